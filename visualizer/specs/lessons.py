"""Non-AI kernels the lessons use: a heat-equation (Jacobi) stencil step and two histograms.

Host side only (numpy, no numba); device code in ``kernels/stencil.py`` and ``kernels/histogram.py``.
Registered by catalog.py (SPECS); the building blocks come from launch.py. The
references are float64 / exact integer numpy; ``extra["accesses"]`` bounds what the access recorder
would record.
"""

from __future__ import annotations

import numpy as np

from visualizer.specs.launch import (  # noqa: E402
    BARRIER_STEPS,
    BLOCK_SHOWN,
    THREAD_START_STEPS,
    KernelSpec,
    Launch,
    Param,
    ceil_div,
)

HEAT_COEF = 0.2  # r = alpha dt / dx^2; explicit Euler is stable for r <= 0.25


# ---------------------------------------------------------------------------------------------
# heat-equation stencil


def _stencil_plan(p: dict) -> Launch:
    t = p["tile"]
    return Launch(
        grid=(ceil_div(p["nx"], t), ceil_div(p["ny"], t), 1),
        block=(t, t, 1),
        scalars={"ny": p["ny"], "nx": p["nx"], "coef": HEAT_COEF},
        static_smem=4 * (t + 2) * (t + 2),
    )


def _stencil_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "u": rng.uniform(0.0, 100.0, (p["ny"], p["nx"])).astype(np.float32),
        "u_new": np.zeros((p["ny"], p["nx"]), np.float32),
    }


def heat_step_reference(u: np.ndarray, coef: float = HEAT_COEF) -> np.ndarray:
    """One explicit heat step in float64: interior points updated, the boundary held."""
    u = u.astype(np.float64)
    out = u.copy()
    c = u[1:-1, 1:-1]
    around = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    out[1:-1, 1:-1] = c + coef * (around - 4.0 * c)
    return out


def _stencil_cost(p: dict, launch: Launch) -> tuple[float, int]:
    # per thread: start, up to 2 loads, a barrier, the 5-point update
    return launch.threads * (THREAD_START_STEPS + 8 + BARRIER_STEPS), 8 * p["ny"] * p["nx"]


HEAT_STENCIL = KernelSpec(
    name="heat_stencil",
    title="Heat equation step (stencil, shared tile + halo)",
    summary="One Jacobi step of the 2-D heat equation: each block stages its tile plus a one-cell halo "
    "in shared memory, then every interior point becomes u + r (neighbours - 4u); the boundary is held.",
    params=(
        Param("ny", 64, 3, 4096, "rows of the temperature grid"),
        Param("nx", 64, 3, 4096, "columns of the temperature grid"),
        Param("tile", 16, 8, 32, "tile edge: blocks are tile x tile threads", choices=(8, 16, 32)),
    ),
    args=("u", "u_new", "ny", "nx", "coef"),
    outputs=("u_new",),
    plan=_stencil_plan,
    make_inputs=_stencil_inputs,
    reference=lambda x, p: {"u_new": heat_step_reference(x["u"])},
    build=("visualizer.kernels.stencil", "stencil_kernel"),
    active_when="inside",
    build_args=("tile",),
    work=lambda p: (8.0 * p["ny"] * p["nx"], 6.0 * p["ny"] * p["nx"]),
    cost=_stencil_cost,
    rtol=1e-5,
    atol=1e-4,  # float32 rounding of values up to 100
    extra={"accesses": lambda p: 8 * p["ny"] * p["nx"]},
)


# ---------------------------------------------------------------------------------------------
# histograms


def _histogram_plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1),
        block=(p["block"], 1, 1),
        scalars={"n": p["n"]},
    )


def _histogram_shared_plan(p: dict) -> Launch:
    launch = _histogram_plan(p)
    launch.static_smem = 4 * p["nbins"]
    return launch


def histogram_values(p: dict, rng: np.random.Generator) -> np.ndarray:
    """n values in [0, nbins): ``hot`` percent of them are bin 0 (a skewed input), the rest uniform."""
    x = rng.integers(0, p["nbins"], p["n"]).astype(np.int32)
    x[rng.random(p["n"]) < p["hot"] / 100.0] = 0
    return x


def _histogram_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": histogram_values(p, rng), "bins": np.zeros(p["nbins"], np.int32)}


def _histogram_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    return {"bins": np.bincount(x["x"], minlength=p["nbins"]).astype(np.int32)}


_HISTOGRAM_PARAMS = (
    Param("n", 4096, 1, 1 << 22, "number of values"),
    Param("nbins", 64, 1, 1024, "number of bins"),
    Param("hot", 0, 0, 100, "percent of the values that fall in bin 0 (skew: contention on one bin)"),
    Param("block", 256, 0, 2048, "threads per block", shown=BLOCK_SHOWN),
)


def _histogram_cost(p: dict, launch: Launch) -> tuple[float, int]:
    steps = launch.threads * (THREAD_START_STEPS + 2)
    return steps, 4 * p["n"] + 4 * p["nbins"]


def _histogram_shared_cost(p: dict, launch: Launch) -> tuple[float, int]:
    steps, nbytes = _histogram_cost(p, launch)
    return steps + launch.threads * 2 * BARRIER_STEPS + 2 * launch.blocks * p["nbins"], nbytes


# the two histograms count the same values into the same bins, privatised or not
_HISTOGRAM_COMMON = dict(
    params=_HISTOGRAM_PARAMS,
    args=("x", "bins", "n"),
    outputs=("bins",),
    make_inputs=_histogram_inputs,
    reference=_histogram_reference,
    active_when="i < n",
    rtol=0.0,
    atol=0.0,
)

HISTOGRAM_GLOBAL = KernelSpec(
    name="histogram_global",
    title="Histogram (global atomics)",
    summary="One atomicAdd on the global bins per value: threads whose values share a bin queue on one "
    "address, so few bins or skewed data serialise the atomics.",
    plan=_histogram_plan,
    build=("visualizer.kernels.histogram", "histogram_global"),
    work=lambda p: (4.0 * p["n"] + 8.0 * p["n"], 0.0),
    cost=_histogram_cost,
    **_HISTOGRAM_COMMON,
    extra={"accesses": lambda p: 2 * p["n"]},
)

HISTOGRAM_SHARED = KernelSpec(
    name="histogram_shared",
    title="Histogram (privatised shared-memory bins)",
    summary="Each block counts into its own shared-memory bins, then adds each non-zero count to the "
    "global bins once: at most one global atomic per bin per block.",
    plan=_histogram_shared_plan,
    build=("visualizer.kernels.histogram", "histogram_shared_kernel"),
    build_args=("nbins",),
    work=lambda p: (4.0 * p["n"] + 8.0 * p["nbins"], 0.0),
    cost=_histogram_shared_cost,
    **_HISTOGRAM_COMMON,
    extra={"accesses": lambda p: 3 * p["n"] + 4 * ceil_div(p["n"], p["block"]) * (p["nbins"] + p["block"])},
)

SPECS = (HEAT_STENCIL, HISTOGRAM_GLOBAL, HISTOGRAM_SHARED)
