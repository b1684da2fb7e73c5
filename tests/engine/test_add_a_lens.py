"""ARCHITECTURE.md's "Add a lens", done by a test: a toy lens defined here, outside the product, is
registered through those steps alone (an engine Lens with an instrumenter pass, its LensTables) and
its table comes back in a capture bundle; the CLI offers its flag. Nothing else is edited."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]

TOY = textwrap.dedent(
    """
    import ast, sys
    import numpy as np
    import pandas as pd
    from visualizer.engine.run.worker import configure_backend
    configure_backend("sim")
    from numba import cuda

    from visualizer.analysis.lens_tables import LensTables, register as register_tables
    from visualizer.engine.lenses import Lens, register

    @cuda.jit(device=True)
    def toy_mark(buf):
        i = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
        if i < buf.shape[0]:
            buf[i] = 7

    class ToyPass:  # step 1's probe (toy_mark) put at the kernel's entry
        name = "toy"
        params = ("_vz_toy",)

        def globals(self):
            return {"_vz_toy_mark": toy_mark}

        def apply(self, fn, info):
            call = ast.parse("_vz_toy_mark(_vz_toy)").body[0]
            ast.copy_location(call, fn.body[0])
            ast.fix_missing_locations(call)
            fn.body.insert(0, call)
            info["sites"] = [fn.body[1].lineno]

    @register  # step 2: the lens
    class Toy(Lens):
        name = "toy"
        help = "a toy lens: every thread marks its slot"

        def passes(self, kernel):
            return (ToyPass(),)

        def buffers(self):
            return {"_vz_toy": np.zeros(self.ctx.launch.threads, np.int32)}

        def reply(self, reply, launch):
            reply["toy"] = reply["buffers"].pop("_vz_toy")

    register_tables(LensTables(  # step 3: its table
        "toy", ("toy_marks",), lambda reply: "toy" in reply,
        lambda cap, reply, t0: cap.set_table("toy_marks", pd.DataFrame({"mark": reply["toy"]})),
    ))

    from visualizer.analysis.capture import build_capture
    from visualizer.engine.capture.backend import Backend
    from visualizer.engine.capture.request import CaptureRequest
    from visualizer.engine.run.worker import capture
    from visualizer.tools import bundle

    request = CaptureRequest.of({"kernel": "vector_add", "params": {"n": 40, "block": 32}}, {"toy": True})
    cap = build_capture(capture(Backend("sim"), request))
    bundle.save(cap, sys.argv[1])

    from visualizer.tools.capture_report import add_lens_flags
    import argparse
    p = argparse.ArgumentParser()
    add_lens_flags(p)
    print("flag:", p.parse_args(["--toy"]).toy)
    """
)


def test_a_toy_lens_registered_outside_the_product_comes_back_in_the_bundle(tmp_path):
    script = tmp_path / "toy_lens.py"
    script.write_text(TOY)
    out = tmp_path / "bundle"
    got = subprocess.run(
        [sys.executable, str(script), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    assert "flag: True" in got.stdout
    marks = pd.read_parquet(out / "toy_marks.parquet")
    assert len(marks) == 64 and (marks["mark"] == 7).all(), "every thread of the launch ran the toy's probe"
    assert (out / "threads.parquet").is_file()
