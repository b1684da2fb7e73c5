"""The PMPP path's kernels (Programming Massively Parallel Processors, chapter by chapter): convolution,
reduction trees, prefix sums, merge, sparse matrix-vector products and the AoS/SoA layouts.

Host side only (numpy, no numba); device code in ``kernels/convolution.py``, ``reduction_variants.py``,
``scan.py``, ``merge.py``, ``spmv.py`` and ``layout.py``. Registered by catalog.py (SPECS). Every
reference is float64 or exact integer numpy; inputs of the sums are small integers, so every partial
sum is exact in float32 and any difference is a real error.
"""

from __future__ import annotations

import numpy as np

from visualizer.specs.launch import (
    BARRIER_STEPS,
    BLOCK_SHOWN,
    THREAD_START_STEPS,
    KernelSpec,
    Launch,
    LaunchError,
    Param,
    ceil_div,
)

POW2_BLOCKS = (32, 64, 128, 256, 512, 1024)


def _log2(x: int) -> int:
    return int(x).bit_length() - 1


# ---------------------------------------------------------------------------------------------
# convolution (ch. 7)


def _conv_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    k = 2 * p["radius"] + 1
    w = rng.uniform(0.0, 1.0, (k, k))
    return {
        "x": rng.uniform(0.0, 1.0, (p["ny"], p["nx"])).astype(np.float32),
        "w": (w / w.sum()).astype(np.float32),  # a blur: the weights sum to 1
        "y": np.zeros((p["ny"], p["nx"]), np.float32),
    }


def conv2d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y[r, c] = sum over the mask of w[i, j] x[r - R + i, c - R + j], zero outside x (float64)."""
    r = w.shape[0] // 2
    ny, nx = x.shape
    pad = np.zeros((ny + 2 * r, nx + 2 * r))
    pad[r : r + ny, r : r + nx] = x
    y = np.zeros((ny, nx))
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            y += float(w[i, j]) * pad[i : i + ny, j : j + nx]
    return y


def _conv_naive_plan(p: dict) -> Launch:
    t = p["tile"]
    return Launch(
        grid=(ceil_div(p["nx"], t), ceil_div(p["ny"], t), 1),
        block=(t, t, 1),
        scalars={"ny": p["ny"], "nx": p["nx"], "r": p["radius"]},
    )


def conv_out_tile(p: dict) -> int:
    """Outputs per block edge of the tiled kernel: the input tile less a halo of radius on each side."""
    out = p["tile"] - 2 * p["radius"]
    if out < 1:
        raise LaunchError(f"tile={p['tile']} leaves no output for radius={p['radius']}: use a bigger tile")
    return out


def _conv_tiled_plan(p: dict) -> Launch:
    t, out = p["tile"], conv_out_tile(p)
    return Launch(
        grid=(ceil_div(p["nx"], out), ceil_div(p["ny"], out), 1),
        block=(t, t, 1),
        scalars={"ny": p["ny"], "nx": p["nx"], "r": p["radius"]},
        static_smem=4 * t * t,
    )


def _conv_cost(p: dict, launch: Launch) -> tuple[float, int]:
    k = 2 * p["radius"] + 1
    return launch.threads * (THREAD_START_STEPS + 3 * k * k + BARRIER_STEPS), 8 * p["ny"] * p["nx"]


_CONV_PARAMS = (
    Param("ny", 32, 3, 2048, "rows of the image"),
    Param("nx", 32, 3, 2048, "columns of the image"),
    Param("radius", 1, 1, 3, "mask radius R: the mask is (2R+1) x (2R+1)"),
    Param("tile", 16, 8, 32, "block edge (tiled: the input tile, halo included)", choices=(8, 16, 32)),
)


def _spec(module: str, name: str, title: str, summary: str, **fields) -> KernelSpec:
    """A spec built from ``visualizer.kernels.<module>``: its function ``name``, or with ``build_args``
    the factory ``<name>_kernel`` that compiles one for them."""
    function = f"{name}_kernel" if fields.get("build_args") else name
    return KernelSpec(
        name=name, title=title, summary=summary, build=(f"visualizer.kernels.{module}", function), **fields
    )


def _conv_spec(name: str, title: str, summary: str, plan, build_args=()) -> KernelSpec:
    return _spec(
        "convolution",
        name,
        title,
        summary,
        params=_CONV_PARAMS,
        args=("x", "w", "y", "ny", "nx", "r"),
        outputs=("y",),
        plan=plan,
        make_inputs=_conv_inputs,
        reference=lambda x, p: {"y": conv2d_reference(x["x"], x["w"])},
        build_args=build_args,
        active_when="row < ny and col < nx",
        work=lambda p: (8.0 * p["ny"] * p["nx"], 2.0 * p["ny"] * p["nx"] * (2 * p["radius"] + 1) ** 2),
        cost=_conv_cost,
        rtol=1e-5,
        atol=1e-5,
    )


CONV2D_NAIVE = _conv_spec(
    "conv2d_naive",
    "2-D convolution (naive: every neighbour from global memory)",
    "Each thread reads its (2R+1)² neighbours from global memory: neighbouring threads load the same "
    "input cells again and again.",
    _conv_naive_plan,
)
CONV2D_TILED = _conv_spec(
    "conv2d_tiled",
    "2-D convolution (shared-memory input tile with a halo)",
    "A block stages an input tile plus its R-cell halo in shared memory, one cell per thread, then its "
    "inner threads compute from shared memory: each input cell is loaded once per block.",
    _conv_tiled_plan,
    build_args=("tile", "radius"),
)


# ---------------------------------------------------------------------------------------------
# reductions (ch. 10) and scans (ch. 11): one section of ``block`` elements per block


def _section_plan(smem_words):
    def plan(p: dict) -> Launch:
        block = p["block"]
        if block not in POW2_BLOCKS:
            raise LaunchError(f"block={block} must be a power of two from 32 to 1024")
        return Launch(
            grid=(ceil_div(p["n"], block), 1, 1),
            block=(block, 1, 1),
            scalars={"n": p["n"]},
            static_smem=4 * smem_words(block),
        )

    return plan


def small_integers(p: dict, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 10, p["n"]).astype(np.float32)


def _sections(x: np.ndarray, block: int) -> np.ndarray:
    padded = np.zeros(ceil_div(len(x), block) * block, np.float64)
    padded[: len(x)] = x
    return padded.reshape(-1, block)


def _reduce_inputs(p, rng):
    return {"x": small_integers(p, rng), "partial": np.zeros(ceil_div(p["n"], p["block"]), np.float32)}


def _reduce_reference(x, p):
    return {"partial": _sections(x["x"], p["block"]).sum(axis=1).astype(np.float32)}


def _reduce_work(p):
    return 4.0 * p["n"], float(p["n"])


def _tree_cost(p: dict, launch: Launch) -> tuple[float, int]:
    levels = _log2(p["block"]) + 1
    return launch.threads * (THREAD_START_STEPS + levels * (3 + BARRIER_STEPS)), 8 * p["n"]


def _scan_inputs(p, rng):
    return {"x": small_integers(p, rng), "y": np.zeros(p["n"], np.float32)}


def section_scan_reference(x: np.ndarray, block: int) -> np.ndarray:
    """Inclusive prefix sums restarted at every section of ``block`` elements."""
    return np.cumsum(_sections(x, block), axis=1).ravel()[: len(x)].astype(np.float32)


def _scan_reference(x, p):
    return {"y": section_scan_reference(x["x"], p["block"])}


def _scan_work(p):
    return 8.0 * p["n"], p["n"] * float(_log2(p["block"]))


def _scan_cost(p: dict, launch: Launch) -> tuple[float, int]:
    steps = 2 * (_log2(p["block"]) + 1) * (3 + 2 * BARRIER_STEPS)
    return launch.threads * (THREAD_START_STEPS + steps), 8 * p["n"]


_SECTION_PARAMS = (
    Param("n", 1024, 1, 1 << 24, "number of elements"),
    Param("block", 128, 0, 2048, "threads per block (a power of two, 32 to 1024)", shown=(32, 1024)),
)

# what a section kernel's module decides: (its output array, inputs, reference, work, cost)
_SECTION_KERNELS = {
    "reduction_variants": ("partial", _reduce_inputs, _reduce_reference, _reduce_work, _tree_cost),
    "scan": ("y", _scan_inputs, _scan_reference, _scan_work, _scan_cost),
}


def _section_spec(module, name, title, summary, smem_words=lambda b: b) -> KernelSpec:
    """A kernel over sections of ``block`` elements, one section per block: x in, one array out, exact;
    ``smem_words(block)`` is its static shared memory in 4-byte words."""
    out, make_inputs, reference, work, cost = _SECTION_KERNELS[module]
    return _spec(
        module,
        name,
        title,
        summary,
        params=_SECTION_PARAMS,
        args=("x", out, "n"),
        outputs=(out,),
        plan=_section_plan(smem_words),
        make_inputs=make_inputs,
        reference=reference,
        build_args=("block",),
        active_when="i < n",
        work=work,
        cost=cost,
        rtol=0.0,
        atol=0.0,
    )


REDUCE_DIVERGENT = _section_spec(
    "reduction_variants",
    "reduce_divergent",
    "Reduction (divergent tree: every 2s-th thread adds)",
    "At stride s the threads whose index is a multiple of 2s add: the active lanes are scattered over "
    "every warp, so most warps run each level with most lanes off.",
)
REDUCE_CONVERGENT = _section_spec(
    "reduction_variants",
    "reduce_convergent",
    "Reduction (divergence-free tree: the first s threads add)",
    "At stride s the first s threads add the slot s away: whole warps are on or off until s < 32.",
)
REDUCE_SHUFFLE = _section_spec(
    "reduction_variants",
    "reduce_shuffle",
    "Reduction (warp shuffles, then one shared slot per warp)",
    "Each warp sums its values in registers with shfl_down_sync, lane 0 stores the warp's sum, and "
    "warp 0 sums those: 32 shared words and one barrier per block.",
    smem_words=lambda b: 32,
)
SCAN_KOGGE_STONE = _section_spec(
    "scan",
    "scan_kogge_stone",
    "Scan (Kogge-Stone: log2 B steps, about B log2 B adds)",
    "Inclusive prefix sums of each block's section: at stride s every thread t >= s adds the value s "
    "to its left. Few steps, many additions.",
)
SCAN_BRENT_KUNG = _section_spec(
    "scan",
    "scan_brent_kung",
    "Scan (Brent-Kung: 2 log2 B - 1 steps, about 2B adds)",
    "Inclusive prefix sums of each block's section: a reduction tree up, then a distribution tree down. "
    "Twice the steps of Kogge-Stone, a fraction of its additions.",
)


# ---------------------------------------------------------------------------------------------
# merge (ch. 12)


def _merge_threads(p: dict) -> int:
    return ceil_div(p["m"] + p["n"], p["per_thread"])


def _merge_plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(_merge_threads(p), p["block"]), 1, 1),
        block=(p["block"], 1, 1),
        scalars={"m": p["m"], "n": p["n"], "per_thread": p["per_thread"]},
    )


def _merge_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    hi = 4 * (p["m"] + p["n"])  # repeats happen: ties between A and B are part of the test
    return {
        "a": np.sort(rng.integers(0, hi, p["m"])).astype(np.int32),
        "b": np.sort(rng.integers(0, hi, p["n"])).astype(np.int32),
        "c": np.zeros(p["m"] + p["n"], np.int32),
    }


MERGE_CORANK = _spec(
    "merge",
    "merge_corank",
    "Merge of two sorted arrays (co-rank)",
    "Each thread finds, by a binary search (co-rank), which slices of A and B make its "
    "per_thread outputs, then merges them sequentially: no thread waits for another.",
    params=(
        Param("m", 256, 0, 1 << 22, "length of the sorted array A"),
        Param("n", 256, 0, 1 << 22, "length of the sorted array B"),
        Param("per_thread", 8, 1, 1024, "outputs per thread"),
        Param("block", 32, 0, 2048, "threads per block", shown=BLOCK_SHOWN),
    ),
    args=("a", "b", "c", "m", "n", "per_thread"),
    outputs=("c",),
    plan=_merge_plan,
    make_inputs=_merge_inputs,
    reference=lambda x, p: {"c": np.sort(np.concatenate([x["a"], x["b"]])).astype(np.int32)},
    active_when="k0 < k1",
    work=lambda p: (8.0 * (p["m"] + p["n"]), 0.0),
    cost=lambda p, launch: (
        launch.threads * (THREAD_START_STEPS + 8 * p["per_thread"] + 40 * _log2(p["m"] + p["n"] + 1)),
        8 * (p["m"] + p["n"]),
    ),
    rtol=0.0,
    atol=0.0,
)


# ---------------------------------------------------------------------------------------------
# sparse matrix-vector product (ch. 14)


def sparse_rows(p: dict, rng: np.random.Generator) -> list[np.ndarray]:
    """Column indices of each row: most rows have 1 to 4 non-zeros, ``long`` percent have ``width``
    (row 0 always does, so the ELL width is ``width`` whatever the draw)."""
    rows, cols, width = p["rows"], p["rows"], p["width"]
    lengths = rng.integers(1, min(4, width) + 1, rows)
    lengths[rng.random(rows) < p["long"] / 100.0] = width
    lengths[0] = width
    return [np.sort(rng.choice(cols, int(k), replace=False)).astype(np.int32) for k in lengths]


def _matrix(p: dict, rng: np.random.Generator):
    cols_of = sparse_rows(p, rng)
    vals_of = [rng.integers(1, 10, len(c)).astype(np.float32) for c in cols_of]
    x = rng.integers(0, 10, p["rows"]).astype(np.float32)
    return cols_of, vals_of, x


def _csr_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cols_of, vals_of, x = _matrix(p, rng)
    row_ptr = np.zeros(p["rows"] + 1, np.int32)
    row_ptr[1:] = np.cumsum([len(c) for c in cols_of])
    return {
        "row_ptr": row_ptr,
        "col_idx": np.concatenate(cols_of).astype(np.int32),
        "values": np.concatenate(vals_of).astype(np.float32),
        "x": x,
        "y": np.zeros(p["rows"], np.float32),
    }


def _ell_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cols_of, vals_of, x = _matrix(p, rng)
    rows, width = p["rows"], p["width"]
    col_idx = np.zeros((width, rows), np.int32)  # column-major: slot k of row r at [k, r]
    values = np.zeros((width, rows), np.float32)  # padding: value 0 at column 0
    for r, (c, v) in enumerate(zip(cols_of, vals_of, strict=True)):
        col_idx[: len(c), r] = c
        values[: len(v), r] = v
    return {"col_idx": col_idx.ravel(), "values": values.ravel(), "x": x, "y": np.zeros(rows, np.float32)}


def _csr_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    rp, ci, v, xv = x["row_ptr"], x["col_idx"], x["values"], x["x"].astype(np.float64)
    y = np.array([np.dot(v[rp[r] : rp[r + 1]], xv[ci[rp[r] : rp[r + 1]]]) for r in range(p["rows"])])
    return {"y": y.astype(np.float32)}


def _ell_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    rows, width = p["rows"], p["width"]
    ci, v = x["col_idx"].reshape(width, rows), x["values"].reshape(width, rows).astype(np.float64)
    y = (v * x["x"].astype(np.float64)[ci]).sum(axis=0)
    return {"y": y.astype(np.float32)}


_SPMV_PARAMS = (
    Param("rows", 256, 1, 1 << 18, "rows (and columns) of the square sparse matrix"),
    Param("width", 16, 1, 256, "non-zeros of the longest rows (the ELL width)"),
    Param("long", 5, 0, 100, "percent of the rows that are that long (the rest have 1 to 4)"),
    Param("block", 64, 0, 2048, "threads per block (one row per thread)", shown=BLOCK_SHOWN),
)


def _spmv_plan(with_width: bool):
    def plan(p: dict) -> Launch:
        if p["width"] > p["rows"]:
            raise LaunchError(f"width={p['width']} is more than the {p['rows']} columns")
        scalars = {"nrows": p["rows"], **({"width": p["width"]} if with_width else {})}
        return Launch(grid=(ceil_div(p["rows"], p["block"]), 1, 1), block=(p["block"], 1, 1), scalars=scalars)

    return plan


def _spmv_spec(fmt: str, title: str, summary: str) -> KernelSpec:
    """``spmv_<fmt>``, CSR or ELL: the same matrix and work; ELL drops row_ptr and takes the width."""
    ell = fmt == "ell"
    return _spec(
        "spmv",
        f"spmv_{fmt}",
        title,
        summary,
        params=_SPMV_PARAMS,
        args=("col_idx", "values", "x", "y", "nrows", "width")
        if ell
        else ("row_ptr", "col_idx", "values", "x", "y", "nrows"),
        outputs=("y",),
        plan=_spmv_plan(ell),
        make_inputs=_ell_inputs if ell else _csr_inputs,
        reference=_ell_reference if ell else _csr_reference,
        active_when="row < nrows",
        work=lambda p: (12.0 * p["rows"] * p["width"], 2.0 * p["rows"] * p["width"]),
        cost=lambda p, launch: (
            launch.threads * (THREAD_START_STEPS + 4 * p["width"]),
            12 * p["rows"] * p["width"],
        ),
        rtol=0.0,
        atol=0.0,  # small integers: every product and sum is exact in float32
    )


SPMV_CSR = _spmv_spec(
    "csr",
    "Sparse matrix × vector (CSR, one thread per row)",
    "Compressed sparse rows: each thread walks its own row's non-zeros. Rows of different lengths keep "
    "some lanes looping while others are done, and neighbouring lanes read far-apart words.",
)
SPMV_ELL = _spmv_spec(
    "ell",
    "Sparse matrix × vector (ELL, padded, column-major)",
    "Every row padded to the same width and stored column-major: at each slot a warp reads 32 "
    "neighbouring words, and every lane loops the same number of times, padding included.",
)


# ---------------------------------------------------------------------------------------------
# AoS vs SoA


DT = 0.01


def _particle_values(p: dict, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, (p["n"], 4)).astype(np.float32)


def _layout_plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1), block=(p["block"], 1, 1), scalars={"n": p["n"], "dt": DT}
    )


def moved_positions(q: np.ndarray) -> np.ndarray:
    """(n, 2) new positions of (n, 4) particles (x, y, vx, vy) after one step of DT, in float64."""
    q = q.astype(np.float64)
    return q[:, :2] + q[:, 2:] * np.float64(np.float32(DT))


_LAYOUT_PARAMS = (
    Param("n", 1024, 1, 1 << 24, "number of particles"),
    Param("block", 128, 0, 2048, "threads per block", shown=BLOCK_SHOWN),
)


def _layout_spec(name, title, summary, args, outputs, inputs, reference) -> KernelSpec:
    return _spec(
        "layout",
        name,
        title,
        summary,
        params=_LAYOUT_PARAMS,
        args=args,
        outputs=outputs,
        plan=_layout_plan,
        make_inputs=inputs,
        reference=reference,
        active_when="i < n",
        work=lambda p: (24.0 * p["n"], 4.0 * p["n"]),
        cost=lambda p, launch: (launch.threads * (THREAD_START_STEPS + 6), 16 * p["n"]),
        rtol=1e-6,
        atol=1e-6,
    )


PARTICLES_AOS = _layout_spec(
    "particles_aos",
    "Particle step, array of structures (x, y, vx, vy per particle)",
    "One row of four floats per particle: neighbouring lanes read words 16 bytes apart, so each warp "
    "load moves four times the bytes it uses.",
    ("p", "moved", "n", "dt"),
    ("moved",),
    lambda p, rng: {"p": _particle_values(p, rng), "moved": np.zeros((p["n"], 2), np.float32)},
    lambda x, p: {"moved": moved_positions(x["p"]).astype(np.float32)},
)

SOA_FIELDS = ("x", "y", "vx", "vy")


def _soa_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    q = _particle_values(p, rng)  # the same particles as the AoS kernel's, split into four arrays
    out = {k: np.ascontiguousarray(q[:, c]) for c, k in enumerate(SOA_FIELDS)}
    return {**out, "x_new": np.zeros(p["n"], np.float32), "y_new": np.zeros(p["n"], np.float32)}


def _soa_reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    moved = moved_positions(np.stack([x[k] for k in SOA_FIELDS], axis=1)).astype(np.float32)
    return {"x_new": moved[:, 0], "y_new": moved[:, 1]}


PARTICLES_SOA = _layout_spec(
    "particles_soa",
    "Particle step, structure of arrays (x[], y[], vx[], vy[])",
    "Four arrays, one per field: neighbouring lanes read neighbouring words, every warp load coalesced.",
    ("x", "y", "vx", "vy", "x_new", "y_new", "n", "dt"),
    ("x_new", "y_new"),
    _soa_inputs,
    _soa_reference,
)


SPECS = (
    CONV2D_NAIVE, CONV2D_TILED, REDUCE_DIVERGENT, REDUCE_CONVERGENT, REDUCE_SHUFFLE, SCAN_KOGGE_STONE,
    SCAN_BRENT_KUNG, MERGE_CORANK, SPMV_CSR, SPMV_ELL, PARTICLES_AOS, PARTICLES_SOA,
)  # fmt: skip
