"""The hardware timeline as a Chrome trace (the ``traceEvents`` JSON that ui.perfetto.dev and
chrome://tracing open): one process per SM (pid = SM id + 1), one thread per block slot and per warp slot, an ``X``
(complete) event per block and per warp, times in microseconds.

Pure pandas in, a dict out. Block *slots*: blocks that ran on one SM at overlapping times get
different slots (the first free slot, in start order), so each track holds slices that never
overlap and Perfetto draws them flat. Warps go on their block's slot's warp tracks
(``slot k · warp w``), which never overlap either (two blocks in one slot never overlap).
Barrier waits are not recorded by any backend yet; no slice is invented for them.

Where the numbers come from is in ``otherData.source`` and in every event's ``args.source``: a GPU
capture's SM ids and ``%globaltimer`` times are measured; a simulator capture's are modelled.
"""

from __future__ import annotations

import heapq
import json

import numpy as np
import pandas as pd

from visualizer.analysis.provenance import source_of

WARP_TID_BASE = 1_000_000  # warp tracks' tids: base + slot * WARPS_PER_SLOT + warp
WARPS_PER_SLOT = 64  # at most 1024 threads per block: 32 warps; room to spare


def block_spans(threads: pd.DataFrame) -> pd.DataFrame:
    """One row per block: block, block_x/y/z, sm, start_ns, end_ns, threads, active (from the
    threads table; a block's span is its threads' earliest start to latest end)."""
    g = threads.groupby("block", sort=True)
    out = g.agg(
        block_x=("block_x", "first"), block_y=("block_y", "first"), block_z=("block_z", "first"),
        sm=("sm", "first"), start_ns=("t_start_ns", "min"), end_ns=("t_end_ns", "max"),
        threads=("thread", "size"), active=("active", "sum"),
    ).reset_index()  # fmt: skip
    out["slot"] = _slots(out)
    return out


def warp_spans(threads: pd.DataFrame) -> pd.DataFrame:
    """One row per (block, warp): sm, start_ns, end_ns, lanes, active lanes."""
    g = threads.groupby(["block", "warp"], sort=True)
    return g.agg(
        sm=("sm", "first"), start_ns=("t_start_ns", "min"), end_ns=("t_end_ns", "max"),
        lanes=("lane", "size"), active=("active", "sum"),
    ).reset_index()  # fmt: skip


def _slots(blocks: pd.DataFrame) -> np.ndarray:
    """Per block, the lowest slot on its SM free at its start (interval partitioning)."""
    slot = np.zeros(len(blocks), np.int64)
    order = np.lexsort((blocks["block"].to_numpy(), blocks["start_ns"].to_numpy(), blocks["sm"].to_numpy()))
    sm, start, end = (blocks[c].to_numpy() for c in ("sm", "start_ns", "end_ns"))
    busy: list[tuple[int, int]] = []  # (end, slot) of blocks running on the current SM
    free: list[int] = []
    next_slot, current = 0, None
    for i in order:
        if sm[i] != current:
            current, busy, free, next_slot = sm[i], [], [], 0
        while busy and busy[0][0] <= start[i]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        s = heapq.heappop(free) if free else next_slot
        next_slot = max(next_slot, s + 1)
        slot[i] = s
        heapq.heappush(busy, (int(end[i]), s))
    return slot


def _pid(sm) -> int:
    """SM n is process n + 1: pid 0 is the idle task in Linux traces, and some viewers hide it."""
    return int(sm) + 1


def _us(ns) -> float:
    return round(float(ns) / 1e3, 3)


def chrome_trace(cap, warps: bool = True) -> dict:
    """The capture's blocks (and warps) as a Chrome-trace dict; ``json.dumps`` it to a file."""
    threads = cap.threads
    source = source_of(threads)
    kernel = cap.launch["kernel"]
    blocks = block_spans(threads)
    events: list[dict] = []
    for sm in sorted(blocks["sm"].unique()):
        events.append(
            {"ph": "M", "name": "process_name", "pid": _pid(sm), "tid": 0, "args": {"name": f"SM {sm}"}}
        )
        events.append({"ph": "M", "name": "process_sort_index", "pid": _pid(sm), "tid": 0, "args": {"sort_index": int(sm)}})  # fmt: skip
        for s in sorted(blocks.loc[blocks["sm"] == sm, "slot"].unique()):
            events.append({"ph": "M", "name": "thread_name", "pid": _pid(sm), "tid": int(s),
                           "args": {"name": f"block slot {s}"}})  # fmt: skip
            events.append({"ph": "M", "name": "thread_sort_index", "pid": _pid(sm), "tid": int(s),
                           "args": {"sort_index": int(s) * (WARPS_PER_SLOT + 1)}})  # fmt: skip
    for b in blocks.itertuples(index=False):
        events.append({
            "ph": "X", "cat": "block", "name": f"block ({b.block_x},{b.block_y},{b.block_z})",
            "pid": _pid(b.sm), "tid": int(b.slot), "ts": _us(b.start_ns), "dur": _us(b.end_ns - b.start_ns),
            "args": {"block": int(b.block), "threads": int(b.threads), "active_threads": int(b.active),
                     "source": source},
        })  # fmt: skip
    if warps:
        w = warp_spans(threads).merge(blocks[["block", "slot"]], on="block")
        named: set[tuple[int, int]] = set()
        for r in w.itertuples(index=False):
            tid = WARP_TID_BASE + int(r.slot) * WARPS_PER_SLOT + int(r.warp)
            if (int(r.sm), tid) not in named:
                named.add((int(r.sm), tid))
                events.append({"ph": "M", "name": "thread_name", "pid": _pid(r.sm), "tid": tid,
                               "args": {"name": f"slot {r.slot} · warp {r.warp}"}})  # fmt: skip
                events.append({"ph": "M", "name": "thread_sort_index", "pid": _pid(r.sm), "tid": tid,
                               "args": {"sort_index": int(r.slot) * (WARPS_PER_SLOT + 1) + 1 + int(r.warp)}})  # fmt: skip
            events.append({
                "ph": "X", "cat": "warp", "name": f"warp {r.warp}", "pid": _pid(r.sm), "tid": tid,
                "ts": _us(r.start_ns), "dur": _us(r.end_ns - r.start_ns),
                "args": {"block": int(r.block), "warp": int(r.warp), "lanes": int(r.lanes),
                         "active_lanes": int(r.active), "source": source},
            })  # fmt: skip
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "kernel": kernel, "device": cap.launch.get("device_name", ""), "source": source,
            "recorded_per": threads.attrs.get("recorded_per", cap.launch.get("recorded_per", "thread")),
            "grid": list(cap.launch["grid"]), "block": list(cap.launch["block"]),
            "note": "ts/dur in microseconds from the kernel's first timestamp; barrier waits not recorded",
        },
    }  # fmt: skip


def chrome_trace_json(cap, warps: bool = True) -> str:
    return json.dumps(chrome_trace(cap, warps=warps), separators=(",", ":"))
