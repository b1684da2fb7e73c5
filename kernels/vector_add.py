"""c = a + b, one element per thread: the first CUDA kernel everyone writes."""

from numba import cuda


def vector_add(a, b, c, n):
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < n:  # the last block may have threads past the end of the data
        c[i] = a[i] + b[i]


def vector_add_x4(a, b, c, n):
    """The same sum with 4 elements per thread, a whole grid apart: each thread has 4 independent
    loads in flight at once (more memory-level parallelism), and every access stays coalesced."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    i1, i2, i3 = i + stride, i + 2 * stride, i + 3 * stride
    if i3 < n:  # the common case: all four in range, loads issued back to back
        x0, x1, x2, x3 = a[i] + b[i], a[i1] + b[i1], a[i2] + b[i2], a[i3] + b[i3]
        c[i], c[i1], c[i2], c[i3] = x0, x1, x2, x3
    else:
        for j in (i, i1, i2, i3):
            if j < n:
                c[j] = a[j] + b[j]
