"""Races you can watch happen: the same launch run N times, its outputs compared cell by cell.

A capture with ``runs`` (engine/capture/pipeline.py) keeps every run's outputs stacked: ``runs[name]`` has
shape (N, *shape). These functions say how many distinct outputs the runs gave, which cells differ
(and how many values each took), each run's verdict against the reference, the sentence a teacher
wants ("right in 7 of 8 runs - and wrong in one") and which hazards of analysis/memory.py raced
where the cells differ. Values are compared bit for bit (NaN equals NaN).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from visualizer.analysis.provenance import labelled

NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _as_uint(a: np.ndarray) -> np.ndarray:
    """The runs of one array as an (N, elements) array of unsigned ints, equal where the bits are (every
    NaN made the same NaN); wider elements (complex128) as rows of bytes."""
    n = a.shape[0]
    flat = np.ascontiguousarray(a).reshape(n, -1)
    if flat.dtype.kind in "fc":
        flat = np.where(np.isnan(flat), np.array(np.nan, flat.dtype), flat)
    size = flat.dtype.itemsize
    if size in (1, 2, 4, 8):
        return np.ascontiguousarray(flat).view(f"u{size}")
    return np.ascontiguousarray(flat).view(np.uint8)


def attach(cap, runs: dict[str, np.ndarray], correct: list) -> None:
    """Put a reply's runs on its Capture: cap.runs, and launch.json's runs counted (``summary``) with
    each run's verdict against the reference (None: no reference)."""
    cap.runs = dict(runs)
    cap.launch["runs"] = {**cap.launch.get("runs", {}), **summary(cap.runs), "correct": list(correct)}


def run_arrays(runs: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Run i's outputs."""
    return {k: v[i] for k, v in runs.items()}


def outcomes(runs: dict[str, np.ndarray]) -> np.ndarray:
    """Per run, which distinct outcome (all outputs together) it gave: 0 for run 0's, then 1, 2 ... in
    order of first appearance."""
    if not runs:
        return np.zeros(0, np.int64)
    parts = [np.ascontiguousarray(_as_uint(runs[k])).view(np.uint8) for k in sorted(runs)]
    rows = np.concatenate([p.reshape(p.shape[0], -1) for p in parts], axis=1)
    seen: dict[bytes, int] = {}
    return np.array([seen.setdefault(r.tobytes(), len(seen)) for r in rows], np.int64)


def _distinct_per_cell(a: np.ndarray) -> np.ndarray:
    """For each element, how many distinct values (bit for bit) it took over the runs."""
    u = _as_uint(a)
    m = int(np.prod(a.shape[1:], dtype=np.int64))
    if a.shape[0] <= 1:
        return np.ones(m, np.int64)
    if u.shape[1] != m:  # bytes of wide elements: count per element
        cellwise = u.reshape(a.shape[0], m, -1)
        return np.array([len({r.tobytes() for r in cellwise[:, j]}) for j in range(m)], np.int64)
    srt = np.sort(u, axis=0)
    return 1 + (srt[1:] != srt[:-1]).sum(axis=0).astype(np.int64)


def summary(runs: dict[str, np.ndarray]) -> dict:
    """launch.json's runs fields: count, distinct (outcomes), differing_elements (cells not the same in
    every run, over all outputs)."""
    out = outcomes(runs)
    differing = sum(int((_distinct_per_cell(a) > 1).sum()) for a in runs.values())
    return {"count": int(len(out)), "distinct": int(out.max() + 1) if len(out) else 0,
            "differing_elements": differing}  # fmt: skip


def cells(runs: dict[str, np.ndarray], name: str, source: str) -> pd.DataFrame:
    """One row per element of output ``name``: its coordinates (row, col of a 2-D view; index flat),
    how many distinct values it took, run 0's value, the least and largest, and whether it differs."""
    a = runs[name]
    n = a.shape[0]
    shape = a.shape[1:]
    flat = a.reshape(n, -1).astype(np.float64) if a.dtype.kind in "biuf" else a.reshape(n, -1)
    index = np.arange(flat.shape[1])
    cols = shape[-1] if len(shape) >= 2 else flat.shape[1]
    distinct = _distinct_per_cell(a)
    df = pd.DataFrame(
        {
            "array": name,
            "index": index,
            "row": index // max(cols, 1),
            "col": index % max(cols, 1),
            "distinct": distinct.astype(np.int64),
            "first": flat[0] if n else np.nan,
            "low": np.nanmin(flat, axis=0) if n else np.nan,
            "high": np.nanmax(flat, axis=0) if n else np.nan,
        }
    )
    df["differs"] = df["distinct"] > 1
    return labelled(df, source)


def runs_table(
    runs: dict[str, np.ndarray], correct: list, schedules: list[dict] | None, source: str
) -> pd.DataFrame:
    """One row per run: its outcome number, each output's total (sum of its elements), whether it
    matches the reference (None: no reference), and how it was scheduled (seed, the simulator's
    stalls, the kinds of site a GPU run's seeded delays waited before)."""
    out = outcomes(runs)
    df = pd.DataFrame({"run": np.arange(len(out)), "outcome": out})
    for k in sorted(runs):
        a = runs[k]
        df[f"total_{k}"] = a.reshape(a.shape[0], -1).astype(np.float64).sum(axis=1)
    df["correct"] = pd.array(list(correct) if correct is not None else [None] * len(out), dtype="boolean")
    sch = schedules or [{} for _ in range(len(out))]
    df["seed"] = pd.array([s.get("seed") for s in sch], dtype="Int64")
    df["stalls"] = pd.array([s.get("stalls") for s in sch], dtype="Int64")
    # a GPU run's seeded delays (engine/instrument/delays.py): the kinds of site its warps waited before
    df["delays"] = [
        " and ".join(k + "s" for k in s["delay_kinds"]) if s.get("delay_kinds") else "" for s in sch
    ]
    return labelled(df, source)


def _count_word(n: int) -> str:
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else f"{n:,}"


def verdict(table: pd.DataFrame) -> str:
    """The sentence beside the strip: right in k of N runs - and wrong in the rest; or that every run
    gave the same output."""
    n = len(table)
    k = int(table["outcome"].max() + 1) if n else 0
    correct = table["correct"]
    if n == 0:
        return "No runs."
    if correct.isna().any():
        if k == 1:
            return f"All {n} runs gave the same output, bit for bit (no reference to check it against)."
        return f"The {n} runs gave {k} different outputs (no reference to say which is right)."
    right = int(correct.sum())
    wrong = n - right
    same = "the same output, bit for bit" if k == 1 else f"{k} different outputs"
    if wrong == 0:
        return f"Right in all {n} runs: {same}." if k > 1 else f"Right in all {n} runs, with {same}."
    if right == 0:
        return f"Wrong in all {n} runs, with {same}."
    tail = "and wrong in one" if wrong == 1 else f"and wrong in {_count_word(wrong)}"
    return f"Right in {right} of {n} runs — {tail} ({same})."


def race_free_sentence(summ: dict) -> str | None:
    """Said of a launch whose N runs all gave one output."""
    if summ.get("count", 0) > 1 and summ.get("distinct") == 1:
        return (
            f"All {summ['count']} runs gave one output, bit for bit: no cell differs "
            "(a race that never changed a result in these schedules is still a race: see the hazards)."
        )
    return None


def hazards_at(
    cell_table: pd.DataFrame, hazards: pd.DataFrame | None, accesses: pd.DataFrame | None
) -> pd.DataFrame:
    """The hazards behind the differing cells: for a cell of array A at index i, the hazards on A[i]
    itself (a global race), and the shared-memory hazards of the blocks whose threads stored A[i]
    (the race upstream of the store). One row per (cell, hazard)."""
    cols = ["array", "index", "row", "col", "distinct", "via", "kind", "space", "hazard_array",
            "hazard_index", "block", "thread_a", "thread_b", "line_a", "line_b"]  # fmt: skip
    src = cell_table.attrs.get("source", "")
    diff = cell_table[cell_table["differs"]]
    if hazards is None or hazards.empty or diff.empty:
        return labelled(pd.DataFrame(columns=cols), src)
    haz = hazards.rename(columns={"array": "hazard_array", "index": "hazard_index"})
    haz = haz[["kind", "space", "hazard_array", "hazard_index", "block", "thread_a", "thread_b", "line_a",
               "line_b"]].astype({"hazard_array": str, "space": str})  # fmt: skip
    parts = []
    direct = diff.merge(haz, left_on=["array", "index"], right_on=["hazard_array", "hazard_index"])
    if len(direct):
        parts.append(direct.assign(via="on the cell itself"))
    if accesses is not None and len(accesses):
        acc = accesses[["array", "op", "index", "block"]].astype({"array": str, "op": str})
        stores = acc[acc["op"].isin(["store", "atomic"])].drop_duplicates(["array", "index", "block"])
        writers = diff.merge(stores[["array", "index", "block"]], on=["array", "index"])
        shared = haz[haz["space"] == "shared"]
        up = writers.merge(shared, on="block")
        if len(up):
            parts.append(up.assign(via="in the shared memory of the block that stored it"))
    if not parts:
        return labelled(pd.DataFrame(columns=cols), src)
    out = pd.concat(parts, ignore_index=True)[cols]
    out = out.drop_duplicates().sort_values(["array", "index", "kind", "thread_a"], kind="stable")
    return labelled(out.reset_index(drop=True), src)


def hazard_summary(joined: pd.DataFrame) -> pd.DataFrame:
    """The joined hazards grouped: per (array, kind, hazard array, lines) the cells and thread pairs."""
    src = joined.attrs.get("source", "")
    if joined.empty:
        return labelled(pd.DataFrame(columns=["array", "kind", "space", "hazard_array", "line_a", "line_b",
                                              "cells", "pairs"]), src)  # fmt: skip
    g = (
        joined.groupby(["array", "kind", "space", "hazard_array", "line_a", "line_b"], sort=True)
        .agg(cells=("index", "nunique"), pairs=("thread_a", "size"))
        .reset_index()
    )
    return labelled(g, src)


def describe(runs: dict) -> list[str]:
    """A few lines of text for the CLI from launch.json's runs."""
    n, seed = runs["count"], runs.get("seed")
    # the simulator's seeded schedules: fastsim's (its steps kept) or the compiled engine's
    seeded = seed is not None and any(
        "steps" in s or s.get("engine") == "compiled" for s in runs.get("schedules") or []
    )
    how = f"seeded schedules (seed {seed}, run 0..{n - 1})" if seeded else "the backend's own schedule"
    if seed is not None and "delay_sites" in runs:
        how += f" with seeded per-warp delays (seed {seed}, run 0..{n - 1})"
    lines = [
        f"runs: {n} of the same launch in {how}: {runs['distinct']} distinct output(s), "
        f"{runs['differing_elements']} element(s) not the same in every run"
    ]
    correct = runs.get("correct") or []
    if correct and all(c is not None for c in correct):
        right = sum(bool(c) for c in correct)
        lines.append(f"right in {right} of {n} runs")
    return lines
