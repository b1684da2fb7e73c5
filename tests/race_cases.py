"""Races nobody here wrote (issue 25): textbook kernels as visitors' sources, each with the one line
that makes it safe (a barrier, an atomic) left out, or put back."""

import textwrap

REVERSE = """
from numba import cuda, float32

N = 128

@cuda.jit
def reverse(a, out):
    s = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * N + t
    s[t] = a[i]
    BARRIER
    out[i] = s[N - 1 - t]
"""

HISTOGRAM = """
from numba import cuda

@cuda.jit
def histogram(x, bins):
    i = cuda.grid(1)
    if i < x.size:
        b = x[i] % bins.size
        UPDATE
"""

MATMUL = """
from numba import cuda, float32

TILE = 8

@cuda.jit
def matmul(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range(A.shape[1] // TILE):
        sA[ty, tx] = A[y, t * TILE + tx]
        sB[ty, tx] = B[t * TILE + ty, x]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        BARRIER
    C[y, x] = acc
"""

CASES = {
    # name: (source, kernel, grid, block, args, reference, racy text, race-free text)
    "reverse": (REVERSE, "reverse", "2", "128", {"a": "arange:float32:256", "out": "zeros:float32:256"},
                "out = a.reshape(2, 128)[:, ::-1].reshape(-1)", "pass", "cuda.syncthreads()"),
    "histogram": (HISTOGRAM, "histogram", "2", "128", {"x": "arange:int32:256", "bins": "zeros:int32:4"},
                  "bins = np.bincount(x % 4, minlength=4).astype(np.int32)", "bins[b] += 1",
                  "cuda.atomic.add(bins, b, 1)"),
    "matmul": (MATMUL, "matmul", "2,2", "8,8", {"A": "rand:float32:16x16", "B": "rand:float32:16x16",
               "C": "zeros:float32:16x16"}, "C = A @ B", "pass", "cuda.syncthreads()"),
}  # fmt: skip


def source(name: str, racy: bool) -> str:
    src, *_, bad, good = CASES[name]
    key = "BARRIER" if "BARRIER" in src else "UPDATE"
    return textwrap.dedent(src).replace(key, bad if racy else good)


# A Kogge-Stone inclusive scan (PMPP ch. 11) of 4,096 threads, 1,024 to a block (issue 39): with the
# barrier between each step's reads and its writes left out, every word of every step races; the
# hazard pairing once took minutes on it, the race-free twin seconds.
SCAN = """
from numba import cuda, float32

N = 1024

@cuda.jit
def scan(x, out):
    s = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * N + t
    s[t] = x[i]
    stride = 1
    while stride < N:
        cuda.syncthreads()
        v = s[t]
        if t >= stride:
            v += s[t - stride]
        BARRIER
        s[t] = v
        stride *= 2
    out[i] = s[t]
"""
SCAN_LAUNCH = dict(kernel="scan", grid="4", block="1024",
                   args={"x": "ones:float32:4096", "out": "zeros:float32:4096"},
                   reference=["out = np.cumsum(x.reshape(4, 1024), axis=1).reshape(-1).astype(np.float32)"])  # fmt: skip


def scan_source(racy: bool) -> str:
    return textwrap.dedent(SCAN).replace("BARRIER", "pass" if racy else "cuda.syncthreads()")
