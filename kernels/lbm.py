"""Air flowing past an obstacle: one lattice-Boltzmann (D2Q9, BGK) step, in two memory layouts.

Each cell holds nine numbers f[q]: how much fluid moves in each of the nine lattice directions
(at rest, the four neighbours, the four diagonals). One step is *stream* then *collide*, fused into
one kernel with one thread per cell:

1. stream (pull): the fluid that moves in direction q arrives from the neighbour behind it,
   (x - CX[q], y - CY[q]). Where that neighbour is solid, the fluid bounced off the wall and comes
   back reversed (bounce-back: this cell's own f[OPP[q]]). Left of the first column the inflow
   enters at rest density and speed u_in; right of the last column the flow leaves as it is
   (the column's own value: zero gradient). Top and bottom wrap around (periodic); with
   ``periodic`` set, left and right wrap too and nothing enters or leaves (a closed box).
2. collide (BGK): density rho = sum f, velocity u = sum f c / rho, and every f relaxes toward the
   equilibrium feq(rho, u) at the rate omega = 1 / tau (the viscosity is (tau - 0.5) / 3).

f_in holds the previous step's collided values and f_out receives this step's; the host swaps
them between launches. Solid cells copy theirs unchanged (no fluid cell reads them).

The two kernels do the same arithmetic on the same numbers, stored differently:

* array of structures, ``f[y, x, q]``: a cell's nine values sit together, so neighbouring threads
  (neighbouring x) read addresses 9 floats = 36 bytes apart: a warp's load touches ~32 sectors.
* structure of arrays, ``f[q, y, x]``: one plane per direction, so neighbouring threads read
  neighbouring floats: a warp's load is 128 contiguous bytes, 4 sectors.
"""

from numba import cuda, float32

#          rest  E   N   W   S  NE  NW  SW  SE
CX = (0, 1, 0, -1, 0, 1, -1, -1, 1)
CY = (0, 0, 1, 0, -1, 1, 1, -1, -1)
OPP = (0, 3, 4, 1, 2, 7, 8, 5, 6)  # the direction pointing back
W = (4.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 36, 1.0 / 36, 1.0 / 36, 1.0 / 36)


def lbm_step_aos(f_in, f_out, solid, ny, nx, u_in, omega, periodic):
    x, y = cuda.grid(2)
    if y < ny and x < nx:
        f = cuda.local.array(9, float32)
        if solid[y, x]:
            for q in range(9):
                f_out[y, x, q] = f_in[y, x, q]
        else:
            # 1. stream: pull each direction's value from the neighbour it comes from
            for q in range(9):
                xs = x - CX[q]
                ys = (y - CY[q] + ny) % ny
                if periodic:
                    xs = (xs + nx) % nx
                if xs < 0:  # inflow: the equilibrium of density 1, velocity (u_in, 0)
                    cu = float32(3.0) * CX[q] * u_in
                    f[q] = W[q] * (float32(1.0) + cu + float32(0.5) * cu * cu - float32(1.5) * u_in * u_in)
                elif xs >= nx:  # outflow: the last column's own value
                    f[q] = f_in[ys, x, q]
                elif solid[ys, xs]:  # bounce-back off the obstacle
                    f[q] = f_in[y, x, OPP[q]]
                else:
                    f[q] = f_in[ys, xs, q]
            # 2. collide: relax toward the local equilibrium
            rho = float32(0.0)
            ux = float32(0.0)
            uy = float32(0.0)
            for q in range(9):
                rho += f[q]
                ux += CX[q] * f[q]
                uy += CY[q] * f[q]
            ux /= rho
            uy /= rho
            usq = float32(1.5) * (ux * ux + uy * uy)
            for q in range(9):
                cu = float32(3.0) * (CX[q] * ux + CY[q] * uy)
                feq = W[q] * rho * (float32(1.0) + cu + float32(0.5) * cu * cu - usq)
                f_out[y, x, q] = f[q] + omega * (feq - f[q])


def lbm_step_soa(f_in, f_out, solid, ny, nx, u_in, omega, periodic):
    x, y = cuda.grid(2)
    if y < ny and x < nx:
        f = cuda.local.array(9, float32)
        if solid[y, x]:
            for q in range(9):
                f_out[q, y, x] = f_in[q, y, x]
        else:
            # 1. stream: pull each direction's value from the neighbour it comes from
            for q in range(9):
                xs = x - CX[q]
                ys = (y - CY[q] + ny) % ny
                if periodic:
                    xs = (xs + nx) % nx
                if xs < 0:  # inflow: the equilibrium of density 1, velocity (u_in, 0)
                    cu = float32(3.0) * CX[q] * u_in
                    f[q] = W[q] * (float32(1.0) + cu + float32(0.5) * cu * cu - float32(1.5) * u_in * u_in)
                elif xs >= nx:  # outflow: the last column's own value
                    f[q] = f_in[q, ys, x]
                elif solid[ys, xs]:  # bounce-back off the obstacle
                    f[q] = f_in[OPP[q], y, x]
                else:
                    f[q] = f_in[q, ys, xs]
            # 2. collide: relax toward the local equilibrium
            rho = float32(0.0)
            ux = float32(0.0)
            uy = float32(0.0)
            for q in range(9):
                rho += f[q]
                ux += CX[q] * f[q]
                uy += CY[q] * f[q]
            ux /= rho
            uy /= rho
            usq = float32(1.5) * (ux * ux + uy * uy)
            for q in range(9):
                cu = float32(3.0) * (CX[q] * ux + CY[q] * uy)
                feq = W[q] * rho * (float32(1.0) + cu + float32(0.5) * cu * cu - usq)
                f_out[q, y, x] = f[q] + omega * (feq - f[q])
