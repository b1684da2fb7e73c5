"""The kernels the visualizer can run: their parameters, launch geometry, inputs and references.

Host side only (numpy, no numba): the CLI lists kernels and validates launches without starting a
worker. Each kernel's device code lives in ``kernels/``; the worker compiles it from ``build``.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Param:
    name: str
    default: int
    lo: int
    hi: int
    help: str
    choices: tuple[int, ...] = ()  # when set, only these values are allowed


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


# The simulator (visualizer/fastsim.py) runs every CUDA thread as Python code on one OS thread,
# ~5-30 us each (measured, docs/benchmarks.md): 2^19 threads is a capture of seconds to a minute.
SIM_MAX_THREADS = 1 << 19  # 524,288; stock cudasim's ~0.1-2 ms per thread held this at 65,536

# Admission by cost (see launch_cost). A thread-step is about 1 us of one core simulating: one
# multiply-add of an inner loop or one element (~0.7-0.9 us); starting a thread (with its probes)
# is ~10 steps and a barrier ~4 on fastsim's greenlets (measured 2026-11-30 on this project's 2-core
# VM, lightly loaded: vector_add 2^18 2.4 s, reduction 65,536 2.5 s, matmul_tiled n=128 2.0 s,
# flash_attention defaults 0.75 s per capture). At the limit a capture (two launches: instrumented,
# then clean) takes ~15 s idle and ~35 s busy, inside the runner's 60 s simulator limit.
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
    args: tuple[str, ...]  # the kernel's arguments in order: arrays, scalars and trace buffers
    outputs: tuple[str, ...]
    plan: Callable[[dict], Launch]
    make_inputs: Callable[[dict, np.random.Generator], dict[str, np.ndarray]]
    reference: Callable[[dict, dict], dict[str, np.ndarray]]
    build: tuple[str, str]  # (module in kernels/, function returning (instrumented, clean))
    build_args: tuple[str, ...] = ()  # parameters that select a compile-time specialisation
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


def check_launch(launch: Launch, limits: DeviceLimits, backend: str) -> None:
    """Refuse launches the device (or the simulator) cannot run, with a one-line reason."""
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
    if backend == "sim" and launch.threads > SIM_MAX_THREADS:
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


def record_bytes(spec: KernelSpec, launch: Launch, per_warp_above: int = 1 << 16) -> int:
    """Bytes of the trace buffers worker.record_buffers allocates for this launch."""
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


def check_cost(name: str, cost: Cost, limits: DeviceLimits, backend: str, capture: bool = False) -> None:
    """Refuse a launch whose work or memory is over this backend's per-run limit, naming the limit.

    ``capture``: the launch becomes a Capture (trace tables in host memory), not only a benchmark.
    """
    if backend == "sim":
        if cost.thread_steps > SIM_MAX_THREAD_STEPS:
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


def _matmul_cost(p: dict, launch: Launch) -> tuple[float, int]:
    n = p["n"]
    barriers = 2 * launch.tile_steps * launch.threads  # tiled: two per tile step (0 for naive)
    return launch.threads * THREAD_START_STEPS + float(n) ** 3 + barriers * BARRIER_STEPS, 3 * 4 * n * n


def _reduction_cost(p: dict, launch: Launch) -> tuple[float, int]:
    levels = launch.row_state[1] if launch.row_state else 1
    steps = launch.threads * (THREAD_START_STEPS + levels * (1 + BARRIER_STEPS))
    return steps, 4 * p["n"] + 4 * launch.blocks


# ---------------------------------------------------------------------------------------------
# PyTorch equivalents (torch is imported by the GPU worker, never here)


def _torch_add(torch, t, p):
    return "torch.add(a, b, out=c)", lambda: torch.add(t["a"], t["b"], out=t["c"])


def _torch_matmul(torch, t, p):
    return "torch.matmul fp32, TF32 off", lambda: torch.matmul(t["A"], t["B"], out=t["C"])


def _torch_sum(torch, t, p):
    """Like with like: one sum per block of ``block`` elements, as the kernel writes (a full sum of
    x is a different job; the bench times both ways). A ragged tail is zero-padded once, outside
    the timed call."""
    x, block = t["x"], p["block"]
    blocks = -(-x.numel() // block)
    if x.numel() != blocks * block:
        x = torch.nn.functional.pad(x, (0, blocks * block - x.numel()))
    rows = x.view(blocks, block)
    return (
        "torch.sum(x.view(-1, block), dim=1): per-block partial sums, like the kernel",
        lambda: torch.sum(rows, dim=1, out=t["partial"]),
    )


# ---------------------------------------------------------------------------------------------
# vector_add


def _vector_add_plan(p: dict) -> Launch:
    return Launch(grid=(ceil_div(p["n"], p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"n": p["n"]})


def _vector_add_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = p["n"]
    return {
        "a": rng.standard_normal(n, dtype=np.float32),
        "b": rng.standard_normal(n, dtype=np.float32),
        "c": np.zeros(n, np.float32),
    }


VECTOR_ADD = KernelSpec(
    name="vector_add",
    title="Vector add",
    summary="c[i] = a[i] + b[i], one thread per element; threads past n idle.",
    params=(
        Param("n", 1000, 1, 2**30, "number of elements"),
        Param("block", 128, 0, 2048, "threads per block"),  # range admits 0/2048 so checks say why
    ),
    args=("a", "b", "c", "n", "trace", "active"),
    outputs=("c",),
    plan=_vector_add_plan,
    make_inputs=_vector_add_inputs,
    reference=lambda x, p: {"c": x["a"] + x["b"]},
    build=("kernels.vector_add", "vector_add"),
    work=lambda p: (12.0 * p["n"], float(p["n"])),
    cost=lambda p, launch: (launch.threads * THREAD_START_STEPS + p["n"], 12 * p["n"]),
    atol=0.0,
    rtol=0.0,
    torch_op=_torch_add,
)


VECTOR_ADD_X4 = KernelSpec(
    name="vector_add_x4",
    title="Vector add, 4 elements per thread",
    summary="c = a + b with each thread adding 4 elements a whole grid apart: a quarter of the threads, "
    "4 independent loads in flight per thread, still coalesced.",
    params=VECTOR_ADD.params,
    args=VECTOR_ADD.args,
    outputs=("c",),
    plan=lambda p: Launch(
        grid=(ceil_div(p["n"], 4 * p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"n": p["n"]}
    ),
    make_inputs=_vector_add_inputs,
    reference=VECTOR_ADD.reference,
    build=("kernels.vector_add", "vector_add_x4"),
    work=VECTOR_ADD.work,
    cost=VECTOR_ADD.cost,
    atol=0.0,
    rtol=0.0,
    torch_op=_torch_add,
)


# ---------------------------------------------------------------------------------------------
# matmul


def _matmul_plan(p: dict) -> Launch:
    n, tile = p["n"], p["tile"]
    g = ceil_div(n, tile)
    return Launch(grid=(g, g, 1), block=(tile, tile, 1), scalars={"n": n})


def _matmul_tiled_plan(p: dict) -> Launch:
    launch = _matmul_plan(p)
    launch.static_smem = 2 * p["tile"] * p["tile"] * 4  # sA and sB, float32
    launch.tile_steps = ceil_div(p["n"], p["tile"])
    return launch


def _matmul_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = p["n"]
    return {
        "A": rng.standard_normal((n, n), dtype=np.float32),
        "B": rng.standard_normal((n, n), dtype=np.float32),
        "C": np.zeros((n, n), np.float32),
    }


def _matmul_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    return {"C": (x["A"].astype(np.float64) @ x["B"].astype(np.float64)).astype(np.float32)}


_MATMUL_PARAMS = (
    Param("n", 48, 1, 16384, "matrix size (n x n)"),
    Param("tile", 16, 0, 64, "tile edge: blocks are tile x tile threads"),
)

MATMUL_NAIVE = KernelSpec(
    name="matmul_naive",
    title="Matrix multiply (naive)",
    summary="C = A @ B, one thread per element of C, every operand read from global memory.",
    params=_MATMUL_PARAMS,
    args=("A", "B", "C", "n", "trace", "active"),
    outputs=("C",),
    plan=_matmul_plan,
    make_inputs=_matmul_inputs,
    reference=_matmul_reference,
    build=("kernels.matmul", "matmul_naive"),
    work=lambda p: (12.0 * p["n"] ** 2, 2.0 * p["n"] ** 3),
    cost=_matmul_cost,
    rtol=1e-4,
    atol=lambda p: 2e-6 * p["n"],  # float32 rounding of an n-term dot product of N(0,1) values
    torch_op=_torch_matmul,
)

MATMUL_TILED = KernelSpec(
    name="matmul_tiled",
    title="Matrix multiply (shared-memory tiles)",
    summary="C = A @ B; each block stages tile x tile pieces of A and B in shared memory, "
    "with syncthreads before and after using them.",
    params=_MATMUL_PARAMS,
    args=("A", "B", "C", "n", "trace", "active", "tiles"),
    outputs=("C",),
    plan=_matmul_tiled_plan,
    make_inputs=_matmul_inputs,
    reference=_matmul_reference,
    build=("kernels.matmul", "matmul_tiled_kernels"),
    build_args=("tile",),
    tile_operands=("A", "B"),
    work=lambda p: (12.0 * p["n"] ** 2, 2.0 * p["n"] ** 3),
    cost=_matmul_cost,
    rtol=1e-4,
    atol=lambda p: 2e-6 * p["n"],  # float32 rounding of an n-term dot product of N(0,1) values
    torch_op=_torch_matmul,
)


# ---------------------------------------------------------------------------------------------
# reduction

TREE_BLOCKS_RECORDED = 16  # blocks whose every tree level is recorded (keeps the buffer small)


def _reduction_plan(p: dict) -> Launch:
    n, block = p["n"], p["block"]
    if block < 1 or block & (block - 1):
        raise LaunchError(f"block={block} must be a power of two for the tree reduction")
    blocks = ceil_div(n, block)
    levels = int(math.log2(block)) + 1
    return Launch(
        grid=(blocks, 1, 1),
        block=(block, 1, 1),
        scalars={"n": n},
        static_smem=4 * block,
        row_state=(min(blocks, TREE_BLOCKS_RECORDED), levels, block),
    )


def _reduction_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # small integers: every partial sum is exact in float32, so any difference is a real error
    x = rng.integers(0, 10, p["n"]).astype(np.float32)
    return {"x": x, "partial": np.zeros(ceil_div(p["n"], p["block"]), np.float32)}


def _reduction_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    n, block = p["n"], p["block"]
    padded = np.zeros(ceil_div(n, block) * block, np.float64)
    padded[:n] = x["x"]
    return {"partial": padded.reshape(-1, block).sum(axis=1).astype(np.float32)}


_REDUCTION_PARAMS = (
    Param("n", 1000, 1, 2**30, "number of elements"),
    Param("block", 128, 0, 2048, "threads per block (a power of two)"),
)

REDUCTION = KernelSpec(
    name="reduction",
    title="Reduction (shared-memory tree)",
    summary="Each block sums its slice in shared memory, halving the active threads each level, "
    "with syncthreads between levels; out: one partial sum per block.",
    params=_REDUCTION_PARAMS,
    args=("x", "partial", "n", "trace", "active", "rows"),
    outputs=("partial",),
    plan=_reduction_plan,
    make_inputs=_reduction_inputs,
    reference=_reduction_reference,
    build=("kernels.reduction", "reduction_kernels"),
    build_args=("block",),
    row_table=("reduction_tree", ("value",)),
    work=lambda p: (4.0 * p["n"], float(p["n"])),
    cost=_reduction_cost,
    rtol=0.0,
    atol=0.0,
    torch_op=_torch_sum,
)

REDUCTION_RACE = KernelSpec(
    name="reduction_race",
    title="Reduction without the barrier (race demo)",
    summary="DELIBERATE RACE: the same tree reduction with the syncthreads between levels removed, "
    "so threads read partial sums before they are written. Its wrong answer is the lesson.",
    params=_REDUCTION_PARAMS,
    args=REDUCTION.args,
    outputs=REDUCTION.outputs,
    plan=_reduction_plan,
    make_inputs=_reduction_inputs,
    reference=_reduction_reference,
    build=("kernels.reduction", "reduction_race_kernels"),
    build_args=("block",),
    row_table=REDUCTION.row_table,
    work=REDUCTION.work,
    cost=_reduction_cost,
    deliberately_wrong=True,
    wrong_because="a race: the syncthreads between tree levels is missing",
    rtol=0.0,
    atol=0.0,
    torch_op=_torch_sum,
)


# ---------------------------------------------------------------------------------------------
# a kernel that faults on purpose (the runner must survive it)


OUT_OF_BOUNDS_WRITE = KernelSpec(
    name="out_of_bounds_write",
    title="Out-of-bounds write (fault demo)",
    summary="FAULTS ON PURPOSE: every thread writes 2^36 elements past its array. "
    "The GPU reports an illegal address; the runner recovers for the next launch.",
    params=(Param("n", 256, 1, 65536, "threads"), Param("block", 128, 0, 2048, "threads per block")),
    args=("c", "offset", "trace", "active"),
    outputs=("c",),
    plan=lambda p: Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"offset": 2**36}
    ),
    make_inputs=lambda p, rng: {"c": np.zeros(p["n"], np.float32)},
    reference=lambda x, p: {"c": np.ones(p["n"], np.float32)},
    build=("kernels.faults", "out_of_bounds_write"),
    cost=lambda p, launch: (launch.threads * (THREAD_START_STEPS + 1), 4 * p["n"]),
    fault_demo=True,
)


KERNELS: dict[str, KernelSpec] = {
    k.name: k
    for k in (
        VECTOR_ADD,
        VECTOR_ADD_X4,
        MATMUL_NAIVE,
        MATMUL_TILED,
        REDUCTION,
        REDUCTION_RACE,
        OUT_OF_BOUNDS_WRITE,
    )
}


def register(spec: KernelSpec) -> None:
    KERNELS[spec.name] = spec


def get(name: str) -> KernelSpec:
    try:
        return KERNELS[name]
    except KeyError:
        raise LaunchError(f"unknown kernel {quoted(name)}; known kernels: {', '.join(KERNELS)}") from None


def plan_launch(
    name: str, params: dict | None, backend: str = "sim", limits: DeviceLimits | None = None
) -> tuple[KernelSpec, dict[str, int], Launch]:
    """Resolve parameters and check the launch; raises LaunchError with a one-line message."""
    spec = get(name)
    values = spec.resolve(params)
    for size in ("block", "tile"):
        if size in values and values[size] < 1:
            raise LaunchError(f"{size} must be at least 1 thread, got {values[size]}")
    launch = spec.plan(values)
    limits = limits or DeviceLimits()
    check_launch(launch, limits, backend)
    check_cost(spec.name, launch_cost(spec, values, launch), limits, backend)
    return spec, values, launch


def admit_capture(
    name: str, params: dict | None, backend: str, limits: DeviceLimits | None = None
) -> tuple[KernelSpec, dict[str, int], Launch, Cost]:
    """plan_launch, plus the limit on the trace tables a capture keeps in host memory."""
    spec, values, launch = plan_launch(name, params, backend, limits)
    cost = launch_cost(spec, values, launch)
    check_cost(spec.name, cost, limits or DeviceLimits(), backend, capture=True)
    return spec, values, launch, cost


# Kernels defined in their own host modules register here (imported last: they use the classes above).
from visualizer.attention_specs import SPECS as _ATTENTION_SPECS  # noqa: E402

for _spec in _ATTENTION_SPECS:
    register(_spec)

from visualizer.memory_specs import SPECS as _MEMORY_SPECS  # noqa: E402

for _spec in _MEMORY_SPECS:
    register(_spec)

from visualizer.lesson_specs import SPECS as _LESSON_SPECS  # noqa: E402

for _spec in _LESSON_SPECS:
    register(_spec)
