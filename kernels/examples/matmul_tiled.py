from numba import cuda, float32

TILE = 16  # edge of the square tiles staged in shared memory; blocks are TILE x TILE threads


@cuda.jit
def matmul_tiled(A, B, C):
    """C = A @ B, one thread per element of C; n must be a multiple of TILE."""
    a_tile = cuda.shared.array((TILE, TILE), dtype=float32)
    b_tile = cuda.shared.array((TILE, TILE), dtype=float32)

    col, row = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    n = A.shape[1]

    acc = float32(0.0)
    for t in range(n // TILE):
        # every thread copies one element of each tile...
        a_tile[ty, tx] = A[row, t * TILE + tx]
        b_tile[ty, tx] = B[t * TILE + ty, col]
        cuda.syncthreads()  # ...and waits until the whole tile is there
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()  # nobody overwrites a tile another thread still reads

    if row >= C.shape[0] or col >= C.shape[1]:
        return
    C[row, col] = acc
