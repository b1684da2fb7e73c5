"""Scheduling tables: which SM ran which block and warp when, waves, concurrency, achieved occupancy.

Pure pandas/numpy. Inputs are a capture's ``threads`` table (see ``visualizer.analysis.capture``); every output
keeps the input's ``source`` label (``measured (GPU)`` or ``simulated ...``). :func:`modelled_schedule`
is the exception: it builds a block table of the same shape from the occupancy calculator and labels
it ``modelled (...)``, because the CUDA simulator runs blocks one after another on no SM at all.

Definitions used throughout (times are ns since the kernel's first timestamp):

* A block's interval is ``[t_start_ns, t_end_ns)``: the earliest start and the latest end of its
  threads (or warps, when the kernel recorded per warp). A warp's interval is the same over its lanes.
* A block's **wave** (:func:`assign_waves`): order the blocks of each SM by start time; the k-th block
  (k = 0, 1, ...) on an SM belongs to wave ``k // capacity``, where capacity is the SM's resident-block
  limit (blocks per SM from the occupancy calculator when given, else the most blocks that SM was seen
  to hold at once). Its ``wave_position`` is ``k % capacity``. So wave 0 is the first set of blocks an
  SM took in, wave 1 the set that replaced them, and so on.
* The **first wave** holds ``num_sms x blocks_per_sm`` blocks; a grid of B blocks has
  ``B // first_wave`` full waves and a partial **tail wave** of the remaining blocks, during which
  part of the GPU idles (the tail effect).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from visualizer.analysis.capture import block_coords
from visualizer.analysis.occupancy import get_arch, occupancy
from visualizer.analysis.provenance import labelled, source_of  # noqa: F401  (schedule.source_of)

WARP_SIZE = 32
BLOCK_COLUMNS = [
    "block",
    "block_x",
    "block_y",
    "block_z",
    "sm",
    "t_start_ns",
    "t_end_ns",
    "warps",
    "threads",
    "active_threads",
    "source",
]
WARP_COLUMNS = [
    "block",
    "block_x",
    "block_y",
    "block_z",
    "warp",
    "sm",
    "t_start_ns",
    "t_end_ns",
    "threads",
    "active_threads",
    "source",
]
# Nominal cost of one thread's work in the modelled schedule: only relative durations matter there.
NOMINAL_NS_PER_THREAD = 8


def _segments(keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(order that sorts ``keys`` or None if already sorted, start index of each run of equal keys)."""
    order = None
    if len(keys) > 1 and (np.diff(keys) < 0).any():
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.array([], np.int64)
    return order, starts


def _reduce(threads: pd.DataFrame, keys: np.ndarray) -> dict[str, np.ndarray]:
    """Per run of equal keys: first sm/coords, min start, max end, max warp, thread and active counts."""
    order, starts = _segments(keys)

    def col(name):
        values = threads[name].to_numpy()
        return values if order is None else values[order]

    if not len(starts):
        return {}
    counts = np.diff(np.r_[starts, len(keys)])
    return {
        "block": col("block")[starts],
        "block_x": col("block_x")[starts],
        "block_y": col("block_y")[starts],
        "block_z": col("block_z")[starts],
        "warp_first": col("warp")[starts],
        "warp_max": np.maximum.reduceat(col("warp"), starts),
        "sm": col("sm")[starts],
        "t_start_ns": np.minimum.reduceat(col("t_start_ns"), starts),
        "t_end_ns": np.maximum.reduceat(col("t_end_ns"), starts),
        "threads": counts,
        "active_threads": np.add.reduceat(col("active").astype(np.int64), starts),
    }


# an interval table's column -> (the reduced column it is, its dtype)
_INTERVAL_COLUMNS = {
    "block": ("block", np.int64), "block_x": ("block_x", np.int32), "block_y": ("block_y", np.int32),
    "block_z": ("block_z", np.int32), "warp": ("warp_first", np.int32), "sm": ("sm", np.int32),
    "t_start_ns": ("t_start_ns", np.int64), "t_end_ns": ("t_end_ns", np.int64), "warps": ("warps", np.int32),
    "threads": ("threads", np.int32), "active_threads": ("active_threads", np.int32),
}  # fmt: skip


def _intervals(threads: pd.DataFrame, keys: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """One row per run of equal ``keys``: ``columns`` (the last is the source label) of ``_reduce``."""
    source = source_of(threads)
    r = _reduce(threads, keys)
    if not r:
        return labelled(pd.DataFrame({c: pd.Series(dtype=np.int64) for c in columns[:-1]}), source)
    r["warps"] = r["warp_max"] + 1
    df = pd.DataFrame({c: r[_INTERVAL_COLUMNS[c][0]].astype(_INTERVAL_COLUMNS[c][1]) for c in columns[:-1]})
    return labelled(df, source)


def block_intervals(threads: pd.DataFrame) -> pd.DataFrame:
    """One row per block: where (SM) and when (first start .. last end over its threads) it ran."""
    return _intervals(threads, threads["block"].to_numpy(), BLOCK_COLUMNS)


def warp_intervals(threads: pd.DataFrame) -> pd.DataFrame:
    """One row per (block, warp): its SM and first start .. last end over its lanes."""
    block = threads["block"].to_numpy().astype(np.int64)
    warp = threads["warp"].to_numpy().astype(np.int64)
    return _intervals(threads, block * (int(warp.max()) + 1 if len(warp) else 1) + warp, WARP_COLUMNS)


def greedy_slots(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Resident slot of each interval: within each group, intervals in start order take the lowest slot
    free at their start (interval partitioning), so overlapping intervals never share a slot and a group
    uses exactly as many slots as it ever held at once. Intervals are half-open: [start, end)."""
    order = np.lexsort((end, start, group))
    slots = np.empty(len(group), np.int32)
    busy: list[tuple[int, int]] = []  # (end, slot) of intervals still resident
    free: list[int] = []
    current = None
    used = 0
    for i in order.tolist():
        if group[i] != current:
            current, busy, free, used = group[i], [], [], 0
        s = start[i]
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            slot, used = used, used + 1
        slots[i] = slot
        heapq.heappush(busy, (end[i], slot))
    return slots


def max_concurrent(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, int]:
    """Most intervals any one group held at once (half-open intervals)."""
    if not len(group):
        return {}
    steps = step_sweep(group, start, end, np.ones(len(group), np.int64))
    return steps.groupby("key")["value"].max().astype(int).to_dict()


def step_sweep(key: np.ndarray, start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> pd.DataFrame:
    """Step function per key: after all events at time t, ``value`` intervals' weight is resident."""
    k = np.r_[key, key]
    t = np.r_[start, end]
    w = np.r_[weight, -weight]
    if not len(k):
        return pd.DataFrame({"key": k, "t_ns": t, "value": w})
    order = np.lexsort((t, k))
    k, t, w = k[order], t[order], w[order]
    # Each key's events sum to zero, so one running sum over the key-sorted events restarts per key.
    value = np.cumsum(w)
    last = np.r_[(k[1:] != k[:-1]) | (t[1:] != t[:-1]), True]
    return pd.DataFrame({"key": k[last], "t_ns": t[last], "value": value[last]})


def concurrency(intervals: pd.DataFrame, by: str = "sm") -> pd.DataFrame:
    """Step functions of resident warps and blocks over time, from a block or a warp table.

    ``by="sm"``: columns sm, t_ns, warps, blocks; each row holds from its t_ns until the SM's next row
    (0 before the SM's first row; every SM's last row is 0). ``by="device"``: t_ns, warps, blocks summed
    over all SMs. A block table counts each block's ``warps`` for its whole interval; a warp table counts
    each warp for its own interval and each block from its first warp's start to its last warp's end.
    """
    if by not in ("sm", "device"):
        raise ValueError(f"by must be 'sm' or 'device', not {by!r}")
    source = source_of(intervals)
    sm = intervals["sm"].to_numpy().astype(np.int64)
    start = intervals["t_start_ns"].to_numpy().astype(np.int64)
    end = intervals["t_end_ns"].to_numpy().astype(np.int64)
    if "warp" in intervals.columns:
        warp_w = np.ones(len(intervals), np.int64)
        extents = (
            pd.DataFrame({"block": intervals["block"].to_numpy(), "sm": sm, "s": start, "e": end})
            .groupby("block", sort=False)
            .agg(sm=("sm", "first"), s=("s", "min"), e=("e", "max"))
        )
        b_sm, b_start, b_end = extents["sm"].to_numpy(), extents["s"].to_numpy(), extents["e"].to_numpy()
        key = np.r_[sm, b_sm]
        s_all, e_all = np.r_[start, b_start], np.r_[end, b_end]
        dw = np.r_[warp_w, np.zeros(len(b_sm), np.int64)]
        db = np.r_[np.zeros(len(sm), np.int64), np.ones(len(b_sm), np.int64)]
    else:
        key, s_all, e_all = sm, start, end
        dw = intervals["warps"].to_numpy().astype(np.int64)
        db = np.ones(len(sm), np.int64)
    if by == "device":
        key = np.zeros(len(key), np.int64)
    # Two weights, one event order: sweep warps and blocks together so their rows line up.
    k = np.r_[key, key]
    t = np.r_[s_all, e_all]
    order = np.lexsort((t, k))
    k, t = k[order], t[order]
    warps = np.cumsum(np.r_[dw, -dw][order])
    blocks = np.cumsum(np.r_[db, -db][order])
    last = np.r_[(k[1:] != k[:-1]) | (t[1:] != t[:-1]), True] if len(k) else np.array([], bool)
    if by == "sm":
        df = pd.DataFrame({"sm": k[last].astype(np.int32), "t_ns": t[last], "warps": warps[last]})
    else:
        df = pd.DataFrame({"t_ns": t[last], "warps": warps[last]})
    df["blocks"] = blocks[last]
    df.attrs["source"] = source
    return df


def step_integral(t: np.ndarray, value: np.ndarray, t0: float, t1: float) -> float:
    """Integral over [t0, t1] of a step function that is ``value[i]`` on [t[i], t[i+1]) and 0 before t[0]
    (and ``value[-1]`` after the last row)."""
    if not len(t) or t1 <= t0:
        return 0.0
    t = t.astype(np.float64)
    area = np.r_[0.0, np.cumsum(value[:-1] * np.diff(t))]

    def at(x: float) -> float:
        if x <= t[0]:
            return 0.0
        if x >= t[-1]:
            return float(area[-1] + value[-1] * (x - t[-1]))
        return float(np.interp(x, t, area))

    return at(t1) - at(t0)


def _as_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """A warp table from a threads table; block and warp tables pass through."""
    if "lane" in table.columns:
        return warp_intervals(table)
    return table


@dataclass
class AchievedOccupancy:
    """Result of :func:`achieved_occupancy` (times in ns, warps per SM unless named otherwise)."""

    source: str
    num_sms: int
    max_warps_per_sm: int
    kernel_ns: int
    per_sm: (
        pd.DataFrame
    )  # sm, blocks, busy_start_ns, busy_end_ns, busy_ns, warp_ns, avg_warps_busy, peak_warps
    timeline: pd.DataFrame  # concurrency(..., by="sm")
    device: pd.DataFrame  # concurrency(..., by="device")
    avg_warps_busy: float  # time-weighted over the time each SM held at least one warp
    avg_warps_kernel: float  # over all num_sms SMs and the whole kernel (idle SMs count as 0)
    theoretical_warps_per_sm: int | None
    blocks: int
    blocks_per_sm: int  # given, else the most blocks any SM held at once
    first_wave_blocks: int  # num_sms * blocks_per_sm
    full_waves: int
    tail_blocks: int  # blocks of the partial last wave (0 if the grid is whole waves)
    tail_start_ns: int  # start of the first tail-wave block (kernel end if no tail)
    tail_ns: int
    tail_idle_fraction: float  # share of SM-time in the tail with no resident warp
    tail_avg_warps: float  # average resident warps per SM during the tail (over all num_sms SMs)
    sms_used: int

    @property
    def achieved(self) -> float:
        """Achieved occupancy: average active warps per SM while busy / max warps per SM."""
        return self.avg_warps_busy / self.max_warps_per_sm if self.max_warps_per_sm else 0.0

    @property
    def achieved_kernel(self) -> float:
        return self.avg_warps_kernel / self.max_warps_per_sm if self.max_warps_per_sm else 0.0

    @property
    def theoretical(self) -> float | None:
        if self.theoretical_warps_per_sm is None or not self.max_warps_per_sm:
            return None
        return self.theoretical_warps_per_sm / self.max_warps_per_sm

    @property
    def has_tail(self) -> bool:
        """A partial last wave after full ones: what every page calls the tail (one partial wave
        alone is the whole run, not a tail)."""
        return self.full_waves > 0 and self.tail_blocks > 0

    @property
    def waves(self) -> int:
        return self.full_waves + (1 if self.tail_blocks else 0)


def achieved_occupancy(
    threads: pd.DataFrame,
    launch: dict,
    max_warps_per_sm: int,
    theoretical_warps_per_sm: int | None = None,
    blocks_per_sm: int | None = None,
) -> AchievedOccupancy:
    """Active warps per SM over time and their averages, waves and the tail.

    ``threads`` is a threads table, a warp table (:func:`warp_intervals`) or a block table (e.g.
    :func:`modelled_schedule`, whose blocks hold all their warps for their whole interval).
    ``launch["num_sms"]`` SMs are counted, including ones that ran nothing. ``blocks_per_sm`` sets the
    first-wave size (pass the occupancy calculator's value); without it the most blocks any SM held at once
    is used.
    """
    source = source_of(threads)
    intervals = _as_intervals(threads)
    num_sms = int(launch["num_sms"])
    timeline = concurrency(intervals, by="sm")
    device = concurrency(intervals, by="device")
    blocks_tbl = intervals if "warp" not in intervals.columns else _block_extents(intervals)
    t0 = int(intervals["t_start_ns"].min()) if len(intervals) else 0
    t_end = int(intervals["t_end_ns"].max()) if len(intervals) else 0
    kernel_ns = t_end - t0

    rows = []
    for sm, steps in timeline.groupby("sm", sort=True):
        t, w = steps["t_ns"].to_numpy(), steps["warps"].to_numpy()
        busy = float(np.sum(np.diff(t)[w[:-1] > 0]))
        rows.append(
            {
                "sm": int(sm),
                "busy_start_ns": int(t[0]),
                "busy_end_ns": int(t[-1]),
                "busy_ns": busy,
                "warp_ns": step_integral(t, w, t[0], t[-1]),
                "peak_warps": int(w.max()),
                "peak_blocks": int(steps["blocks"].max()),
            }
        )
    per_sm = pd.DataFrame(
        rows,
        columns=["sm", "busy_start_ns", "busy_end_ns", "busy_ns", "warp_ns", "peak_warps", "peak_blocks"],
    )
    counts = blocks_tbl.groupby("sm").size()
    per_sm.insert(1, "blocks", per_sm["sm"].map(counts).fillna(0).astype(int))
    per_sm["avg_warps_busy"] = np.where(per_sm["busy_ns"] > 0, per_sm["warp_ns"] / per_sm["busy_ns"], 0.0)
    per_sm.attrs["source"] = source

    total_warp_ns = float(per_sm["warp_ns"].sum())
    total_busy = float(per_sm["busy_ns"].sum())
    avg_busy = total_warp_ns / total_busy if total_busy > 0 else 0.0
    avg_kernel = total_warp_ns / (num_sms * kernel_ns) if kernel_ns > 0 and num_sms else 0.0

    n_blocks = len(blocks_tbl)
    bps = int(blocks_per_sm) if blocks_per_sm else int(per_sm["peak_blocks"].max() if len(per_sm) else 1)
    bps = max(bps, 1)
    first_wave = num_sms * bps
    full_waves, tail_blocks = divmod(n_blocks, first_wave)
    if tail_blocks:
        starts = np.sort(blocks_tbl["t_start_ns"].to_numpy())
        tail_start = int(starts[full_waves * first_wave])
    else:
        tail_start = t_end
    tail_ns = t_end - tail_start
    tail_idle, tail_warps = 0.0, 0.0
    if tail_ns > 0:
        busy_in_tail, warp_ns_in_tail = 0.0, 0.0
        for _, steps in timeline.groupby("sm", sort=False):
            t, w = steps["t_ns"].to_numpy(), steps["warps"].to_numpy()
            busy_in_tail += step_integral(t, (w > 0).astype(np.int64), tail_start, t_end)
            warp_ns_in_tail += step_integral(t, w, tail_start, t_end)
        tail_idle = 1.0 - busy_in_tail / (num_sms * tail_ns)
        tail_warps = warp_ns_in_tail / (num_sms * tail_ns)
    return AchievedOccupancy(
        source=source,
        num_sms=num_sms,
        max_warps_per_sm=int(max_warps_per_sm),
        kernel_ns=kernel_ns,
        per_sm=per_sm,
        timeline=timeline,
        device=device,
        avg_warps_busy=avg_busy,
        avg_warps_kernel=avg_kernel,
        theoretical_warps_per_sm=theoretical_warps_per_sm,
        blocks=n_blocks,
        blocks_per_sm=bps,
        first_wave_blocks=first_wave,
        full_waves=full_waves,
        tail_blocks=tail_blocks,
        tail_start_ns=tail_start,
        tail_ns=tail_ns,
        tail_idle_fraction=tail_idle,
        tail_avg_warps=tail_warps,
        sms_used=int(blocks_tbl["sm"].nunique()),
    )


def _block_extents(warps: pd.DataFrame) -> pd.DataFrame:
    return (
        warps.groupby("block", sort=True)
        .agg(sm=("sm", "first"), t_start_ns=("t_start_ns", "min"), t_end_ns=("t_end_ns", "max"))
        .reset_index()
    )


def assign_waves(blocks: pd.DataFrame, blocks_per_sm: int | None = None) -> pd.DataFrame:
    """The block table plus ``order`` (k: the block's start-order index on its SM), ``wave`` (k // capacity),
    ``wave_position`` (k % capacity) and ``slot`` (resident slot from :func:`greedy_slots`).

    Capacity is ``blocks_per_sm`` for every SM when given (the occupancy calculator's blocks per SM),
    else each SM's observed peak of concurrently resident blocks. ``attrs["capacity"]`` records it.
    """
    df = blocks.copy()
    df.attrs = dict(blocks.attrs)
    sm = df["sm"].to_numpy().astype(np.int64)
    start = df["t_start_ns"].to_numpy().astype(np.int64)
    end = df["t_end_ns"].to_numpy().astype(np.int64)
    block = df["block"].to_numpy().astype(np.int64)
    order_idx = np.lexsort((block, start, sm))
    k = np.empty(len(df), np.int64)
    if len(df):
        sorted_sm = sm[order_idx]
        run_start = np.r_[True, sorted_sm[1:] != sorted_sm[:-1]]
        first_of_run = np.maximum.accumulate(np.where(run_start, np.arange(len(df)), 0))
        k[order_idx] = np.arange(len(df)) - first_of_run
    if blocks_per_sm:
        capacity = np.full(len(df), int(blocks_per_sm), np.int64)
        df.attrs["capacity"] = int(blocks_per_sm)
    else:
        peaks = max_concurrent(sm, start, end)
        capacity = np.array([max(peaks.get(s, 1), 1) for s in sm.tolist()], np.int64)
        df.attrs["capacity"] = "observed peak per SM"
    df["order"] = k.astype(np.int32)
    df["wave"] = (k // capacity).astype(np.int32)
    df["wave_position"] = (k % capacity).astype(np.int32)
    df["slot"] = greedy_slots(sm, start, end)
    return df


def modelled_schedule(
    launch: dict,
    arch: str,
    regs_per_thread: int,
    block_cost_ns: float | None = None,
    active_threads=None,
) -> pd.DataFrame:
    """A modelled block schedule of this launch on the named GPU (not what the simulator did).

    Resident blocks per SM come from :func:`visualizer.analysis.occupancy.occupancy` for the launch's block size and
    shared memory and ``regs_per_thread``; the GPU's SM count from ``ARCHS[arch].num_sms``. Blocks are
    handed out in blockIdx order, each to the resident slot that frees up first; slots free at the same
    time go lowest slot rank first, then lowest SM, so the first wave spreads one block per SM before
    doubling up (breadth-first, like the hardware's block distributor).

    Each block takes ``block_cost_ns x max(active, 1) / threads_per_block`` ns (rounded, at least 1), where
    ``active`` is its active thread count (``active_threads``, one value per block, e.g. from
    :func:`block_intervals` of the capture; all threads active when omitted) and ``block_cost_ns`` defaults
    to ``NOMINAL_NS_PER_THREAD x threads_per_block``. Durations do not depend on how busy the SM is: this
    shows placement, waves and the tail, not performance. Raises ValueError when the block cannot launch.
    """
    spec = get_arch(arch)
    tpb = int(launch["threads_per_block"])
    occ = occupancy(
        spec,
        tpb,
        int(regs_per_thread),
        int(launch.get("dynamic_smem_bytes") or 0),
        int(launch.get("static_smem_bytes") or 0),
    )
    if not occ.launchable:
        raise ValueError(occ.reason)
    n_blocks = int(launch["blocks"])
    if active_threads is None:
        active = np.full(n_blocks, tpb, np.int64)
    else:
        active = np.asarray(active_threads, np.int64)
        if len(active) != n_blocks:
            raise ValueError(f"active_threads has {len(active)} values for {n_blocks} blocks")
    full_cost = float(block_cost_ns) if block_cost_ns is not None else NOMINAL_NS_PER_THREAD * tpb
    duration = np.maximum(np.rint(full_cost * np.maximum(active, 1) / tpb), 1).astype(np.int64)

    slots = [(0, rank, sm) for rank in range(occ.blocks_per_sm) for sm in range(spec.num_sms)]
    heapq.heapify(slots)
    sm_of = np.empty(n_blocks, np.int32)
    start = np.empty(n_blocks, np.int64)
    for b, d in enumerate(duration.tolist()):
        t, rank, sm = heapq.heappop(slots)
        sm_of[b], start[b] = sm, t
        heapq.heappush(slots, (t + d, rank, sm))
    bx, by, bz = block_coords(np.arange(n_blocks), launch["grid"])
    df = pd.DataFrame(
        {
            "block": np.arange(n_blocks, dtype=np.int64),
            "block_x": bx.astype(np.int32),
            "block_y": by.astype(np.int32),
            "block_z": bz.astype(np.int32),
            "sm": sm_of,
            "t_start_ns": start,
            "t_end_ns": start + duration,
            "warps": np.full(n_blocks, occ.warps_per_block, np.int32),
            "threads": np.full(n_blocks, tpb, np.int32),
            "active_threads": active.astype(np.int32),
        }
    )
    df = labelled(df, modelled_source(spec.name))
    df.attrs.update(
        arch=spec.name,
        gpu=spec.label,
        num_sms=spec.num_sms,
        blocks_per_sm=occ.blocks_per_sm,
        warps_per_sm=occ.warps_per_sm,
        max_warps_per_sm=spec.max_warps_per_sm,
        occupancy_reason=occ.reason,
        block_cost_ns=full_cost,
    )
    return df


def modelled_source(arch: str) -> str:
    return f"modelled ({get_arch(arch).label}, occupancy-limited round robin)"


def modelled_warps(blocks: pd.DataFrame, warps: pd.DataFrame) -> pd.DataFrame:
    """The warps of a modelled block table: each (block, warp) of ``warps`` (e.g. the capture's
    :func:`warp_intervals`, for the warp list and active lanes) takes its block's modelled SM and interval."""
    placed = blocks.set_index("block")[["sm", "t_start_ns", "t_end_ns"]]
    df = warps.drop(columns=["sm", "t_start_ns", "t_end_ns", "source"]).join(placed, on="block")
    df = df[WARP_COLUMNS[:-1]].reset_index(drop=True)
    return labelled(df, source_of(blocks))
