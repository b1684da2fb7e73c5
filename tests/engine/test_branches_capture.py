"""The SIMT lens through the capture path on the simulator: a built-in kernel and a visitor's kernel
asked for ``branches``, the bundle and ``capture --branches``; the visits against independent models."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiers import every_builtin

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))
import branch_cases  # noqa: E402

from tests.engine.test_branches import visits  # noqa: E402
from visualizer.engine.capture import ptx  # noqa: E402
from visualizer.engine.run.user_runner import UserRunner  # noqa: E402
from visualizer.specs.source import plan_source_launch  # noqa: E402
from visualizer.tools import bundle  # noqa: E402
from visualizer.web.examples import EXAMPLES  # noqa: E402


def test_builtin_reduction_visits_on_the_simulator(sim_runner, tmp_path):
    cap = sim_runner.capture("reduction", {"n": 1000, "block": 128}, branches=True)
    assert cap.check["correct"] and cap.barriers is None  # the simulator has no clock: no barrier waits
    rows = cap.branches
    # kernels/reduction.py: `while stride > 0` (8 tests: 64..1 and the failing one), `if tid < stride`
    # per level, `if tid == 0`; BARRIER is a compile-time constant and is not a branch
    sites = cap.launch["lens"]["branches"]["sites"]
    assert [s["kind"] for s in sites] == ["while", "if", "if"]
    want = {}
    for block in range(8):
        for warp in range(4):
            lanes = [warp * 32 + lane for lane in range(32)]
            want[(block, warp, 0)] = [(0xFFFFFFFF, 0xFFFFFFFF)] * 7 + [(0xFFFFFFFF, 0)]
            want[(block, warp, 1)] = [
                (0xFFFFFFFF, sum(1 << (t - warp * 32) for t in lanes if t < s))
                for s in (64, 32, 16, 8, 4, 2, 1)
            ]
            want[(block, warp, 2)] = [(0xFFFFFFFF, 1 if warp == 0 else 0)]
    assert visits(rows) == want
    summary = cap.launch["branches"]
    assert summary["divergent_warps"] == 8  # warp 0 of each block: stride 16..1 and tid == 0
    assert summary["efficiency"] == pytest.approx(100 * (512 - 48) / 512)
    bundle.save(cap, tmp_path / "b")
    again = bundle.load(tmp_path / "b")
    assert visits(again.branches) == want and again.barriers is None
    assert (
        json.loads((tmp_path / "b" / "launch.json").read_text())["branches"]["efficiency"]
        == summary["efficiency"]
    )


def test_a_visitors_kernel_gets_the_lens_in_its_sandbox():
    ex = EXAMPLES["reduction"]
    launch = plan_source_launch(
        ex.source, ex.kernel, grid=ex.grid, block=ex.block, args=ex.args, threads_for_n=ex.threads_for,
        reference=[ex.reference.replace(" = ", "=", 1)], filename=ex.file,
    )  # fmt: skip
    with UserRunner("sim") as runner:
        cap = runner.capture_source(launch, seed=1, branches=True)
    assert cap.check["correct"], cap.check
    nblocks, tpb = launch.launch.blocks, launch.launch.threads_per_block
    assert visits(cap.branches) == branch_cases.model_reduction(nblocks, tpb, 2000)  # x has 2000 elements
    assert cap.launch["branches"]["source"].startswith("modelled")


def test_capture_cli_writes_branches(tmp_path):
    out = tmp_path / "bundle"
    proc = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", "vector_add", "--backend", "sim", "--branches",
         "--param", "n=1000", "--param", "block=128", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "branch efficiency" in proc.stdout and (out / "branches.parquet").is_file()
    if ptx.tool("ptxas") and ptx.tool("nvdisasm"):  # `if i < n:` is a predicated EXIT in the SASS
        assert "as Nsight Compute counts it (sm_90 SASS): no branch line compiled to a conditional jump" in (
            proc.stdout
        )
    else:
        assert "as Nsight Compute counts it: not computed" in proc.stdout
    launch = json.loads((out / "launch.json").read_text())
    # `if i < n:` in 32 warps: all take it but warp 31's lanes 8..31 (1000 = 31 * 32 + 8)
    assert launch["branches"]["visits"] == 32 and launch["branches"]["divergent_warps"] == 1
    rows = bundle.load(out).branches
    last = rows.sort_values(["block", "warp"]).iloc[-1]
    assert (int(last["block"]), int(last["warp"]), int(last["active"]), int(last["taken"])) == (7, 3, 32, 8)
    assert np.all(rows["line"] == rows["line"].iloc[0])


def test_capture_cli_refuses_barriers_on_the_simulator(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", "reduction", "--backend", "sim", "--barriers",
         "--out", str(tmp_path / "b")],
        capture_output=True, text=True, timeout=120, cwd=HERE.parent,
    )  # fmt: skip
    assert (
        proc.returncode == 2
        and proc.stderr.count("\n") == 1
        and "no" in proc.stderr
        and "clock" in proc.stderr
    )
    assert not (tmp_path / "b").exists()


def _builtin_kernels():
    from visualizer.specs.catalog import KERNELS

    return [name for name, spec in KERNELS.items() if not spec.fault_demo]


# one test each: the workers share them out
@pytest.mark.parametrize("name", every_builtin(_builtin_kernels()))
def test_every_builtin_kernel_still_computes_its_answer_with_the_lens(sim_runner, name):
    """The branch pass rewrites tests and range loops: every built-in kernel's output under it is still
    numpy's (the deliberately wrong demos still wrong), and each got visits recorded."""
    from visualizer.specs.catalog import KERNELS

    spec = KERNELS[name]
    cap = sim_runner.capture(name, {}, branches=True, time_clean=False)
    assert cap.check["correct"] is (not spec.deliberately_wrong), name
    assert cap.launch["branches"]["visits"] > 0 and len(cap.branches), name


HALVES = """\
from numba import cuda


@cuda.jit
def halves(x, out):
    i = cuda.grid(1)
    if i >= x.size:
        return
    if cuda.threadIdx.x < 16:
        out[i] = x[i] * 2.0
    else:
        out[i] = x[i]
"""


def test_capture_source_cli_writes_a_visitors_branches(tmp_path):
    src = tmp_path / "halves.py"
    src.write_text(HALVES)
    out = tmp_path / "b"
    proc = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", "--source", str(src), "--kernel", "halves",
         "--block", "64", "--threads-for", "100", "--arg", "x=rand:float32:100", "--arg", "out=zeros:float32:100",
         "--backend", "sim", "--branches", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=HERE.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # 4 warps: the guard splits the last one (lanes 4-31 past 100), `threadIdx.x < 16` each block's first
    assert "branch efficiency 62.5% (3 of 8 warp visits divergent; 3 of 4 warps" in proc.stdout
    assert "as Nsight Compute counts it" in proc.stdout  # compiled in the visitor's sandbox
    rows = bundle.load(out).branches
    assert sorted(rows["line"].unique().tolist()) == [7, 9]


def test_a_lane_dependent_loop_on_the_simulator_and_as_ncu_counts_it():
    """`for k in range(threadIdx.x % 32)` at 2 x 128 (issue 39): the simulator's source-level model is
    1 uniform test of 32 per warp (3.1 %); as Nsight Compute counts it, the loop ptxas unrolled by 4 runs
    13 conditional jumps per warp, 2 uniform: 15.4 % (ncu said 15.38 % on the H200)."""
    from visualizer.tools.capture_report import sass_counted_lines

    launch = plan_source_launch(
        branch_cases.LANE_LOOP, "lane_loop", grid="2", block="128",
        args={"x": "rand:float32:256", "out": "zeros:float32:256"}, filename="lane_loop.py",
    )  # fmt: skip
    with UserRunner("sim") as runner:
        cap = runner.capture_source(launch, seed=1, branches=True)
    s = cap.launch["branches"]
    assert s["visits"] == 8 * 32 and s["divergent_visits"] == 8 * 31
    assert s["efficiency"] == pytest.approx(100 / 32, abs=1e-3)
    if not (ptx.tool("ptxas") and ptx.tool("nvdisasm")):
        pytest.skip("ptxas / nvdisasm not installed here")
    text = "\n".join(sass_counted_lines(cap, ptx.source_asm(launch.request("sim"))))
    assert "15.4% over the 104 conditional jumps of line 8, 88 divergent" in text, text
    assert "line 8's loop counted as ptxas unrolled it (by 4" in text
