"""c = a + b, one element per thread: the first CUDA kernel everyone writes."""

from numba import cuda

from kernels.probes import jit_pair, trace_begin, trace_end


def vector_add(a, b, c, n, trace, active):
    t0 = trace_begin(trace)
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < n:  # the last block may have threads past the end of the data
        c[i] = a[i] + b[i]
    trace_end(trace, active, t0, i < n)


vector_add_traced, vector_add_clean = jit_pair(vector_add)
