"""Airflow over a wing: the lattice-Boltzmann (D2Q9) step in two memory layouts, its obstacles, its
numpy reference and the fields a frame shows (speed, vorticity).

Host side only (numpy, no numba); device code in ``kernels/lbm.py``. Registered by catalog.py (SPECS).
``extra["steps"]`` tells the host loop (engine/capture/steps.py) how to run many steps: which two
arrays swap after each launch, and how to read a frame's fields from the distributions.
"""

from __future__ import annotations

import numpy as np

from visualizer.specs.launch import THREAD_START_STEPS, KernelSpec, Launch, Param, ceil_div

CX = np.array([0, 1, 0, -1, 0, 1, -1, -1, 1])
CY = np.array([0, 0, 1, 0, -1, 1, 1, -1, -1])
OPP = np.array([0, 3, 4, 1, 2, 7, 8, 5, 6])
W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4)

SHAPES = {0: "cylinder", 1: "NACA 2412 airfoil", 2: "none (an empty periodic box)"}
BLOCK = (32, 8)  # 32 threads along x: one warp reads one row of cells


def reynolds(p: dict) -> float:
    """Re = u L / nu, L the obstacle's size across the flow (the cylinder's diameter, the chord)."""
    nu = (p["tau_milli"] / 1000.0 - 0.5) / 3.0
    return p["u_milli"] / 1000.0 * obstacle_length(p) / nu


def obstacle_length(p: dict) -> float:
    return 2.0 * cylinder_radius(p) if p["shape"] == 0 else chord(p)


def cylinder_radius(p: dict) -> float:
    return max(2.0, p["ny"] / 10.0)


def chord(p: dict) -> float:
    return max(8.0, p["ny"] * 0.4)


def naca4(code: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Camber line and half-thickness of a NACA 4-digit profile at chord positions x in [0, 1]."""
    m, pos, t = int(code[0]) / 100.0, int(code[1]) / 10.0, int(code[2:]) / 100.0
    half = 5 * t * (0.2969 * np.sqrt(x) - 0.1260 * x - 0.3516 * x**2 + 0.2843 * x**3 - 0.1015 * x**4)
    if m == 0:
        return np.zeros_like(x), half
    camber = np.where(
        x < pos, m / pos**2 * (2 * pos * x - x**2), m / (1 - pos) ** 2 * ((1 - 2 * pos) + 2 * pos * x - x**2)
    )
    return camber, half


def obstacle(p: dict) -> np.ndarray:
    """The solid cells (uint8, ny x nx): a cylinder a little off the centre line (so shedding starts
    sooner), a NACA 2412 wing at ``angle`` degrees of attack, or nothing."""
    ny, nx = p["ny"], p["nx"]
    y, x = np.mgrid[0:ny, 0:nx].astype(np.float64)
    if p["shape"] == 0:
        r = cylinder_radius(p)
        return ((x - nx / 4) ** 2 + (y - ny / 2 - 1) ** 2 <= r * r).astype(np.uint8)
    if p["shape"] == 1:
        c = chord(p)
        a = np.radians(p["angle"])
        # rotate each cell into the wing's frame: leading edge at (nx/5, ny/2), nose up by ``angle``
        dx, dy = x - nx / 5, y - ny / 2
        s = (dx * np.cos(a) - dy * np.sin(a)) / c
        n = (dx * np.sin(a) + dy * np.cos(a)) / c
        inside = (s >= 0) & (s <= 1)
        camber, half = naca4("2412", np.clip(s, 0, 1))
        return (inside & (np.abs(n - camber) <= half)).astype(np.uint8)
    return np.zeros((ny, nx), np.uint8)


def equilibrium(rho: np.ndarray, ux: np.ndarray, uy: np.ndarray) -> np.ndarray:
    """feq[q, ...] in float64."""
    cu = 3.0 * (CX[:, None, None] * ux + CY[:, None, None] * uy)
    usq = 1.5 * (ux * ux + uy * uy)
    return W[:, None, None] * rho * (1.0 + cu + 0.5 * cu * cu - usq)


def initial_soa(p: dict, rng: np.random.Generator) -> np.ndarray:
    """f[q, y, x]: the inflow everywhere (a closed box: at rest with a few density bumps)."""
    ny, nx, u = p["ny"], p["nx"], p["u_milli"] / 1000.0
    rho = np.ones((ny, nx))
    ux = np.full((ny, nx), 0.0 if p["shape"] == 2 else u)
    if p["shape"] == 2:
        rho = rho + 0.01 * rng.standard_normal((ny, nx))
        ux = ux + u * rng.standard_normal((ny, nx)) * 0.1
    return equilibrium(rho, ux, np.zeros((ny, nx))).astype(np.float32)


def lbm_step_reference(
    f: np.ndarray, solid: np.ndarray, u_in: float, omega: float, periodic: bool
) -> np.ndarray:
    """One step on f[q, y, x] in float64, as kernels/lbm.py does it (pull streaming, bounce-back,
    inflow left, zero-gradient outflow right, periodic top/bottom; BGK collision)."""
    f = f.astype(np.float64)
    nq, ny, nx = f.shape
    y, x = np.mgrid[0:ny, 0:nx]
    solid = solid.astype(bool)
    pulled = np.empty_like(f)
    inflow = equilibrium(np.ones((1, 1)), np.full((1, 1), u_in), np.zeros((1, 1)))[:, 0, 0]
    for q in range(nq):
        xs = x - CX[q]
        ys = (y - CY[q]) % ny
        if periodic:
            xs = xs % nx
        left, right = xs < 0, xs >= nx
        xc = np.clip(xs, 0, nx - 1)
        got = f[q, ys, xc]
        got = np.where(right, f[q, ys, x], got)
        got = np.where(~left & ~right & solid[ys, xc], f[OPP[q]], got)
        pulled[q] = np.where(left, inflow[q], got)
    rho = pulled.sum(axis=0)
    ux = (CX[:, None, None] * pulled).sum(axis=0) / rho
    uy = (CY[:, None, None] * pulled).sum(axis=0) / rho
    out = pulled + omega * (equilibrium(rho, ux, uy) - pulled)
    return np.where(solid[None], f, out)


def omega_of(p: dict) -> float:
    return 1000.0 / p["tau_milli"]


def fields_soa(f: np.ndarray, solid: np.ndarray) -> dict[str, np.ndarray]:
    """A frame's fields from f[q, y, x]: speed |u|, vorticity duy/dx - dux/dy (0 in the solid), the
    fluid's mass, and the transverse velocity u_y at a probe in the wake (the middle of the domain):
    it swings + and - once vortices shed from alternate sides."""
    f = f.astype(np.float64)
    rho = f.sum(axis=0)
    ux = (CX[:, None, None] * f).sum(axis=0) / rho
    uy = (CY[:, None, None] * f).sum(axis=0) / rho
    fluid = solid == 0
    ux, uy = np.where(fluid, ux, 0.0), np.where(fluid, uy, 0.0)
    vort = (np.roll(uy, -1, axis=1) - np.roll(uy, 1, axis=1)) / 2 - (
        np.roll(ux, -1, axis=0) - np.roll(ux, 1, axis=0)
    ) / 2
    return {
        "speed": np.hypot(ux, uy).astype(np.float32),
        "vorticity": np.where(fluid, vort, 0.0).astype(np.float32),
        "mass": np.float64(rho[fluid].sum()),
        "uy_probe": np.float64(uy[uy.shape[0] // 2, uy.shape[1] // 2]),
    }


def to_aos(f_soa: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(f_soa, 0, -1))


def to_soa(f_aos: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(f_aos, -1, 0))


# ---------------------------------------------------------------------------------------------
# the two specs


def _plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(p["nx"], BLOCK[0]), ceil_div(p["ny"], BLOCK[1]), 1),
        block=(*BLOCK, 1),
        scalars={
            "ny": p["ny"],
            "nx": p["nx"],
            "u_in": np.float32(p["u_milli"] / 1000.0),
            "omega": np.float32(omega_of(p)),
            "periodic": int(p["shape"] == 2),
        },
    )


def _inputs(aos: bool):
    def make(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        f = initial_soa(p, rng)
        # a little noise so one step's streaming is visible in every direction
        f = (f * (1 + 0.01 * rng.standard_normal(f.shape))).astype(np.float32)
        return {
            "f_in": to_aos(f) if aos else f,
            "f_out": np.zeros_like(to_aos(f) if aos else f),
            "solid": obstacle(p),
        }

    return make


def _reference(aos: bool):
    def ref(x: dict, p: dict) -> dict[str, np.ndarray]:
        f = to_soa(x["f_in"]) if aos else x["f_in"]
        out = lbm_step_reference(f, x["solid"], p["u_milli"] / 1000.0, omega_of(p), p["shape"] == 2)
        out = out.astype(np.float32)
        return {"f_out": to_aos(out) if aos else out}

    return ref


def _frame(aos: bool):
    def frame(arrays: dict, p: dict) -> dict:
        f = to_soa(arrays["f_in"]) if aos else arrays["f_in"]  # after the swap: the newest step
        return fields_soa(f, arrays["solid"])

    return frame


def _cost(p: dict, launch: Launch) -> tuple[float, int]:
    cells = p["ny"] * p["nx"]
    return launch.threads * (THREAD_START_STEPS + 60), 2 * 36 * cells + cells


_PARAMS = (
    Param("nx", 128, 8, 4096, "cells along the flow (x)"),
    Param("ny", 32, 8, 2048, "cells across the flow (y)"),
    Param("shape", 0, 0, 2, "obstacle: 0 cylinder, 1 NACA 2412 airfoil, 2 none (closed periodic box)"),
    Param("angle", 12, -20, 25, "the airfoil's angle of attack, degrees"),
    Param("u_milli", 100, 1, 200, "inflow speed, thousandths of a cell per step (Mach ~ u * 1.7)"),
    Param("tau_milli", 560, 505, 2000, "relaxation time tau, thousandths (viscosity (tau - 0.5) / 3)"),
)


def _lbm_spec(layout: str, title: str, summary: str) -> KernelSpec:
    """``lbm_<layout>``: kernels/lbm.py's ``lbm_step_<layout>``; the two layouts differ in nothing else."""
    aos = layout == "aos"
    return KernelSpec(
        name=f"lbm_{layout}",
        title=title,
        summary=summary,
        build=("visualizer.kernels.lbm", f"lbm_step_{layout}"),
        params=_PARAMS,
        args=("f_in", "f_out", "solid", "ny", "nx", "u_in", "omega", "periodic"),
        outputs=("f_out",),
        plan=_plan,
        make_inputs=_inputs(aos),
        reference=_reference(aos),
        active_when="y < ny and x < nx",
        work=lambda p: (2 * 36.0 * p["ny"] * p["nx"] + p["ny"] * p["nx"], 150.0 * p["ny"] * p["nx"]),
        cost=_cost,
        rtol=1e-4,
        atol=2e-6,  # float32 arithmetic on values ~0.01-0.5
        extra={
            "accesses": lambda p: 20 * p["ny"] * p["nx"],
            "steps": {"swap": ("f_in", "f_out"), "frame": _frame(aos)},
        },
    )


LBM_AOS = _lbm_spec(
    "aos",
    "Lattice-Boltzmann step, array of structures (f[y, x, q])",
    "Airflow past a cylinder or a wing: one D2Q9 stream-and-collide step per launch, one thread per "
    "cell. A cell's nine values sit together, so neighbouring threads read 36 bytes apart: uncoalesced.",
)

LBM_SOA = _lbm_spec(
    "soa",
    "Lattice-Boltzmann step, structure of arrays (f[q, y, x])",
    "The same D2Q9 step with one plane per direction: neighbouring threads read neighbouring floats, "
    "so every warp's load is 4 sectors (coalesced).",
)

SPECS = (LBM_AOS, LBM_SOA)
