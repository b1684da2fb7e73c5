"""A kernel that faults on purpose: every thread writes far past the end of its array.

On a GPU this is an illegal-address error that poisons the CUDA context; the runner must
report it and recover. The simulator raises IndexError for the same write.
"""

from numba import cuda

from kernels.probes import jit_pair, trace_begin, trace_end


def out_of_bounds_write(c, offset, trace, active):
    t0 = trace_begin(trace)
    i = cuda.grid(1)
    c[i + offset] = 1.0  # no bounds check: offset puts this far outside the allocation
    trace_end(trace, active, t0, True)


out_of_bounds_write_traced, out_of_bounds_write_clean = jit_pair(out_of_bounds_write)
