"""Device time on a real GPU (marked gpu; skipped without one). Properties, not speeds: a 1,000-element
add's GPU time is far below what Python takes to launch it; the spin really covers the queue (and a
missing spin is detected); torch is timed the same way beside it."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_small_add_device_time_is_below_its_launch_overhead(gpu_runner):
    cap = gpu_runner.capture("vector_add", {"n": 1000, "block": 256})
    t = cap.timing
    assert cap.check["correct"]
    assert t["clock"].startswith("CUDA events queued behind a spin")
    assert t["queue_covered"] is True, t["method"]
    # 1,000 adds are a few µs of GPU work; Python + the dispatcher take tens of µs to queue them
    assert t["clean_ms"] * 1e3 < t["launch_overhead_us"]
    assert t["one_launch_event_ms"] > t["clean_ms"]  # the naive number carries the dispatch
    m = t["method"]
    assert m["spin_ran_us"] >= m["spin_us"]  # the spin kernel really waited as long as asked
    assert m["l2_flush"] is True and "memory-bound" in m["l2_flush_why"]
    assert m["covered_repeats"] == m["repeats"] == len(t["clean_ms_all"])
    assert t["kernel_span_ns"] > 0  # the recorded span, shown beside device time
    if "torch_ms" in t:  # torch installed on this machine: timed the same way, on the same stream
        assert t["torch_ms"] > 0 and t["torch_launch_overhead_us"] > 0
        assert t["torch_queue_covered"] is True
        assert t["torch_method"]["l2_flush"] is True


def test_reduction_torch_baseline_is_per_block_partials(gpu_runner):
    cap = gpu_runner.capture("reduction", {"n": 100_000, "block": 256})  # ragged: 100000 % 256 != 0
    t = cap.timing
    assert cap.check["correct"] and "torch_error" not in t, t.get("torch_error")
    if "torch_ms" in t:
        assert "per-block partial" in t["torch_op"]


@pytest.fixture(scope="module")
def gpu_numba():
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        pytest.skip("in-process GPU checks need NUMBA_ENABLE_CUDASIM=0 (see README)")
    from numba import cuda

    return cuda


def _small_add(cuda, n=1000):
    from visualizer.engine.capture.builds import pair
    from visualizer.kernels.vector_add import vector_add

    _, vector_add_clean = pair(vector_add, "i < n")
    a = cuda.to_device(np.arange(n, dtype=np.float32))
    c = cuda.device_array(n, np.float32)

    def launch():
        vector_add_clean[-(-n // 256), 256](a, a, c, n)

    return launch, c


def test_spin_covers_the_queue_and_its_absence_is_detected(gpu_numba):
    from visualizer.engine.timing import gpu_timing

    cuda = gpu_numba
    launch, c = _small_add(cuda)
    ops = gpu_timing.NumbaOps(cuda)
    m = gpu_timing.measure(ops, launch, repeats=20)
    assert m.queue_covered and m.covered_repeats == 20
    assert m.spun_ns >= m.spin_ns
    np.testing.assert_array_equal(c.copy_to_host(), 2 * np.arange(1000, dtype=np.float32))
    # no real spin: the GPU finishes each 1,000-element add long before Python queues the next
    bare = gpu_timing.queued_device_ms(ops, launch, repeats=20, spin_ns=0)
    assert not bare["queue_covered"] and not bare["spin_outlasted_queue"]
    assert m.device_median_ms < gpu_timing.median(bare["times_ms"])


def test_torch_queues_behind_the_spin_on_its_stream(gpu_numba):
    torch = pytest.importorskip("torch")
    from visualizer.engine.timing import gpu_timing

    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    ops = gpu_timing.TorchOps(torch, gpu_numba)
    m = gpu_timing.measure(ops, lambda: torch.add(x, x, out=y), repeats=20)
    assert m.queue_covered and m.spun_ns >= m.spin_ns
    assert torch.equal(y, 2 * x)
