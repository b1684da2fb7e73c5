"""dst[i] = src[i * stride]: how the distance between neighbouring lanes' addresses sets the
number of 32-byte sectors a warp's load touches (stride 1: 4 sectors per 32 lanes of float32;
stride 8 or more: one sector per lane, 32 per request, 8x the bytes moved for the same data)."""

from numba import cuda

from kernels.probes import jit_pair, trace_begin, trace_end


def strided_copy(src, dst, n, stride, trace, active):
    t0 = trace_begin(trace)
    i = cuda.grid(1)
    if i < n:
        dst[i] = src[i * stride]  # lanes stride elements apart: 1 is coalesced, 32 the worst case
    trace_end(trace, active, t0, i < n)


strided_copy_traced, strided_copy_clean = jit_pair(strided_copy)
