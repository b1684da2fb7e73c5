"""Achieved occupancy as a timeline: active warps per SM over time, measured (from the threads
table, through :func:`schedule.achieved_occupancy`: one definition of achieved occupancy and of the
tail for every page) or modelled for the simulator (blocks filling SMs in waves of one block-time);
and the occupancy calculator's opt-in helpers the Occupancy page uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from visualizer.analysis.occupancy import (
    WARP_SIZE,
    Arch,
    Occupancy,
    get_arch,
    occupancy,
    sweep_registers,
    sweep_shared_memory,
    sweep_threads,
)
from visualizer.analysis.schedule import achieved_occupancy, step_sweep
from visualizer.specs.launch import ceil_div

SIM_ACHIEVED_SOURCE = (  # short enough for one title line at 1280 px; the page explains the model
    "modelled (simulator: achieved occupancy is not meaningful; blocks fill SMs in waves of one block-time)"
)


def modelled_label(arch: str | Arch) -> str:
    return f"modelled (CUDA occupancy formula, {get_arch(arch).label})"


def max_dynamic_smem_optin(arch: str | Arch, smem_static: int) -> int:
    """Largest dynamic shared memory a kernel can opt in to; the what-if charts assume it did."""
    return max(0, get_arch(arch).smem_per_block_optin - smem_static)


def occupancy_opted_in(
    arch: str | Arch, threads: int, regs: int, smem_dynamic: int = 0, smem_static: int = 0
) -> Occupancy:
    """:func:`occupancy` for a kernel that raised its dynamic shared-memory maximum to the opt-in limit.

    Below the 48 KB default this gives the same block count as the default; above it, it is what a
    kernel that calls cudaFuncSetAttribute gets.
    """
    return occupancy(
        arch,
        threads,
        regs,
        smem_dynamic,
        smem_static,
        max_dynamic_smem=max_dynamic_smem_optin(arch, smem_static),
    )


@dataclass(frozen=True)
class ImpactSweeps:
    """Nsight Compute's occupancy "impact" sweeps around one configuration (a kernel opted in to the
    most dynamic shared memory): each sweep varies one input, the others held at ``current``'s."""

    arch: Arch
    threads: int
    regs: int
    smem_dynamic: int
    max_dynamic_smem: int
    current: Occupancy
    threads_sweep: list[tuple[int, Occupancy]]
    regs_sweep: list[tuple[int, Occupancy]]
    smem_sweep: list[tuple[int, Occupancy]]


def impact_sweeps(arch: str | Arch, threads: int, regs: int, smem_dynamic: int = 0, smem_static: int = 0):
    """The three sweeps (block size, registers per thread, dynamic shared memory) of :class:`ImpactSweeps`."""
    spec = get_arch(arch)
    optin = max_dynamic_smem_optin(spec, smem_static)
    opted = {"max_dynamic_smem": optin}
    return ImpactSweeps(
        arch=spec,
        threads=threads,
        regs=regs,
        smem_dynamic=smem_dynamic,
        max_dynamic_smem=optin,
        current=occupancy_opted_in(spec, threads, regs, smem_dynamic, smem_static),
        threads_sweep=sweep_threads(spec, regs, smem_dynamic, smem_static, current=threads, **opted),
        regs_sweep=sweep_registers(spec, threads, smem_dynamic, smem_static, **opted),
        smem_sweep=sweep_shared_memory(spec, threads, regs, smem_static, current=smem_dynamic, **opted),
    )


# ---------------------------------------------------------------------------------------------------
# Calculator figures (modelled)


def _sweep(sm: np.ndarray, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> pd.DataFrame:
    """Active warps per SM after each event time (schedule.step_sweep, in this module's column names)."""
    events = step_sweep(np.asarray(sm, np.int64), start, end, np.asarray(weight, np.int64))
    events = events.rename(columns={"key": "sm", "t_ns": "t", "value": "active_warps"})
    return events.astype({"t": np.float64}).reset_index(drop=True)


def active_warps_over_time(
    threads: pd.DataFrame, launch: dict, blocks_per_sm: int | None = None
) -> pd.DataFrame:
    """Active warps per SM over time from a measured threads table (columns sm, t, active_warps).

    The step functions, the average and the tail are those of :func:`schedule.achieved_occupancy` (one
    computation for every page): each (block, warp) is active from its first thread's start to its last
    thread's end on its SM; ``active_warps`` holds from ``t`` until the SM's next row; ``attrs``
    carry ``achieved_warps`` (average over the time each SM was busy) and ``tail_start`` (the start of
    the partial last wave, None when the grid is whole waves).
    """
    max_warps = max(1, int(launch.get("max_threads_per_sm", 2048)) // WARP_SIZE)
    a = achieved_occupancy(threads, launch, max_warps, blocks_per_sm=blocks_per_sm)
    events = a.timeline.rename(columns={"t_ns": "t", "warps": "active_warps"})[["sm", "t", "active_warps"]]
    events = events.astype({"sm": np.int64, "t": np.float64, "active_warps": np.int64}).reset_index(drop=True)
    events.attrs.update(
        source=launch["source"],
        time_unit="ns",
        num_sms=int(launch["num_sms"]),
        blocks=int(launch["blocks"]),
        warps_per_block=ceil_div(int(launch["threads_per_block"]), WARP_SIZE),
        achieved_warps=a.avg_warps_busy,
        tail_start=float(a.tail_start_ns) if a.has_tail else None,  # as for the model below
    )
    return events


def modelled_active_warps(launch: dict, blocks_per_sm: int) -> pd.DataFrame:
    """Active warps per SM if blocks filled the SMs in waves, each block lasting one block-time.

    For the simulator, whose recorded times are one block after another: block i runs on SM
    ``i % num_sms`` during wave ``i // (num_sms * blocks_per_sm)``. Same columns as
    :func:`active_warps_over_time`; time is in block-times.
    """
    num_sms, blocks = int(launch["num_sms"]), int(launch["blocks"])
    warps_per_block = ceil_div(int(launch["threads_per_block"]), WARP_SIZE)
    ids = np.arange(blocks if blocks_per_sm > 0 else 0, dtype=np.int64)
    per_wave = max(1, num_sms * blocks_per_sm)
    wave = ids // per_wave
    weight = np.full(len(ids), warps_per_block, np.int64)
    events = _sweep(ids % num_sms, wave, wave + 1, weight)
    events.attrs.update(
        source=SIM_ACHIEVED_SOURCE,
        time_unit="block-times",
        num_sms=num_sms,
        blocks=blocks,
        warps_per_block=warps_per_block,
        # Only a partial last wave after full ones is a tail; a single partial wave is the whole run.
        tail_start=float(wave[-1]) if len(wave) and wave[-1] > 0 and blocks % per_wave else None,
    )
    return events


def _sm_areas(active: pd.DataFrame):
    """Per SM: event times and the cumulative warp-time (area under its step curve) at each."""
    for sm, group in active.groupby("sm", sort=True):
        t = group["t"].to_numpy()
        warps = group["active_warps"].to_numpy()
        area = np.concatenate([[0.0], np.cumsum(warps[:-1] * np.diff(t))])
        yield sm, t, warps, area


def achieved_warps_per_sm(active: pd.DataFrame) -> float:
    """Time-average of active warps per SM over the time each SM had any warp (as Nsight's achieved);
    for a measured table, the number :func:`schedule.achieved_occupancy` computed."""
    if "achieved_warps" in active.attrs:
        return float(active.attrs["achieved_warps"])
    warp_time = busy_time = 0.0
    for _, t, warps, area in _sm_areas(active):
        warp_time += area[-1]
        busy_time += float(np.sum(np.diff(t)[warps[:-1] > 0]))
    return warp_time / busy_time if busy_time > 0 else 0.0
