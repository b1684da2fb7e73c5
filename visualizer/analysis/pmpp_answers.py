"""Answers of the PMPP path's lessons, computed from a run's own tables (pure functions, no constants).

Recorded accesses (the simulator's exact recorder) answer the memory questions: loads per block, per
thread, per warp request. The SIMT lens (both backends: a GPU's activemask, the simulator's lane
decisions) answers the work questions: how many lanes took an add, how many times a loop ran.
"""

from __future__ import annotations

import pandas as pd

from visualizer.analysis.capture import Capture
from visualizer.analysis.lesson_answers import Answer

RECORDED = "recorded addresses, simulator"


def _accesses(cap: Capture) -> pd.DataFrame:
    if cap.accesses is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    return cap.accesses


def _of(acc: pd.DataFrame, array: str, op: str = "load", space: str = "global") -> pd.DataFrame:
    keep = (acc["array"].astype(str) == array) & (acc["op"].astype(str) == op)
    return acc[keep & (acc["space"].astype(str) == space)]


def global_loads(cap: Capture, array: str) -> Answer:
    """Global loads of ``array`` by the whole launch, and by the block that loaded the most."""
    loads = _of(_accesses(cap), array)
    per_block = loads.groupby("block", observed=True).size()
    return Answer(
        int(len(loads)),
        {"busiest_block": int(per_block.idxmax()) if len(per_block) else None,
         "busiest": int(per_block.max()) if len(per_block) else 0, "blocks": int(cap.launch["blocks"]),
         "distinct": int(loads["index"].nunique()), "threads": int(cap.launch["threads_per_block"])},
        RECORDED,
    )  # fmt: skip


def busiest_block_loads(cap: Capture, array: str) -> Answer:
    """Global loads of ``array`` by the block that loaded the most (an interior one)."""
    total = global_loads(cap, array)
    return Answer(total.facts["busiest"], {**total.facts, "total": total.value}, RECORDED)


def load_requests(cap: Capture, arrays: tuple[str, ...]) -> Answer:
    """Warp-wide global load requests of ``arrays`` (one per warp per load instruction it ran)."""
    if cap.requests is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    r = cap.requests
    keep = (r["space"].astype(str) == "global") & (r["op"].astype(str) == "load")
    keep &= r["array"].astype(str).isin(arrays)
    sel = r[keep]
    return Answer(
        int(len(sel)),
        {"sectors": int(sel["sectors"].sum()), "threads": int(cap.launch["threads"]),
         "blocks": int(cap.launch["blocks"]), "lanes": int(sel["lanes"].sum())},
        RECORDED,
    )  # fmt: skip


def sectors_per_request(cap: Capture, array: str) -> Answer:
    """Mean 32-byte sectors per warp load request of ``array`` (4 = 32 neighbouring floats)."""
    if cap.requests is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    r = cap.requests
    sel = r[(r["array"].astype(str) == array) & (r["op"].astype(str) == "load")]
    sel = sel[sel["space"].astype(str) == "global"]
    if sel.empty:
        return Answer(0, {"requests": 0, "array": array}, RECORDED)
    return Answer(
        round(float(sel["sectors"].sum() / len(sel)), 2),
        {"requests": int(len(sel)), "array": array, "bytes": int(sel["bytes"].sum()),
         "moved": int(32 * sel["sectors"].sum())},
        RECORDED,
    )  # fmt: skip


def corank_loads(cap: Capture) -> Answer:
    """The busiest thread's loads of A and B in its two co-rank searches (merge_corank).

    The searches are the loads made before the sequential merge: every line above the first line
    that stores to C less one (the merge loop's own comparison sits on the line before that store)."""
    acc = _accesses(cap)
    stores = _of(acc, "c", "store")
    if stores.empty:
        raise ValueError("no thread wrote C")
    merge_from = int(stores["line"].min()) - 1
    loads = acc[acc["array"].astype(str).isin(("a", "b")) & (acc["op"].astype(str) == "load")]
    search = loads[loads["line"] < merge_from]
    per_thread = search.groupby(["block", "thread"], observed=True).size()
    params = cap.launch["params"]
    return Answer(
        int(per_thread.max()) if len(per_thread) else 0,
        {"search_loads": int(len(search)), "loads": int(len(loads)), "per_thread": int(params["per_thread"]),
         "m": int(params["m"]), "n": int(params["n"]),
         "share": 100.0 * len(search) / len(loads) if len(loads) else 0.0,
         "threads": int(stores.groupby(["block", "thread"], observed=True).ngroups)},
        RECORDED,
    )  # fmt: skip


# --- the SIMT lens: work and steps -------------------------------------------------------------


def _branch_rows(cap: Capture) -> tuple[pd.DataFrame, pd.DataFrame]:
    from visualizer.analysis import branches

    if cap.branches is None:
        raise ValueError("this capture has no branch visits (run it with branches=True)")
    return cap.branches, branches.sites_table(cap.launch["lens"]["branches"]["sites"])


def loop_work(cap: Capture) -> Answer:
    """Additions and steps of a tree-shaped kernel (scan, reduction), from the SIMT lens.

    Steps: the times block 0's first warp ran the body of each top-level loop (taken visits of its
    test). Additions per block: lanes that took the first ``if`` inside each loop (the add), summed
    over block 0's warps."""
    rows, sites = _branch_rows(cap)
    loops = sites[sites["kind"].isin(("while", "for"))]
    adds_sites = []
    for loop in loops["site"]:
        inner = sites[
            (sites["kind"] == "if") & sites["loops"].map(lambda ls, s=loop: bool(ls) and ls[-1] == s)
        ]
        if len(inner):
            adds_sites.append(int(inner["site"].min()))
    b0 = rows[rows["block"] == 0]
    w0 = b0[b0["warp"] == b0["warp"].min()]
    steps = int(((w0["site"].isin(loops["site"])) & (w0["taken"] > 0)).sum())
    adds = int(b0[b0["site"].isin(adds_sites)]["taken"].sum())
    return Answer(
        adds,
        {"steps": steps, "adds": adds, "block": int(cap.launch["threads_per_block"]),
         "lines": sites[sites["site"].isin(adds_sites)]["text"].tolist()},
        rows.attrs.get("source", cap.source),
    )  # fmt: skip


def loop_steps(cap: Capture) -> Answer:
    work = loop_work(cap)
    return Answer(work.facts["steps"], work.facts, work.source)


def divergent_adds(cap: Capture) -> Answer:
    """Warp visits of the add branch (the first ``if`` in the loop) in block 0 with some lanes off."""
    rows, sites = _branch_rows(cap)
    work = loop_work(cap)
    add_sites = sites[sites["text"].isin(work.facts["lines"]) & (sites["kind"] == "if")]["site"]
    b0 = rows[(rows["block"] == 0) & rows["site"].isin(add_sites)]
    div = (b0["taken"] > 0) & (b0["taken"] < b0["active"])
    idle = int((b0["active"] - b0["taken"])[b0["taken"] > 0].sum())
    return Answer(
        int(div.sum()),
        {"visits": int((b0["taken"] > 0).sum()), "idle_lanes": idle, "warps": int(b0["warp"].nunique())},
        rows.attrs.get("source", cap.source),
    )  # fmt: skip


def shared_bytes(cap: Capture) -> Answer:
    """Shared memory one block declares (the launch's static shared bytes)."""
    nbytes = int(cap.launch.get("static_smem_bytes") or 0) + int(cap.launch.get("dynamic_smem_bytes") or 0)
    engine = {"engine": cap.launch.get("sim_engine"), "engine_note": cap.launch.get("sim_engine_note")}
    return Answer(nbytes, {"threads": int(cap.launch["threads_per_block"]), **engine}, cap.source)


def launched_threads(cap: Capture) -> Answer:
    """Threads and blocks the launch ran (the capture's recorded grid)."""
    return Answer(
        int(cap.launch["threads"]), {"blocks": int(cap.launch["blocks"]), "n": int(cap.launch["params"]["n"])},
        cap.source,
    )  # fmt: skip


def bytes_used(cap: Capture, array: str) -> Answer:
    """Percent of the bytes the warp load requests of ``array`` moved (32-byte sectors) that a lane used."""
    spr = sectors_per_request(cap, array)
    moved = spr.facts.get("moved", 0)
    return Answer(round(100.0 * spr.facts["bytes"] / moved, 1) if moved else 0.0, spr.facts, RECORDED)
