"""Matrix transpose, three ways: the classic lesson in coalescing and shared-memory bank conflicts.

out (width x height) = inp (height x width) transposed, one thread per element, TILE x TILE blocks with
threadIdx.x along columns (so the 32 lanes of a warp are 32 neighbouring columns).

* ``transpose_naive``: reads a row of ``inp`` (coalesced) and writes a column of ``out``: the 32
  stores of a warp land in 32 different rows, 32 sectors per request.
* ``transpose_tiled``: stages a TILE x TILE tile in shared memory, so both the global read and the
  global write are along rows; but reading the tile back column-wise puts all 32 words of a warp
  in one bank (word tx * TILE + ty: same bank for every lane when TILE is 32): a 32-way conflict.
* ``transpose_padded``: the same tile with one extra column (TILE + 1): word tx * (TILE + 1) + ty
  puts each lane in its own bank. Conflict-free.
"""

from functools import cache

from numba import cuda, float32


def transpose_naive(inp, out, height, width):
    x = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # column of inp
    y = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y  # row of inp
    if y < height and x < width:
        out[x, y] = inp[y, x]  # neighbouring lanes: neighbouring reads, stores a whole row apart


@cache
def transpose_tiled_kernel(tile, pad=0):
    """Shared-memory transpose for TILE x TILE blocks; pad extra columns."""
    TILE = tile
    WIDTH = tile + pad  # a compile-time constant: the shared array's row length

    def transpose_tiled(inp, out, height, width):
        tile = cuda.shared.array((TILE, WIDTH), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        x = cuda.blockIdx.x * TILE + tx
        y = cuda.blockIdx.y * TILE + ty
        if y < height and x < width:
            tile[ty, tx] = inp[y, x]  # coalesced read of a row, stored along a row of the tile
        cuda.syncthreads()  # the whole tile must be staged before any thread reads it transposed
        ox = cuda.blockIdx.y * TILE + tx  # column of out
        oy = cuda.blockIdx.x * TILE + ty  # row of out
        if oy < width and ox < height:
            out[oy, ox] = tile[tx, ty]  # coalesced write; the tile is read down a column

    return transpose_tiled


def transpose_padded_kernel(tile):
    """The tiled transpose with one padding column: no bank conflicts."""
    return transpose_tiled_kernel(tile, pad=1)
