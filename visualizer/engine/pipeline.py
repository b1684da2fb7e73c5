"""The one capture sequence every kernel goes through, built-in or a visitor's.

A front end (``worker.prepare_builtin``, ``source_capture.prepare_source``) turns a request into a
:class:`Job`: the two compiled builds, the kernel's arrays, the probe buffers and how each build's
arguments are laid out. :func:`run` then does, the same way for both:

    allocate -> copy in -> warm-up (GPU: compiles both builds, then the buffers are reset)
    -> instrumented launch (recording accesses when asked) -> copy out
    -> (runs > 1: the same launch again from the same inputs, each run's arrays kept) -> time both builds -> free

and returns the arrays after the launch, the probe buffers, the host steps, timing.json and the
builds' resources. The front end adds only what is its own (names, the reference check).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from visualizer.analysis.provenance import backend_source
from visualizer.engine.measure import kernel_timing, resources
from visualizer.specs.launch import MAX_RUNS

# How a build's parameter is filled: ("array", name) a kernel array, ("buffer", name) a probe
# buffer, ("value", v) a scalar passed as it is.
Arg = tuple[str, Any]


@dataclass
class Job:
    traced: Any  # the instrumented build (a numba dispatcher)
    clean: Any  # the same kernel with every probe a no-op (built-in) or untouched (a visitor's)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arrays: dict[str, np.ndarray]  # the kernel's own arrays: copied in, read back
    buffers: dict[str, np.ndarray]  # probe buffers (trace, active, tiles, rows): kept apart, so a
    # visitor's argument may be called "trace"
    traced_args: list[Arg]
    clean_args: list[Arg]
    dynamic_smem: int = 0
    nbytes: float = 0.0  # bytes the kernel moves (decides the L2 flush; GB/s when flops is known)
    flops: float = 0.0
    compile_started_ns: int = field(default_factory=time.perf_counter_ns)
    # wraps every launch of either build: (dispatcher, args) -> result; turns a visitor's failure
    # into one line naming their line
    call: Callable[[Any, list], Any] = lambda fn, args: fn(*args)  # noqa: E731
    # (device arrays, device buffers) -> an access recorder (engine/access_record.py) or None
    start_recording: Callable[[dict, dict], Any] | None = None
    limits: Callable[[], Any] = nullcontext  # a context around running the kernel (a visitor's limits)
    during_launch: Callable[[], Any] = nullcontext  # a context around the instrumented launch only
    overflow_error: Callable[[Any], Exception] | None = None  # recorder -> the error to raise instead
    before_run: Callable[[int], None] | None = None  # before run i > 0 is reset (its delay table)
    delay_sites: list | None = None  # the delays pass's (line, kinds) sites; its table: buffers["delay"]
    lens: dict = field(default_factory=dict)  # what the lenses' passes recorded about the kernel (sites)
    # the read-back probe buffers -> the recorder's buffers, for accesses the kernel recorded itself
    # (the access pass, engine/gpu_access_job.py); it takes its own buffers out of them
    finish_accesses: Callable[[dict], dict] | None = None

    @property
    def config(self) -> tuple:
        if self.dynamic_smem:
            return (self.grid, self.block, 0, self.dynamic_smem)
        return (self.grid, self.block)


@dataclass
class Ran:
    after: dict[str, np.ndarray]  # the kernel's arrays after the instrumented launch
    buffers: dict[str, np.ndarray]  # the probe buffers it wrote
    timing: dict
    instrumented: dict  # registers, shared memory, driver occupancy of each build (GPU)
    clean: dict
    device_arrays: dict  # only until free(): the torch baseline reads them
    accesses: dict | None = None
    runs: dict[str, np.ndarray] | None = None  # runs > 1: each kernel array after every run, stacked
    # how each run was scheduled (seeded simulator: its warp steps and stalls; GPU delays: their table)
    schedules: list[dict] | None = None


def _reset(job: Job, run: int, copy_in) -> None:
    """Run ``run`` starts from the same inputs (and, for a visitor's delays, its own delay table)."""
    if job.before_run is not None:
        job.before_run(run)
    copy_in()


def _args(layout: list[Arg], device: dict, bufs: dict) -> list:
    out = []
    for kind, what in layout:
        out.append(device[what] if kind == "array" else bufs[what] if kind == "buffer" else what)
    return out


def schedule(backend, seed: int | None, run: int):
    """The context one run of the instrumented launch runs in: on the simulator the seeded
    interleaving (seed, run) of engine/fastsim.py (seed None: its fixed linear order); on a GPU the
    hardware's own schedule."""
    if backend.simulator and seed is not None:
        from visualizer.engine import fastsim

        return fastsim.seeded(seed, run)
    return nullcontext()


def run(
    backend,
    job: Job,
    repeats: int = 20,
    time_clean: bool = True,
    before_free=None,
    runs: int = 1,
    seed: int | None = None,
) -> Ran:
    """The capture sequence (module docstring). ``before_free(ran)`` runs while the device arrays
    still exist (the torch baseline of a built-in kernel). ``runs``: launch the instrumented build
    this many times from the same inputs (run 0 is the one the capture's tables come from) and keep
    every run's arrays; ``seed``: the seeded schedules they run (``schedule``)."""
    if not 1 <= int(runs) <= MAX_RUNS:
        raise ValueError(f"runs must be 1 to {MAX_RUNS}, not {runs}")
    cuda = backend.cuda
    steps: dict[str, float] = {}
    if backend.announce_blocks is not None:
        backend.announce_blocks(job.grid[0] * job.grid[1] * job.grid[2])

    (device, bufs), steps["allocate"] = backend.timed(
        lambda: (
            {k: cuda.device_array(v.shape, v.dtype) for k, v in job.arrays.items()},
            {k: cuda.device_array(v.shape, v.dtype) for k, v in job.buffers.items()},
        )
    )

    def copy_in():
        for k, v in job.arrays.items():
            device[k].copy_to_device(v)
        for k, v in job.buffers.items():
            bufs[k].copy_to_device(v)

    _, steps["copy_in"] = backend.timed(copy_in)
    traced_args, clean_args = _args(job.traced_args, device, bufs), _args(job.clean_args, device, bufs)
    config = job.config

    def traced():
        return job.call(job.traced[config], traced_args)

    def clean():
        return job.call(job.clean[config], clean_args)

    with job.limits():
        if not backend.simulator:
            # warm-up compiles both builds (excluded from timing), then every buffer starts again
            t = time.perf_counter_ns()
            traced()
            clean()
            cuda.synchronize()
            compile_ns = time.perf_counter_ns() - t
            copy_in()
        else:
            compile_ns = time.perf_counter_ns() - job.compile_started_ns

        recorder = job.start_recording(device, bufs) if job.start_recording else None
        schedules = []
        try:
            with job.during_launch(), schedule(backend, seed, 0) as sch:
                _, steps["kernel"] = backend.timed(traced)
            schedules.append(schedule_fields(seed, 0, sch))
        except Exception:
            if recorder is not None and getattr(recorder, "overflow", False) and job.overflow_error:
                raise job.overflow_error(recorder) from None
            raise
        finally:
            if recorder is not None:
                from visualizer.engine import access_record

                access_record.stop()

        def copy_out():
            return {k: device[k].copy_to_host() for k in job.arrays}, {
                k: v.copy_to_host() for k, v in bufs.items()
            }

        (after, recorded), steps["copy_out"] = backend.timed(copy_out)
        stacked = more_runs(
            backend, after, runs, seed, schedules, lambda i: _reset(job, i, copy_in), traced, job.during_launch,
            lambda: {k: device[k].copy_to_host() for k in job.arrays},
        )  # fmt: skip
        timing = kernel_timing(
            backend, steps, compile_ns, repeats, time_clean, clean, traced, job.nbytes, job.flops
        )

    ran = Ran(
        after=after,
        buffers=recorded,
        timing=timing,
        instrumented=resources(backend, job.traced, _launch_shape(job)),
        clean=resources(backend, job.clean, _launch_shape(job)),
        device_arrays=device,
        accesses=recorder.buffers()
        if recorder is not None
        else job.finish_accesses(recorded)
        if job.finish_accesses is not None
        else None,
        runs=stacked,
        schedules=schedules,
    )
    if before_free is not None:
        before_free(ran)

    def free():
        device.clear()
        bufs.clear()
        if not backend.simulator:
            cuda.current_context().deallocations.clear()

    _, steps["free"] = backend.timed(free)
    ran.device_arrays = {}
    return ran


def more_runs(backend, first: dict, runs: int, seed, schedules: list, reset, launch, around, read):
    """Runs 1..runs-1 of a launch whose run 0 gave the arrays ``first``: each from the same inputs
    (``reset(i)``), in its schedule (``schedule``), its arrays read back (``read``). Returns every
    run's arrays stacked (None for one unseeded run); appends each run's schedule fields to ``schedules``."""
    if runs <= 1 and seed is None:
        return None
    each = [first]
    for i in range(1, runs):
        reset(i)
        with around(), schedule(backend, seed, i) as sch:
            launch()
            if not backend.simulator:
                backend.cuda.synchronize()
        schedules.append(schedule_fields(seed, i, sch))
        each.append(read())
    return {k: np.stack([r[k] for r in each]) for k in first}


def schedule_fields(seed, run: int, sch) -> dict:
    """One run's entry of launch.json's runs.schedules."""
    if sch is not None:  # the simulator's seeded interleaving
        return sch.summary()
    return {"seed": seed, "run": run}


@dataclass(frozen=True)
class _Shape:
    threads_per_block: int
    dynamic_smem: int


def _launch_shape(job: Job) -> _Shape:
    return _Shape(job.block[0] * job.block[1] * job.block[2], job.dynamic_smem)


def launch_fields(backend, job: Job, ran: Ran) -> dict:
    """The launch.json fields every capture has, whoever's kernel it ran."""
    threads_per_block = job.block[0] * job.block[1] * job.block[2]
    blocks = job.grid[0] * job.grid[1] * job.grid[2]
    threads = blocks * threads_per_block
    return {
        **backend.device_info(),
        "grid": list(job.grid),
        "block": list(job.block),
        "threads": threads,
        "blocks": blocks,
        "threads_per_block": threads_per_block,
        "dynamic_smem_bytes": job.dynamic_smem,
        "recorded_per": "warp" if job.buffers["trace"].shape[1] < threads else "thread",
        "source": backend_source(backend.simulator),
        "instrumented": ran.instrumented,
        "clean": ran.clean,
    }
