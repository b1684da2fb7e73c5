"""Users' kernels end to end on the simulator: the runner's dedicated worker, the CLI, bad code."""

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from visualizer.engine.run.runner import KernelError
from visualizer.engine.run.user_runner import UserRunner, arrays_after
from visualizer.specs.catalog import SIM_MAX_THREADS, LaunchError
from visualizer.specs.source import plan_source_launch
from visualizer.web.examples import EXAMPLES, HERE


@pytest.fixture(scope="module")
def user_runner():
    with UserRunner("sim") as runner:
        yield runner


def plan(example, **overrides):
    kwargs = dict(
        grid=example.grid,
        block=example.block,
        args=example.args,
        threads_for_n=example.threads_for,
        reference=[example.reference.replace(" = ", "=", 1)],
        filename=example.file,
    )
    return plan_source_launch(example.source, example.kernel, **{**kwargs, **overrides})


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_textbook_kernels_unmodified_give_correct_outputs_and_traces(user_runner, name):
    ex = EXAMPLES[name]
    cap = user_runner.capture_source(plan(ex), seed=3)
    assert cap.check["correct"] is True, cap.check
    assert cap.launch["user_kernel"] and cap.launch["kernel_name"] == ex.kernel
    # the default engine in the sandbox (the page and sandbox tests run visitors' kernels on fastsim)
    assert cap.launch["sim_engine"] == "compiled", cap.launch.get("sim_engine_note")
    threads = cap.threads
    assert len(threads) == cap.launch["threads"] and (threads["t_end_ns"] >= threads["t_start_ns"]).all()
    assert threads["t_start_ns"].min() == 0, "every thread recorded its start"
    # every array argument after the launch, by name; the result is one the kernel wrote
    after = arrays_after(cap)
    assert list(after) == [p for p in cap.launch["arg_order"] if p in ex.args and ":" in ex.args[p]]
    out = {"vector_add": "c", "matmul_tiled": "C", "reduction": "partial"}[name]
    assert cap.launch["written"] == [out]
    if name == "vector_add":  # 1000 elements in blocks of 128: the last block's 24 threads idle
        assert int(threads["active"].sum()) == 1000 and len(threads) == 1024
        np.testing.assert_array_equal(after["c"], after["a"] + after["b"])
    if name == "matmul_tiled":  # two TILE x TILE float32 tiles, TILE = 16 read from the module
        assert cap.launch["static_smem_bytes"] == 2 * 16 * 16 * 4
        np.testing.assert_allclose(after["C"], after["A"].astype(np.float64) @ after["B"], rtol=1e-4)
    if name == "reduction":
        x = np.zeros(8 * 256, np.float64)
        x[:2000] = after["x"]
        np.testing.assert_allclose(after["partial"], x.reshape(8, 256).sum(1), rtol=1e-5)
        assert cap.launch["static_smem_bytes"] == 256 * 4


def test_the_examples_table_is_checked_when_loaded(tmp_path):
    from visualizer.web.examples import load_examples

    assert set(EXAMPLES) == {"vector_add", "matmul_tiled", "reduction"}
    table = (HERE / "examples.toml").read_text()
    (tmp_path / "typo.toml").write_text(table.replace("threads_for = 1000", "threads_fro = 1000"))
    with pytest.raises(ValueError, match=r"typo.toml \[vector_add\]: .*threads_fro"):
        load_examples(tmp_path / "typo.toml")
    (tmp_path / "gone.toml").write_text(table.replace('"reduction.py"', '"reduce.py"'))
    with pytest.raises(ValueError, match=r"\[reduction\]: no source file reduce.py"):
        load_examples(tmp_path / "gone.toml")


def test_wrong_kernel_is_reported_wrong_and_reference_function_works(user_runner):
    src = (
        "from numba import cuda\n\n@cuda.jit\ndef k(a, out):\n    i = cuda.grid(1)\n"
        "    if i < a.size:\n        out[i] = a[i] * 2 + (1 if i == 3 else 0)\n\n"
        "def ref(a, out):\n    out[:] = a * 2\n"
    )
    sl = plan_source_launch(
        src,
        "k",
        grid="1",
        block="32",
        args={"a": "arange:float32:32", "out": "zeros:float32:32"},
        reference="fn:ref",
    )
    cap = user_runner.capture_source(sl)
    assert cap.check["correct"] is False and cap.check["outputs"]["out"]["mismatches"] == 1


def test_a_reference_may_use_array_methods_and_builtins_but_not_import(user_runner):
    """``m.sum(axis=1)`` makes numpy import a part of itself through the caller's ``__import__``: it
    failed as "KeyError: '__import__'"; an import of anything else is refused in one line. A
    comprehension's body sees the arguments (it failed: "name 'm' is not defined")."""
    src = "from numba import cuda\n\n@cuda.jit\ndef k(m, out):\n    i = cuda.grid(1)\n    if i < out.size:\n" \
          "        acc = 0.0\n        for j in range(m.shape[1]):\n            acc += m[i, j]\n        out[i] = acc\n"  # fmt: skip
    args = {"m": "rand:float32:64x8", "out": "zeros:float32:64"}
    for ref in ("out = m.sum(axis=1)", "out = np.array([sum(r) for r in m])",
                "out = np.array([m[i].sum() for i in range(out.size)])"):  # fmt: skip
        sl = plan_source_launch(src, "k", grid="2", block="32", args=args, reference=ref)
        assert user_runner.capture_source(sl).check["correct"] is True, ref
    sl = plan_source_launch(
        src, "k", grid="2", block="32", args=args, reference="out = __import__('os').getcwd()"
    )
    with pytest.raises(Exception, match="may use np and math, not import os"):
        user_runner.capture_source(sl)


BAD = {
    "oob": ("from numba import cuda\n\n@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    a[i] = i\n", None),
    "module": ("from numba import cuda\nimport not_a_module_here\n\ndef k(a):\n    pass\n", None),
    "name": ("from numba import cuda\n\n@cuda.jit\ndef k(a):\n    a[0] = undefined_name\n", None),
    "reference": (
        "from numba import cuda\n\n@cuda.jit\ndef k(a):\n    a[0] = 1\n",
        "a=np.sqrt(a, b)",
    ),
}


@pytest.mark.parametrize(
    "case, words",
    [
        ("oob", r"IndexError in thread \(\d+,0,0\) of block \(1,0,0\) at k\.py line 6: a\[i\] = i: index"),
        (
            "module",
            r"running the module failed at k\.py line 2: import not_a_module_here: ModuleNotFoundError",
        ),
        (  # a GPU's compile refuses it before the simulator runs (engine/capture/ptx.gpu_check)
            "name",
            r"a GPU cannot compile k: typing error at k\.py line 5: a\[0\] = undefined_name: NameError",
        ),
        ("reference", r"reference a=np.sqrt\(a, b\) failed: NameError"),
    ],
)
def test_bad_code_is_one_line_and_the_runner_keeps_working(user_runner, case, words):
    src, ref = BAD[case]
    sl = plan_source_launch(
        src, "k", grid="2", block="64", args={"a": "zeros:float32:100"}, reference=ref, filename="k.py"
    )
    with pytest.raises(LaunchError if case == "name" else KernelError) as err:
        user_runner.capture_source(sl)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert re.search(words, msg), msg
    ok = plan(EXAMPLES["vector_add"])
    assert user_runner.capture_source(ok).check["correct"]


def test_endless_loop_is_stopped_at_the_named_limit_and_the_worker_restarts(user_runner):
    src = "from numba import cuda\n\n@cuda.jit\ndef spin(a):\n    while True:\n        a[0] += 1\n"
    sl = plan_source_launch(src, "spin", grid="1", block="2", args={"a": "zeros:float32:4"})
    restarts = user_runner.restarts
    with pytest.raises(KernelError, match=r"did not finish within 3 s, the time limit for user code"):
        user_runner.capture_source(sl, timeout=3)
    assert user_runner.restarts == restarts + 1
    assert user_runner.capture_source(plan(EXAMPLES["vector_add"])).check["correct"]


def test_syntax_error_is_refused_before_any_worker():
    with pytest.raises(LaunchError, match=r"syntax error in k\.py line 3"):
        plan_source_launch(
            "from numba import cuda\ndef k(a):\n    if a\n",
            "k",
            grid="1",
            block="1",
            args={"a": "1"},
            filename="k.py",
        )


def run_cli(*args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_cli_captures_a_kernel_from_a_file(tmp_path, name):
    ex = EXAMPLES[name]
    geometry = ["--grid", ex.grid] if ex.grid else ["--threads-for", str(ex.threads_for)]
    args = [f"--arg={k}={v}" for k, v in ex.args.items()]
    res = run_cli(
        "--source",
        str(HERE / ex.file),
        "--kernel",
        ex.kernel,
        "--block",
        ex.block,
        *geometry,
        *args,
        "--reference",
        ex.reference.replace(" = ", "=", 1),
        "--backend",
        "sim",
        "--out",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    assert "output matches the numpy reference" in res.stdout
    arrays = np.load(tmp_path / "arrays.npz")
    assert sorted(arrays.files) == sorted(ex.args)
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert (
        launch["kernel_name"] == ex.kernel
        and launch["check"]["correct"]
        and launch["kernel_source"] == ex.source
    )
    threads = pd.read_parquet(tmp_path / "threads.parquet")
    assert len(threads) == launch["threads"]


def test_cli_bad_input_exits_2_and_failing_kernel_exits_1(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("from numba import cuda\n\n@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    a[i] = i\n")
    common = ["--source", str(src), "--block", "64", "--backend", "sim", "--out", str(tmp_path / "out")]
    bad = run_cli(*common, "--grid", "2", "--arg", "a=rand:float99:100")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "float99" in bad.stderr
    oob = run_cli(*common, "--grid", "2", "--arg", "a=zeros:float32:100")
    assert oob.returncode == 1 and oob.stderr.count("\n") == 1 and "k.py line 6" in oob.stderr
    big = run_cli(*common, "--grid", "10000", "--arg", "a=zeros:float32:100")  # 640,000 threads
    assert big.returncode == 2 and f"limit {SIM_MAX_THREADS:,} threads" in big.stderr


def test_accesses_come_from_the_memory_engine_when_it_is_there(tmp_path):
    import importlib.util

    ex = EXAMPLES["reduction"]
    res = run_cli(
        "--source",
        str(HERE / ex.file),
        "--block",
        "256",
        "--threads-for",
        "300",
        "--arg",
        "x=rand:float32:300",
        "--arg",
        "partial=zeros:float32:2",
        "--backend",
        "sim",
        "--accesses",
        "--out",
        str(tmp_path),
    )
    if importlib.util.find_spec("visualizer.engine.sim.access_record") is None:
        assert res.returncode == 2 and "memory-access engine" in res.stderr and res.stderr.count("\n") == 1
    else:
        assert res.returncode == 0, res.stderr
        accesses = pd.read_parquet(tmp_path / "accesses.parquet")
        assert {"x", "partial"} <= set(accesses["array"].astype(str))


def test_cpu_time_limit_stops_a_spinning_kernel(monkeypatch):
    monkeypatch.setenv("VISUALIZER_USER_CPU_S", "2")  # read by the worker when it starts
    src = "from numba import cuda\n\n@cuda.jit\ndef spin(a):\n    while True:\n        a[0] += 1\n"
    sl = plan_source_launch(src, "spin", grid="1", block="2", args={"a": "zeros:float32:4"})
    with UserRunner("sim") as runner:
        with pytest.raises(KernelError, match=r"more than 2 s of CPU time, the limit for user code"):
            runner.capture_source(sl, timeout=60)
        assert runner.restarts == 1


SPINS = {
    # two blocks, each waiting for the other's flag through atomics (blocks run one at a time here)
    "flags": (
        "from numba import cuda\n\n@cuda.jit\ndef k(flags, out):\n    b = cuda.blockIdx.x\n"
        "    if cuda.threadIdx.x == 0:\n        cuda.atomic.exch(flags, b, 1)\n"
        "        while cuda.atomic.add(flags, 1 - b, 0) == 0:\n            pass\n    out[b] = 1\n",
        {"flags": "zeros:int32:2", "out": "zeros:int32:2"},
        r"threads spin: .* thread \(0,0,0\) is spinning at k\.py:8",
    ),
    # a spin on syncwarp(1) for a value written after a barrier
    "syncwarp": (
        "from numba import cuda, int32\n\n@cuda.jit\ndef k(flags, out):\n    s = cuda.shared.array(1, int32)\n"
        "    t = cuda.threadIdx.x\n    if t == 0:\n        s[0] = 0\n    cuda.syncthreads()\n    if t == 0:\n"
        "        while s[0] == 0:\n            cuda.syncwarp(1)\n    cuda.syncthreads()\n    if t == 1:\n"
        "        s[0] = 1\n    out[0] = 1\n",
        {"flags": "zeros:int32:2", "out": "zeros:int32:2"},
        r"deadlock: .* 31 threads \(1,0,0\)\.\.\(31,0,0\) wait at a barrier at k\.py:13; "
        r"thread \(0,0,0\) is spinning at k\.py:12",
    ),
}


@pytest.mark.parametrize("name", list(SPINS))
def test_a_spin_through_atomics_or_syncwarp_is_one_line_naming_threads_and_line(monkeypatch, name):
    """Issue 39: these ran to the sandbox's wall-clock limit and ended with no thread or line."""
    monkeypatch.setenv("FASTSIM_STALL_S", "1")  # the sandboxed worker's simulator reads it at its start
    src, args, words = SPINS[name]
    sl = plan_source_launch(src, "k", grid="2", block="32", args=args, filename="k.py")
    with UserRunner("sim") as runner, pytest.raises(KernelError) as err:
        runner.capture_source(sl, time_clean=False)
    msg = str(err.value)
    assert "\n" not in msg and re.search(words, msg), msg


HALO_CONV = """
from numba import cuda, float32

OUT_TILE = 6
R = 1
IN_TILE = OUT_TILE + 2 * R


@cuda.jit
def conv1d(x, out):
    tile = cuda.shared.array(IN_TILE, dtype=float32)
    tx = cuda.threadIdx.x
    i = cuda.blockIdx.x * OUT_TILE + tx - R  # every thread loads one input, halo included
    if 0 <= i < x.size:
        tile[tx] = x[i]
    else:
        tile[tx] = 0
    cuda.syncthreads()
    o = cuda.blockIdx.x * OUT_TILE + tx - R
    if R <= tx < IN_TILE - R and o < out.size:  # only the inner threads compute an output
        out[o] = tile[tx - 1] + tile[tx] + tile[tx + 1]
"""


def test_did_work_of_a_halo_kernel_counts_the_threads_that_wrote(user_runner):
    """A tiled stencil's halo loaders pass every guard (no early return), so the inferred rule counts
    them; with the accesses recorded, "did work" is the threads that wrote global memory."""
    from visualizer.web.did_work import did_work

    launch = plan_source_launch(
        HALO_CONV, "conv1d", grid="4", block="8", args={"x": "rand:float32:24", "out": "zeros:float32:24"},
        reference=["out=np.convolve(np.pad(x, 1), np.ones(3, np.float32), 'valid')"],
    )  # fmt: skip
    plain = user_runner.capture_source(launch)
    assert plain.check["correct"]
    label, n, how = did_work(plain)
    assert (label, n) == ("past its guards", 32) and "halo" in how  # what the inferred rule counts
    recorded = user_runner.capture_source(launch, accesses=True)
    label, n, how = did_work(recorded)
    assert (label, n) == ("wrote global memory", 24)  # 4 blocks x 6 inner threads; the halo loaders not
    assert "recorded accesses" in how
