"""Sparse matrix times vector, y = A x (PMPP ch. 14), one thread per row, in two storage formats.

* ``spmv_csr``: compressed sparse rows: row r's non-zeros are values[row_ptr[r]:row_ptr[r+1]] at
  columns col_idx[...]. Neighbouring threads start far apart in ``values`` (uncoalesced), and rows of
  different lengths make the lanes of a warp leave the loop at different times.
* ``spmv_ell``: ELL: every row padded to ``width`` slots (zeros), stored column-major
  (slot k of row r at k * nrows + r), so at each k the 32 lanes of a warp read 32 neighbouring words.
  Coalesced and uniform, at the price of multiply-adds on the padding.
"""

from numba import cuda, float32


def spmv_csr(row_ptr, col_idx, values, x, y, nrows):
    row = cuda.grid(1)
    if row < nrows:
        acc = float32(0.0)
        for k in range(row_ptr[row], row_ptr[row + 1]):  # this row's non-zeros, however many
            acc += values[k] * x[col_idx[k]]
        y[row] = acc


def spmv_ell(col_idx, values, x, y, nrows, width):
    row = cuda.grid(1)
    if row < nrows:
        acc = float32(0.0)
        for k in range(width):  # every row runs width slots, padding included
            acc += values[k * nrows + row] * x[col_idx[k * nrows + row]]  # column-major: lanes adjacent
        y[row] = acc
