from numba import cuda, float32

THREADS_PER_BLOCK = 256


@cuda.jit
def block_sum(x, partial):
    """Each block adds up its slice of x in shared memory and writes one partial sum."""
    cache = cuda.shared.array(THREADS_PER_BLOCK, dtype=float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)

    if i < x.shape[0]:
        cache[tid] = x[i]
    else:
        cache[tid] = 0
    cuda.syncthreads()

    # tree reduction: halve the number of active threads at every step
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:
            cache[tid] += cache[tid + s]
        cuda.syncthreads()
        s //= 2

    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]
