"""C = A @ B for n x n float32 matrices: the naive kernel and the shared-memory tiled one.

Both use one thread per element of C, with threadIdx.x along columns and threadIdx.y along rows.
The tiled kernel is built for one tile size at a time, because a shared-memory array's shape
must be a compile-time constant.
"""

from functools import cache

from numba import cuda, float32

from visualizer.kernels.probes import trace_tile

A_TILE, B_TILE = 0, 1  # operand slots in the tiles buffer


def matmul_naive(A, B, C, n):
    col, row = cuda.grid(2)
    if row < n and col < n:
        acc = float32(0.0)
        for k in range(n):  # each thread reads a whole row of A and column of B from global memory
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@cache
def matmul_tiled_kernel(tile):
    """Tiled matmul for TILE x TILE blocks."""
    TILE = tile

    def matmul_tiled(A, B, C, n, tiles):
        sA = cuda.shared.array((TILE, TILE), float32)
        sB = cuda.shared.array((TILE, TILE), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        acc = float32(0.0)
        steps = (n + TILE - 1) // TILE
        for step in range(steps):
            # Each thread stages one element of the A tile and one of the B tile;
            # past the edge of the matrix it stages 0 so the partial last tile adds nothing.
            a_col = step * TILE + tx
            b_row = step * TILE + ty
            sA[ty, tx] = A[row, a_col] if row < n and a_col < n else float32(0.0)
            sB[ty, tx] = B[b_row, col] if b_row < n and col < n else float32(0.0)
            cuda.syncthreads()  # the whole tile must be in shared memory before anyone reads it
            r0 = cuda.blockIdx.y * TILE
            c0 = cuda.blockIdx.x * TILE
            trace_tile(tiles, step, A_TILE, r0, step * TILE, min(TILE, n - r0), min(TILE, n - step * TILE))
            trace_tile(tiles, step, B_TILE, step * TILE, c0, min(TILE, n - step * TILE), min(TILE, n - c0))
            for k in range(TILE):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()  # nobody may overwrite the tile while others still read it
        if row < n and col < n:
            C[row, col] = acc

    return matmul_tiled
