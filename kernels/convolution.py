"""2-D convolution (PMPP ch. 7): y = x convolved with a (2R+1) x (2R+1) mask, zero outside the image.

* ``conv2d_naive``: each thread reads its (2R+1)^2 neighbours straight from global memory, so
  neighbouring threads read the same input cells again and again.
* ``conv2d_tiled``: a block is an *input* tile of IN_TILE x IN_TILE threads; each thread stages one
  cell (the tile plus an R-cell halo, zero past the edge) into shared memory, then only the inner
  OUT_TILE x OUT_TILE threads compute, reading shared memory. Every input cell a block needs is read
  from global memory once per block.

The mask is the same for every thread and read-only: on a GPU it belongs in constant memory (one
broadcast read per warp). Here it is an argument ``w`` so that a lesson can change it at run time.
"""

from functools import cache

from numba import cuda, float32


def conv2d_naive(x, w, y, ny, nx, r):
    col, row = cuda.grid(2)
    if row < ny and col < nx:
        acc = float32(0.0)
        for i in range(2 * r + 1):
            for j in range(2 * r + 1):
                rr = row - r + i
                cc = col - r + j
                if rr >= 0 and rr < ny and cc >= 0 and cc < nx:  # ghost cells outside count as 0
                    acc += w[i, j] * x[rr, cc]
        y[row, col] = acc


@cache
def conv2d_tiled_kernel(in_tile, radius):
    """Tiled convolution: blocks of IN_TILE x IN_TILE threads produce OUT_TILE x OUT_TILE outputs."""
    IN_TILE = in_tile
    R = radius
    OUT_TILE = IN_TILE - 2 * R

    def conv2d_tiled(x, w, y, ny, nx, r):
        tile = cuda.shared.array((IN_TILE, IN_TILE), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * OUT_TILE + ty - R  # the input cell this thread stages (halo included)
        col = cuda.blockIdx.x * OUT_TILE + tx - R
        if row >= 0 and row < ny and col >= 0 and col < nx:
            tile[ty, tx] = x[row, col]
        else:
            tile[ty, tx] = float32(0.0)  # a ghost cell past the image's edge
        cuda.syncthreads()  # the whole input tile is staged before anyone reads a neighbour
        ti = ty - R
        tj = tx - R
        if ti >= 0 and ti < OUT_TILE and tj >= 0 and tj < OUT_TILE and row < ny and col < nx:
            acc = float32(0.0)
            for i in range(2 * R + 1):
                for j in range(2 * R + 1):
                    acc += w[i, j] * tile[ti + i, tj + j]
            y[row, col] = acc

    return conv2d_tiled
