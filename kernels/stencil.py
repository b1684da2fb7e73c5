"""One step of the 2-D heat equation (Jacobi): u_new = u + coef * (sum of 4 neighbours - 4u).

Interior points get the update; the outer boundary keeps its value (Dirichlet). Each TILE x TILE
block stages its tile plus a one-cell halo ((TILE + 2) x (TILE + 2) in shared memory): every thread
loads its own cell, and the threads on the tile's edges also load the neighbour cell just outside
it. After one barrier the five-point stencil reads only shared memory, so each global value is
loaded about once per block instead of five times.
"""

from functools import cache

from numba import cuda, float32


@cache
def stencil_kernel(tile):
    """Jacobi step for TILE x TILE blocks (shared tile shape is compile-time)."""
    TILE = tile
    SIDE = tile + 2  # the tile and its halo

    def heat_step(u, u_new, ny, nx, coef):
        s = cuda.shared.array((SIDE, SIDE), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        x = cuda.blockIdx.x * TILE + tx  # column
        y = cuda.blockIdx.y * TILE + ty  # row
        inside = y < ny and x < nx
        if inside:
            s[ty + 1, tx + 1] = u[y, x]
            # halo: the edge threads fetch the cell just outside the tile (only where it exists)
            if tx == 0 and x > 0:
                s[ty + 1, 0] = u[y, x - 1]
            if tx == TILE - 1 and x + 1 < nx:
                s[ty + 1, TILE + 1] = u[y, x + 1]
            if ty == 0 and y > 0:
                s[0, tx + 1] = u[y - 1, x]
            if ty == TILE - 1 and y + 1 < ny:
                s[TILE + 1, tx + 1] = u[y + 1, x]
        cuda.syncthreads()  # the tile and its halo are complete before any neighbour is read
        if inside:
            if 0 < y < ny - 1 and 0 < x < nx - 1:
                c = s[ty + 1, tx + 1]
                around = s[ty, tx + 1] + s[ty + 2, tx + 1] + s[ty + 1, tx] + s[ty + 1, tx + 2]
                u_new[y, x] = c + coef * (around - float32(4.0) * c)
            else:
                u_new[y, x] = s[ty + 1, tx + 1]  # the boundary holds its temperature

    return heat_step
