"""Warp divergence, the SIMT lesson: two kernels that do the same work per thread and differ only in
which threads take which side of one branch.

* ``branch_lanes`` branches on ``threadIdx.x % 2``: the even and odd lanes of every warp go different
  ways, so every warp runs both sides one after the other, half its lanes idle each time.
* ``branch_warps`` branches on ``threadIdx.x // 32 % 2``: all 32 lanes of a warp go the same way, the
  warps take turns by parity, and no warp runs both sides.

Each side is ``reps`` steps of a dependent multiply-add (``reps`` is a kernel argument, so the
compiler cannot fold the loop away); the two sides are the same amount of work, so a thread's result
differs between the kernels only in which side it ran.
"""

from numba import cuda, float32

A_MUL, A_ADD = float32(0.999), float32(0.5)  # side A: v = v * A_MUL + A_ADD
B_MUL, B_ADD = float32(0.998), float32(-0.25)  # side B: v = v * B_MUL + B_ADD


def branch_lanes(x, out, n, reps):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        if cuda.threadIdx.x % 2 == 0:  # even and odd lanes of one warp disagree: the warp diverges
            for _ in range(reps):
                v = v * A_MUL + A_ADD
        else:
            for _ in range(reps):
                v = v * B_MUL + B_ADD
        out[i] = v


def branch_warps(x, out, n, reps):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        if cuda.threadIdx.x // 32 % 2 == 0:  # whole warps agree: no warp runs both sides
            for _ in range(reps):
                v = v * A_MUL + A_ADD
        else:
            for _ in range(reps):
                v = v * B_MUL + B_ADD
        out[i] = v
