"""Array of structures vs structure of arrays: the same particle step, two memory layouts.

Each particle moves by its velocity: (x, y) + (vx, vy) dt, written to new positions.

* ``particles_aos``: one row of 4 floats per particle, p[i] = (x, y, vx, vy). Lane i reads p[i, 0],
  lane i+1 p[i+1, 0]: 16 bytes apart, so a warp's load of one field touches 512 bytes of which it
  uses 128.
* ``particles_soa``: four arrays x, y, vx, vy. Lane i reads x[i], lane i+1 x[i+1]: 4 bytes apart,
  one fully used 128-byte stretch per warp load.
"""

from numba import cuda


def particles_aos(p, moved, n, dt):
    i = cuda.grid(1)
    if i < n:
        moved[i, 0] = p[i, 0] + p[i, 2] * dt  # x + vx dt: a 16-byte stride between neighbouring lanes
        moved[i, 1] = p[i, 1] + p[i, 3] * dt


def particles_soa(x, y, vx, vy, x_new, y_new, n, dt):
    i = cuda.grid(1)
    if i < n:
        x_new[i] = x[i] + vx[i] * dt  # neighbouring lanes, neighbouring words
        y_new[i] = y[i] + vy[i] * dt
