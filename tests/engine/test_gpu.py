"""Real-GPU checks (marked gpu; skipped without one): SM ids, timestamps, results, timings, faults."""

import numpy as np
import pytest

from visualizer.engine.run.runner import KernelError

pytestmark = pytest.mark.gpu


def _sane_trace(cap):
    t = cap.threads
    assert cap.measured and cap.source == "measured (GPU)"
    assert (t["t_end_ns"] >= t["t_start_ns"]).all()  # non-decreasing within each thread
    assert t["t_start_ns"].min() == 0
    assert 0 <= t["sm"].min() and t["sm"].max() < cap.launch["num_sms"]
    assert cap.timing["instrumented_ms"] > 0 and cap.timing["clean_ms"] > 0
    assert cap.timing["clock"].startswith("CUDA events")
    assert set(cap.timing["host_steps_ns"]) == {"allocate", "copy_in", "kernel", "copy_out", "free"}


def test_vector_add_uses_every_sm(gpu_runner):
    cap = gpu_runner.capture("vector_add", {"n": 1 << 20, "block": 256})
    assert cap.check["correct"], cap.check
    _sane_trace(cap)
    assert cap.launch["recorded_per"] == "warp"
    assert cap.threads["sm"].nunique() == cap.launch["num_sms"]  # 4096 blocks reach all SMs
    # SM is uniform within a block
    assert (cap.threads.groupby("block")["sm"].nunique() == 1).all()
    res = cap.launch["instrumented"]
    assert res["registers_per_thread"] > 0 and res["driver_blocks_per_sm"] > 0


def test_vector_add_per_thread_small(gpu_runner):
    cap = gpu_runner.capture("vector_add", {"n": 1000, "block": 96})
    assert cap.check["correct"] and cap.launch["recorded_per"] == "thread"
    _sane_trace(cap)
    np.testing.assert_array_equal(cap.threads["active"], cap.threads["global_id"] < 1000)


@pytest.mark.parametrize("kernel", ["matmul_naive", "matmul_tiled"])
def test_matmul_matches_numpy(gpu_runner, kernel):
    cap = gpu_runner.capture(kernel, {"n": 1000, "tile": 16})  # 1000 is not a multiple of 16
    assert cap.check["correct"], cap.check
    _sane_trace(cap)
    if kernel == "matmul_tiled":
        tiles = cap.tiles
        assert len(tiles) == 63 * 63 * 63 * 2
        assert (tiles.groupby("block")["t_ns"].apply(lambda s: s.is_monotonic_increasing)).all()
        assert (tiles.query("row0 == 992")["rows"] == 8).all()


def test_reduction_and_race(gpu_runner):
    cap = gpu_runner.capture("reduction", {"n": 1 << 20, "block": 256})
    assert cap.check["correct"], cap.check
    _sane_trace(cap)
    race = gpu_runner.capture("reduction_race", {"n": 1 << 20, "block": 256})
    assert race.check["expected_wrong"]
    print("race demo wrong partial sums:", race.check["outputs"]["partial"]["mismatches"], "of 4096")


def test_fault_reported_and_runner_recovers(gpu_runner):
    with pytest.raises(KernelError, match="faulted|failed"):
        gpu_runner.capture("out_of_bounds_write", {"n": 256, "block": 128})
    cap = gpu_runner.capture("vector_add", {"n": 4096, "block": 128})
    assert cap.check["correct"]
    assert gpu_runner.restarts >= 1
