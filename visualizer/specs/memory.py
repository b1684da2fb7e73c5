"""Kernels that teach memory access: transposes (coalescing, bank conflicts) and a strided copy.

Host side only (numpy, no numba); device code in ``kernels/transpose.py`` and ``kernels/strided.py``.
Registered by catalog.py (SPECS); the building blocks come from launch.py.
Each spec's ``extra["accesses"]`` estimates the loads and stores a launch makes, so the access
recorder can refuse a launch too big to record before running it.
"""

from __future__ import annotations

import numpy as np

from visualizer.specs.launch import BLOCK_SHOWN, KernelSpec, Launch, Param, ceil_div  # noqa: E402

_TRANSPOSE_PARAMS = (
    Param("rows", 64, 1, 8192, "rows of the input matrix"),
    Param("cols", 64, 1, 8192, "columns of the input matrix"),
    Param("tile", 32, 8, 32, "tile edge: blocks are tile x tile threads", choices=(8, 16, 32)),
)


def _transpose_plan(shared: bool):
    def plan(p: dict) -> Launch:
        t = p["tile"]
        return Launch(
            grid=(ceil_div(p["cols"], t), ceil_div(p["rows"], t), 1),
            block=(t, t, 1),
            scalars={"height": p["rows"], "width": p["cols"]},
            static_smem=4 * t * (t + (1 if shared == "padded" else 0)) if shared else 0,
        )

    return plan


def _transpose_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "inp": rng.standard_normal((p["rows"], p["cols"]), dtype=np.float32),
        "out": np.zeros((p["cols"], p["rows"]), np.float32),
    }


def _transpose_accesses(p: dict) -> int:
    return 4 * p["rows"] * p["cols"]  # tiled: global load, shared store, shared load, global store


_TRANSPOSE_COMMON = dict(
    params=_TRANSPOSE_PARAMS,
    args=("inp", "out", "height", "width"),  # not "rows": a probe buffer's role
    outputs=("out",),
    make_inputs=_transpose_inputs,
    reference=lambda x, p: {"out": np.ascontiguousarray(x["inp"].T)},
    work=lambda p: (8.0 * p["rows"] * p["cols"], 0.0),
    active_when="y < height and x < width",
    rtol=0.0,
    atol=0.0,
    extra={"accesses": _transpose_accesses},
)

TRANSPOSE_NAIVE = KernelSpec(
    name="transpose_naive",
    title="Transpose (naive)",
    summary="out = inp transposed, one thread per element: reads along a row (coalesced), writes down a "
    "column, so a warp's 32 stores touch 32 sectors.",
    plan=_transpose_plan(False),
    build=("visualizer.kernels.transpose", "transpose_naive"),
    **_TRANSPOSE_COMMON,
)


def _tiled_transpose(variant: str, title: str, summary: str) -> KernelSpec:
    """A transpose through a shared-memory tile (kernels/transpose.py transpose_<variant>_kernel)."""
    return KernelSpec(
        name=f"transpose_{variant}",
        title=title,
        summary=summary,
        plan=_transpose_plan(variant),
        build=("visualizer.kernels.transpose", f"transpose_{variant}_kernel"),
        build_args=("tile",),
        **_TRANSPOSE_COMMON,
    )


TRANSPOSE_TILED = _tiled_transpose(
    "tiled",
    "Transpose (shared-memory tile)",
    "Stages a tile in shared memory so the global reads and writes are both along rows (4 sectors "
    "per request); reading the tile down a column is a 32-way shared-memory bank conflict.",
)

TRANSPOSE_PADDED = _tiled_transpose(
    "padded",
    "Transpose (padded shared-memory tile)",
    "The tiled transpose with one extra column in the tile (tile x tile+1): each lane's word of a "
    "column falls in its own bank, so the bank conflicts vanish.",
)


def _strided_plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1),
        block=(p["block"], 1, 1),
        scalars={"n": p["n"], "stride": p["stride"]},
    )


STRIDED_COPY = KernelSpec(
    name="strided_copy",
    title="Strided copy",
    summary="dst[i] = src[i * stride]: stride 1 is coalesced (4 sectors per warp load), stride 8 and up "
    "touch one 32-byte sector per lane (32 per request) for the same useful bytes.",
    params=(
        Param("n", 1024, 1, 1 << 22, "elements copied"),
        Param("stride", 1, 1, 32, "distance between neighbouring threads' source elements"),
        Param("block", 128, 0, 2048, "threads per block", shown=BLOCK_SHOWN),
    ),
    args=("src", "dst", "n", "stride"),
    outputs=("dst",),
    plan=_strided_plan,
    make_inputs=lambda p, rng: {
        "src": rng.standard_normal(p["n"] * p["stride"], dtype=np.float32),
        "dst": np.zeros(p["n"], np.float32),
    },
    reference=lambda x, p: {"dst": x["src"][:: p["stride"]][: p["n"]]},
    build=("visualizer.kernels.strided", "strided_copy"),
    active_when="i < n",
    work=lambda p: (8.0 * p["n"], 0.0),
    rtol=0.0,
    atol=0.0,
    extra={"accesses": lambda p: 2 * p["n"]},
)

SPECS = (TRANSPOSE_NAIVE, TRANSPOSE_TILED, TRANSPOSE_PADDED, STRIDED_COPY)
