"""GPU timing shared by the worker and the benchmarks: device time the way nvbench measures it, and
host launch overhead as a number of its own.

Why not CUDA events around one launch: Python and Numba's dispatcher take ~30 µs to queue a launch,
and the GPU sits idle between the two events meanwhile, so a 3 µs kernel reads as 40 µs. Instead:

1. **device time** (``queued_device_ms``): a spin kernel keeps the GPU busy for a while; behind it
   the host queues, for each repeat, event / launch / event (and, for memory-bound kernels, an L2
   flush before each). By the time the GPU reaches the first event every launch is already queued,
   so each pair of events brackets GPU work only. Whether the spin really covered the queue is
   checked, not assumed: the spin's own event must still be pending when the host has finished
   queuing, or at least each repeat's preceding event must still be pending once the repeat is
   queued (``queue_covered``; long kernels keep the GPU busy on their own). If the queue outran the
   spin, the spin is lengthened and the measurement repeated.
2. **launch overhead** (``host_launch_ns``): host time per launch of a loop of launches, without
   synchronising (Python + dispatcher + driver enqueue): what a small kernel really costs a program.

The same code times torch ops (``TorchOps``): the spin is launched on torch's current stream, so the
torch work is queued behind the same kind of spin on the same stream as its events.

Nothing here imports numba or torch at module level: the simulator never calls these functions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SPIN_MIN_NS = 50_000  # the shortest spin worth launching (a launch itself takes ~5 µs of GPU time)
SPIN_MAX_NS = 200_000_000  # never keep the GPU busy for more than 0.2 s per measurement
SPIN_MARGIN_NS = 50_000  # slack on top of the estimated time to queue everything
EVENT_RECORD_NS = 3_000  # a generous host cost of one event record, used only to size the spin
MAX_ATTEMPTS = 3  # measure again with a longer spin at most this many times in all
FLOPS_PER_BYTE_FLUSH = 1.0  # below this arithmetic intensity a kernel is memory-bound: flush L2
DEFAULT_L2_BYTES = 64 << 20  # if the device does not say (an H200 has 50 MB)

DEVICE_TIME_METHOD = (
    "device time: CUDA events around each launch, all queued behind a spin kernel that keeps the "
    "GPU busy while the host queues them (nvbench's method), so they bracket GPU work only; "
    "median over repeats after warm-up"
)
LAUNCH_OVERHEAD_METHOD = (
    "launch overhead: host time per launch in a loop of launches, not synchronised (Python, the "
    "dispatcher and the driver's enqueue), median"
)
RECORDED_SPAN_METHOD = (
    "recorded span: last %globaltimer end minus first start over the instrumented launch's own "
    "records (kernel_span_ns), a cross-check of the instrumented device time"
)
ONE_LAUNCH_METHOD = (
    "events around one launch: the naive measurement, CUDA events recorded just before and after "
    "a single launch; includes the host's dispatch while the GPU waits"
)


def median(values) -> float:
    """Median of a non-empty sequence (ValueError when empty: a missing measurement is an error)."""
    values = list(values)
    if not values:
        raise ValueError("no measurements to take the median of")
    return float(statistics.median(values))


def wants_l2_flush(nbytes: float, flops: float) -> bool:
    """Memory-bound kernels (under 1 FLOP per byte) are timed with a cold L2, as nvbench does: the
    data of a repeat would otherwise still sit in the 50 MB L2 from the previous one."""
    return nbytes > 0 and flops / nbytes < FLOPS_PER_BYTE_FLUSH


def l2_flush_reason(nbytes: float, flops: float) -> str:
    """Why the L2 was (or was not) flushed between repeats, for timing.json and the panel."""
    intensity = flops / nbytes if nbytes > 0 else float("inf")
    if wants_l2_flush(nbytes, flops):
        return (
            f"memory-bound ({intensity:.2f} FLOP/byte): L2 flushed before each repeat, so each reads its "
            "data from DRAM as a first run would"
        )
    return f"compute-bound ({intensity:.3g} FLOP/byte): L2 not flushed"


def plan_spin_ns(repeats: int, per_item_ns: float) -> int:
    """Spin long enough for the host to queue ``repeats`` items of ``per_item_ns`` each, twice over."""
    want = 2 * repeats * per_item_ns + SPIN_MARGIN_NS
    return int(min(max(want, SPIN_MIN_NS), SPIN_MAX_NS))


def host_launch_ns(sync: Callable, launch: Callable, count: int, clock=time.perf_counter_ns) -> list[int]:
    """Host nanoseconds of each of ``count`` launches in a loop (no synchronisation between them)."""
    sync()
    per = []
    for _ in range(count):
        t = clock()
        launch()
        per.append(clock() - t)
    sync()
    return per


def queued_device_ms(
    ops, launch: Callable, repeats: int, spin_ns: int, flush: bool = False, clock=None
) -> dict:
    """One measurement: spin, then event/launch/event per repeat; see the module docstring.

    Whether the GPU ever waited for the host is checked per repeat: once repeat i's end event is
    queued, the event before it (the previous repeat's end, or the spin's) must still be pending:
    then the GPU had not reached repeat i's start while the host was still queuing it, so its two
    events bracket GPU work only. Returns times_ms (one per repeat), covered (that check per repeat),
    queue_covered (all of them), spin_outlasted_queue (the spin's event still pending once
    everything was queued), spun_ns (the spin's own recorded duration) and enqueue_ns (host time to
    queue everything behind the spin).
    """
    clock = clock or time.perf_counter_ns
    ops.sync()
    spin_done = ops.event()
    starts = [ops.event() for _ in range(repeats)]
    ends = [ops.event() for _ in range(repeats)]
    ops.spin(spin_ns)
    spin_done.record()
    covered = []
    t0 = clock()
    for i in range(repeats):
        if flush:
            ops.flush()
        starts[i].record()
        launch()
        ends[i].record()
        covered.append(not (ends[i - 1] if i else spin_done).query())
    enqueue_ns = clock() - t0
    spin_outlasted = not spin_done.query()
    ops.sync()
    times = [ops.elapsed_ms(s, e) for s, e in zip(starts, ends, strict=True)]
    return {
        "times_ms": times,
        "spin_ns": int(spin_ns),
        "spun_ns": int(ops.spun_ns()),
        "enqueue_ns": int(enqueue_ns),
        "spin_outlasted_queue": bool(spin_outlasted),
        "covered": covered,
        "queue_covered": all(covered),
    }


@dataclass
class Measurement:
    """Device time and launch overhead of one callable, and how they were measured."""

    device_ms: list[float]
    launch_ns: list[int]
    spin_ns: int
    spun_ns: int  # how long the spin ran by its own %globaltimer stamps (>= spin_ns if it worked)
    enqueue_ns: int
    spin_outlasted_queue: bool
    queue_covered: bool
    covered_repeats: int  # repeats whose events the GPU reached only after they were all queued
    attempts: int
    l2_flush: bool
    warmup: int
    history: list[dict] = field(default_factory=list)  # earlier attempts whose queue outran the spin

    @property
    def device_median_ms(self) -> float:
        return median(self.device_ms)

    @property
    def launch_median_us(self) -> float:
        return median(self.launch_ns) / 1e3

    def method(self) -> dict:
        return {
            "device_time": DEVICE_TIME_METHOD,
            "launch_overhead": LAUNCH_OVERHEAD_METHOD,
            "repeats": len(self.device_ms),
            "warmup": self.warmup,
            "spin_us": self.spin_ns / 1e3,
            "spin_ran_us": self.spun_ns / 1e3,
            "enqueue_us": self.enqueue_ns / 1e3,
            "spin_outlasted_queue": self.spin_outlasted_queue,
            "queue_covered": self.queue_covered,
            "covered_repeats": self.covered_repeats,
            "attempts": self.attempts,
            "l2_flush": self.l2_flush,
        }


def measure(
    ops, launch: Callable, repeats: int = 20, warmup: int = 3, flush: bool = False, clock=None
) -> Measurement:
    """Warm up, time the host launch loop, then device time behind a spin sized from that loop; if
    the queue outran the spin, measure again with a spin twice as long as the queuing took."""
    clock = clock or time.perf_counter_ns
    repeats = max(1, int(repeats))
    for _ in range(warmup):
        launch()
    ops.warm_up()
    if flush:
        ops.flush()  # allocates the flush buffer here, not while the timed launches are queued
        ops.sync()
    launch_ns = host_launch_ns(ops.sync, launch, repeats, clock)
    per_item = median(launch_ns) + 2 * EVENT_RECORD_NS + (median(launch_ns) + EVENT_RECORD_NS if flush else 0)
    spin_ns = plan_spin_ns(repeats, per_item)
    history = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        got = queued_device_ms(ops, launch, repeats, spin_ns, flush, clock)
        if got["queue_covered"] or attempt == MAX_ATTEMPTS or spin_ns >= SPIN_MAX_NS:
            break
        history.append({k: got[k] for k in ("spin_ns", "enqueue_ns", "spin_outlasted_queue")})
        history[-1]["covered_repeats"] = sum(got["covered"])
        spin_ns = min(max(2 * spin_ns, 2 * got["enqueue_ns"] + SPIN_MARGIN_NS), SPIN_MAX_NS)
    return Measurement(
        device_ms=got["times_ms"],
        launch_ns=launch_ns,
        spin_ns=got["spin_ns"],
        spun_ns=got["spun_ns"],
        enqueue_ns=got["enqueue_ns"],
        spin_outlasted_queue=got["spin_outlasted_queue"],
        queue_covered=got["queue_covered"],
        covered_repeats=sum(got["covered"]),
        attempts=attempt,
        l2_flush=flush,
        warmup=warmup,
        history=history,
    )


def one_launch_event_ms(ops, launch: Callable, repeats: int) -> list[float]:
    """The naive measurement, for comparison only: events just before and after one launch each."""
    times = []
    for _ in range(repeats):
        ops.sync()
        e0, e1 = ops.event(), ops.event()
        e0.record()
        launch()
        e1.record()
        ops.sync()
        times.append(ops.elapsed_ms(e0, e1))
    return times


def timing_fields(
    clean: Measurement, instrumented: Measurement | None, one_launch_ms: list[float] | None
) -> dict:
    """The device-time part of timing.json for a GPU capture (flat numbers the panel and CLI read)."""
    out = {
        "clock": "CUDA events queued behind a spin kernel: GPU device time (nvbench's method), median",
        "repeats": len(clean.device_ms),
        "clean_ms": clean.device_median_ms,
        "clean_ms_all": list(clean.device_ms),
        "launch_overhead_us": clean.launch_median_us,
        "method": {**clean.method(), "recorded_span": RECORDED_SPAN_METHOD, "one_launch": ONE_LAUNCH_METHOD},
        "queue_covered": clean.queue_covered,
    }
    if instrumented is not None:
        out.update(
            instrumented_ms=instrumented.device_median_ms,
            instrumented_ms_all=list(instrumented.device_ms),
            instrumented_launch_overhead_us=instrumented.launch_median_us,
            queue_covered=clean.queue_covered and instrumented.queue_covered,
        )
        out["method"]["instrumented_spin_us"] = instrumented.spin_ns / 1e3
    if one_launch_ms:
        out["one_launch_event_ms"] = median(one_launch_ms)
    return out


def torch_fields(label: str, m: Measurement) -> dict:
    """The torch baseline's part of timing.json, measured the same way as ours."""
    return {
        "torch_op": label,
        "torch_ms": m.device_median_ms,
        "torch_launch_overhead_us": m.launch_median_us,
        "torch_queue_covered": m.queue_covered,
        "torch_method": m.method(),
    }


# ------------------------------------------------------------------------------------ backends


def l2_bytes(cuda) -> int:
    try:
        return int(cuda.get_current_device().L2_CACHE_SIZE) or DEFAULT_L2_BYTES
    except Exception:  # an attribute the driver does not report: use a safe size
        return DEFAULT_L2_BYTES


class _NumbaEvent:
    def __init__(self, cuda, stream):
        self.event, self.stream = cuda.event(), stream

    def record(self):
        self.event.record(stream=self.stream)

    def query(self) -> bool:
        return self.event.query()


class NumbaOps:
    """Events, spin and L2 flush on a Numba stream (default: the legacy default stream, where
    ``kernel[grid, block](...)`` launches go)."""

    def __init__(self, cuda, stream=None):
        import numpy as np

        from visualizer.kernels.spin import spin

        self.cuda = cuda
        self.stream = stream if stream is not None else cuda.default_stream()
        self._spin = spin
        self._stamps = cuda.device_array(2, np.int64)
        self._flush_buf = None
        self._np = np

    def sync(self) -> None:
        self.cuda.synchronize()

    def event(self):
        return _NumbaEvent(self.cuda, self.stream)

    def elapsed_ms(self, a, b) -> float:
        return a.event.elapsed_time(b.event)

    def spin(self, ns: int) -> None:
        self._spin[1, 32, self.stream](self._np.uint64(ns), self._stamps)

    def warm_up(self) -> None:
        """Compile the spin kernel and allocate the flush buffer outside any measurement."""
        self.spin(1000)
        self.sync()

    def spun_ns(self) -> int:
        """How long the last spin actually ran, by its own %globaltimer stamps."""
        t0, t1 = self._stamps.copy_to_host()
        return int(t1 - t0)

    def flush(self) -> None:
        """Overwrite twice the L2's size (one memset, as nvbench does), evicting the timed data."""
        from numba.cuda.cudadrv.driver import device_memset

        if self._flush_buf is None:
            self._flush_buf = self.cuda.device_array(2 * l2_bytes(self.cuda), self._np.uint8)
        device_memset(self._flush_buf, 0, self._flush_buf.size, stream=self.stream)


class _TorchEvent:
    def __init__(self, torch):
        self.event = torch.cuda.Event(enable_timing=True)

    def record(self):
        self.event.record()  # on torch's current stream

    def query(self) -> bool:
        return self.event.query()


class TorchOps(NumbaOps):
    """The same for torch ops: events on torch's current stream, and the spin and flush launched on
    that very stream (wrapped for Numba), so the torch work queues behind them."""

    def __init__(self, torch, cuda):
        handle = torch.cuda.current_stream().cuda_stream
        super().__init__(cuda, cuda.default_stream() if handle == 0 else cuda.external_stream(handle))
        self.torch = torch

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def event(self):
        return _TorchEvent(self.torch)

    def elapsed_ms(self, a, b) -> float:
        return a.event.elapsed_time(b.event)


# ---------------------------------------------------------------- kept for comparison and merges


def numba_event_ms(cuda, launch, repeats: int, warmup: int = 1) -> list[float]:
    """Events around each single launch (the naive method: includes host dispatch). Comparison only."""
    for _ in range(warmup):
        launch()
    cuda.synchronize()
    return one_launch_event_ms(NumbaOps(cuda), launch, repeats)


def torch_event_ms(torch, fn, repeats: int, warmup: int = 1) -> tuple[list[float], object]:
    """The same naive method for a torch callable; also returns its last result. Comparison only."""
    out = None
    for _ in range(warmup):
        out = fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        out = fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return times, out
