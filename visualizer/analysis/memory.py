"""Tidy tables of recorded memory accesses: accesses, warp requests, hazards and summaries.

Pure pandas (no numba): built from the buffers ``record.Recorder.buffers()`` returns, or from any
DataFrame with the same columns (tests build small ones by hand).

Definitions (issue 9):

* A **warp request** is the n-th execution of one access of source line L by the lanes of one
  warp: rows with equal (block, warp, code, line, pc, occurrence). ``pc`` (the bytecode offset)
  tells apart two accesses on one line, as two instructions would be on a GPU. A 16-byte global
  access (complex128, 8-byte aligned) is two requests, its 8-byte halves, as ptxas makes two
  ``LDG.E.64`` / ``STG.E.64`` of it (issue 39; Nsight Compute counts both): the two rows share the
  key, the first half's row first. Shared memory's 16-byte access stays one (``LDS.128``).
* ``sectors``: distinct 32-byte sectors the request touches (global and local memory; arrays start
  on a 256-byte boundary, as CUDA allocations do). ``ideal_sectors``: the fewest sectors its
  distinct bytes could occupy, ceil(distinct bytes / 32).
* ``bank_ways`` (shared memory): the largest number of distinct 4-byte words that fall in one
  bank (bank = word address mod 32; each shared array starts on a 128-byte boundary). Lanes
  reading the same word are a broadcast, not a conflict; 1 = conflict-free.
* ``wavefronts`` (shared memory), as the hardware counts them (issue 23): a shared request moves at
  most 128 bytes per wavefront, so the warp is served in *phases* of ``128 / access size`` lanes
  (all 32 lanes for 1-, 2- and 4-byte accesses, lanes 0-15 and 16-31 for 8-byte ones, four
  quarter-warps for 16-byte ones). A phase takes as many wavefronts as the most distinct words any
  one bank holds within it; the request's wavefronts are the sum over its phases that have lanes.
  ``ideal_wavefronts`` is that number of phases (1, 2 or 4 for a full warp), and
  ``extra_wavefronts = wavefronts - ideal_wavefronts`` are the bank conflicts, Nsight Compute's
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_*`` (a 32-way conflicted float32 request adds
  31; a conflict-free float64 read takes 2 wavefronts and adds none).
* **Hazards** (compute-sanitizer racecheck's idea): two different threads of one block touching
  the same shared word in the same barrier epoch, at least one storing (RAW, WAR, WAW); global
  words touched by threads nothing orders (different blocks, or one block in the same epoch),
  atomics excluded. Which one came "first" is decided by each thread's own program order (its
  n-th access), never by how the simulator interleaved threads: RAW when the read is a later
  access of its thread than the write is of its thread, else WAR.
* **UNINIT** (compute-sanitizer initcheck's idea): a read of a shared word that no thread of the
  same block wrote earlier in the launch, where earlier means in an earlier barrier epoch, or
  earlier in the reading thread's own program order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from visualizer.specs.launch import ceil_div

SOURCE = "recorded addresses, simulator"
SECTOR_BYTES = 32
BANKS = 32
WORD_BYTES = 4
WIDE_PART_BYTES = 8  # a 16-byte global access moves as two 8-byte ones (see _split_wide_global)
MAX_PAIRS_PER_WORD = 8  # hazard rows kept per (word, kind); the count of all pairs is in ``pairs``

ACCESS_COLUMNS = [
    "block", "thread", "warp", "lane", "tseq", "array", "space", "op", "i0", "i1", "i2", "index",
    "offset_bytes", "bytes", "epoch", "line", "occurrence", "pc", "code",
]  # fmt: skip
REQUEST_KEY = ["block", "warp", "code", "line", "pc", "occurrence", "array", "space", "op"]
HAZARD_COLUMNS = [
    "kind", "space", "array", "index", "block", "epoch", "thread_a", "thread_b", "line_a", "line_b",
    "block_b", "epoch_b", "pairs",
]  # fmt: skip


# The recorder's codes for an access's op and space (engine/sim/access_record.py writes them).
OPS = ("load", "store", "atomic")
SPACES = ("global", "shared", "local")


def _label(df: pd.DataFrame, source: str | None = None) -> pd.DataFrame:
    df.attrs["source"] = source or SOURCE
    return df


def source_of_buffers(buffers: dict) -> str:
    """The recorder's label: the simulator's (SOURCE) unless the buffers name theirs (a GPU recording)."""
    return str(buffers.get("source") or SOURCE)


def accesses_table(buffers: dict) -> pd.DataFrame:
    """One row per recorded access, ordered by (block, thread, the thread's own sequence)."""
    rows = buffers["records"]
    cols = {name: rows[:, i] for i, name in enumerate(buffers["columns"])}
    arrays = buffers["arrays"]
    names = [a["name"] for a in arrays] or ["?"]
    aid = cols["array"].astype(np.int64)
    itemsize = np.array([a["itemsize"] for a in arrays] or [1], np.int64)[aid]
    space_of = np.array([SPACES.index(a["space"]) for a in arrays] or [0], np.int64)[aid]
    # flat C-order element index from the per-dimension indices; arrays of more than 3 dimensions
    # (attention's q, k, v, o) keep only 3 of them, so their index is the recorded element offset
    # (C order too: the recorder's arrays are contiguous); before, every o[b, h, row, col] with
    # the same b, h and row looked like one word, and attention kernels showed write races
    flat = np.zeros(len(rows), np.int64)
    ndim = np.array([len(a["shape"]) for a in arrays] or [1], np.int64)[aid]
    for k in range(3):
        dim = np.array([a["shape"][k] if len(a["shape"]) > k else 1 for a in arrays] or [1], np.int64)[aid]
        flat = np.where(k < ndim, flat * dim + cols[f"i{k}"], flat)
    flat = np.where(ndim > 3, cols["offset"].astype(np.int64), flat)
    thread = cols["thread"].astype(np.int64)
    df = pd.DataFrame(
        {
            "block": cols["block"].astype(np.int64),
            "thread": thread,
            "warp": thread // 32,
            "lane": (thread % 32).astype(np.int8),
            "tseq": cols["tseq"].astype(np.int64),
            "array": pd.Categorical(np.array(names, dtype=object)[aid]),
            "space": pd.Categorical.from_codes(space_of, categories=list(SPACES)),
            "op": pd.Categorical.from_codes(cols["op"].astype(np.int64), categories=list(OPS)),
            "i0": cols["i0"],
            "i1": cols["i1"],
            "i2": cols["i2"],
            "index": flat,
            "offset_bytes": cols["offset"].astype(np.int64) * itemsize,
            "bytes": itemsize,
            "epoch": cols["epoch"].astype(np.int64),
            "line": cols["line"].astype(np.int64),
            "occurrence": cols["occurrence"].astype(np.int64),
            "pc": cols["pc"].astype(np.int64),
            "code": cols["code"].astype(np.int64),
        }
    )
    df = df.sort_values(["block", "thread", "tseq"], kind="stable").reset_index(drop=True)
    return _label(df, source_of_buffers(buffers))


def empty_accesses() -> pd.DataFrame:
    return _label(pd.DataFrame({c: pd.Series(dtype="int64") for c in ACCESS_COLUMNS}))


def requests_table(acc: pd.DataFrame) -> pd.DataFrame:
    """One row per warp request: lanes, bytes, sectors, ideal_sectors, bank_ways, extra wavefronts."""
    cols = [
        *REQUEST_KEY, "epoch", "lanes", "bytes", "addresses", "sectors", "ideal_sectors",
        "bank_ways", "wavefronts", "ideal_wavefronts", "extra_wavefronts",
    ]  # fmt: skip
    source = acc.attrs.get("source")
    if acc.empty:
        return _label(pd.DataFrame({c: pd.Series(dtype="int64") for c in cols}), source)
    a = acc.copy()
    a["array"] = a["array"].astype(str)
    a["space"] = a["space"].astype(str)
    a["op"] = a["op"].astype(str)
    a = _split_wide_global(a)
    a["sector"] = a["offset_bytes"] // SECTOR_BYTES
    g = a.groupby([*REQUEST_KEY, "part"], sort=True, observed=True)
    req = g.agg(
        epoch=("epoch", "min"),
        lanes=("lane", "nunique"),
        bytes=("bytes", "sum"),
        itemsize=("bytes", "max"),
        addresses=("offset_bytes", "nunique"),
        sectors=("sector", "nunique"),
    ).reset_index()
    req["ideal_sectors"] = ceil_div((req["addresses"] * req["itemsize"]), SECTOR_BYTES)
    # shared memory: distinct words per bank (a word wider than 4 bytes covers consecutive banks)
    sh = a[a["space"] == "shared"]
    if len(sh):
        words = []
        for extra in range(int(sh["bytes"].max() // WORD_BYTES) or 1):
            part = sh[sh["bytes"] > extra * WORD_BYTES] if extra else sh
            w = part[REQUEST_KEY].copy()
            w["word"] = part["offset_bytes"] // WORD_BYTES + extra
            words.append(w)
        w = pd.concat(words).drop_duplicates()
        w["bank"] = w["word"] % BANKS
        ways = w.groupby([*REQUEST_KEY, "bank"], observed=True).size().groupby(level=REQUEST_KEY).max()
        ways = ways.rename("bank_ways").reset_index()
        req = req.merge(ways, on=REQUEST_KEY, how="left")
        req["bank_ways"] = req["bank_ways"].fillna(0).astype(np.int64)
        req = req.merge(_wavefronts(sh), on=REQUEST_KEY, how="left")
        for c in ("wavefronts", "ideal_wavefronts"):
            req[c] = req[c].fillna(0).astype(np.int64)
    else:
        req["bank_ways"] = 0
        req["wavefronts"] = 0
        req["ideal_wavefronts"] = 0
    shared = req["space"] == "shared"
    req.loc[shared, ["sectors", "ideal_sectors"]] = 0  # sectors are a global/local notion
    req["extra_wavefronts"] = np.where(
        shared, np.maximum(req["wavefronts"] - req["ideal_wavefronts"], 0), 0
    ).astype(np.int64)
    req = req.sort_values(["block", "warp", "line", "pc", "occurrence", "part"], kind="stable")
    req = req.drop(columns="itemsize")[cols].reset_index(drop=True)
    for c in ("space", "op"):
        req[c] = req[c].astype("category")
    return _label(req, source)


def _split_wide_global(a: pd.DataFrame) -> pd.DataFrame:
    """Each lane's 16-byte global access as the two 8-byte halves the hardware moves: numba's complex128
    is aligned to 8 bytes, so ptxas makes each such load or store two ``LDG.E.64`` / ``STG.E.64``, two
    requests (Nsight Compute counts both, and the sectors of each). ``part`` tells the halves apart (0
    for every other access); shared memory keeps one 16-byte access (``LDS.128``, served by quarter-warps)."""
    wide = (a["space"] == "global") & (a["bytes"] == 2 * WIDE_PART_BYTES)
    a = a.assign(part=0)
    if not wide.any():
        return a
    halves = a[wide].assign(bytes=WIDE_PART_BYTES)
    second = halves.assign(offset_bytes=halves["offset_bytes"] + WIDE_PART_BYTES, part=1)
    return pd.concat([a[~wide], halves, second], ignore_index=True)


def lanes_per_phase(itemsize) -> np.ndarray:
    """Lanes a shared-memory wavefront serves at once: 128 bytes' worth (32 for accesses <= 4 bytes)."""
    size = np.maximum(np.asarray(itemsize, np.int64), WORD_BYTES)
    return np.clip(BANKS * WORD_BYTES // size, 1, 32)


def _wavefronts(sh: pd.DataFrame) -> pd.DataFrame:
    """Per shared request: wavefronts (summed over its phases) and ideal_wavefronts (its phases)."""
    sh = sh.assign(phase=sh["lane"].astype(np.int64) // lanes_per_phase(sh["bytes"]))
    words = []
    for extra in range(int(sh["bytes"].max() // WORD_BYTES) or 1):
        part = sh[sh["bytes"] > extra * WORD_BYTES] if extra else sh
        w = part[[*REQUEST_KEY, "phase"]].copy()
        w["word"] = part["offset_bytes"] // WORD_BYTES + extra
        words.append(w)
    w = pd.concat(words).drop_duplicates()
    w["bank"] = w["word"] % BANKS
    per_phase = w.groupby([*REQUEST_KEY, "phase", "bank"], observed=True).size()
    per_phase = per_phase.groupby(level=[*REQUEST_KEY, "phase"]).max()
    out = per_phase.groupby(level=REQUEST_KEY).agg(["sum", "size"])
    out.columns = ["wavefronts", "ideal_wavefronts"]
    return out.reset_index()


def _thread_first(a: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (word, thread): first load and first store (sequence and line) and whether atomic."""
    loads = (
        a[a["op"] == "load"]
        .groupby([*keys, "thread"], observed=True)
        .agg(load_seq=("tseq", "min"), load_line=("line", "first"))
    )
    stores = (
        a[a["op"] == "store"]
        .groupby([*keys, "thread"], observed=True)
        .agg(store_seq=("tseq", "min"), store_line=("line", "first"))
    )
    return loads.join(stores, how="outer").reset_index()


def _group_ids(a: pd.DataFrame, b: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One integer per distinct value of ``cols``, shared by the rows of ``a`` and ``b``."""
    both = pd.concat([a[cols], b[cols]], ignore_index=True)
    ids = both.groupby(cols, sort=False, observed=True).ngroup().to_numpy(np.int64)
    return ids[: len(a)], ids[len(a) :]


def _count_after(gq, vq, gt, vt, strict: bool) -> np.ndarray:
    """For each query (group gq, value vq): the targets of its group with a value > vq (strict) or
    >= vq, by binary search in the targets sorted by (group, value): no pair is formed to count."""
    if len(gq) == 0 or len(gt) == 0:
        return np.zeros(len(gq), np.int64)
    _, rank = np.unique(np.concatenate([vq, vt]), return_inverse=True)
    scale = np.int64(rank.max() + 2)
    keys = np.sort(gt * scale + rank[len(vq) :])
    end = np.searchsorted(keys, (gq + 1) * scale, "left")
    return end - np.searchsorted(keys, gq * scale + rank[: len(vq)], "right" if strict else "left")


def _kind_pairs(a: pd.DataFrame, b: pd.DataFrame, value: str, strict: bool, epochs: bool) -> pd.DataFrame:
    """One hazard kind over whole tables: for each word, the pairs (x of ``a``, y of ``b``) of
    different threads (``who``) with y's ``value`` after x's (> when strict, else >=); with
    ``epochs`` (global memory) a pair in one block counts only within one barrier epoch. Returns
    the first MAX_PAIRS_PER_WORD pairs of each word in (who_a, who_b) order, each row with the
    word's count of all its pairs (``pairs``); the pairs are counted, not formed, so a word every
    thread touches costs no more than its rows."""
    cols = ["word", "who", "block", "thread", "epoch", "seq", "line"]
    a, b = a[cols].reset_index(drop=True), b[cols].reset_index(drop=True)
    if a.empty or b.empty:
        return pd.DataFrame(columns=[f"{c}_{s}" for c in cols for s in "ab"] + ["pairs"])
    # how many partners each x has: all of its word's, less those in its block in another epoch
    levels = [(["word"], 1)] + ([(["word", "block"], -1), (["word", "block", "epoch"], 1)] if epochs else [])
    n = np.zeros(len(a), np.int64)
    for group, sign in levels:
        ga, gb = _group_ids(a, b, group)
        n += sign * _count_after(ga, a[value].to_numpy(), gb, b[value].to_numpy(), strict)
    if value != "who":  # the thread itself, counted above when its own access is after: not a pair
        own = a.reset_index().merge(b, on=["word", "who"], suffixes=("", "_b"))
        later = own["seq_b"] > own["seq"] if strict else own["seq_b"] >= own["seq"]
        if epochs:
            later &= own["epoch_b"] == own["epoch"]
        np.subtract.at(n, own.loc[later, "index"].to_numpy(), 1)
    a["n"] = n
    a = a[a["n"] > 0].sort_values(["word", "who"], kind="stable")
    total = a.groupby("word")["n"].sum().rename("pairs")
    # only the x whose pairs come among the first MAX_PAIRS_PER_WORD of their word are paired out
    before = a.groupby("word")["n"].cumsum() - a["n"]
    first = a[before < MAX_PAIRS_PER_WORD].drop(columns="n")
    rank = first.groupby("word").cumcount().to_numpy()
    found = []
    for r in range(MAX_PAIRS_PER_WORD):  # one x per word at a time: no join is longer than ``b``
        cross = first[rank == r].merge(b, on="word", suffixes=("_a", "_b"))
        if cross.empty:
            continue
        keep = cross["who_b"] != cross["who_a"]
        keep &= (
            cross[f"{value}_b"] > cross[f"{value}_a"]
            if strict
            else cross[f"{value}_b"] >= cross[f"{value}_a"]
        )
        if epochs:
            keep &= (cross["block_a"] != cross["block_b"]) | (cross["epoch_a"] == cross["epoch_b"])
        found.append(
            cross[keep].sort_values(["word", "who_b"], kind="stable").groupby("word").head(MAX_PAIRS_PER_WORD)
        )
    if not found:
        return pd.DataFrame(columns=[f"{c}_{s}" for c in cols for s in "ab"] + ["pairs"])
    cross = pd.concat(found).sort_values(["word", "who_a", "who_b"], kind="stable")
    cross = cross.groupby("word").head(MAX_PAIRS_PER_WORD)
    return cross.join(total, on="word")


def _race_pairs(writers: pd.DataFrame, readers: pd.DataFrame, epochs: bool) -> list[tuple[str, pd.DataFrame]]:
    """RAW, WAR and WAW pairs (see ``_kind_pairs``) of per-thread first stores and first loads.

    Which came first is each thread's own program order: RAW when the read is a later access of its
    thread than the write is of its thread, else WAR; WAW between any two writers, lower thread first."""
    return [
        ("RAW", _kind_pairs(writers, readers, "seq", strict=True, epochs=epochs)),
        ("WAR", _kind_pairs(readers, writers, "seq", strict=False, epochs=epochs)),
        ("WAW", _kind_pairs(writers, writers, "who", strict=True, epochs=epochs)),
    ]


def _hazard_rows(kind: str, space: str, pairs: pd.DataFrame, words: pd.DataFrame) -> pd.DataFrame:
    """A ``_kind_pairs`` table as rows of HAZARD_COLUMNS (``words``: array and index of each word)."""
    p = pairs.join(words, on="word")
    return pd.DataFrame(
        {
            "kind": kind,
            "space": space,
            "array": p["array"],
            "index": p["index"],
            "block": p["block_a"],
            "epoch": p["epoch_a"],
            "thread_a": p["thread_a"],
            "thread_b": p["thread_b"],
            "line_a": p["line_a"],
            "line_b": p["line_b"],
            "block_b": p["block_b"],
            "epoch_b": p["epoch_b"],
            "pairs": p["pairs"],
        },
        columns=HAZARD_COLUMNS,
    )


def hazards_table(acc: pd.DataFrame) -> pd.DataFrame:
    """RAW/WAR/WAW between unordered threads, and UNINIT shared reads (see the module docstring)."""
    parts = [pd.DataFrame(columns=HAZARD_COLUMNS)]
    if not acc.empty:
        a = acc[["block", "thread", "tseq", "array", "space", "op", "index", "epoch", "line"]].copy()
        a["array"] = a["array"].astype(str)
        a["space"] = a["space"].astype(str)
        a["op"] = a["op"].astype(str)
        parts += _shared_hazards(a[a["space"] == "shared"])
        parts += _global_hazards(a[a["space"] == "global"])
        parts.append(pd.DataFrame(_uninit(a[a["space"] == "shared"]), columns=HAZARD_COLUMNS))
    df = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    for c in HAZARD_COLUMNS:
        if c not in ("kind", "space", "array"):
            df[c] = df[c].astype(np.int64)
    df = df.sort_values(
        ["space", "array", "block", "epoch", "index", "kind", "thread_a", "thread_b"], kind="stable"
    )
    df = df.reset_index(drop=True)
    for c in ("kind", "space"):
        df[c] = df[c].astype(str)
    return _label(df, acc.attrs.get("source"))


def _shared_hazards(sh: pd.DataFrame) -> list[pd.DataFrame]:
    """Shared words two threads of one block touch in one barrier epoch, one of them storing."""
    if sh.empty:
        return []
    keys = ["block", "epoch", "array", "index"]
    plain = sh[sh["op"] != "atomic"].assign(is_store=lambda d: d["op"] == "store")
    stats = plain.groupby(keys, observed=True).agg(threads=("thread", "nunique"), stores=("is_store", "sum"))
    hot = stats[(stats["threads"] > 1) & (stats["stores"] > 0)].reset_index()[keys]
    if hot.empty:
        return []
    per = _thread_first(plain.merge(hot, on=keys), keys)
    per["word"] = per.groupby(keys, sort=True, observed=True).ngroup()
    per["who"] = per["thread"]
    words = per.drop_duplicates("word").set_index("word")[["array", "index"]]

    def side(seq: str, line: str) -> pd.DataFrame:
        rows = per[per[seq].notna()]
        return rows.assign(seq=rows[seq].astype(np.int64), line=rows[line].astype(np.int64))

    pairs = _race_pairs(side("store_seq", "store_line"), side("load_seq", "load_line"), epochs=False)
    return [_hazard_rows(kind, "shared", p, words) for kind, p in pairs if len(p)]


def _global_hazards(gl: pd.DataFrame) -> list[pd.DataFrame]:
    """Global words touched by >= 2 (block, thread) with a store, by threads nothing orders."""
    if gl.empty:
        return []
    plain = gl[gl["op"] != "atomic"].copy()
    plain["who"] = plain["block"] * (1 << 20) + plain["thread"]
    keys = ["array", "index"]
    plain["is_store"] = plain["op"] == "store"
    stats = plain.groupby(keys, observed=True).agg(threads=("who", "nunique"), stores=("is_store", "sum"))
    hot = stats[(stats["threads"] > 1) & (stats["stores"] > 0)].reset_index()[keys]
    if hot.empty:
        return []
    first = (
        plain.merge(hot, on=keys)
        .groupby([*keys, "block", "thread", "op"], observed=True)
        .agg(seq=("tseq", "min"), line=("line", "first"), epoch=("epoch", "min"))
        .reset_index()
    )
    first["word"] = first.groupby(keys, sort=True, observed=True).ngroup()
    first["who"] = first["block"] * (1 << 20) + first["thread"]
    words = first.drop_duplicates("word").set_index("word")[keys]
    pairs = _race_pairs(first[first["op"] == "store"], first[first["op"] == "load"], epochs=True)
    return [_hazard_rows(kind, "global", p, words) for kind, p in pairs if len(p)]


def _uninit(sh: pd.DataFrame) -> list[dict]:
    """Shared reads (loads and atomics) of words nothing in the block wrote earlier."""
    if sh.empty:
        return []
    keys = ["block", "array", "index"]
    reads = sh[sh["op"] != "store"]
    writes = sh[sh["op"] != "load"]  # stores and atomics initialise a word
    if reads.empty:
        return []
    first_epoch = writes.groupby(keys, observed=True)["epoch"].min().rename("first_write_epoch")
    own = writes.groupby([*keys, "thread", "epoch"], observed=True)["tseq"].min().rename("own_write_seq")
    r = reads.join(first_epoch, on=keys).join(own, on=[*keys, "thread", "epoch"])
    ok = (r["first_write_epoch"] < r["epoch"]) | (r["own_write_seq"] < r["tseq"])
    bad = r[~ok.fillna(False)]
    if bad.empty:
        return []
    first = (
        bad.sort_values("tseq")
        .groupby([*keys, "thread"], observed=True)
        .agg(epoch=("epoch", "first"), line=("line", "first"), reads=("tseq", "size"))
        .reset_index()
    )
    return [
        dict(
            kind="UNINIT",
            space="shared",
            array=x["array"],
            index=x["index"],
            block=x["block"],
            epoch=x["epoch"],
            thread_a=x["thread"],
            thread_b=-1,
            line_a=x["line"],
            line_b=-1,
            block_b=-1,
            epoch_b=-1,
            pairs=x["reads"],
        )
        for x in first.to_dict("records")
    ]


# --- summaries ---------------------------------------------------------------------------------


def line_summary(req: pd.DataFrame) -> pd.DataFrame:
    """Per source line, array, space and op: requests, sectors per request, bank conflicts."""
    cols = ["line", "array", "space", "op", "requests", "lanes", "sectors", "ideal_sectors",
            "sectors_per_request", "ideal_per_request", "bank_conflicts", "max_bank_ways", "wavefronts",
            "wavefronts_per_request"]  # fmt: skip
    if req.empty:
        return _label(pd.DataFrame(columns=cols), req.attrs.get("source"))
    s = (
        req.groupby(["line", "array", "space", "op"], observed=True, sort=True)
        .agg(
            requests=("lanes", "size"),
            lanes=("lanes", "sum"),
            sectors=("sectors", "sum"),
            ideal_sectors=("ideal_sectors", "sum"),
            bank_conflicts=("extra_wavefronts", "sum"),
            max_bank_ways=("bank_ways", "max"),
            wavefronts=("wavefronts", "sum"),
        )
        .reset_index()
    )
    s["wavefronts_per_request"] = s["wavefronts"] / s["requests"]
    s["sectors_per_request"] = s["sectors"] / s["requests"]
    s["ideal_per_request"] = s["ideal_sectors"] / s["requests"]
    return _label(s[cols], req.attrs.get("source"))


def summary(req: pd.DataFrame, haz: pd.DataFrame, accesses: int, limit: int | None = None) -> dict:
    """Per-kernel totals, as Nsight Compute names them where it has a counter for them."""

    def part(space, op):
        r = req[(req["space"].astype(str) == space) & (req["op"].astype(str) == op)] if len(req) else req
        return r

    out: dict = {"source": req.attrs.get("source") or SOURCE, "accesses": int(accesses)}
    if limit is not None:
        out["record_limit"] = int(limit)
    for op, short in (("load", "ld"), ("store", "st")):
        g = part("global", op)
        out[f"global_{short}_requests"] = int(len(g))
        out[f"global_{short}_sectors"] = int(g["sectors"].sum()) if len(g) else 0
        out[f"global_{short}_ideal_sectors"] = int(g["ideal_sectors"].sum()) if len(g) else 0
        s = part("shared", op)
        out[f"shared_{short}_requests"] = int(len(s))
        out[f"shared_{short}_bank_conflicts"] = int(s["extra_wavefronts"].sum()) if len(s) else 0
        out[f"shared_{short}_wavefronts"] = int(s["wavefronts"].sum()) if len(s) else 0
    out["global_atomic_requests"] = int(len(part("global", "atomic")))
    out["shared_atomic_requests"] = int(len(part("shared", "atomic")))
    kinds = haz["kind"].value_counts().to_dict() if len(haz) else {}
    out["hazards"] = {k: int(kinds.get(k, 0)) for k in ("RAW", "WAR", "WAW", "UNINIT")}
    races = haz[haz["kind"] != "UNINIT"] if len(haz) else haz
    out["raced_words"] = (
        int(races[["space", "array", "block", "index"]].drop_duplicates().shape[0]) if len(races) else 0
    )
    out["raced_blocks"] = int(races["block"].nunique()) if len(races) else 0
    # every racing pair is counted; MAX_PAIRS_PER_WORD of each word and kind are listed as rows
    out["race_pairs"] = int(_pairs_per_word(races).sum()) if len(races) else 0
    out["race_pairs_listed"] = int(len(races))
    unin = haz[haz["kind"] == "UNINIT"] if len(haz) else haz
    out["uninit_reads"] = int(unin["pairs"].sum()) if len(unin) else 0
    return out


def _pairs_per_word(races: pd.DataFrame) -> pd.Series:
    """All racing thread pairs of each (word, kind) (a shared word is one block's, in one epoch)."""
    shared = races["space"].astype(str) == "shared"
    key = ["space", "array", "index", "kind"]
    per = [
        races[shared].groupby([*key, "block", "epoch"], observed=True)["pairs"].first(),
        races[~shared].groupby(key, observed=True)["pairs"].first(),
    ]
    return pd.concat([p for p in per if len(p)]) if any(len(p) for p in per) else pd.Series(dtype=np.int64)


def build(buffers: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """(accesses, requests, hazards, summary) from a recorder's buffers."""
    acc = accesses_table(buffers)
    req = requests_table(acc)
    haz = hazards_table(acc)
    summ = summary(req, haz, len(acc), buffers.get("limit"))
    if buffers.get("sample") is not None:  # a GPU recording: which warps recorded, what overflowed
        summ["sample"] = buffers["sample"]
    per_line = line_summary(req)
    per_line["array"] = per_line["array"].astype(str)
    summ["per_line"] = [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        for row in per_line.astype({"space": str, "op": str}).to_dict("records")
    ]
    return acc, req, haz, summ


def describe(summ: dict) -> list[str]:
    """A few lines of text for the CLI from ``summary()``."""
    lines = [f"memory accesses ({summ['source']}): {summ['accesses']} recorded"]
    if summ.get("sample"):  # a GPU recording: which warps, and what did not fit
        from visualizer.analysis.gpu_accesses import describe_sample

        lines.append(describe_sample(summ["sample"]))
    for short, op in (("ld", "loads"), ("st", "stores")):
        req = summ[f"global_{short}_requests"]
        if req:
            sec = summ[f"global_{short}_sectors"]
            lines.append(
                f"global {op}: {req} requests, {sec} sectors ({sec / req:.1f} per request, "
                f"ideal {summ[f'global_{short}_ideal_sectors'] / req:.1f})"
            )
        sreq = summ[f"shared_{short}_requests"]
        if sreq:
            waves = summ.get(f"shared_{short}_wavefronts")
            lines.append(
                f"shared {op}: {sreq} requests"
                + (f", {waves} wavefronts ({waves / sreq:.1f} per request)" if waves is not None else "")
                + f", {summ[f'shared_{short}_bank_conflicts']} bank conflicts"
            )
    h = summ["hazards"]
    lines.append(
        f"hazards: RAW {h['RAW']}, WAR {h['WAR']}, WAW {h['WAW']} ({summ['raced_words']} raced words in "
        f"{summ['raced_blocks']} blocks"
        + (
            f"; {summ['race_pairs']:,} racing thread pairs, {summ['race_pairs_listed']:,} listed: at most "
            f"{MAX_PAIRS_PER_WORD} per word and kind"
            if summ.get("race_pairs", 0) > summ.get("race_pairs_listed", 0)
            else ""
        )
        + f"); uninitialised shared reads: {summ['uninit_reads']}"
    )
    return lines


# --- one request, the worst request, the raced pairs: what the Memory access page picks to draw


def request_accesses(acc: pd.DataFrame, request: pd.Series) -> pd.DataFrame:
    """The lanes' accesses that make up one warp request (a row of the requests table)."""
    mask = np.ones(len(acc), bool)
    for k in REQUEST_KEY:
        mask &= (acc[k].astype(str) if k in ("array", "space", "op") else acc[k]).to_numpy() == (
            str(request[k]) if k in ("array", "space", "op") else request[k]
        )
    return acc[mask].sort_values("lane")


def worst_request(req: pd.DataFrame, line: int | None = None, array: str | None = None) -> pd.Series:
    """The request with the most sectors (global) or bank ways (shared), first in table order on ties."""
    r = req
    if line is not None:
        r = r[r["line"] == line]
    if array is not None:
        r = r[r["array"].astype(str) == array]
    if r.empty:
        raise ValueError("no warp request matches")
    score = np.where(r["space"].astype(str) == "shared", r["bank_ways"], r["sectors"] - r["ideal_sectors"])
    return r.iloc[int(np.argmax(score))]


def race_pairs(haz: pd.DataFrame, limit: int = 200) -> pd.DataFrame:
    """The raced words and thread pairs as a small readable table."""
    races = haz[haz["kind"] != "UNINIT"].head(limit)
    return pd.DataFrame(
        {
            "block": races["block"],
            "word": races["array"] + "[" + races["index"].astype(str) + "]",
            "kind": races["kind"],
            "first": "t" + races["thread_a"].astype(str) + " line " + races["line_a"].astype(str),
            "then": "t" + races["thread_b"].astype(str) + " line " + races["line_b"].astype(str),
            "barrier epoch": races["epoch"],
            "pairs on the word": races["pairs"],  # of this kind; at most MAX_PAIRS_PER_WORD are rows
        }
    ).reset_index(drop=True)


def global_writers(acc: pd.DataFrame) -> int:
    """Threads that stored to, or atomically updated, a global array: (block, thread) pairs."""
    if acc is None or not len(acc):
        return 0
    sel = acc[(acc["space"].astype(str) == "global") & acc["op"].astype(str).isin(["store", "atomic"])]
    return int(sel[["block", "thread"]].drop_duplicates().shape[0])
