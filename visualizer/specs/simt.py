"""The SIMT lesson's kernels: one branch per thread, split by lane parity (every warp diverges) or by
warp parity (no warp diverges), the same work either way.

Host side only (numpy, no numba); device code in ``kernels/divergence.py``. Registered by catalog.py
(SPECS). The reference replays each side's multiply-add chain in float32, as the kernel does.
"""

from __future__ import annotations

import numpy as np

from visualizer.specs.launch import THREAD_START_STEPS, KernelSpec, Launch, Param, ceil_div

A_MUL, A_ADD = np.float32(0.999), np.float32(0.5)  # kernels/divergence.py's two sides
B_MUL, B_ADD = np.float32(0.998), np.float32(-0.25)


def _plan(p: dict) -> Launch:
    return Launch(
        grid=(ceil_div(p["n"], p["block"]), 1, 1),
        block=(p["block"], 1, 1),
        scalars={"n": p["n"], "reps": p["reps"]},
    )


def _inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal(p["n"]).astype(np.float32), "out": np.zeros(p["n"], np.float32)}


def side_a(p: dict, lane_of_block: np.ndarray) -> np.ndarray:
    """Which threads run side A: even threadIdx.x (by lanes) or even warps (by warps)."""
    if p["_by"] == "lanes":
        return lane_of_block % 2 == 0
    return lane_of_block // 32 % 2 == 0


def _reference(by: str):
    def reference(x: dict, p: dict) -> dict[str, np.ndarray]:
        v = x["x"].astype(np.float32).copy()
        tid = np.arange(p["n"]) % p["block"]
        a = side_a({**p, "_by": by}, tid)
        for _ in range(p["reps"]):
            v = np.where(a, v * A_MUL + A_ADD, v * B_MUL + B_ADD).astype(np.float32)
        return {"out": v}

    return reference


def _cost(p: dict, launch: Launch) -> tuple[float, int]:
    return launch.threads * (THREAD_START_STEPS + 2 * p["reps"]), 8 * p["n"]


_PARAMS = (
    Param("n", 4096, 1, 1 << 24, "number of elements"),
    Param("reps", 64, 1, 4096, "multiply-adds on each side of the branch"),
    Param("block", 256, 32, 1024, "threads per block", choices=(32, 64, 128, 256, 512, 1024)),
)


def _spec(by: str, title: str, summary: str) -> KernelSpec:
    return KernelSpec(
        name=f"branch_{by}",
        title=title,
        summary=summary,
        params=_PARAMS,
        args=("x", "out", "n", "reps"),
        outputs=("out",),
        plan=_plan,
        make_inputs=_inputs,
        reference=_reference(by),
        build=("visualizer.kernels.divergence", f"branch_{by}"),
        active_when="i < n",
        work=lambda p: (8.0 * p["n"], 2.0 * p["n"] * p["reps"]),
        cost=_cost,
        rtol=1e-5,
        atol=1e-4,  # fma contraction on a GPU rounds a 4096-step chain a little differently
    )


BRANCH_LANES = _spec(
    "lanes",
    "Branch by lane parity (every warp diverges)",
    "if threadIdx.x % 2 == 0: side A else side B. Even and odd lanes of one warp disagree, so every warp "
    "runs both sides one after the other, half its lanes idle each time.",
)
BRANCH_WARPS = _spec(
    "warps",
    "Branch by warp parity (no warp diverges)",
    "if threadIdx.x // 32 % 2 == 0: side A else side B. All 32 lanes of a warp agree; the same work as "
    "branch_lanes, and no warp runs both sides.",
)

SPECS = (BRANCH_LANES, BRANCH_WARPS)
