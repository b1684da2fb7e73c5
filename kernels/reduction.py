"""Sum of a float32 vector: each block reduces its slice in shared memory as a tree.

``reduction`` is correct. ``reduction_race`` is the same source built without the barrier inside
the tree loop: a thread may read a partner's slot before the partner has added into it, so its
result is wrong on a GPU. It exists to show why that ``syncthreads`` is needed.
"""

from functools import cache

from numba import cuda, float32

from visualizer.kernels.probes import trace_row_state


@cache
def reduction_kernel(block, barrier=True):
    """Tree reduction for blocks of BLOCK threads (a power of two).

    barrier=False leaves out the syncthreads between tree levels: the race demo.
    """
    BLOCK = block
    BARRIER = barrier  # a compile-time constant: the branch below is resolved when compiling

    def reduction(x, partial, n, tree):
        s = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        s[tid] = x[i] if i < n else float32(0.0)
        cuda.syncthreads()
        trace_row_state(tree, 0, tid, s[tid], 0.0)
        stride = BLOCK // 2
        level = 1
        while stride > 0:
            if tid < stride:
                s[tid] += s[tid + stride]  # without the barrier: s[tid + stride] may not be summed yet
            if BARRIER:
                cuda.syncthreads()  # every pair of this level is summed before the next level reads it
            trace_row_state(tree, level, tid, s[tid], 0.0)
            stride //= 2
            level += 1
        if tid == 0:
            partial[cuda.blockIdx.x] = s[0]

    return reduction


def reduction_race_kernel(block):
    """DELIBERATELY RACY reduction: the tree loop has no barrier."""
    return reduction_kernel(block, barrier=False)
