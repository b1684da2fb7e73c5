"""The simulator refuses what a GPU refuses: a visitor's kernel is compiled for a GPU (numba -> NVVM ->
PTX, ptxas) before the simulator runs it, once per source; ptxas's register count rides on the capture."""

from __future__ import annotations

import subprocess
import sys

import pytest

from visualizer.engine.capture import ptx
from visualizer.engine.run import user_runner
from visualizer.engine.run.user_runner import UserRunner
from visualizer.specs.catalog import LaunchError
from visualizer.specs.source import plan_source_launch

PADDED_BAD = """from numba import cuda, float32

TILE_DIM = 32


@cuda.jit
def transpose(out, a):
    tile = cuda.shared.array((TILE_DIM, TILE_DIM + 1), float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    if y < a.shape[0] and x < a.shape[1]:
        tile[ty, tx] = a[y, x]
    cuda.syncthreads()
    bx = cuda.blockIdx.y * TILE_DIM + tx
    by = cuda.blockIdx.x * TILE_DIM + ty
    if by < out.shape[0] and bx < out.shape[1]:
        out[by, bx] = tile[tx, ty]
"""
# the fix the refusal suggests: the padded width named once, a global numba folds into a constant
PADDED_GOOD = PADDED_BAD.replace("TILE_DIM = 32\n", "TILE_DIM = 32\nPADDED = TILE_DIM + 1\n").replace(
    "(TILE_DIM, TILE_DIM + 1)", "(TILE_DIM, PADDED)"
)
ARGS = ["out=zeros:float32:64x64", "a=rand:float32:64x64"]


def _launch(source: str, backend: str = "sim"):
    return plan_source_launch(
        source, "transpose", grid="2,2", block="32,32", args=ARGS, reference=["out=a.T"], backend=backend,
        filename="transpose_padded.py",
    )  # fmt: skip


@pytest.fixture(scope="module")
def toolchain():
    """Skip where this machine cannot compile for a GPU at all (no libNVVM): nothing is checked there."""
    got = ptx.gpu_check(_launch(PADDED_GOOD).request("sim"))
    if not got["checked"]:
        pytest.skip(f"no GPU toolchain here: {got['why']}")
    return got


def test_the_simulator_refuses_a_shared_array_no_gpu_compiles_naming_its_line(toolchain):
    with UserRunner("sim") as runner, pytest.raises(LaunchError) as refused:
        runner.capture_source(_launch(PADDED_BAD), time_clean=False)
    text = str(refused.value)
    assert "\n" not in text and "a GPU cannot compile transpose" in text, text
    assert "transpose_padded.py line 8: tile = cuda.shared.array((TILE_DIM, TILE_DIM + 1), float32)" in text
    assert "PADDED = TILE_DIM + 1" in text and " at 0x" not in text  # what to do; no object address


def test_the_cli_exits_2_with_one_line_before_the_simulator_runs(tmp_path, toolchain):
    src = tmp_path / "transpose_padded.py"
    src.write_text(PADDED_BAD)
    args = ["--source", str(src), "--grid", "2,2", "--block", "32,32", *[f"--arg={a}" for a in ARGS]]
    done = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", *args, "--backend", "sim", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "a GPU cannot compile transpose: typing error at transpose_padded.py line 8" in done.stderr
    assert not (tmp_path / "o" / "launch.json").exists()  # refused before the run: nothing written


def test_a_kernel_that_compiles_runs_with_ptxas_registers_and_compiles_once(monkeypatch, toolchain):
    launch = _launch(PADDED_GOOD)
    monkeypatch.setattr(user_runner, "_gpu_checks", type(user_runner._gpu_checks)())
    sent = []
    with UserRunner("sim") as runner:
        exchange = runner._exchange

        def spy(request, *a, **k):
            sent.append(bool(request.get("gpu_check")))
            return exchange(request, *a, **k)

        monkeypatch.setattr(runner, "_exchange", spy)
        first = runner.capture_source(launch, time_clean=False)
        second = runner.capture_source(launch, seed=1, time_clean=False)
    assert first.check["correct"] and second.check["correct"]
    assert sent == [True, False]  # the second run of the same source is not compiled again
    counted = first.launch["gpu_compile"]
    assert counted["checked"] and counted["arch"] == "sm_90" and counted["build"] == "clean"
    regs = counted["resources"]["registers"]
    assert isinstance(regs, int) and 1 <= regs <= 255
    assert counted["resources"]["smem_bytes"] == 32 * 33 * 4  # the padded tile, as ptxas allocates it
    assert second.launch["gpu_compile"] == counted
    if ptx.tool("nvdisasm"):  # its SASS counted in the sandbox too (Compare's your-two-versions reads it)
        assert isinstance(counted["sass_instructions"], int) and counted["sass_instructions"] > 10


@pytest.mark.parametrize("count, kept", [(120, 120), (0, None), (-3, None), (True, None), ("99", None),
                                         (1 << 30, None), (12.5, None)])  # fmt: skip
def test_a_sandboxs_sass_count_is_kept_only_as_an_int_in_range(monkeypatch, count, kept):
    monkeypatch.setattr(user_runner, "_gpu_checks", type(user_runner._gpu_checks)())
    checked = {"checked": True, "arch": "sm_90", "ptxas_log": "Used 20 registers", "sass_instructions": count}
    known = user_runner.remember_gpu_check(_launch(PADDED_GOOD), checked)
    assert known.get("sass_instructions") == kept


def test_a_missing_toolchain_refuses_nothing(monkeypatch):
    def no_nvvm(request, timeout=0):
        raise ptx.AsmError("numba could not compile transpose: NvvmSupportError: libNVVM cannot be found")

    monkeypatch.setattr(ptx, "compile_ptx", no_nvvm)
    got = ptx.gpu_check(_launch(PADDED_BAD).request("sim"))
    assert got == {"checked": False, "why": "numba could not compile transpose: NvvmSupportError: "
                   "libNVVM cannot be found"}  # fmt: skip


def test_a_sandbox_that_lies_about_the_count_is_held_to_its_form():
    launch = _launch(PADDED_GOOD + "\n# another source\n")
    assert user_runner.remember_gpu_check(launch, {"checked": "yes"})["checked"] is False
    assert user_runner.gpu_checked(launch) is None  # not remembered: the next run compiles again
    known = user_runner.remember_gpu_check(
        launch,
        {"checked": True, "arch": "sm_90;rm -rf", "ptxas_log": "ptxas info : Used 40 registers" * 9999},
    )
    assert known["arch"] == "sm_90" and known["resources"]["registers"] == 40


@pytest.mark.gpu
def test_on_a_gpu_the_same_kernel_is_refused_and_ptxas_counts_what_the_driver_reports():
    """On the H200: the GPU backend refuses the same line, and the simulator's ptxas count (sm_90,
    clean build) equals the CUDA driver's registers for the clean build."""
    with UserRunner("gpu") as runner:
        with pytest.raises((LaunchError, Exception)) as refused:
            runner.capture_source(_launch(PADDED_BAD, "gpu"), time_clean=False)
        assert "line 8" in str(refused.value), str(refused.value)
        on_gpu = runner.capture_source(_launch(PADDED_GOOD, "gpu"))
    with UserRunner("sim") as runner:
        on_sim = runner.capture_source(_launch(PADDED_GOOD), time_clean=False)
    driver = on_gpu.launch["clean"]["registers_per_thread"]
    assert on_sim.launch["gpu_compile"]["resources"]["registers"] == driver, (
        on_sim.launch["gpu_compile"],
        driver,
    )
