"""Sum reductions (PMPP ch. 10): one partial sum per block, three ways to pair the additions.

* ``reduce_divergent``: the first tree people write: at stride s, threads whose index is a multiple
  of 2s add. The active threads are spread over every warp, so each warp runs the add with most of
  its lanes off (control divergence) for most levels.
* ``reduce_convergent``: the divergence-free tree: at stride s the first s threads add the slot s
  away. The active threads are packed into the first warps; a warp only diverges once s < 32.
* ``reduce_shuffle``: each warp sums its 32 values in registers with ``shfl_down_sync`` (no shared
  memory, no barrier), lane 0 writes its warp's sum to shared memory, and warp 0 sums those.
"""

from functools import cache

from numba import cuda, float32

FULL_MASK = 0xFFFFFFFF


@cache
def reduce_divergent_kernel(block):
    BLOCK = block

    def reduce_divergent(x, partial, n):
        s = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        s[tid] = x[i] if i < n else float32(0.0)
        cuda.syncthreads()
        stride = 1
        while stride < BLOCK:
            if tid % (2 * stride) == 0:  # every 2s-th thread: active lanes scattered over all warps
                s[tid] += s[tid + stride]
            cuda.syncthreads()
            stride *= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = s[0]

    return reduce_divergent


@cache
def reduce_convergent_kernel(block):
    BLOCK = block

    def reduce_convergent(x, partial, n):
        s = cuda.shared.array(BLOCK, float32)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        s[tid] = x[i] if i < n else float32(0.0)
        cuda.syncthreads()
        stride = BLOCK // 2
        while stride > 0:
            if tid < stride:  # the first s threads: whole warps on or off until s < 32
                s[tid] += s[tid + stride]
            cuda.syncthreads()
            stride //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = s[0]

    return reduce_convergent


@cache
def reduce_shuffle_kernel(block):
    BLOCK = block
    WARPS = (BLOCK + 31) // 32

    def reduce_shuffle(x, partial, n):
        warp_sums = cuda.shared.array(32, float32)  # one slot per warp, not one per thread
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        i = cuda.grid(1)
        v = x[i] if i < n else float32(0.0)
        offset = 16
        while offset > 0:  # a tree inside the warp, in registers: lane l adds lane l + offset's value
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            warp_sums[warp] = v
        cuda.syncthreads()  # the only barrier: every warp's sum is in shared memory
        if warp == 0:
            v = warp_sums[lane] if lane < WARPS else float32(0.0)
            offset = 16
            while offset > 0:
                v += cuda.shfl_down_sync(FULL_MASK, v, offset)
                offset //= 2
            if lane == 0:
                partial[cuda.blockIdx.x] = v

    return reduce_shuffle
