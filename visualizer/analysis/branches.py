"""The SIMT lens: which lanes of each warp reached each branch of the source and which took it, and
how long each warp waited at each barrier. Pure pandas/numpy.

A **branch** is a site of the kernel's source the instrumenter records (engine/instrument/branches.py):
the test of an ``if``/``elif``, of a ``while``, of a ``for`` over ``range()`` (once per iteration, the
last failing test included), or the top of the body of another ``for`` (kind ``for-body``: its
iterations only). A ``for`` over a constant ``range()`` (kind ``for-const``) is no branch of the
table: every lane runs it the same number of times, so it cannot diverge. A **visit** is one evaluation of that test by a warp: ``active`` lanes evaluated it
together, ``taken`` of them went into the body (the others to the ``else``, or out of the loop).

Where the visits come from:

* GPU (measured): the lowest lane evaluating the test writes ``(site, activemask(), ballot(cond))``
  for its warp; the warp's n-th record of a site is its visit n.
* Simulator (modelled from simulated per-lane decisions): the simulator runs each thread alone, so it
  records each lane's own decisions, and a warp's visit is formed the way a GPU's structured SIMT
  execution forms it: lanes that diverge at a branch reconverge where the branch ends, so two lanes
  of one warp evaluate a test together iff they reach it in the same iteration of every enclosing
  loop. A lane's iteration of a loop is how many times it has evaluated that loop's test since it
  (re)entered the loop; a lane that left (``break``, ``return``, a failing test) is not there.

**Branch efficiency** is Nsight Compute's ``smsp__sass_average_branch_targets_threads_uniform.pct``
applied to the source's branches: the share of warp-level visits in which every active lane went the
same way (uniform), in percent. ncu counts SASS branch instructions, so where the compiler predicates
a short ``if`` (no branch) or adds branches of its own, its number differs from the source's.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from visualizer.analysis.provenance import MEASURED_GPU, labelled, modelled

# the buffers' names: the parameters engine/instrument/branches.py's passes append to a kernel
BRANCH_LOG, BRANCH_COUNT, BAR_LOG, BAR_COUNT = "_vz_br", "_vz_brn", "_vz_bar", "_vz_barn"
ROW_COLUMNS = [
    "block",
    "warp",
    "site",
    "line",
    "kind",
    "visit",
    "active",
    "taken",
    "active_mask",
    "taken_mask",
]
SIM_SOURCE = modelled("structured SIMT reconvergence over simulated lane decisions")
LOOP_KINDS = ("while", "for", "for-body", "for-const")
UNCOUNTED = ("for-body",)  # no exit test recorded: left out of the efficiency
# a loop over a constant range: the same trip count in every lane (it cannot diverge), unrolled by the
# compiler; the simulator records it to tell the inner branches' iterations apart, a GPU does not probe
# it; its visits are dropped from the table on both
NOT_SHOWN = ("for-const",)


def sites_table(sites: list[dict], source_lines: list[str] | None = None) -> pd.DataFrame:
    """The branch sites: site, line, kind, loops (enclosing loop sites), text (the branch as written,
    from the pass; else the source line, when given)."""
    df = pd.DataFrame(sites, columns=["site", "line", "kind", "loops", "text"])
    if source_lines is not None:
        df["text"] = [
            source_lines[line - 1].strip() if 0 < line <= len(source_lines) else "" for line in df["line"]
        ]
    df["text"] = [t if isinstance(t, str) else "" for t in df["text"]]
    return df


def _popcount(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.uint64)
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1).astype(np.int64)


def _frame(records: list[tuple], sites: list[dict], source: str) -> pd.DataFrame:
    by_site = {s["site"]: s for s in sites}
    df = pd.DataFrame(records, columns=["block", "warp", "site", "visit", "active_mask", "taken_mask"])
    df = df.astype({c: np.int64 for c in df.columns})
    df["line"] = df["site"].map(lambda s: by_site[s]["line"]).astype(np.int64)
    df["kind"] = df["site"].map(lambda s: by_site[s]["kind"]).astype(str)
    df["active"] = _popcount(df["active_mask"].to_numpy()) if len(df) else np.zeros(0, np.int64)
    df["taken"] = _popcount(df["taken_mask"].to_numpy()) if len(df) else np.zeros(0, np.int64)
    df = df[~df["kind"].isin(NOT_SHOWN)]
    df = df[ROW_COLUMNS].sort_values(["block", "warp", "site", "visit"], kind="stable").reset_index(drop=True)
    return labelled(df, source)


def _lane_keys(codes: list[int], loops: dict, is_loop: dict) -> list:
    """One lane's decisions (site * 2 + taken) -> the (site, iterations of its enclosing loops) of each,
    None for a code of no site (a damaged buffer: skipped, as on the GPU)."""
    stack: list[list[int]] = []  # [loop site, iteration] of the loops this lane is in
    keys: list = []
    for code in codes:
        site = code >> 1
        if site not in loops:
            keys.append(None)
            continue
        path = loops[site] + ([site] if is_loop[site] else [])
        keep = 0
        while keep < len(stack) and keep < len(path) and stack[keep][0] == path[keep]:
            keep += 1
        del stack[keep:]
        if is_loop[site]:
            if len(stack) == len(path):
                stack[-1][1] += 1  # the loop's next test
            else:
                stack.append([site, 0])  # (re)entered the loop
        keys.append((site, tuple(it for _, it in stack)))
    return keys


def rows_from_lanes(
    log: np.ndarray, count: np.ndarray, sites: list[dict], threads_per_block: int
) -> pd.DataFrame:
    """Simulator: per-thread decision logs (``site * 2 + taken``, int32 (threads, records)) -> warp visits.

    A visit is (block, warp, site, the iterations of the loops around it); a lane's visits follow from
    its sequence of sites alone, so each distinct sequence is walked once (in Python) and the lanes that
    share it are combined with numpy (a 1M-thread tiled matmul: 16.7M decisions, ~1 lane walk)."""
    loops = {s["site"]: list(s["loops"]) for s in sites}
    is_loop = {s["site"]: s["kind"] in LOOP_KINDS for s in sites}
    log = np.asarray(log)
    n = np.minimum(np.asarray(count, np.int64), log.shape[1])
    key_ids: dict = {}  # (site, iterations) -> id
    parts = []  # (thread, key id, took) of every decision
    # the lanes' sequences of sites (past a lane's count: -1), grouped in numpy (1M lanes: no Python loop)
    site_codes = np.where(np.arange(log.shape[1])[None, :] < n[:, None], log.astype(np.int64) >> 1, -1)
    rows = np.ascontiguousarray(site_codes).view(np.dtype((np.void, 8 * log.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(inverse.ravel()))[:-1])
    for g, threads in enumerate(groups if log.size else []):
        length = int(n[first[g]])
        threads = threads.astype(np.int64)
        keys = _lane_keys(log[threads[0], :length].tolist(), loops, is_loop)
        cols = [j for j, k in enumerate(keys) if k is not None]
        if not cols:
            continue
        ids = np.array([key_ids.setdefault(keys[j], len(key_ids)) for j in cols], np.int64)
        uniq, col_key = np.unique(ids, return_inverse=True)  # a key twice in a sequence: its took OR'ed
        vals = (log[threads][:, cols] & 1).astype(np.int64)
        took = np.zeros((len(threads), len(uniq)), np.int64)
        for c, kk in enumerate(col_key.ravel().tolist()):
            np.maximum(took[:, kk], vals[:, c], out=took[:, kk])
        parts.append((np.repeat(threads, len(uniq)), np.tile(uniq, len(threads)), took.ravel()))
    records = []
    if parts:
        t = np.concatenate([p[0] for p in parts])
        k = np.concatenate([p[1] for p in parts])
        took = np.concatenate([p[2] for p in parts])
        wpb = (threads_per_block + 31) // 32
        block, thread = np.divmod(t, threads_per_block)
        warp, lane = np.divmod(thread, 32)
        # one (warp, key) per visit; its lanes' bits are distinct, so their sum is their OR (exact in float64)
        combo, inv = np.unique((block * wpb + warp) * len(key_ids) + k, return_inverse=True)
        bit = np.left_shift(np.int64(1), lane).astype(np.float64)
        active = np.bincount(inv.ravel(), weights=bit, minlength=len(combo)).astype(np.int64)
        taken = np.bincount(inv.ravel(), weights=bit * took, minlength=len(combo)).astype(np.int64)
        gw, key = np.divmod(combo, len(key_ids))
        v = pd.DataFrame({"block": gw // wpb, "warp": gw % wpb, "key": key, "active_bits": active,
                          "taken_bits": taken})  # fmt: skip
        keys = list(key_ids)
        order = {key_ids[key]: rank for rank, key in enumerate(sorted(keys))}  # a warp's order of them
        v["site"] = [keys[i][0] for i in v["key"].tolist()]
        v["rank"] = v["key"].map(order)
        v = v.sort_values(["block", "warp", "rank"], kind="stable")
        v["visit"] = v.groupby(["block", "warp", "site"], sort=False).cumcount()
        records = list(zip(v["block"].tolist(), v["warp"].tolist(), v["site"].tolist(), v["visit"].tolist(),
                           v["active_bits"].tolist(), v["taken_bits"].tolist(), strict=True))  # fmt: skip
    df = _frame(records, sites, SIM_SOURCE)
    df.attrs["truncated"] = int((np.asarray(count) > log.shape[1]).sum())
    df.attrs["decisions_made"] = int(np.asarray(count, np.int64).sum())  # lane decisions, also those cut
    return df


def rows_from_warps(
    log: np.ndarray, count: np.ndarray, sites: list[dict], threads_per_block: int
) -> pd.DataFrame:
    """GPU: per-warp records ``(site, activemask, ballot)`` (int64 (warps, records, 3)) -> warp visits."""
    wpb = (threads_per_block + 31) // 32
    n = np.minimum(np.asarray(count, np.int64), log.shape[1])
    keep = np.arange(log.shape[1])[None, :] < n[:, None]
    w, _ = np.nonzero(keep)
    rec = log[keep].reshape(-1, 3).astype(np.int64)  # int32 records: the masks as unsigned below
    known = {int(s["site"]) for s in sites}
    ok = np.isin(rec[:, 0], list(known))  # a record of no site (a damaged buffer) is dropped
    w, rec = w[ok], rec[ok]
    df = pd.DataFrame({"w": w, "site": rec[:, 0]})
    visit = df.groupby(["w", "site"], sort=False).cumcount().to_numpy()
    records = zip(
        (w // wpb).tolist(), (w % wpb).tolist(), rec[:, 0].tolist(), visit.tolist(),
        (rec[:, 1] & 0xFFFFFFFF).tolist(), (rec[:, 2] & 0xFFFFFFFF).tolist(), strict=True,
    )  # fmt: skip
    df = _frame(list(records), sites, MEASURED_GPU)
    df.attrs["truncated"] = int((np.asarray(count) > log.shape[1]).sum())
    df.attrs["visits_made"] = int(np.asarray(count, np.int64).sum())  # every visit, also those past the row
    return df


def rows(simulator: bool, log: np.ndarray, count: np.ndarray, sites: list[dict], threads_per_block: int):
    """branches.parquet's rows from either backend's probe buffers."""
    fn = rows_from_lanes if simulator else rows_from_warps
    return fn(np.asarray(log), np.asarray(count), sites, threads_per_block)


def from_capture(launch: dict, bufs: dict, t0: int | None = None) -> tuple:
    """(branches or None, barriers or None, {"branches": summary, "barriers": summary} for launch.json)
    of a capture whose request asked for the SIMT lens (``launch["lens"]``: each pass's sites; ``bufs``:
    their buffers)."""
    lens, tpb = launch["lens"], int(launch["threads_per_block"])
    simulator = launch["backend"] != "gpu"
    rows = bars = None
    out: dict = {}
    if "branches" in lens:
        rows = globals()["rows"](
            simulator, bufs[BRANCH_LOG], bufs[BRANCH_COUNT], lens["branches"]["sites"], tpb
        )
        out["branches"] = {**summary(rows), "not_recorded": list(lens["branches"].get("not_recorded", []))}
    if not simulator and "barriers" in lens:
        bars = barrier_rows(bufs[BAR_LOG], bufs[BAR_COUNT], lens["barriers"]["sites"], tpb, t0)
        out["barriers"] = barrier_summary(bars)
    return rows, bars, out


def barrier_summary(bars: pd.DataFrame) -> dict:
    """launch.json's "barriers": arrivals timed, the median and longest wait (ns), the log cut."""
    return {
        "arrivals": int(len(bars)),
        "sites": int(bars["site"].nunique()) if len(bars) else 0,
        "wait_ns_median": float(bars["wait_ns"].median()) if len(bars) else None,
        "wait_ns_max": int(bars["wait_ns"].max()) if len(bars) else None,
        "truncated": int(bars.attrs.get("truncated", 0)),
        "source": bars.attrs.get("source", MEASURED_GPU),
    }


def describe(summary_: dict) -> list[str]:
    """launch.json's "branches" in a line or two (the CLI prints them)."""
    eff = summary_.get("efficiency")
    if eff is None:
        return ["branches: the kernel has no branch the SIMT lens records"]
    lines = [
        f"branch efficiency {eff:.1f}% ({summary_['divergent_visits']:,} of {summary_['visits']:,} warp visits "
        f"divergent; {summary_['divergent_warps']:,} of {summary_['warps']:,} warps diverged at least once) "
        f"[{summary_.get('source', '')}]"
    ]
    if summary_.get("truncated"):
        lines.append(f"branches: {cut_words(summary_)}")
    return lines


def describe_barriers(summary_: dict) -> list[str]:
    if not summary_["arrivals"]:
        return ["barriers: no syncthreads reached"]
    return [
        f"barriers: {summary_['arrivals']:,} warp arrivals timed at {summary_['sites']} syncthreads; wait median "
        f"{summary_['wait_ns_median']:,.0f} ns, longest {summary_['wait_ns_max']:,} ns [{summary_['source']}]"
    ]


def divergent(rows: pd.DataFrame) -> pd.Series:
    return (rows["taken"] > 0) & (rows["taken"] < rows["active"])


def counted(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~rows["kind"].isin(UNCOUNTED)]


def efficiency(rows: pd.DataFrame) -> float | None:
    """Branch efficiency in percent: uniform visits / all visits (ncu's definition); None with no branch."""
    c = counted(rows)
    if not len(c):
        return None
    return float(100.0 * (~divergent(c)).sum() / len(c))


def summary(rows: pd.DataFrame) -> dict:
    """launch.json's "branches": efficiency, warps with at least one divergent visit, and the counts."""
    c = counted(rows)
    div = divergent(c)
    warps = rows[["block", "warp"]].drop_duplicates()
    return {
        "efficiency": None if efficiency(rows) is None else round(efficiency(rows), 3),
        "divergent_warps": int(len(c[div][["block", "warp"]].drop_duplicates())),
        "warps": int(len(warps)),
        "visits": int(len(c)),
        "divergent_visits": int(div.sum()),
        "sites": int(rows["site"].nunique()),
        "truncated": int(rows.attrs.get("truncated", 0)),
        "source": rows.attrs.get("source", ""),
        **cut_log(rows),
    }


def cut_log(rows: pd.DataFrame) -> dict:
    """Where the log was cut, how much of it the numbers stand on: ``recorded`` of ``made`` (warp visits
    on a GPU, lane decisions on the simulator); {} when nothing was cut. The efficiency of a cut log is
    that of the visits kept (each warp's first ones), which need not be the whole launch's."""
    if not rows.attrs.get("truncated"):
        return {}
    if "visits_made" in rows.attrs:
        return {"recorded": int(len(rows)), "made": int(rows.attrs["visits_made"]), "of": "warp visits"}
    made = int(rows.attrs.get("decisions_made", 0))
    return {"recorded": None, "made": made, "of": "lane decisions"}


def cut_words(summary_: dict) -> str:
    """The cut log in words, for every place an efficiency of it is shown ('' when not cut)."""
    if not summary_.get("truncated"):
        return ""
    if summary_.get("recorded") is not None:  # a GPU: each warp's first visits
        kept = (
            f"the {summary_['recorded']:,} recorded of {summary_['made']:,} warp visits (each warp's first)"
        )
        who = "warps"
    else:  # the simulator: each thread's first decisions, formed into visits
        kept = f"each thread's first decisions ({summary_.get('made', 0):,} were made)"
        who = "threads"
    return f"the log was cut for {summary_['truncated']:,} {who}: these numbers are over {kept}, not the whole launch"


def per_warp(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (block, warp): visits, divergent visits, branch efficiency, and the mean share of the warp's
    lanes active at its visits (how much of the warp did work while it branched)."""
    c = counted(rows).assign(div=lambda d: divergent(d))
    g = c.groupby(["block", "warp"], sort=True)
    out = pd.DataFrame(
        {
            "visits": g.size(),
            "divergent": g["div"].sum().astype(np.int64),
            "mean_active": g["active"].mean(),
        }
    ).reset_index()
    out["efficiency"] = 100.0 * (out["visits"] - out["divergent"]) / out["visits"]
    return labelled(out, rows.attrs.get("source", ""))


JUMPS = r"^(BRA|BRX|JMP|JMX)\b"  # SASS opcodes that jump (EXIT, RET and CALL are not what ncu counts here)


def sass_branches(sass: pd.DataFrame, same_file: pd.Series, conditional: bool = False) -> dict[int, int]:
    """Jump instructions per source line in a build's SASS (analysis/asm.sass_table, in address order;
    ``same_file``: its rows of the kernel's file), leaving out the jump-to-itself the compiler puts
    after the last EXIT; ``conditional``: only the predicated ones (``@P0 BRA``: a jump some lanes may
    take and others not). A branch line with none was predicated or its loop unrolled: no lane jumps
    there, and Nsight Compute counts no branch there."""
    jump = sass["opcode"].astype(str).str.match(JUMPS)
    text = sass["text"].astype(str).str.strip()
    after_exit = text.shift(1).eq("EXIT") & ~text.str.startswith("@")
    keep = same_file & jump & ~after_exit
    if conditional:
        keep &= text.str.startswith("@")
    rows = sass[keep]
    return {int(k): int(v) for k, v in rows.groupby("line").size().items()}


def jumps_of(compiled: dict) -> tuple[dict[int, int], dict[int, int]]:
    """(Every jump, the conditional ones) per source line of a compile reply (engine/ptx: its ``sass``
    text and the kernel's ``filename``): ``sass_branches`` over one parse of the SASS."""
    from visualizer.analysis import asm

    sass = asm.sass_table(compiled["sass"])
    same = asm.same_file(sass["file"], compiled["filename"])
    return sass_branches(sass, same), sass_branches(sass, same, conditional=True)


_LABEL = re.compile(r"^\s*(\.L_x_\d+):")  # nvdisasm's label lines, before the instruction they name
_ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_REMAINDER_MASK = re.compile(r"LOP3\.LUT\s+\S+,\s*\S+,\s*0x([0-9a-f]+),\s*RZ,\s*0xc0\b")


def _jump_targets(sass_text: str) -> dict[int, int]:
    """Address of each jump -> address of the instruction its label names (nvdisasm's SASS text)."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    jumps: list[tuple[int, str]] = []
    for raw in sass_text.splitlines():
        m = _LABEL.match(raw)
        if m:
            pending.append(m.group(1))
            continue
        a = _ADDRESS.search(raw)
        if not a:
            continue
        address = int(a.group(1), 16)
        for name in pending:
            labels[name] = address
        pending = []
        t = _TARGET.search(raw)
        if t:
            jumps.append((address, t.group(1)))
    return {a: labels[name] for a, name in jumps if name in labels}


def unrolled_loops(compiled: dict) -> dict[int, int]:
    """Source lines whose counted loop ptxas unrolled by U with a remainder loop: line -> U.

    Recognised from the clean build's SASS (a compile reply: ``sass``, ``filename``): the line's
    conditional jumps, in address order, are exactly the shape LLVM's runtime unrolling gives a loop of a
    trip count t known at entry, ``for k in range(t)``: a guard that skips the loop (t == 0), a jump over
    the unrolled loop (t < U), the unrolled loop's back edge, a jump over the remainder loop
    (t % U == 0) and the remainder loop's back edge. U is how many copies of the body the unrolled loop
    holds over the remainder loop's one (instructions of the other lines of the file in each), or else
    the remainder mask ``t & (U - 1)``. Any other shape is not listed (its jumps are not modelled)."""
    from visualizer.analysis import asm

    text = compiled.get("sass") or ""
    sass = asm.sass_table(text)
    if sass.empty:
        return {}
    same = asm.same_file(sass["file"], compiled["filename"])
    targets = _jump_targets(text)
    is_jump = sass["opcode"].astype(str).str.match(JUMPS) & sass["text"].astype(str).str.startswith("@")
    out = {}
    for line, group in sass[same & is_jump].groupby("line"):
        at = sorted(int(a) for a in group["address"])
        if len(at) != 5 or any(a not in targets for a in at):
            continue
        to = [targets[a] for a in at]
        guard, over_main, main_back, over_rest, rest_back = zip(at, to, strict=True)
        shape = (
            guard[1] > rest_back[0]  # the guard skips everything
            and main_back[1] <= main_back[0] and rest_back[1] <= rest_back[0]  # two back edges
            and main_back[0] < over_main[1] <= over_rest[0]  # past the unrolled loop, before the rest
            and rest_back[0] < over_rest[1]  # past the remainder loop
        )  # fmt: skip
        if not shape:
            continue
        body = same & (sass["line"] != line) & (sass["line"] > 0)
        addr = sass["address"]
        in_main = int((body & (addr >= main_back[1]) & (addr < main_back[0])).sum())
        in_rest = int((body & (addr >= rest_back[1]) & (addr < rest_back[0])).sum())
        unroll = in_main // in_rest if in_rest and in_main % in_rest == 0 else 0
        if unroll < 2:
            mask = [
                int(m.group(1), 16) + 1
                for t in sass[same & (sass["line"] == line)]["text"].astype(str)
                if (m := _REMAINDER_MASK.search(t))
            ]
            unroll = next((u for u in mask if u >= 2 and u & (u - 1) == 0), 0)
        if unroll >= 2:
            out[int(line)] = unroll
    return out


def _masks(lanes: np.ndarray) -> int:
    return int(np.sum(np.left_shift(np.int64(1), lanes.astype(np.int64)))) if len(lanes) else 0


def unrolled_jumps(trips: np.ndarray, lanes: np.ndarray, unroll: int) -> list[tuple[int, int]]:
    """The (active, taken) lane masks of each conditional jump one warp executes in a loop unrolled by
    ``unroll`` with a remainder loop (the shape ``unrolled_loops`` recognises), from the trip count of
    each of its ``lanes`` that reached the loop. Lanes that leave a part wait at its end (the BSSY/BSYNC
    pair ptxas puts round it) and go on together, as on a GPU."""
    trips, lanes = np.asarray(trips, np.int64), np.asarray(lanes, np.int64)
    out = []
    if not len(lanes):
        return out
    out.append((_masks(lanes), _masks(lanes[trips == 0])))  # the guard: t == 0 skips the loop
    go = trips > 0
    if not go.any():
        return out
    t, ln = trips[go], lanes[go]
    out.append((_masks(ln), _masks(ln[t < unroll])))  # over the unrolled loop when t < U
    rounds = t // unroll
    for j in range(int(rounds.max())):  # its back edge, once per round of U iterations
        out.append((_masks(ln[rounds > j]), _masks(ln[rounds > j + 1])))
    rest = t % unroll
    out.append((_masks(ln), _masks(ln[rest == 0])))  # over the remainder loop when t % U == 0
    for j in range(int(rest.max())):  # its back edge, once per leftover iteration
        out.append((_masks(ln[rest > j]), _masks(ln[rest > j + 1])))
    return out


def _lane_sums(masks: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per group of rows (from each of ``starts``): how many of its masks have each lane's bit, (groups, 32)."""
    m = np.asarray(masks, np.int64)
    return np.stack([np.add.reduceat((m >> lane) & 1, starts) for lane in range(32)], axis=1)


def unrolled_visits(rows: pd.DataFrame, site: int, unroll: int) -> pd.DataFrame:
    """The modelled jump executions (block, warp, active, taken) of a loop site the compiler unrolled,
    from each lane's trip count: the times its bit is in the site's taken masks, however the visits
    grouped the lanes (so a GPU's visits and the simulator's give the same)."""
    mine = rows[rows["site"] == site].sort_values(["block", "warp"], kind="stable")
    recs: list[tuple[int, list]] = []
    blocks = warps = np.zeros(0, np.int64)
    if len(mine):
        warp_id = mine["block"].to_numpy(np.int64) * (1 << 20) + mine["warp"].to_numpy(np.int64)
        starts = np.flatnonzero(np.r_[True, warp_id[1:] != warp_id[:-1]])
        trips = _lane_sums(mine["taken_mask"].to_numpy(), starts)
        reached = _lane_sums(mine["active_mask"].to_numpy(), starts) > 0
        blocks, warps = mine["block"].to_numpy()[starts], mine["warp"].to_numpy()[starts]
        seen: dict[bytes, list] = {}  # warps alike (most of a regular kernel's) are modelled once
        for k in range(len(starts)):
            lanes = np.flatnonzero(reached[k])
            key = reached[k].tobytes() + trips[k].tobytes()
            if key not in seen:
                seen[key] = unrolled_jumps(trips[k][lanes], lanes, unroll)
            recs.append((k, seen[key]))
    at = np.repeat(np.array([k for k, _ in recs], np.int64), [len(jumps) for _, jumps in recs])
    masks = np.array([m for _, jumps in recs for m in jumps], np.int64).reshape(-1, 2)
    df = pd.DataFrame(
        {"block": blocks[at], "warp": warps[at], "active_mask": masks[:, 0], "taken_mask": masks[:, 1]}
    )
    df["active"] = _popcount(df["active_mask"].to_numpy()) if len(df) else np.zeros(0, np.int64)
    df["taken"] = _popcount(df["taken_mask"].to_numpy()) if len(df) else np.zeros(0, np.int64)
    return df


def as_ncu_counts(
    rows: pd.DataFrame,
    conditional_jumps: dict[int, int],
    unrolled: dict[int, int] | None = None,
    sites: list[dict] | None = None,
) -> dict:
    """Branch efficiency as Nsight Compute counts it, from the lens's visits and the clean build's SASS:
    the visits of the source lines that compiled to a conditional jump (``sass_branches(...,
    conditional=True)``), each counted once, uniform ones over all. A line whose test was predicated
    (no jump) is left out, as ncu leaves it out. It is ncu's number where each such test is one jump
    executed once per visit (a loop's entry test and its back edge, an ``if`` that jumps over its
    body); a loop the compiler unrolled runs fewer jumps than the source has visits, and a loop exit
    it folded into the trip count none, so there the two still part. ``efficiency`` None: no branch
    line has a conditional jump (ncu counts no divergent branch there).

    ``unrolled`` (``unrolled_loops`` of the same SASS) and ``sites`` (the lens's): a ``for`` over
    ``range()`` outside any other loop whose line ptxas unrolled is counted as its SASS runs, the jumps
    of ``unrolled_jumps`` from each lane's trip count, in place of its source visits (``modelled``:
    line -> U)."""
    c = counted(rows)
    mine = c[c["line"].isin(list(conditional_jumps))]
    modelled_lines: dict[int, int] = {}
    parts = []
    for s in sites or []:
        line = int(s["line"])
        if s["kind"] == "for" and not s.get("loops") and line in (unrolled or {}):
            jumps = unrolled_visits(c, int(s["site"]), unrolled[line])
            mine = mine[mine["site"] != s["site"]]
            parts.append(jumps.assign(line=line))
            modelled_lines[line] = int(unrolled[line])
    cols = ["line", "active", "taken"]
    both = pd.concat([mine[cols], *[p[cols] for p in parts]], ignore_index=True) if parts else mine
    div = divergent(both)
    return {
        "efficiency": float(100.0 * (~div).sum() / len(both)) if len(both) else None,
        "visits": int(len(both)),
        "divergent_visits": int(div.sum()),
        "lines": sorted(int(x) for x in both["line"].unique()),
        "left_out": sorted(int(x) for x in set(c["line"].unique()) - set(conditional_jumps)),
        "modelled": modelled_lines,
    }


def per_line(rows: pd.DataFrame, jumps: dict[int, int] | None = None) -> pd.DataFrame:
    """Per branch line: visits over all warps, divergent visits, efficiency, lanes taken / reached;
    with ``jumps`` (sass_branches of the clean build), the jump instructions on the line."""
    c = rows.assign(div=lambda d: divergent(d))
    g = c.groupby(["site", "line", "kind"], sort=True)
    out = pd.DataFrame(
        {
            "visits": g.size(),
            "divergent": g["div"].sum().astype(np.int64),
            "active": g["active"].sum(),
            "taken": g["taken"].sum(),
        }
    ).reset_index()
    out["efficiency"] = 100.0 * (out["visits"] - out["divergent"]) / out["visits"]
    if jumps is not None:
        out["sass_jumps"] = out["line"].map(lambda line: jumps.get(int(line), 0)).astype(np.int64)
    return labelled(out, rows.attrs.get("source", ""))


# --- barriers (GPU) -------------------------------------------------------------------------------

BARRIER_COLUMNS = ["block", "warp", "site", "line", "visit", "arrive_ns", "release_ns", "wait_ns", "last"]


def barrier_rows(
    log: np.ndarray, count: np.ndarray, sites: list[dict], threads_per_block: int, t0: int | None = None
) -> pd.DataFrame:
    """Per (block, warp, barrier site, visit): %globaltimer at arrival and release (ns since ``t0``, the
    earliest arrival when not given), the wait, and ``last``: this warp arrived last (the others waited
    for it). Measured on a GPU."""
    wpb = (threads_per_block + 31) // 32
    n = np.minimum(np.asarray(count), log.shape[1])
    line = {s["site"]: s["line"] for s in sites}
    rec = []
    for w in range(log.shape[0]):
        block, warp = divmod(w, wpb)
        seen: dict[int, int] = {}
        for site, ta, tr in log[w, : n[w]].tolist():
            v = seen.get(site, 0)
            seen[site] = v + 1
            rec.append((block, warp, site, line.get(site, -1), v, ta, tr))
    df = pd.DataFrame(rec, columns=BARRIER_COLUMNS[:7]).astype(np.int64)
    df.attrs["truncated"] = int((np.asarray(count) > log.shape[1]).sum())
    if len(df):
        base = int(df["arrive_ns"].min()) if t0 is None else int(t0)
        df["arrive_ns"] -= base
        df["release_ns"] -= base
    df["wait_ns"] = df["release_ns"] - df["arrive_ns"]
    # the same barrier instance of a block: the k-th barrier this block passed (site order in time)
    df["instance"] = df.groupby(["block", "warp"]).cumcount()
    latest = df.groupby(["block", "instance"])["arrive_ns"].transform("max")
    df["last"] = df["arrive_ns"] == latest
    df.attrs["origin"] = "the first barrier arrival" if t0 is None else "the kernel's first timestamp"
    return labelled(df, MEASURED_GPU)


def barrier_segments(bars: pd.DataFrame, block: int, starts: dict | None = None) -> pd.DataFrame:
    """One block's timeline: per warp, alternating ``work`` (from the previous release, or the warp's
    start when known) and ``wait`` (arrival to release) segments, ns."""
    b = bars[bars["block"] == block].sort_values(["warp", "instance"])
    seg = []
    for warp, g in b.groupby("warp", sort=True):
        prev = None if starts is None else starts.get(int(warp))
        for r in g.itertuples(index=False):
            if prev is not None and r.arrive_ns >= prev:
                seg.append((warp, "work", prev, r.arrive_ns, r.line, r.instance, False))
            seg.append((warp, "wait", r.arrive_ns, r.release_ns, r.line, r.instance, bool(r.last)))
            prev = r.release_ns
    df = pd.DataFrame(seg, columns=["warp", "what", "start_ns", "end_ns", "line", "instance", "last"])
    df.attrs["origin"] = bars.attrs.get("origin", "the first barrier arrival")
    return labelled(df, bars.attrs.get("source", MEASURED_GPU))
