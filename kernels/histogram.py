"""Histogram of integer values in [0, nbins) with atomic adds: the contention lesson.

* ``histogram_global``: every thread does ``atomic.add(bins, x[i], 1)`` on global memory. When many
  threads hit one bin (few bins, or skewed data) their atomics to one address are serialised.
* ``histogram_shared``: privatised bins. Each block counts into its own shared-memory copy of the
  bins (atomics on shared memory, contended only within the block), then adds each non-zero
  private count to the global bins once: at most one global atomic per bin per block.
"""

from functools import cache

from numba import cuda, int32

from kernels.probes import jit_pair, trace_begin, trace_end


def histogram_global(x, bins, n, trace, active):
    t0 = trace_begin(trace)
    i = cuda.grid(1)
    if i < n:
        cuda.atomic.add(bins, x[i], 1)  # threads with equal values queue on one address
    trace_end(trace, active, t0, i < n)


histogram_global_traced, histogram_global_clean = jit_pair(histogram_global)


@cache
def histogram_shared_kernels(nbins):
    """(instrumented, clean) privatised histogram with NBINS shared-memory bins per block."""
    NBINS = nbins

    def histogram_shared(x, bins, n, trace, active):
        t0 = trace_begin(trace)
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
        trace_end(trace, active, t0, i < n)

    return jit_pair(histogram_shared)
