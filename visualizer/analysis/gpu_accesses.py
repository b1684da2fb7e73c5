"""A GPU recording of sampled warps' accesses, decoded into the simulator recorder's buffers.

Pure numpy. kernels/access_probes.py has each lane of a sampled warp (a *slot*) write its own
stream of accesses: site (line, array, op), barrier epoch, element size, byte offset and the mask of
the lanes that made the request with it. analysis/lane_streams.py rebuilds the warp's requests from
those streams; ``decode`` turns them into the buffers ``engine/access_record.Recorder.buffers()``
gives (one int64 row per lane access, the same columns), so ``analysis/memory.build`` and every page,
lesson and export read a GPU recording unchanged. The label is ``provenance.MEASURED_GPU_SAMPLED``:
only the sampled warps are in it.

What the columns mean here: ``tseq`` is the lane's n-th access (its own program order, as the
simulator's recorder numbers a thread's accesses), ``pc`` the instrumented site (two accesses on one
line are two sites, as two instructions are), ``occurrence`` the n-th request of this warp at this
site, ``code`` 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from visualizer.analysis import lane_streams
from visualizer.analysis.provenance import MEASURED_GPU_SAMPLED
from visualizer.specs.launch import ceil_div

COLUMNS = (
    "block",
    "thread",
    "tseq",
    "array",
    "op",
    "offset",
    "epoch",
    "line",
    "pc",
    "code",
    "occurrence",
    "i0",
    "i1",
    "i2",
)  # fmt: skip  (engine/access_record.COLUMNS: tests/engine/test_gpu_accesses.py checks they agree)
OPS = ("load", "store", "atomic")
SAMPLE_BLOCKS = 3  # default: the first, the middle and the last block
MAX_SAMPLE_BLOCKS = 64  # blocks a request may name (each warp of each gets a row of the buffers)
MAX_BUFFER_WORDS = (1 << 32) - 1  # int64 words of the record buffer (kernels/access_probes.py: uint32 index)
DEFAULT_RECORDS = 2_000_000  # lane accesses the buffers hold at most (the simulator's RECORD_LIMIT)
# ... and each lane's own share at most. What recording costs is per lane: a sampled warp records its
# accesses one after another (H200, 2026-12-02, flash_attention seq 4096, whose 3 sampled warps are
# the kernel's last: 2,048 per lane 1.79x the clean kernel, 4,096 2.02x, 20,833 4.08x; docs/benchmarks.md)
LANE_RECORDS = 2048


def linear_blocks(grid) -> int:
    return int(grid[0]) * int(grid[1]) * int(grid[2])


def default_blocks(grid) -> list[int]:
    """First, middle and last block of the grid (fewer when the grid is smaller)."""
    n = linear_blocks(grid)
    return sorted({0, n // 2, n - 1})[:SAMPLE_BLOCKS] if n else []


def parse_blocks(text: str, grid) -> list[int]:
    """``"0,17,4095"`` -> linear block numbers; ValueError (one line) for anything else or out of range."""
    n = linear_blocks(grid)
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or len(part) > 12:
            raise ValueError(f"blocks to sample: expected block numbers like 0,17,40, got {part[:20]!r}")
        b = int(part)
        if b >= n:
            raise ValueError(f"blocks to sample: block {b} is outside the grid's {n} blocks (0 to {n - 1})")
        out.append(b)
    if not out:
        raise ValueError("blocks to sample: name at least one block")
    out = sorted(set(out))
    if len(out) > MAX_SAMPLE_BLOCKS:
        raise ValueError(f"blocks to sample: {len(out)} named, at most {MAX_SAMPLE_BLOCKS}")
    return out


def plan(grid, block, blocks: list[int] | None = None, records: int = DEFAULT_RECORDS,
         lane_records: int = LANE_RECORDS) -> dict:  # fmt: skip
    """Which warps record and how many accesses each of their lanes may record: the buffers' shapes.

    Every warp of a sampled block records (shared-memory hazards need the whole block); ``cap``
    accesses per lane fit ``records`` lane accesses in all, and ``lane_records`` at most (a converged
    warp's lanes make one each per request, so ``cap`` is also its requests)."""
    blocks = default_blocks(grid) if blocks is None else sorted(set(int(b) for b in blocks))
    tpb = int(block[0]) * int(block[1]) * int(block[2])
    warps = ceil_div(tpb, 32)
    slots = [(b, w) for b in blocks for w in range(warps)]
    cap = min(int(records) // (32 * max(len(slots), 1)), int(lane_records))
    cap = max(1, min(cap, MAX_BUFFER_WORDS // (64 * max(len(slots), 1)) - 1))  # the probes index in 32 bits
    sel = np.full(linear_blocks(grid), -1, np.int32)
    for i, b in enumerate(blocks):
        sel[b] = i * warps
    return {"blocks": blocks, "warps_per_block": warps, "slots": slots, "cap": cap, "sel": sel}


def host_buffers(p: dict) -> dict[str, np.ndarray]:
    """Zeroed host copies of the three access buffers (names as the pass's parameters want them):
    each lane's access words and request words side by side (kernels/access_probes.py), its count."""
    n = len(p["slots"])
    return {
        # slot s, row k, column c at (s * (cap + 1) + k) * 64 + c; row cap: spare, the done word (kernels/access_probes.py)
        "_vz_acc": np.zeros(n * (p["cap"] + 1) * 64, np.int64),
        "_vz_acc_cnt": np.zeros((n, 32), np.uint64),
        "_vz_acc_sel": p["sel"].copy(),
    }


def _unravel(offset: np.ndarray, shape: list[int]) -> np.ndarray:
    """(n, 3) indices of the first three dimensions of C-order element offsets."""
    out = np.zeros((len(offset), 3), np.int64)
    rest = offset.copy()
    dims = list(shape) or [1]
    for k in range(len(dims) - 1, -1, -1):
        d = max(int(dims[k]), 1)
        if k < 3:
            out[:, k] = rest % d if k else rest
        rest //= d
    return out


def decode(
    bufs: dict[str, np.ndarray], p: dict, sites: list[dict], arrays: list[dict], grid, block, *, lockstep=True
) -> dict:
    """The recorder's buffers (analysis/memory.build reads them) from a GPU recording.

    ``sites``: the pass's table (line, array, op); ``arrays``: name, space, dtype, itemsize, shape
    of each array a site names (the host knows them). What a warp's lanes could not record (past a
    lane's ``cap``) is left out and ``sample`` says how much, per warp and in all; so are the records
    of a warp whose streams do not fit together (analysis/lane_streams.py), with the reason.
    ``lockstep=False``: the lanes ran one after another (the compiled simulator), so there is no warp
    order to keep (lane_streams.rebuild)."""
    cnt = bufs["_vz_acc_cnt"].astype(np.int64)
    rows = len(bufs["_vz_acc"]) // (64 * max(len(p["slots"]), 1))
    cap = rows - 1  # the last row of each slot is spare (its word 0: the done word)
    rec = bufs["_vz_acc"].reshape(len(p["slots"]), rows, 64)[:, :cap]
    names = [a["name"] for a in arrays]
    site_array = np.array([names.index(s["array"]) for s in sites] or [0], np.int64)
    site_op = np.array([OPS.index(s["op"]) for s in sites] or [0], np.int64)
    site_line = np.array([s["line"] for s in sites] or [0], np.int64)
    arrays = [dict(a) for a in arrays]
    parts = []
    overflow = []
    inconsistent = []
    for s, (blk, warp) in enumerate(p["slots"]):
        w = lane_streams.rebuild(rec[s], cnt[s], lockstep=lockstep)
        if w.inconsistent:
            inconsistent.append({"block": blk, "warp": warp, "why": w.inconsistent, "accesses": w.made})
        elif w.unrecorded:
            overflow.append({"block": blk, "warp": warp, "recorded_requests": w.requests,
                             "unrecorded_accesses": w.unrecorded})  # fmt: skip
        if not len(w.lane):
            continue
        if (w.site >= len(sites)).any():
            inconsistent.append({"block": blk, "warp": warp, "why": "a record names a site the kernel does not have",
                                 "accesses": w.made})  # fmt: skip
            continue
        aid = site_array[w.site]
        for k in np.unique(aid):
            if not arrays[k].get("itemsize"):  # a shared array whose dtype the host could not read
                seen = w.size[(aid == k) & (w.size > 0)]
                arrays[k]["itemsize"] = int(seen[0]) if len(seen) else 0
        size = np.array([max(int(a.get("itemsize") or 1), 1) for a in arrays], np.int64)[aid]
        off = w.offset // size
        rows = np.empty((len(w.lane), len(COLUMNS)), np.int64)
        rows[:, 0] = blk
        rows[:, 1] = warp * 32 + w.lane
        rows[:, 2] = w.seq
        rows[:, 3] = aid
        rows[:, 4] = site_op[w.site]
        rows[:, 5] = off
        rows[:, 6] = w.epoch
        rows[:, 7] = site_line[w.site]
        rows[:, 8] = w.site
        rows[:, 9] = 0
        rows[:, 10] = w.occurrence
        idx = np.zeros((len(w.lane), 3), np.int64)
        for k in np.unique(aid):
            m = aid == k
            idx[m] = _unravel(off[m], arrays[k].get("shape") or [])
        rows[:, 11:14] = idx
        parts.append(rows)
    records = np.concatenate(parts) if parts else np.empty((0, len(COLUMNS)), np.int64)
    unrecorded = sum(o["unrecorded_accesses"] for o in overflow)
    return {
        "records": records,
        "columns": list(COLUMNS),
        "arrays": [
            {k: a[k] for k in ("name", "space", "itemsize", "dtype", "shape")} | {"shape": list(a["shape"])}
            for a in arrays
        ],
        "codes": [{"file": "", "func": ""}],
        "limit": int(cap * 32 * len(p["slots"])),
        "grid": list(grid),
        "block": list(block),
        "source": MEASURED_GPU_SAMPLED,
        "sample": {
            "blocks": [int(b) for b in p["blocks"]],
            "warps": len(p["slots"]),
            "accesses_per_lane": int(cap),
            "overflowed_warps": len(overflow),
            "unrecorded_accesses": int(unrecorded),
            "overflow": overflow[:64],
            "inconsistent_warps": len(inconsistent),
            "inconsistent": inconsistent[:64],
        },
    }


def describe_sample(sample: dict) -> str:
    """One sentence: which warps recorded, and what did not fit (never silently a partial picture)."""
    blocks = sample["blocks"]
    shown = ", ".join(str(b) for b in blocks[:8]) + (" …" if len(blocks) > 8 else "")
    cap = sample.get("accesses_per_lane", sample.get("requests_per_warp", 0))  # (older bundles: per warp)
    where = sample.get("where") or ("the simulator" if sample.get("on") == "simulator" else "the GPU")
    text = (
        f"recorded on {where} by {sample['warps']} sampled warps (every warp of block"
        f"{'s' if len(blocks) > 1 else ''} {shown}), up to {cap:,} accesses per lane"
    )
    if sample["unrecorded_accesses"]:
        text += (
            f"; {sample['overflowed_warps']} warp(s) made more, and their last "
            f"{sample['unrecorded_accesses']:,} lane accesses are not in these tables (sample fewer blocks)"
        )
    if sample.get("inconsistent_warps"):
        first = sample["inconsistent"][0]
        text += (
            f"; {sample['inconsistent_warps']} warp(s) recorded streams that do not fit together "
            f"({first['why']}), and none of their accesses are in these tables"
        )
    return text + "."


SIDE_BY_SIDE_SOURCE = "recorded addresses, simulator vs " + MEASURED_GPU_SAMPLED


def side_by_side(sim_req: pd.DataFrame, gpu_req: pd.DataFrame, blocks) -> pd.DataFrame:
    """Per source line, array, space and op: requests and sectors (global) or wavefronts (shared) per
    request, from the simulator's requests of the sampled ``blocks`` and from the GPU's, and whether
    they agree. One launch, two recorders: they should (tests/engine/test_gpu_accesses.py)."""
    return _two(sim_req, gpu_req, blocks, blocks, ("sim", "gpu"), SIDE_BY_SIDE_SOURCE)


def sizes_side_by_side(small_req: pd.DataFrame, big_req: pd.DataFrame) -> pd.DataFrame:
    """The same per-line table for two launches of one kernel at two sizes, both recorded on the GPU
    (each by its own sampled warps): does the access pattern per request change with the size?"""
    return _two(small_req, big_req, None, None, ("small", "big"), MEASURED_GPU_SAMPLED)


def _two(a_req, b_req, a_blocks, b_blocks, sides: tuple[str, str], source: str) -> pd.DataFrame:
    key = ["line", "array", "space", "op"]

    def per_line(req: pd.DataFrame, blocks) -> pd.DataFrame:
        r = (req if blocks is None else req[req["block"].isin(list(blocks))]).copy()
        for c in ("array", "space", "op"):
            r[c] = r[c].astype(str)
        r["per"] = np.where(r["space"] == "shared", r["wavefronts"], r["sectors"])
        return r.groupby(key, sort=True).agg(requests=("per", "size"), total=("per", "sum")).reset_index()

    a, b = per_line(a_req, a_blocks), per_line(b_req, b_blocks)
    out = a.merge(b, on=key, how="outer", suffixes=tuple(f"_{x}" for x in sides)).fillna(0)
    for side in sides:
        out[f"requests_{side}"] = out[f"requests_{side}"].astype(np.int64)
        out[f"per_request_{side}"] = out[f"total_{side}"] / out[f"requests_{side}"].where(
            out[f"requests_{side}"] > 0
        )
    x, y = sides
    out["unit"] = np.where(out["space"] == "shared", "wavefronts", "sectors")
    if a_blocks is not None:  # the same launch: every count must agree
        out["agree"] = (out[f"requests_{x}"] == out[f"requests_{y}"]) & (
            out[f"total_{x}"] == out[f"total_{y}"]
        )
    else:  # two sizes: the pattern per request
        out["agree"] = out[f"per_request_{x}"] == out[f"per_request_{y}"]
    cols = [f"requests_{x}", f"requests_{y}", f"per_request_{x}", f"per_request_{y}"]
    out = out[[*key, "unit", *cols, "agree"]]
    out.attrs["source"] = source
    return out
