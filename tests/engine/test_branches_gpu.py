"""The SIMT lens on a GPU through the capture path: built-in kernels (barrier waits of the tiled matmul
and the reduction, measured) and a visitor's kernel in its sandbox, against the same models as on the
simulator."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))
import branch_cases  # noqa: E402

from tests.engine.test_branches import visits  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("kernel", "params", "barriers_per_warp"), [
    ("matmul_tiled", {"n": 256, "tile": 16}, 2 * 16),  # two per tile step, 16 steps
    ("reduction", {"n": 1 << 16, "block": 256}, 1 + 8),  # one after the load, one per tree level
])  # fmt: skip
def test_barrier_waits_are_measured(gpu_runner, kernel, params, barriers_per_warp):
    cap = gpu_runner.capture(kernel, params, barriers=True)  # the barrier timestamps alone
    assert cap.check["correct"] and cap.branches is None
    bars = cap.barriers
    warps = cap.launch["blocks"] * ((cap.launch["threads_per_block"] + 31) // 32)
    assert len(bars) == warps * barriers_per_warp
    assert (bars["release_ns"] >= bars["arrive_ns"]).all() and (bars["arrive_ns"] >= 0).all()
    # at every barrier of a block someone arrived last, and the release is after that arrival
    per = bars.groupby(["block", "instance"])
    assert (per["last"].sum() >= 1).all()
    assert (per["release_ns"].min() >= per["arrive_ns"].max() - 64).all()  # within two 32 ns ticks
    assert (
        cap.launch["barriers"]["arrivals"] == len(bars)
        and cap.launch["barriers"]["source"] == "measured (GPU)"
    )


def test_divergence_pair_on_the_gpu(gpu_runner):
    from visualizer.analysis import lesson_answers as A

    params = {"n": 1 << 20, "reps": 64, "block": 256}
    lanes = gpu_runner.capture("branch_lanes", params, branches=True)
    warps = gpu_runner.capture("branch_warps", params, branches=True)
    assert lanes.check["correct"] and warps.check["correct"]
    assert lanes.launch["branches"]["divergent_warps"] == lanes.launch["blocks"] * 8
    assert warps.launch["branches"]["divergent_visits"] == 0
    slow = A.divergence_slowdown(lanes, warps)
    assert slow.source.startswith("measured") and slow.value > 1.2


def test_a_visitors_kernel_on_the_gpu():
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch
    from visualizer.web.examples import EXAMPLES

    ex = EXAMPLES["reduction"]
    launch = plan_source_launch(
        ex.source, ex.kernel, grid=ex.grid, block=ex.block, args=ex.args, threads_for_n=ex.threads_for,
        reference=[ex.reference.replace(" = ", "=", 1)], filename=ex.file, backend="gpu",
    )  # fmt: skip
    with UserRunner("gpu") as runner:
        cap = runner.capture_source(launch, seed=1, branches=True)
        timed = runner.capture_source(launch, seed=1, barriers=True)
    assert cap.check["correct"] and timed.check["correct"]
    nblocks, tpb = launch.launch.blocks, launch.launch.threads_per_block
    assert visits(cap.branches) == branch_cases.model_reduction(nblocks, tpb, 2000)
    assert cap.barriers is None and len(timed.barriers) == nblocks * (tpb // 32) * 9
