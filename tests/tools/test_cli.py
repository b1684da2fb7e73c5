"""The CLI as a script would use it: listing, capturing a bundle, and one-line errors with exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from visualizer.engine.run.runner import gpu_present

ROOT = Path(__file__).resolve().parents[2]


def run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args], capture_output=True, text=True, timeout=timeout
    )


def test_kernels_lists_every_kernel_with_defaults():
    res = run("kernels", "--json")
    assert res.returncode == 0
    listed = json.loads(res.stdout)
    for name in ("vector_add", "matmul_naive", "matmul_tiled", "reduction", "reduction_race"):
        assert name in listed
    assert listed["vector_add"]["params"] == {"n": 1000, "block": 128}
    assert "reduction_race" in run("kernels").stdout


def test_capture_writes_bundle(tmp_path):
    res = run(
        "capture",
        "matmul_tiled",
        "--backend",
        "sim",
        "--param",
        "n=18",
        "--param",
        "tile=8",
        "--out",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    threads = pd.read_parquet(tmp_path / "threads.parquet")
    tiles = pd.read_parquet(tmp_path / "tiles.parquet")
    launch = json.loads((tmp_path / "launch.json").read_text())
    timing = json.loads((tmp_path / "timing.json").read_text())
    arrays = np.load(tmp_path / "arrays.npz")
    assert len(threads) == 9 * 64 and threads["active"].sum() == 18 * 18
    assert set(tiles["operand"]) == {"A", "B"}
    assert launch["grid"] == [3, 3, 1] and launch["block"] == [8, 8, 1] and launch["backend"] == "sim"
    assert launch["static_smem_bytes"] == 512 and launch["check"]["correct"]
    assert {"host_steps_ns", "instrumented_ms", "clean_ms"} <= timing.keys()
    assert set(timing["host_steps_ns"]) == {"allocate", "copy_in", "kernel", "copy_out", "free"}
    np.testing.assert_allclose(
        arrays["C"], arrays["A"].astype(np.float64) @ arrays["B"], rtol=1e-4, atol=1e-4
    )


def test_race_demo_exits_zero_and_says_so(tmp_path):
    res = run(
        "capture",
        "reduction_race",
        "--backend",
        "sim",
        "--param",
        "n=512",
        "--param",
        "block=256",
        "--out",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    assert "output is WRONG, as this demo is meant to show (a race: the syncthreads" in res.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["capture", "vector_add", "--param", "block=0"], "at least 1"),
        (["capture", "vector_add", "--param", "block=2048"], "1024"),
        (["capture", "vector_add", "--param", "n=0"], "out of range"),
        (["capture", "vector_add", "--param", "n=-5"], "out of range"),
        (
            ["capture", "vector_add", "--param", "n=4000000", "--sim-engine", "fastsim"],
            "simulator",
        ),  # its cap
        (
            ["capture", "vector_add", "--param", "n=70000000", "--accesses"],
            "simulator",
        ),  # a lens on the compiled engine: its cap (2^26)
        (["capture", "vector_add", "--sim-engine", "turbo"], "invalid choice"),
        (["capture", "vector_add", "--param", "colour=3"], "no parameter"),
        (["capture", "vector_add", "--param", "n"], "NAME=VALUE"),
        (["capture", "nope"], "unknown kernel"),
        (["capture", "matmul_tiled", "--param", "tile=64"], "1024"),
        (["frobnicate"], "unknown command"),
        (["bench", "--backend", "xyz", "--out", "x.json"], "invalid choice"),
        (["bench", "--quick"], "--out"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, args, words):
    res = run(*args, "--backend", "sim", "--out", str(tmp_path)) if args[0] == "capture" else run(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_too_much_shared_memory_is_refused():
    from visualizer.specs.catalog import DeviceLimits, Launch, LaunchError, check_launch

    launch = Launch(grid=(1, 1, 1), block=(128, 1, 1), scalars={}, static_smem=64 * 1024)
    with pytest.raises(LaunchError, match="static shared memory"):
        check_launch(launch, DeviceLimits(), "gpu")
    launch = Launch(grid=(1, 1, 1), block=(128, 1, 1), scalars={}, dynamic_smem=240 * 1024)
    with pytest.raises(LaunchError, match="232448"):
        check_launch(launch, DeviceLimits(), "gpu")


def crosscheck(*args, timeout=120):
    """``python -m devtools.crosscheck``: a maintainers' tool, run from a checkout (not installed)."""
    return subprocess.run(
        [sys.executable, "-m", "devtools.crosscheck", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_a_moved_maintainer_tool_says_where_it_went_in_one_line():
    res = run("crosscheck", "gpu", "--out", "x")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: crosscheck is a maintainers' tool, not installed: from a checkout of the repository, "
        "run python -m devtools.crosscheck"
    ]
    usage = run("--help").stdout
    assert "crosscheck" not in usage and "bench" in usage  # the help lists what the package installs


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU: crosscheck gpu would run")
def test_crosscheck_gpu_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "cc"
    res = crosscheck("gpu", "--out", str(out))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: crosscheck gpu needs an NVIDIA GPU, and this machine has none (run it on a GPU machine)"
    ]
    assert "Traceback" not in res.stderr and not out.exists()  # nothing written


def test_crosscheck_compare_without_a_gpu_run_is_one_line_and_exit_2(tmp_path):
    res = crosscheck("compare", str(tmp_path))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "has no ncu.csv" in res.stderr and "Traceback" not in res.stderr


def test_readme_states_the_simulator_cost_limit_the_app_enforces():
    from visualizer.specs.catalog import sim_cost_limit

    docs = ROOT / "docs"
    for page in ("install.md", "simulator.md"):  # the README's reference moved into the docs site
        text = " ".join((docs / page).read_text().split())
        assert sim_cost_limit() in text, page  # one truth: the words come from SIM_MAX_THREAD_STEPS
        assert "about 15 s of" not in text, page


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`python -m visualizer kernels | head -1`: the pipe closes under the command; it stops in silence."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "visualizer", "kernels"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # before the command has written a line
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()[-2000:]
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped
