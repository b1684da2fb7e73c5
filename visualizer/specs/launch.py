"""What a kernel spec is made of, and the rules every launch passes: parameters, launch geometry,
device limits, the estimated cost and admission by cost. No kernel is defined here (see catalog.py).

Host side only (numpy, no numba): the CLI validates launches without starting a worker.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class LaunchError(ValueError):
    """A launch that cannot or must not run; its message is one line for the user."""


QUOTE_MAX_CHARS = 40


def quoted(value: object, limit: int = QUOTE_MAX_CHARS) -> str:
    """repr of a value someone typed (a URL, a CLI flag), cut to ``limit`` characters: a message
    names the bad value without echoing 10 kB of it."""
    text = repr(str(value)) if not isinstance(value, int | float) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}…' ({len(str(value)):,} characters)"


# accesses the simulator's recorder keeps of one launch, every thread's (engine/sim/access_record.py)
ACCESS_RECORD_LIMIT = 2_000_000


@dataclass(frozen=True)
class Param:
    name: str
    default: int
    lo: int
    hi: int
    help: str
    choices: tuple[int, ...] = ()  # when set, only these values are allowed
    # the range a listing advertises: the values that can launch, where lo..hi is wider so that the
    # launch check says why an end cannot run (block 0 or 2048: "exceeds the limit of 1024 threads")
    shown: tuple[int, int] | None = None

    @property
    def advertised(self) -> tuple[int, int]:
        return self.shown or (self.lo, self.hi)


@dataclass(frozen=True)
class DeviceLimits:
    """What a launch is checked against. Defaults are the H200's (what the simulator models)."""

    name: str = "NVIDIA H200 (modelled)"
    max_threads_per_block: int = 1024
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    smem_per_block: int = 48 * 1024  # static shared memory, and dynamic without opt-in
    smem_per_block_optin: int = 232448
    num_sms: int = 132
    memory_bytes: int = 143_771 * 2**20  # global memory (the H200's, as the driver reports it)


def limits_from_info(info: dict | None) -> DeviceLimits:
    """The limits a worker's device reports (DeviceLimits' H200 defaults for what it leaves out)."""
    if not info:
        return DeviceLimits()
    defaults = DeviceLimits()
    return DeviceLimits(
        name=info.get("device_name", defaults.name),
        max_threads_per_block=info.get("max_threads_per_block", defaults.max_threads_per_block),
        smem_per_block=info.get("smem_per_block", defaults.smem_per_block),
        smem_per_block_optin=info.get("smem_per_block_optin", defaults.smem_per_block_optin),
        num_sms=info.get("num_sms", defaults.num_sms),
        memory_bytes=info.get("memory_bytes") or defaults.memory_bytes,
    )


# The simulator (visualizer/engine/sim/fastsim.py) runs every CUDA thread as Python code on one OS thread,
# ~5-30 us each (measured, docs/benchmarks.md): 2^19 threads is a capture of seconds to a minute.
BLOCK_SHOWN = (1, 1024)  # threads per block that launch (DeviceLimits.max_threads_per_block)
TILE_SHOWN = (1, 32)  # a tile x tile block: 32 x 32 = 1024 threads
SIM_MAX_THREADS = 1 << 19  # 524,288; stock cudasim's ~0.1-2 ms per thread held this at 65,536
# The compiled simulator engine (engine/compiled/, docs/compiled-engine.md) runs a kernel compiled for the
# CPU, 100-300x fastsim's speed: a launch that will run there (the request asks for it and for lenses it
# has, a built-in kernel) is admitted up to these; one it then hands to fastsim is refused past fastsim's.
COMPILED_MAX_THREADS = 1 << 26
# its thread-step budget: fastsim's times this (tiled matmul n=1024, 1,621 million steps: 1.4 CPU s a launch)
COMPILED_STEP_FACTOR = 400

# Admission by cost (see launch_cost). A thread-step is about 1 us of one core simulating: one
# multiply-add of an inner loop or one element (~0.7-0.9 us); starting a thread (with its probes)
# is ~10 steps and a barrier ~4 on fastsim's greenlets (measured 2026-11-30 on this project's 2-core
# VM, lightly loaded: vector_add 2^18 2.4 s, reduction 65,536 2.5 s, matmul_tiled n=128 2.0 s,
# flash_attention defaults 0.75 s per capture). At the limit a capture (two launches: instrumented,
# then clean) takes ~15 s idle and ~35 s busy, inside the runner's 90 CPU-s simulator limit.
SIM_THREAD_STEP_US = 1.0
SIM_MAX_THREAD_STEPS = 8_000_000
SIM_CAPTURE_LAUNCHES = 2  # a simulator capture launches the kernel twice: instrumented, then clean
SIM_MAX_BYTES = 256 * 2**20  # arrays allocated + trace buffers recorded, per simulator run
GPU_MEMORY_FRACTION = 0.5  # of the device's global memory, per GPU run
GPU_MAX_CAPTURE_BYTES = 4 * 2**30  # host memory of the tables one GPU capture becomes
THREAD_START_STEPS = 10
BARRIER_STEPS = 4
THREAD_ROW_BYTES = 120  # one row of the threads table (15 numeric columns + a categorical)


@dataclass
class Launch:
    """Everything the worker needs to launch a kernel once, derived from the parameters."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    scalars: dict[str, int | float]  # non-array kernel arguments by name
    static_smem: int = 0  # bytes of shared memory the kernel declares
    dynamic_smem: int = 0
    tile_steps: int = 0  # size of the tiles buffer's step axis (kernels with tiles)
    row_state: tuple[int, int, int] | None = None  # (blocks recorded, steps, rows) of the rows buffer

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.blocks * self.threads_per_block


@dataclass(frozen=True)
class KernelSpec:
    name: str
    title: str
    summary: str
    params: tuple[Param, ...]
    args: tuple[str, ...]  # the kernel's own parameters in order: arrays, scalars, domain probe buffers
    outputs: tuple[str, ...]
    plan: Callable[[dict], Launch]
    make_inputs: Callable[[dict, np.random.Generator], dict[str, np.ndarray]]
    reference: Callable[[dict, dict], dict[str, np.ndarray]]
    build: tuple[str, str]  # (module in kernels/, the kernel function, or with build_args its factory)
    build_args: tuple[str, ...] = ()  # parameters that select a compile-time specialisation
    # which threads did work, for the instrumenter's trace_end: an expression over the kernel's own
    # names where it ends (e.g. "row < n and col < n"); None: the instrumenter infers it
    active_when: str | None = None
    tile_operands: tuple[str, ...] = ()
    row_table: tuple[str, tuple[str, ...]] | None = None  # (table name, value column names)
    work: Callable[[dict], tuple[float, float]] = lambda p: (0.0, 0.0)  # (bytes moved, flops)
    # (params, launch) -> (simulated thread-steps, bytes of the kernel's own arrays); see launch_cost
    cost: Callable[[dict, Launch], tuple[float, int]] | None = None
    # (torch, tensors by argument name, params) -> (label, zero-argument call): the same work in
    # PyTorch, timed beside the kernel on a GPU when torch is installed
    torch_op: Callable | None = None
    deliberately_wrong: bool = False  # a demo whose wrong answer is the point
    wrong_because: str = ""  # a deliberately wrong demo's one-line reason
    fault_demo: bool = False  # a demo that faults on purpose
    rtol: float = 1e-5
    atol: float | Callable[[dict], float] = 1e-6  # may depend on the size (float32 sums grow)
    extra: dict = field(default_factory=dict)

    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def resolve(self, given: dict[str, object] | None) -> dict[str, int]:
        """Defaults overridden by ``given``; unknown names or values out of range raise LaunchError."""
        values = self.defaults()
        for name, raw in (given or {}).items():
            param = next((p for p in self.params if p.name == name), None)
            if param is None:
                known = ", ".join(p.name for p in self.params)
                raise LaunchError(f"{self.name} has no parameter {quoted(name)} (it takes: {known})")
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise LaunchError(f"{name} must be an integer, got {quoted(raw)}") from None
            if param.choices and value not in param.choices:
                raise LaunchError(f"{name}={value} is not allowed; choose one of {list(param.choices)}")
            if not param.lo <= value <= param.hi:
                raise LaunchError(f"{name}={value} is out of range [{param.lo}, {param.hi}]")
            values[name] = value
        return values


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_launch(launch: Launch, limits: DeviceLimits, backend: str, sim_engine: str = "fastsim") -> None:
    """Refuse launches the device (or the simulator) cannot run, with a one-line reason. ``sim_engine``:
    the simulator's engine the launch will run on ("compiled": its own, higher thread cap)."""
    tpb = launch.threads_per_block
    if min(launch.block) < 1 or tpb < 1:
        raise LaunchError(f"block size must be at least 1 thread, got {launch.block}")
    if tpb > limits.max_threads_per_block:
        raise LaunchError(
            f"block of {tpb} threads exceeds the limit of {limits.max_threads_per_block} threads per block"
        )
    if min(launch.grid) < 1:
        raise LaunchError(f"grid must have at least 1 block in each dimension, got {launch.grid}")
    for axis, (g, lim) in enumerate(zip(launch.grid, limits.max_grid, strict=True)):
        if g > lim:
            raise LaunchError(f"grid dimension {'xyz'[axis]}={g} exceeds the device limit {lim}")
    if launch.static_smem > limits.smem_per_block:
        raise LaunchError(
            f"{launch.static_smem} bytes of static shared memory exceed the {limits.smem_per_block}-byte "
            "per-block limit"
        )
    total = launch.static_smem + launch.dynamic_smem
    if total > limits.smem_per_block_optin:
        raise LaunchError(
            f"{total} bytes of shared memory per block exceed the device's {limits.smem_per_block_optin}-byte limit"
        )
    if backend == "sim" and sim_engine == "compiled" and launch.threads > COMPILED_MAX_THREADS:
        raise LaunchError(
            f"{launch.threads:,} threads is too many for the simulator's compiled engine (limit "
            f"{COMPILED_MAX_THREADS:,} threads per launch); use a smaller launch or the GPU backend"
        )
    if backend == "sim" and sim_engine != "compiled" and launch.threads > SIM_MAX_THREADS:
        raise LaunchError(
            f"{launch.threads:,} threads is too many for the CUDA simulator (limit {SIM_MAX_THREADS:,} threads "
            "per launch: it runs every CUDA thread as Python code); use a smaller launch or the GPU backend"
        )


@dataclass(frozen=True)
class Cost:
    """What one launch would cost, estimated from its parameters before anything runs."""

    thread_steps: float  # simulated threads x per-thread work (see SIM_MAX_THREAD_STEPS)
    array_bytes: int  # the kernel's inputs and outputs
    record_bytes: int  # trace buffers the instrumented kernel writes
    capture_bytes: int  # host memory of the Capture (tables and arrays) it becomes

    @property
    def run_bytes(self) -> int:
        return self.array_bytes + self.record_bytes


MAX_RUNS = 64  # runs of one launch a capture may ask for (engine/capture/pipeline.py runs them)


def runs_cost(cost: Cost, runs: int) -> Cost:
    """The cost of one launch run ``runs`` times from the same inputs: runs x its simulated work, and
    the host memory of every run's outputs kept beside the capture (the device arrays are reused)."""
    runs = int(runs)
    if not 1 <= runs <= MAX_RUNS:
        raise LaunchError(f"runs must be a whole number from 1 to {MAX_RUNS}, not {runs}")
    if runs == 1:
        return cost
    return dataclasses.replace(
        cost,
        thread_steps=cost.thread_steps * runs,
        capture_bytes=cost.capture_bytes + (runs - 1) * cost.array_bytes,
    )


def record_bytes(spec: KernelSpec, launch: Launch, per_warp_above: int = 1 << 16) -> int:
    """Bytes of the trace buffers capture/builtin.record_buffers allocates for this launch."""
    tpb = launch.threads_per_block
    records = launch.blocks * ceil_div(tpb, 32) if launch.threads > per_warp_above else launch.threads
    sizes = {
        "trace": 3 * records * 8,
        "active": launch.threads,
        "tiles": launch.blocks * max(launch.tile_steps, 1) * max(len(spec.tile_operands), 1) * 5 * 8,
        "rows": math.prod(launch.row_state or (1, 1, 1)) * 2 * 4,
    }
    return sum(v for k, v in sizes.items() if k in spec.args)


def default_cost(spec: KernelSpec, values: dict, launch: Launch) -> tuple[float, int]:
    """For a spec without its own cost: a multiply-add per two flops, its bytes moved as its arrays."""
    nbytes, flops = spec.work(values)
    return launch.threads * THREAD_START_STEPS + flops / 2, int(nbytes)


def launch_cost(spec: KernelSpec, values: dict, launch: Launch) -> Cost:
    steps, array_bytes = spec.cost(values, launch) if spec.cost else default_cost(spec, values, launch)
    recorded = record_bytes(spec, launch)
    capture = launch.threads * THREAD_ROW_BYTES + 2 * array_bytes + recorded
    return Cost(float(steps), int(array_bytes), int(recorded), int(capture))


def _count(n: float) -> str:
    return f"{n / 1e6:,.0f} million" if n >= 1e6 else f"{n:,.0f}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


TIMES = {1: "once", 2: "twice"}


def sim_cost_limit() -> str:
    """The simulator's cost limit in words, from its constants (the README says the same)."""
    launch_s = SIM_MAX_THREAD_STEPS * SIM_THREAD_STEP_US / 1e6
    return (
        f"{_count(SIM_MAX_THREAD_STEPS)} simulated thread-steps per launch, about {launch_s:.0f} s of one idle "
        f"CPU core; a capture launches the kernel {TIMES.get(SIM_CAPTURE_LAUNCHES, f'{SIM_CAPTURE_LAUNCHES} times')} "
        f"(instrumented, then clean), about {SIM_CAPTURE_LAUNCHES * launch_s:.0f} s"
    )


def check_cost(
    name: str,
    cost: Cost,
    limits: DeviceLimits,
    backend: str,
    capture: bool = False,
    sim_engine: str = "fastsim",
) -> None:
    """Refuse a launch whose work or memory is over this backend's per-run limit, naming the limit.

    ``capture``: the launch becomes a Capture (trace tables in host memory), not only a benchmark.
    ``sim_engine`` "compiled": the compiled engine's budget (``COMPILED_STEP_FACTOR`` x fastsim's).
    """
    if backend == "sim":
        if sim_engine == "compiled" and cost.thread_steps > SIM_MAX_THREAD_STEPS * COMPILED_STEP_FACTOR:
            raise LaunchError(
                f"{name} would take about {_count(cost.thread_steps)} simulated thread-steps per launch, over "
                f"the compiled simulator engine's limit of {_count(SIM_MAX_THREAD_STEPS * COMPILED_STEP_FACTOR)}; "
                "use a smaller launch or the GPU backend"
            )
        if sim_engine != "compiled" and cost.thread_steps > SIM_MAX_THREAD_STEPS:
            raise LaunchError(
                f"{name} would take about {_count(cost.thread_steps)} simulated thread-steps per launch, over "
                f"the simulator's limit of {sim_cost_limit()}; use a smaller launch or the GPU backend"
            )
        if cost.run_bytes > SIM_MAX_BYTES:
            raise LaunchError(
                f"{name} would allocate {_mib(cost.run_bytes)} (arrays and trace buffers), over the "
                f"simulator's limit of {_mib(SIM_MAX_BYTES)} per run; use a smaller launch"
            )
        return
    budget = int(limits.memory_bytes * GPU_MEMORY_FRACTION)
    if cost.run_bytes > budget:
        raise LaunchError(
            f"{name} would allocate {_mib(cost.run_bytes)} on the GPU, over the limit of {_mib(budget)} "
            f"per run ({GPU_MEMORY_FRACTION:.0%} of the device's {_mib(limits.memory_bytes)}); use a smaller launch"
        )
    if capture and cost.capture_bytes > GPU_MAX_CAPTURE_BYTES:
        raise LaunchError(
            f"{name} would record about {_mib(cost.capture_bytes)} of trace tables, over the limit of "
            f"{_mib(GPU_MAX_CAPTURE_BYTES)} per capture; use a smaller launch"
        )
