"""The GPU timer's host logic against a model of a GPU queue (no GPU needed).

FakeGPU models what matters: every host call costs host time; GPU work starts when both the GPU is
free and the host has queued it; an event's timestamp is when the GPU reaches it. With it the tests
check that the spin method brackets GPU work only, that a spin too short is detected (and fixed by
measuring again), and what timing.json gets.
"""

import pytest

from visualizer.engine.timing import gpu_timing
from visualizer.engine.timing.gpu_timing import (
    SPIN_MAX_NS,
    SPIN_MIN_NS,
    measure,
    median,
    one_launch_event_ms,
    plan_spin_ns,
    queued_device_ms,
    timing_fields,
    torch_fields,
    wants_l2_flush,
)
from visualizer.specs import catalog


class FakeEvent:
    def __init__(self, gpu):
        self.gpu, self.ts = gpu, None

    def record(self):
        self.gpu.host += self.gpu.event_cost
        self.ts = self.gpu.enqueue(0)

    def query(self):
        return self.ts <= self.gpu.host


class FakeGPU:
    def __init__(self, kernel_ns=3_000, dispatch_ns=30_000, event_cost=2_000, flush_ns=40_000):
        self.kernel_ns, self.dispatch_ns, self.event_cost, self.flush_ns = (
            kernel_ns, dispatch_ns, event_cost, flush_ns,
        )  # fmt: skip
        self.host = 0  # host clock, ns
        self.free_at = 0  # when the GPU finishes everything queued so far
        self.kernel_starts = []
        self.last_spin = 0

    def enqueue(self, duration):
        start = max(self.free_at, self.host)
        self.free_at = start + duration
        return start

    def clock(self):
        return self.host

    # ops interface
    def sync(self):
        self.host = max(self.host, self.free_at)

    def event(self):
        return FakeEvent(self)

    def elapsed_ms(self, a, b):
        return (b.ts - a.ts) / 1e6

    def spin(self, ns):
        self.host += self.dispatch_ns
        self.enqueue(ns)
        self.last_spin = ns

    def spun_ns(self):
        return self.last_spin

    def warm_up(self):
        pass

    def flush(self):
        self.host += 5_000
        self.enqueue(self.flush_ns)

    def launch(self):
        self.host += self.dispatch_ns
        self.kernel_starts.append(self.enqueue(self.kernel_ns))


def test_spin_brackets_gpu_work_only():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000)
    got = queued_device_ms(gpu, gpu.launch, repeats=10, spin_ns=2_000_000, clock=gpu.clock)
    assert got["times_ms"] == [0.003] * 10  # exactly the kernel, not the 30 µs dispatch
    assert got["spin_outlasted_queue"] and got["queue_covered"]
    assert all(got["covered"])
    assert got["enqueue_ns"] == 10 * (30_000 + 2 * 2_000)
    assert got["spun_ns"] == 2_000_000


def test_events_around_one_launch_include_dispatch():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000)
    times = one_launch_event_ms(gpu, gpu.launch, 5)
    assert times == [0.033] * 5  # what the old panel showed: dispatch + kernel


def test_spin_too_short_is_detected():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000)
    got = queued_device_ms(gpu, gpu.launch, repeats=10, spin_ns=10_000, clock=gpu.clock)
    assert not got["spin_outlasted_queue"]
    assert not got["queue_covered"]
    assert not any(got["covered"])  # the 10 µs spin is over before the first launch is queued
    assert max(got["times_ms"]) > 0.003  # the GPU waited for the host inside the brackets


def test_long_kernels_keep_the_gpu_busy_without_a_long_spin():
    # 5 ms kernels: the spin ends long before the queue is full, but the GPU never waits
    gpu = FakeGPU(kernel_ns=5_000_000, dispatch_ns=30_000)
    got = queued_device_ms(gpu, gpu.launch, repeats=5, spin_ns=SPIN_MIN_NS, clock=gpu.clock)
    assert not got["spin_outlasted_queue"]
    assert got["queue_covered"] and got["times_ms"] == [5.0] * 5


def test_measure_plans_the_spin_from_the_launch_loop():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000)
    m = measure(gpu, gpu.launch, repeats=20, warmup=2, clock=gpu.clock)
    assert m.attempts == 1 and m.queue_covered and m.spin_outlasted_queue
    assert m.device_median_ms == pytest.approx(0.003)
    assert m.launch_median_us == pytest.approx(30.0)  # the host loop: dispatch per launch
    assert m.spin_ns == plan_spin_ns(20, 30_000 + 2 * gpu_timing.EVENT_RECORD_NS)
    assert len(gpu.kernel_starts) == 2 + 20 + 20  # warm-up, host loop, timed repeats


def test_measure_again_with_a_longer_spin_when_the_queue_outran_it():
    # events cost far more than the planner assumes: the first spin is too short
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000, event_cost=60_000)
    m = measure(gpu, gpu.launch, repeats=20, warmup=1, clock=gpu.clock)
    assert m.attempts == 2 and len(m.history) == 1
    assert not m.history[0]["spin_outlasted_queue"] and m.history[0]["covered_repeats"] < 20
    assert m.queue_covered and m.device_ms == [0.003] * 20
    assert m.spin_ns > m.history[0]["spin_ns"]


def test_l2_flush_stays_outside_the_brackets():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000, flush_ns=40_000)
    m = measure(gpu, gpu.launch, repeats=8, warmup=1, flush=True, clock=gpu.clock)
    assert m.l2_flush and m.queue_covered and m.covered_repeats == 8
    assert m.device_ms == [0.003] * 8  # flush time is not in the kernel's time
    starts = gpu.kernel_starts[-8:]
    assert all(b - a == 3_000 + 40_000 for a, b in zip(starts, starts[1:], strict=False))


def test_measure_gives_up_after_max_attempts():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000, event_cost=10_000_000)  # hopeless host
    m = measure(gpu, gpu.launch, repeats=50, warmup=0, clock=gpu.clock)
    assert not m.queue_covered  # reported, not hidden
    assert m.attempts == gpu_timing.MAX_ATTEMPTS or m.spin_ns == SPIN_MAX_NS
    assert m.method()["queue_covered"] is False


def test_plan_spin_ns_bounds():
    assert plan_spin_ns(0, 0) == SPIN_MIN_NS
    assert plan_spin_ns(10**6, 10**6) == SPIN_MAX_NS
    assert plan_spin_ns(20, 40_000) == 2 * 20 * 40_000 + gpu_timing.SPIN_MARGIN_NS


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError):
        median([])


@pytest.mark.parametrize(
    ("kernel", "params", "flush"),
    [
        ("vector_add", {"n": 1 << 20}, True),
        ("reduction", {"n": 1 << 20}, True),
        ("matmul_tiled", {"n": 1024}, False),
        ("flash_attention", {}, False),
    ],
)
def test_l2_flush_for_memory_bound_kernels_only(kernel, params, flush):
    spec = catalog.get(kernel)
    values = spec.resolve(params)
    assert wants_l2_flush(*spec.work(values)) is flush


def test_timing_json_fields():
    gpu = FakeGPU(kernel_ns=3_000, dispatch_ns=30_000)
    clean = measure(gpu, gpu.launch, repeats=6, warmup=1, clock=gpu.clock)
    gpu.kernel_ns = 6_000
    inst = measure(gpu, gpu.launch, repeats=6, warmup=1, clock=gpu.clock)
    one = one_launch_event_ms(gpu, gpu.launch, 3)
    t = timing_fields(clean, inst, one)
    assert t["clean_ms"] == pytest.approx(0.003) and t["instrumented_ms"] == pytest.approx(0.006)
    assert t["launch_overhead_us"] == pytest.approx(30.0)
    assert t["one_launch_event_ms"] == pytest.approx(0.036)
    assert t["one_launch_event_ms"] > t["clean_ms"]
    assert len(t["clean_ms_all"]) == 6 and t["repeats"] == 6 and t["queue_covered"] is True
    method = t["method"]
    assert "spin" in method["device_time"] and "%globaltimer" in method["recorded_span"]
    assert {"spin_us", "spin_ran_us", "queue_covered", "l2_flush", "repeats", "warmup", "attempts"} <= set(
        method
    )
    tt = torch_fields("torch.add", clean)
    assert tt["torch_ms"] == pytest.approx(0.003) and tt["torch_launch_overhead_us"] == pytest.approx(30.0)
    assert tt["torch_method"]["queue_covered"] is True
