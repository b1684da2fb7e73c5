"""The one capture sequence every kernel goes through, built-in or a visitor's.

A front end (``builtin.prepare_builtin``, ``source.prepare_source``) turns a request into a
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
from visualizer.engine.timing.measure import kernel_timing, resources
from visualizer.specs.launch import MAX_RUNS, Launch

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
    buffers: dict[str, np.ndarray]  # probe buffers (trace, active, tiles, rows, the lenses'): kept apart,
    # so a visitor's argument may be called "trace"
    traced_args: list[Arg]
    clean_args: list[Arg]
    # the traced build's parameter names, as far as the simulator's listeners name arrays by them (the
    # kernel's own, then the trace buffers)
    traced_names: list[str] = field(default_factory=list)
    lenses: Any = None  # engine/lenses Lenses: the lenses this capture asked for
    dynamic_smem: int = 0
    nbytes: float = 0.0  # bytes the kernel moves (decides the L2 flush; GB/s when flops is known)
    flops: float = 0.0
    compile_started_ns: int = field(default_factory=time.perf_counter_ns)
    # wraps every launch of either build: (dispatcher, args) -> result; turns a visitor's failure
    # into one line naming their line
    call: Callable[[Any, list], Any] = lambda fn, args: fn(*args)  # noqa: E731
    # the simulator's listeners of the front end's own (a visitor's static shared memory)
    sim_listeners: list = field(default_factory=list)
    # the instrumented function's own AST (a FunctionDef) and namespace: the compiled simulator engine
    # compiles the traced build from these (its file holds the kernel's original source)
    traced_tree: Any = None
    traced_namespace: dict | None = None
    # why fastsim may not run this launch (admitted at the compiled engine's limits, over fastsim's):
    # if the compiled engine hands it over, the capture is refused with this instead
    fastsim_refusal: str | None = None

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
    runs: dict[str, np.ndarray] | None = None  # runs > 1: each kernel array after every run, stacked
    # how each run was scheduled (seeded simulator: its warp steps and stalls; GPU delays: their table)
    schedules: list[dict] | None = None
    # the simulator's engine: which ran the instrumented launch, why not the compiled one, its CPU times
    sim_engine: dict | None = None


def _reset(job: Job, run: int, copy_in) -> None:
    """Run ``run`` starts from the same inputs (and the lenses' own tables for it: the delays')."""
    if job.lenses is not None:
        job.lenses.before_run(run, job.buffers)
    copy_in()


def _listened(job: Job, device: dict, bufs: dict) -> list:
    """The simulator's listeners of the instrumented launch: the lenses' (arrays named by the kernel's
    parameter names, the probe buffers among them excluded) and the front end's."""
    arrays, excluded = {}, set()
    for (kind, what), name in zip(job.traced_args, job.traced_names, strict=False):
        if kind == "array":
            arrays[name] = device[what]
        elif kind == "buffer":
            arrays[name] = bufs[what]
            excluded.add(name)
    own = job.lenses.listeners(arrays, excluded) if job.lenses is not None else []
    return [*own, *job.sim_listeners]


def _args(layout: list[Arg], device: dict, bufs: dict) -> list:
    out = []
    for kind, what in layout:
        out.append(device[what] if kind == "array" else bufs[what] if kind == "buffer" else what)
    return out


def listen(backend, listeners: list):
    """The context the instrumented launch runs in on the simulator: ``listeners`` hear its array
    accesses, barriers, atomics and thread switches (engine/sim/fastsim.py ``listening``)."""
    if backend.listens and listeners:
        from visualizer.engine.sim import fastsim

        return fastsim.listening(listeners)
    return nullcontext()


def schedule(backend, seed: int | None, run: int):
    """The context one run of the instrumented launch runs in: on the simulator the seeded
    interleaving (seed, run) of engine/sim/fastsim.py (seed None: its fixed linear order); on a GPU the
    hardware's own schedule."""
    if backend.simulator and seed is not None:
        from visualizer.engine.sim import fastsim

        return fastsim.seeded(seed, run)
    return nullcontext()


def choose_sim_engine(backend, job: Job) -> tuple[str | None, str | None]:
    """(the engine the simulator's launches are asked to run on, why not the compiled one): the
    request's (CaptureRequest.planned_sim_engine). The compiled engine may still hand a launch to
    fastsim (``NotCompiled``): the router records that (``SimEngine.ran``). (None, None) on a GPU."""
    if not backend.simulator:
        return None, None
    request = job.lenses.ctx.request if job.lenses is not None else None
    if request is None:
        return "compiled", None
    return request.planned_sim_engine()


class SimEngine:
    """The simulator's engine around a capture's launches: the compiled engine (engine/compiled/, its
    router in front of fastsim) or fastsim; afterwards, which one ran the instrumented launch."""

    def __init__(self, backend, job: Job):
        self.asked, self.note = choose_sim_engine(backend, job)
        self.router = None
        if self.asked is not None:
            from visualizer.engine.compiled import simulator as router

            router.install()
            self.router = router
            if job.traced_tree is not None:
                from visualizer.engine.compiled.translate import kernel_python_function

                router.register_tree(
                    kernel_python_function(job.traced), job.traced_tree, job.traced_namespace
                )

    def context(self, refuse_fallback: str | None = None):
        if self.router is None:
            return nullcontext()
        return self.router.engine(self.asked, refuse_fallback if self.asked == "compiled" else None)

    def mark(self) -> int:
        return self.router.mark() if self.router is not None else 0

    def launch_after(self, mark: int) -> dict | None:
        """The router's entry of the one launch after ``mark`` (None: fastsim was asked, or no record)."""
        if self.router is None or self.asked != "compiled":
            return None
        entries = self.router.since(mark)
        return entries[0] if entries else None

    def ran(self, entry: dict | None, clean: dict | None) -> dict | None:
        """launch.json's fields on the engine: which ran the instrumented launch and why not compiled,
        and its CPU times (timing.json) for the instrumented launch and the clean one."""
        if self.asked is None:
            return None
        engine, note = self.asked, self.note
        if entry is not None:
            engine, note = entry["engine"], entry.get("fallback")
            if engine != "compiled":
                note = f"the compiled engine did not take the kernel: {note}"
        out = {"sim_engine": engine, "sim_engine_note": note}
        if entry is not None and engine == "compiled":
            out.update(blocks=entry["blocks"], serial_reason=entry["serial_reason"],
                       compile_s=entry["compile_s"], run_s=entry["run_s"],
                       shared_bytes=entry.get("shared_bytes", 0))  # fmt: skip
            if clean is not None and clean.get("engine") == "compiled":
                out.update(clean_compile_s=clean["compile_s"], clean_run_s=clean["run_s"])
        return out


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

    compile_ns = _warm_up(backend, job, time_clean, traced, clean, copy_in)

    engine = SimEngine(backend, job)
    with engine.context(job.fastsim_refusal):
        return _launches(backend, job, engine, device, bufs, copy_in, traced, clean, steps, compile_ns,
                         repeats, time_clean, before_free, runs, seed)  # fmt: skip


def _launches(backend, job, engine, device, bufs, copy_in, traced, clean, steps, compile_ns, repeats,
              time_clean, before_free, runs, seed) -> Ran:  # fmt: skip
    """``run`` from the instrumented launch on, inside the simulator engine's context."""
    cuda = backend.cuda
    schedules = []
    listening = listen(backend, _listened(job, device, bufs) if backend.listens else [])
    mark = engine.mark()
    try:
        with listening, schedule(backend, seed, 0) as sch:
            _, steps["kernel"] = backend.timed(traced)
        entry = engine.launch_after(mark)
        schedules.append(schedule_fields(seed, 0, sch, entry))
    except Exception as exc:
        better = job.lenses.error(exc) if job.lenses is not None else None
        if better is not None:
            raise better from None
        raise

    def copy_out():
        return {k: device[k].copy_to_host() for k in job.arrays}, {
            k: v.copy_to_host() for k, v in bufs.items()
        }

    (after, recorded), steps["copy_out"] = backend.timed(copy_out)
    stacked = more_runs(
        backend, after, runs, seed, schedules, lambda i: _reset(job, i, copy_in), traced,
        lambda: {k: device[k].copy_to_host() for k in job.arrays}, engine,
    )  # fmt: skip
    before_clean = engine.mark()
    timing = kernel_timing(
        backend, steps, compile_ns, repeats, time_clean, clean, traced, job.nbytes, job.flops
    )
    sim_engine = engine.ran(entry, engine.launch_after(before_clean) if time_clean else None)
    if sim_engine is not None and sim_engine.get("compile_s"):
        # the compiled engine builds the kernel inside its first launch: build time, not the flow's
        # kernel step (fastsim and a GPU's warm-up keep it apart the same way)
        built = int(sim_engine["compile_s"] * 1e9)
        steps["kernel"] = max(0, int(steps["kernel"]) - built)
        timing["compile_ns"] = int(timing.get("compile_ns", 0)) + built
    if sim_engine is not None:
        timing.update(sim_engine_timing(sim_engine))
        timing.pop("overhead_ratio", None)
        if "simulator_cpu_s" in timing:
            timing.setdefault("method", {})["device_time"] = (
                "none: the simulator has no GPU clock; times are the compiled engine's CPU time of one "
                "simulated launch (compile apart, simulator_cpu_s), and SM placement and in-kernel times "
                "are modelled"
            )
        if timing.get("clean_ms", 0) > 0:
            timing["overhead_ratio"] = timing["instrumented_ms"] / timing["clean_ms"]

    ran = Ran(
        after=after,
        buffers=recorded,
        timing=timing,
        instrumented=resources(backend, job.traced, _launch_shape(job)),
        clean=resources(backend, job.clean, _launch_shape(job)),
        device_arrays=device,
        runs=stacked,
        schedules=schedules,
        sim_engine=sim_engine,
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


def _warm_up(backend, job: Job, time_clean: bool, traced, clean, copy_in) -> int:
    """A timed GPU capture's warm-up: both builds compiled (excluded from timing), then every buffer
    starts again; returns the compile time (ns). The simulator compiles nothing, and an untimed GPU
    capture compiles in its one launch."""
    if backend.simulator or not time_clean:
        return time.perf_counter_ns() - job.compile_started_ns
    t = time.perf_counter_ns()
    traced()
    clean()
    backend.cuda.synchronize()
    compile_ns = time.perf_counter_ns() - t
    copy_in()
    return compile_ns


def sim_engine_timing(sim_engine: dict) -> dict:
    """timing.json's part on the simulator's engine: which ran, and the compiled engine's compile and
    run CPU seconds apart (simulator CPU time on this machine, never kernel time). Where the compiled
    engine ran, the launch times are its run CPU time, compile left out (it is paid once per source and
    argument types: a cached kernel compiles nothing)."""
    out: dict = {"sim_engine": sim_engine["sim_engine"]}
    if "compile_s" not in sim_engine:
        return out
    cpu = {"clock": "simulator CPU time (process time on the CPU), not kernel time",
           "instrumented_compile": sim_engine["compile_s"], "instrumented_run": sim_engine["run_s"]}  # fmt: skip
    out["clock"] = "simulator CPU time of the compiled launch on the CPU, compile apart (not GPU time)"
    out["instrumented_ms"] = sim_engine["run_s"] * 1e3
    if "clean_compile_s" in sim_engine:
        cpu.update(clean_compile=sim_engine["clean_compile_s"], clean_run=sim_engine["clean_run_s"])
        out["clean_ms"] = sim_engine["clean_run_s"] * 1e3
    out["simulator_cpu_s"] = cpu
    return out


def more_runs(backend, first: dict, runs: int, seed, schedules: list, reset, launch, read, engine=None):
    """Runs 1..runs-1 of a launch whose run 0 gave the arrays ``first``: each from the same inputs
    (``reset(i)``), in its schedule (``schedule``), its arrays read back (``read``). Returns every
    run's arrays stacked (None for one unseeded run); appends each run's schedule fields to ``schedules``."""
    if runs <= 1 and seed is None:
        return None
    each = [first]
    for i in range(1, runs):
        reset(i)
        mark = engine.mark() if engine is not None else 0
        with schedule(backend, seed, i) as sch:
            launch()
            if not backend.simulator:
                backend.cuda.synchronize()
        schedules.append(
            schedule_fields(seed, i, sch, engine.launch_after(mark) if engine is not None else None)
        )
        each.append(read())
    return {k: np.stack([r[k] for r in each]) for k in first}


def schedule_fields(seed, run: int, sch, entry: dict | None = None) -> dict:
    """One run's entry of launch.json's runs.schedules (``entry``: the compiled engine's record of it)."""
    if entry is not None and entry.get("engine") == "compiled":  # its own seeded schedule (no steps kept)
        return {"seed": seed, "run": run, "engine": "compiled"}
    if sch is not None:  # fastsim's seeded interleaving
        return {**sch.summary(), **({"engine": "fastsim"} if entry is not None else {})}
    return {"seed": seed, "run": run}


@dataclass(frozen=True)
class _Shape:
    threads_per_block: int
    dynamic_smem: int


def _launch_shape(job: Job) -> _Shape:
    return _Shape(job.block[0] * job.block[1] * job.block[2], job.dynamic_smem)


@dataclass
class LaunchSummary:
    """launch.json, typed: what ran, where and how. The front ends make it (``summary``); the reply
    carries it as a plain dict (``to_dict``), to which the lenses then add their parts."""

    device: dict  # the backend's device_info()
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    recorded_per: str  # "thread" or "warp": a trace record per thread or per warp
    source: str  # measured / simulated (analysis/provenance.py)
    instrumented: dict  # each build's resources (GPU)
    clean: dict
    kernel: str = ""  # a built-in kernel's name; a visitor's: "NAME (yours)"
    params: dict = field(default_factory=dict)  # its parameters (a visitor's: their texts)
    static_smem_bytes: int = 0
    tile_operands: list = field(default_factory=list)
    row_table: list | None = None
    visitor: dict = field(default_factory=dict)  # a visitor's kernel only: its name, file, written arrays...
    runs: dict | None = None  # runs > 1: count, seed, each run's schedule
    # the simulator's engine (None on a GPU): sim_engine (which ran), sim_engine_note (why not compiled)...
    sim_engine: dict | None = None

    def to_dict(self) -> dict:
        shape = Launch(tuple(self.grid), tuple(self.block), {})
        out = {
            **self.device, "grid": list(self.grid), "block": list(self.block), "threads": shape.threads,
            "blocks": shape.blocks, "threads_per_block": shape.threads_per_block,
            "dynamic_smem_bytes": self.dynamic_smem_bytes, "recorded_per": self.recorded_per, "source": self.source,
            "instrumented": self.instrumented, "clean": self.clean, "kernel": self.kernel, "params": self.params,
            "static_smem_bytes": self.static_smem_bytes, "tile_operands": list(self.tile_operands),
            "row_table": self.row_table, **self.visitor,
        }  # fmt: skip
        if self.runs is not None:
            out["runs"] = self.runs
        if self.sim_engine is not None:
            e = self.sim_engine
            out.update(sim_engine=e["sim_engine"], sim_engine_note=e["sim_engine_note"])
            if "blocks" in e:
                out["sim_engine_blocks"] = e["blocks"]
        return out


def summary(backend, job: Job, ran: Ran, **fields) -> LaunchSummary:
    """The launch summary every capture has, whoever's kernel it ran; ``fields``: the front end's own."""
    threads = job.grid[0] * job.grid[1] * job.grid[2] * job.block[0] * job.block[1] * job.block[2]
    return LaunchSummary(
        device=backend.device_info(), grid=tuple(job.grid), block=tuple(job.block), dynamic_smem_bytes=job.dynamic_smem,
        recorded_per="warp" if job.buffers["trace"].shape[1] < threads else "thread",
        source=backend_source(backend.simulator), instrumented=ran.instrumented, clean=ran.clean,
        sim_engine=ran.sim_engine, **fields,
    )  # fmt: skip
