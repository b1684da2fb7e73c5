"""dst[i] = src[i * stride]: how the distance between neighbouring lanes' addresses sets the
number of 32-byte sectors a warp's load touches (stride 1: 4 sectors per 32 lanes of float32;
stride 8 or more: one sector per lane, 32 per request, 8x the bytes moved for the same data)."""

from numba import cuda


def strided_copy(src, dst, n, stride):
    i = cuda.grid(1)
    if i < n:
        dst[i] = src[i * stride]  # lanes stride elements apart: 1 is coalesced, 32 the worst case
