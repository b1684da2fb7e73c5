"""The kernels the visualizer can run: the registry (``KERNELS``, ``get``, ``plan_launch``,
``admit_capture``) and the specs of the first kernels (vector add, matmul, reduction, the race demo,
the faulting kernel). Kernels with host modules of their own (attention, memory, lessons) are
registered from those modules. The building blocks live in ``launch.py`` and are re-exported here.

Host side only (numpy, no numba): the CLI lists kernels and validates launches without starting a
worker. Each kernel's device code lives in ``kernels/``; the worker compiles it from ``build``.
"""

from __future__ import annotations

import math

import numpy as np

from visualizer.specs.attention import SPECS as ATTENTION_SPECS
from visualizer.specs.flow import SPECS as FLOW_SPECS
from visualizer.specs.launch import (  # noqa: F401  (re-exported: catalog.X as before)
    ACCESS_RECORD_LIMIT,
    BARRIER_STEPS,
    BLOCK_SHOWN,
    GPU_MAX_CAPTURE_BYTES,
    GPU_MEMORY_FRACTION,
    MAX_RUNS,
    QUOTE_MAX_CHARS,
    SIM_CAPTURE_LAUNCHES,
    SIM_MAX_BYTES,
    SIM_MAX_THREAD_STEPS,
    SIM_MAX_THREADS,
    SIM_THREAD_STEP_US,
    THREAD_ROW_BYTES,
    THREAD_START_STEPS,
    TILE_SHOWN,
    Cost,
    DeviceLimits,
    KernelSpec,
    Launch,
    LaunchError,
    Param,
    _count,
    _mib,
    ceil_div,
    check_cost,
    check_launch,
    default_cost,
    launch_cost,
    limits_from_info,
    quoted,
    record_bytes,
    runs_cost,
    sim_cost_limit,
)
from visualizer.specs.lessons import SPECS as LESSON_SPECS
from visualizer.specs.memory import SPECS as MEMORY_SPECS
from visualizer.specs.pmpp import SPECS as PMPP_SPECS
from visualizer.specs.simt import SPECS as SIMT_SPECS


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
    blocks = ceil_div(x.numel(), block)
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


# what the vector adds share: the same arrays, inputs, answer and work, done by more or fewer threads
_VECTOR_ADD_COMMON = dict(
    params=(
        Param("n", 1000, 1, 2**30, "number of elements"),
        Param(
            "block", 128, 0, 2048, "threads per block", shown=BLOCK_SHOWN
        ),  # range admits 0/2048 so checks say why
    ),
    args=("a", "b", "c", "n"),
    outputs=("c",),
    make_inputs=_vector_add_inputs,
    reference=lambda x, p: {"c": x["a"] + x["b"]},
    active_when="i < n",
    work=lambda p: (12.0 * p["n"], float(p["n"])),
    cost=lambda p, launch: (launch.threads * THREAD_START_STEPS + p["n"], 12 * p["n"]),
    atol=0.0,
    rtol=0.0,
    torch_op=_torch_add,
)

VECTOR_ADD = KernelSpec(
    name="vector_add",
    title="Vector add",
    summary="c[i] = a[i] + b[i], one thread per element; threads past n idle.",
    plan=_vector_add_plan,
    build=("visualizer.kernels.vector_add", "vector_add"),
    **_VECTOR_ADD_COMMON,
)


VECTOR_ADD_X4 = KernelSpec(
    name="vector_add_x4",
    title="Vector add, 4 elements per thread",
    summary="c = a + b with each thread adding 4 elements a whole grid apart: a quarter of the threads, "
    "4 independent loads in flight per thread, still coalesced.",
    plan=lambda p: Launch(
        grid=(ceil_div(p["n"], 4 * p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"n": p["n"]}
    ),
    build=("visualizer.kernels.vector_add", "vector_add_x4"),
    **_VECTOR_ADD_COMMON,
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


_MATMUL_COMMON = dict(
    params=(
        Param("n", 48, 1, 16384, "matrix size (n x n)"),
        Param("tile", 16, 0, 64, "tile edge: blocks are tile x tile threads", shown=TILE_SHOWN),
    ),
    outputs=("C",),
    make_inputs=_matmul_inputs,
    reference=_matmul_reference,
    active_when="row < n and col < n",
    work=lambda p: (12.0 * p["n"] ** 2, 2.0 * p["n"] ** 3),
    cost=_matmul_cost,
    rtol=1e-4,
    atol=lambda p: 2e-6 * p["n"],  # float32 rounding of an n-term dot product of N(0,1) values
    torch_op=_torch_matmul,
)

MATMUL_NAIVE = KernelSpec(
    name="matmul_naive",
    title="Matrix multiply (naive)",
    summary="C = A @ B, one thread per element of C, every operand read from global memory.",
    args=("A", "B", "C", "n"),
    plan=_matmul_plan,
    build=("visualizer.kernels.matmul", "matmul_naive"),
    **_MATMUL_COMMON,
)

MATMUL_TILED = KernelSpec(
    name="matmul_tiled",
    title="Matrix multiply (shared-memory tiles)",
    summary="C = A @ B; each block stages tile x tile pieces of A and B in shared memory, "
    "with syncthreads before and after using them.",
    args=("A", "B", "C", "n", "tiles"),
    plan=_matmul_tiled_plan,
    build=("visualizer.kernels.matmul", "matmul_tiled_kernel"),
    build_args=("tile",),
    tile_operands=("A", "B"),
    **_MATMUL_COMMON,
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


# the race demo is the same reduction with one syncthreads removed: everything else is shared
_REDUCTION_COMMON = dict(
    params=(
        Param("n", 1000, 1, 2**30, "number of elements"),
        Param("block", 128, 0, 2048, "threads per block (a power of two)", shown=BLOCK_SHOWN),
    ),
    args=("x", "partial", "n", "rows"),
    outputs=("partial",),
    plan=_reduction_plan,
    make_inputs=_reduction_inputs,
    reference=_reduction_reference,
    active_when="i < n",
    build_args=("block",),
    row_table=("reduction_tree", ("value",)),
    work=lambda p: (4.0 * p["n"], float(p["n"])),
    cost=_reduction_cost,
    rtol=0.0,
    atol=0.0,
    torch_op=_torch_sum,
)

REDUCTION = KernelSpec(
    name="reduction",
    title="Reduction (shared-memory tree)",
    summary="Each block sums its slice in shared memory, halving the active threads each level, "
    "with syncthreads between levels; out: one partial sum per block.",
    build=("visualizer.kernels.reduction", "reduction_kernel"),
    **_REDUCTION_COMMON,
)

REDUCTION_RACE = KernelSpec(
    name="reduction_race",
    title="Reduction without the barrier (race demo)",
    summary="DELIBERATE RACE: the same tree reduction with the syncthreads between levels removed, "
    "so threads read partial sums before they are written. Its wrong answer is the lesson.",
    build=("visualizer.kernels.reduction", "reduction_race_kernel"),
    deliberately_wrong=True,
    wrong_because="a race: the syncthreads between tree levels is missing",
    **_REDUCTION_COMMON,
)


# ---------------------------------------------------------------------------------------------
# a kernel that faults on purpose (the runner must survive it)


OUT_OF_BOUNDS_WRITE = KernelSpec(
    name="out_of_bounds_write",
    title="Out-of-bounds write (fault demo)",
    summary="FAULTS ON PURPOSE: every thread writes 2^36 elements past its array. "
    "The GPU reports an illegal address; the runner recovers for the next launch.",
    params=(
        Param("n", 256, 1, 65536, "threads"),
        Param("block", 128, 0, 2048, "threads per block", shown=BLOCK_SHOWN),
    ),
    args=("c", "offset"),
    outputs=("c",),
    plan=lambda p: Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"offset": 2**36}
    ),
    make_inputs=lambda p, rng: {"c": np.zeros(p["n"], np.float32)},
    reference=lambda x, p: {"c": np.ones(p["n"], np.float32)},
    build=("visualizer.kernels.faults", "out_of_bounds_write"),
    active_when="True",
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


# kernels with host modules of their own
for _spec in (*ATTENTION_SPECS, *MEMORY_SPECS, *LESSON_SPECS, *SIMT_SPECS, *PMPP_SPECS, *FLOW_SPECS):
    KERNELS[_spec.name] = _spec


def register(spec: KernelSpec) -> None:
    KERNELS[spec.name] = spec


def get(name: str) -> KernelSpec:
    try:
        return KERNELS[name]
    except KeyError:
        raise LaunchError(f"unknown kernel {quoted(name)}; known kernels: {', '.join(KERNELS)}") from None


def plan_launch(
    name: str, params: dict | None, backend: str = "sim", limits: DeviceLimits | None = None,
    sim_engine: str = "fastsim",
) -> tuple[KernelSpec, dict[str, int], Launch]:  # fmt: skip
    """Resolve parameters and check the launch; raises LaunchError with a one-line message.
    ``sim_engine``: the simulator's engine it will run on (its limits: specs/launch.py)."""
    spec = get(name)
    values = spec.resolve(params)
    for size in ("block", "tile"):
        if size in values and values[size] < 1:
            raise LaunchError(f"{size} must be at least 1 thread, got {values[size]}")
    launch = spec.plan(values)
    limits = limits or DeviceLimits()
    check_launch(launch, limits, backend, sim_engine)
    check_cost(spec.name, launch_cost(spec, values, launch), limits, backend, sim_engine=sim_engine)
    return spec, values, launch


def access_estimate(name: str, params: dict | None) -> int | None:
    """About how many loads, stores and atomics the simulator's recorder would keep of this launch (the
    spec's ``extra["accesses"]``), or None where the spec gives no estimate."""
    spec = get(name)
    estimate = (spec.extra or {}).get("accesses")
    if not callable(estimate):
        return None
    return int(estimate(spec.resolve(params)))


def _largest_fitting(spec: KernelSpec, values: dict, param: Param, limit: int) -> int | None:
    """The largest value of ``param`` below its current one at which the estimate fits ``limit``."""
    estimate = spec.extra["accesses"]
    now = values[param.name]
    if param.choices:
        fits = [c for c in param.choices if c < now and estimate({**values, param.name: c}) <= limit]
        return max(fits) if fits else None
    lo, hi = param.lo, now - 1
    if hi < lo or estimate({**values, param.name: lo}) > limit:
        return None
    while lo < hi:  # the estimates grow with a size: the largest that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate({**values, param.name: mid}) <= limit else (lo, mid - 1)
    return lo


def admit_accesses(name: str, params: dict | None, limit: int = ACCESS_RECORD_LIMIT) -> None:
    """Refuse, before anything runs, a launch whose every-thread access recording would pass the
    recorder's limit: one line naming what to lower (each parameter alone, to a value that fits) and
    the other way, sampled warps. Nothing for a launch that fits or has no estimate."""
    estimate = access_estimate(name, params)
    if estimate is None or estimate <= limit:
        return
    spec = get(name)
    values = spec.resolve(params)
    lower = []
    for param in spec.params:
        if param.name in ("causal", "stride", "hot", "logit_scale"):  # not sizes
            continue
        fits = _largest_fitting(spec, values, param, limit)
        if fits is not None:
            at_most = not param.choices and fits > param.lo
            lower.append(f"{param.name} to {'at most ' if at_most else ''}{fits:,}")
    what = ("lower " + ", or ".join(lower)) if lower else "use a smaller launch"
    raise LaunchError(
        f"{name} would make about {estimate:,} memory accesses, more than the {limit:,} the simulator "
        f"records of every thread: {what}; or record sampled warps as a GPU does (--access-engine pass, "
        "which the Memory access page uses itself)"
    )


def admit_capture(
    name: str, params: dict | None, backend: str, limits: DeviceLimits | None = None, runs: int = 1,
    sim_engine: str = "fastsim",
) -> tuple[KernelSpec, dict[str, int], Launch, Cost]:  # fmt: skip
    """plan_launch, plus the limit on the trace tables a capture keeps in host memory. ``runs``: the
    launch run that many times (races made visible): runs x its cost (launch.runs_cost)."""
    spec, values, launch = plan_launch(name, params, backend, limits, sim_engine)
    cost = runs_cost(launch_cost(spec, values, launch), runs)
    name = spec.name if runs == 1 else f"{spec.name} run {runs} times"
    check_cost(name, cost, limits or DeviceLimits(), backend, capture=True, sim_engine=sim_engine)
    return spec, values, launch, cost
