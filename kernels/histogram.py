"""Histogram of integer values in [0, nbins) with atomic adds: the contention lesson.

* ``histogram_global``: every thread does ``atomic.add(bins, x[i], 1)`` on global memory. When many
  threads hit one bin (few bins, or skewed data) their atomics to one address are serialised.
* ``histogram_shared``: privatised bins. Each block counts into its own shared-memory copy of the
  bins (atomics on shared memory, contended only within the block), then adds each non-zero
  private count to the global bins once: at most one global atomic per bin per block.
"""

from functools import cache

from numba import cuda, int32


def histogram_global(x, bins, n):
    i = cuda.grid(1)
    if i < n:
        cuda.atomic.add(bins, x[i], 1)  # threads with equal values queue on one address


@cache
def histogram_shared_kernel(nbins):
    """Privatised histogram with NBINS shared-memory bins per block."""
    NBINS = nbins

    def histogram_shared(x, bins, n):
        local = cuda.shared.array(NBINS, int32)
        tid = cuda.threadIdx.x
        b = tid
        while b < NBINS:  # zero the private bins, a block-stride loop
            local[b] = 0
            b += cuda.blockDim.x
        cuda.syncthreads()  # every private bin is zero before anyone counts
        i = cuda.grid(1)
        if i < n:
            cuda.atomic.add(local, x[i], 1)  # contended only inside this block
        cuda.syncthreads()  # the block's counts are complete before they are published
        b = tid
        while b < NBINS:
            if local[b] != 0:
                cuda.atomic.add(bins, b, local[b])  # one global atomic per bin per block
            b += cuda.blockDim.x

    return histogram_shared
