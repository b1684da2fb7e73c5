"""Inclusive prefix sums of each block's section (PMPP ch. 11): y[i] = x[start] + ... + x[i].

* ``scan_kogge_stone``: log2(B) steps; at stride s every thread t >= s adds the value s to its left.
  Few steps, but about B log2 B additions where a loop on one core needs B - 1.
* ``scan_brent_kung``: a reduction tree up (partial sums at the power-of-two positions), then a
  distribution tree down that fills in the rest: 2 log2(B) - 1 steps, but only about 2B additions.

Both scan one section of B = BLOCK elements per block (a full scan would add each section's total to
the sections after it, a second kernel).
"""

from functools import cache

from numba import cuda, float32


@cache
def scan_kogge_stone_kernel(block):
    BLOCK = block

    def scan_kogge_stone(x, y, n):
        s = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        s[tid] = x[i] if i < n else float32(0.0)
        stride = 1
        while stride < BLOCK:
            cuda.syncthreads()
            if tid >= stride:
                t = s[tid] + s[tid - stride]  # read both before anyone writes this step
            cuda.syncthreads()
            if tid >= stride:
                s[tid] = t
            stride *= 2
        if i < n:
            y[i] = s[tid]

    return scan_kogge_stone


@cache
def scan_brent_kung_kernel(block):
    BLOCK = block

    def scan_brent_kung(x, y, n):
        s = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        s[tid] = x[i] if i < n else float32(0.0)
        stride = 1
        while stride < BLOCK:  # up: a reduction tree leaves partial sums at positions 2s k - 1
            cuda.syncthreads()
            index = (tid + 1) * 2 * stride - 1
            if index < BLOCK:
                s[index] += s[index - stride]
            stride *= 2
        stride = BLOCK // 4
        while stride > 0:  # down: each partial sum is pushed to the position s to its right
            cuda.syncthreads()
            index = (tid + 1) * 2 * stride - 1
            if index + stride < BLOCK:
                s[index + stride] += s[index]
            stride //= 2
        cuda.syncthreads()
        if i < n:
            y[i] = s[tid]

    return scan_brent_kung
