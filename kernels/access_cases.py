"""Small kernels written for checking recorded accesses against Nsight Compute (issue 23).

Each one makes one kind of request the tables must count as the hardware does: 8- and 16-byte
shared accesses (served by half- and quarter-warps), 16-byte global ones (two 8-byte requests each), a conflict that only the per-phase count gets
right, a divergent reduction, atomics, a guard return, a conditional expression, a view read in a
device function. ``CASES`` gives
each kernel its launch and inputs (numpy only); devtools/crosscheck.py profiles them with ncu, and
tests/engine/test_gpu_accesses.py records them on both backends.
"""

import numpy as np
from numba import complex128, cuda, float32, float64

N = 256  # elements a case's block reads
N2, N16 = 2 * N, 16 * N  # shared arrays' sizes must be constants numba can read (not expressions)


@cuda.jit
def f64_rows(x, out):
    """float64 in shared memory, read along the row: two wavefronts a request, no conflict."""
    s = cuda.shared.array(N, float64)
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncthreads()
    out[t] = s[t] * 2.0


@cuda.jit
def f64_stride2(x, out):
    """float64 at a stride of two elements: each half-warp uses 16 banks twice (4 wavefronts)."""
    s = cuda.shared.array(N2, float64)
    t = cuda.threadIdx.x
    s[2 * t] = x[t]  # (the odd elements are never touched: two stores side by side would be fused)
    cuda.syncthreads()
    out[t] = s[2 * t]


@cuda.jit
def f64_uneven(x, out):
    """Lanes 0-15 read down a column of float64 (16 words in one bank pair), lanes 16-31 along a row:
    17 wavefronts per request, where a warp-wide busiest-bank count says 16."""
    s = cuda.shared.array(N16, float64)
    t = cuda.threadIdx.x
    lane = t % 32
    v = x[t]  # one load (the compiler would hoist it out of the loop anyway)
    for k in range(16):
        s[k * N + t] = v  # along a row, never two neighbours by one thread (ptxas would fuse those)
    cuda.syncthreads()
    i = lane * 16 if lane < 16 else lane
    out[t] = s[(t // 32) * 512 + i]


@cuda.jit
def c128_rows(x, out):
    """complex128 (16 bytes) in shared memory along the row: four quarter-warps, no conflict."""
    s = cuda.shared.array(N, complex128)
    t = cuda.threadIdx.x
    v = x[t]
    s[t] = complex(v, -v)
    cuda.syncthreads()
    v = s[t]
    out[t] = v.real + v.imag


@cuda.jit
def c128_add(a, b, out):
    """complex128 (16 bytes) in global memory, along the row: numba aligns it to 8 bytes, so ptxas moves
    each element as two 8-byte halves (two LDG.E.64 per load, two STG.E.64 per store): two requests."""
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


def _c128(r, n):
    return (r.random(n) + 1j * r.random(n)).astype(np.complex128)


@cuda.jit
def f32_column(x, out):
    """float32 tile read down a column: a 32-way conflict per request (31 extra wavefronts)."""
    s = cuda.shared.array((32, 32), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    s[ty, tx] = x[ty * 32 + tx]
    cuda.syncthreads()
    out[ty * 32 + tx] = s[tx, ty]


@cuda.jit
def tree_sum(x, out):
    """A block's sum by halving: divergent lanes (t < stride), shared +=, a guard at the end."""
    s = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.blockIdx.x * N + t]
    cuda.syncthreads()
    stride = N // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t != 0:
        return
    out[cuda.blockIdx.x] = s[0]


@cuda.jit
def tree_sum_race(x, out):
    """tree_sum without the barrier in the loop: lanes of other warps read partial sums (a race)."""
    s = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.blockIdx.x * N + t]
    cuda.syncthreads()
    stride = N // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


@cuda.jit
def histogram(x, bins):
    """Global atomics on data-dependent addresses; a conditional expression picks the bin."""
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        b = int(v * 16) if v < 1.0 else 15
        cuda.atomic.add(bins, b, 1)


@cuda.jit(device=True)
def _dot_row(row, w):
    acc = float32(0.0)
    for j in range(w.shape[0]):  # a run-time trip count: no unrolling, no fused vector loads
        acc += row[j] * w[j]
    return acc


@cuda.jit
def view_rows(x, w, out):
    """A view of one row per thread (``row = x[i]``) read in a device function: the lanes' rows are 32
    bytes apart, so each request of ``row[j]`` touches 32 sectors; ``w[j]`` is one broadcast sector."""
    i = cuda.grid(1)
    row = x[i]
    out[i] = _dot_row(row, w)


def _f32(n):
    return lambda rng: {"x": rng.random(n).astype(np.float32)}


CASES = [
    # (kernel, grid, block, inputs(rng) -> arrays, outputs: name -> (shape, dtype))
    ("f64_rows", (1, 1, 1), (N, 1, 1), lambda r: {"x": r.random(N)}, {"out": ((N,), np.float64)}),
    ("f64_stride2", (1, 1, 1), (N, 1, 1), lambda r: {"x": r.random(N)}, {"out": ((N,), np.float64)}),
    ("f64_uneven", (1, 1, 1), (N, 1, 1), lambda r: {"x": r.random(N)}, {"out": ((N,), np.float64)}),
    ("c128_rows", (1, 1, 1), (N, 1, 1), lambda r: {"x": r.random(N)}, {"out": ((N,), np.float64)}),
    ("c128_add", (2, 1, 1), (128, 1, 1), lambda r: {"a": _c128(r, 2 * 128), "b": _c128(r, 2 * 128)},
     {"out": ((2 * 128,), np.complex128)}),
    ("f32_column", (1, 1, 1), (32, 32, 1), _f32(1024), {"out": ((1024,), np.float32)}),
    ("tree_sum", (4, 1, 1), (N, 1, 1), _f32(4 * N), {"out": ((4,), np.float32)}),
    ("tree_sum_race", (2, 1, 1), (N, 1, 1), _f32(2 * N), {"out": ((2,), np.float32)}),
    ("histogram", (4, 1, 1), (128, 1, 1), _f32(500), {"bins": ((16,), np.int32)}),
    ("view_rows", (2, 1, 1), (64, 1, 1),
     lambda r: {"x": r.random((128, 8)).astype(np.float32), "w": r.random(8).astype(np.float32)},
     {"out": ((128,), np.float32)}),
]  # fmt: skip


def reference(kernel: str, arrays: dict) -> dict:
    """What each case must compute (numpy), to check a run's outputs."""
    if kernel == "c128_add":
        return {"out": arrays["a"] + arrays["b"]}
    x = arrays["x"]
    if kernel in ("f64_rows",):
        return {"out": x * 2.0}
    if kernel in ("f64_stride2", "f64_uneven"):
        if kernel == "f64_uneven":
            lane = np.arange(N) % 32
            i = np.where(lane < 16, lane * 16, lane) + (np.arange(N) // 32) * 512
            return {"out": x[i % N]}
        return {"out": x.copy()}
    if kernel == "c128_rows":
        return {"out": np.zeros_like(x)}
    if kernel == "f32_column":
        return {"out": x.reshape(32, 32).T.reshape(-1).copy()}
    if kernel == "tree_sum":
        return {"out": x.reshape(4, N).sum(axis=1)}
    if kernel == "tree_sum_race":  # raced: any value; only the recorded accesses are compared
        return {}
    if kernel == "view_rows":
        return {"out": (x.astype(np.float64) @ arrays["w"]).astype(np.float32)}
    if kernel == "histogram":
        b = np.where(x < 1.0, (x * 16).astype(np.int64), 15)
        return {"bins": np.bincount(b, minlength=16).astype(np.int32)}
    raise KeyError(kernel)
