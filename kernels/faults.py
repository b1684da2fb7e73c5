"""A kernel that faults on purpose: every thread writes far past the end of its array.

On a GPU this is an illegal-address error that poisons the CUDA context; the runner must
report it and recover. The simulator raises IndexError for the same write.
"""

from numba import cuda


def out_of_bounds_write(c, offset):
    i = cuda.grid(1)
    c[i + offset] = 1.0  # no bounds check: offset puts this far outside the allocation
