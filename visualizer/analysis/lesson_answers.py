"""Lesson answers, computed from a run's own capture (pure functions: no Streamlit, no constants).

Each function takes the Capture(s) a lesson ran (plus the lesson's modelling choices: a GPU model,
registers per thread) and returns the number or choice the learner is asked to predict, together
with the figures the explanation quotes. Nothing here is a hard-coded answer: change the launch and
the answer follows the recorded tables.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from visualizer.analysis.capture import Capture
from visualizer.analysis.occupancy import ARCHS, WARP_SIZE, occupancy
from visualizer.analysis.transfers import flow_model, modelled_gpu_timing

# The GPU models the lessons offer (their occupancy calculator arch); same names as the other pages.
GPU_ARCHS = {"H200": "sm_90", "A100": "sm_80", "RTX 4090": "sm_89", "RTX 3090": "sm_86", "T4": "sm_75"}


@dataclass
class Answer:
    """What a question's answer is, and the numbers behind it (for the explanation)."""

    value: float | int | str
    facts: dict = field(default_factory=dict)
    source: str = ""  # measured / simulated / modelled, as every chart says


# --- threads, blocks, warps -----------------------------------------------------------------


def warps_per_block(cap: Capture) -> Answer:
    """Warps of the largest block, counted from the threads table (its warp column)."""
    per_block = cap.threads.groupby("block", observed=True)["warp"].nunique()
    tpb = int(cap.launch["threads_per_block"])
    return Answer(int(per_block.max()), {"threads_per_block": tpb, "blocks": int(len(per_block))}, cap.source)


def idle_lanes(cap: Capture) -> Answer:
    """Lanes that run but do no work: 32 lanes per warp, minus the threads that recorded active work.

    Counts both kinds: lanes of a last, partial warp of each block (no thread there at all) and
    threads past the end of the data (they exist but skip the work, e.g. i >= n).
    """
    threads = cap.threads
    warps = int(threads.groupby("block", observed=True)["warp"].nunique().sum())
    active = int(threads["active"].astype(bool).sum())
    missing = warps * WARP_SIZE - len(threads)
    return Answer(
        warps * WARP_SIZE - active,
        {"warps": warps, "lanes": warps * WARP_SIZE, "active": active, "no_thread": missing,
         "inactive_threads": len(threads) - active},
        cap.source,
    )  # fmt: skip


# --- the block scheduler and occupancy ---------------------------------------------------------


def regs_of(cap: Capture, modelled_regs: int) -> tuple[int, str]:
    """Registers per thread: the compiled kernel's (GPU capture) or the learner's modelled value."""
    regs = (cap.launch.get("instrumented") or {}).get("registers_per_thread")
    if regs is not None:
        return int(regs), "the compiled kernel's registers (GPU)"
    return int(modelled_regs), "registers per thread you chose (modelled: the simulator compiles no code)"


def occupancy_of(cap: Capture, gpu: str, modelled_regs: int):
    """The occupancy calculator's answer for this capture's block size and shared memory on ``gpu``."""
    regs, _ = regs_of(cap, modelled_regs)
    launch = cap.launch
    return occupancy(
        GPU_ARCHS[gpu],
        int(launch["threads_per_block"]),
        regs,
        int(launch.get("dynamic_smem_bytes") or 0),
        int(launch.get("static_smem_bytes") or 0),
    )


def waves(cap: Capture, gpu: str, modelled_regs: int) -> Answer:
    """Waves of blocks: blocks ÷ (SMs × resident blocks per SM), rounded up; and the last wave's fill."""
    occ = occupancy_of(cap, gpu, modelled_regs)
    sms = ARCHS[GPU_ARCHS[gpu]].num_sms
    per_wave = sms * occ.blocks_per_sm
    blocks = int(cap.launch["blocks"])
    n = math.ceil(blocks / per_wave) if per_wave else 0
    tail = blocks - (n - 1) * per_wave if n else 0
    # the block scheduler spreads a wave one block per SM before doubling up (schedule.modelled_schedule)
    tail_sms = min(tail, sms)
    return Answer(
        n,
        {"blocks": blocks, "sms": sms, "blocks_per_sm": occ.blocks_per_sm, "per_wave": per_wave,
         "tail_blocks": tail, "tail_fill": tail / per_wave if per_wave else 0.0,
         "tail_sms": tail_sms, "idle_sms": sms - tail_sms, "empty_slots": per_wave - tail, "waves": n},
        f"modelled: occupancy calculator for {GPU_ARCHS[gpu]}, the launch's recorded grid",
    )  # fmt: skip


def occupancy_answer(cap: Capture, gpu: str, modelled_regs: int) -> tuple[Answer, Answer]:
    """(theoretical occupancy in %, the limit that binds) for the capture's launch on ``gpu``."""
    occ = occupancy_of(cap, gpu, modelled_regs)
    source = f"modelled: occupancy calculator for {GPU_ARCHS[gpu]} ({regs_of(cap, modelled_regs)[1]})"
    facts = {"blocks_per_sm": occ.blocks_per_sm, "warps_per_sm": occ.warps_per_sm,
             "max_warps": occ.arch.max_warps_per_sm, "limits": dict(occ.limits), "reason": occ.reason,
             "result": occ}  # fmt: skip
    limiter = occ.limiters[0] if occ.limiters else "warps"
    # limits can tie (e.g. warps and registers both allow 8 blocks): any limit that binds is right
    bind = {**facts, "accepted": list(occ.limiters)}
    return Answer(round(100 * occ.occupancy, 1), facts, source), Answer(limiter, bind, source)


# --- CPU vs GPU and the memory flow ----------------------------------------------------------


def numpy_time_us(cap: Capture, repeats: int = 7) -> float:
    """The same work in numpy on this machine's CPU, timed now on the capture's own inputs (best of)."""
    kernel = cap.launch["kernel"]
    if kernel not in ("vector_add", "vector_add_x4"):
        raise ValueError(f"no numpy equivalent timed for {kernel}")
    a, b = cap.inputs["a"], cap.inputs["b"]
    out = np.empty_like(a)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter_ns()
        np.add(a, b, out=out)
        best = min(best, time.perf_counter_ns() - t)
    return best / 1e3


FLOW_STEPS = ("allocate", "copy_in", "kernel", "copy_out")  # what a GPU answer costs a numpy caller


def gpu_time_us(cap: Capture, gpu: str = "H200") -> tuple[float, str]:
    """(µs, where it comes from) for c = a + b on the GPU as a numpy caller gets it: allocate the device
    arrays, copy a and b in, launch the kernel, copy c back (FLOW_STEPS). A GPU capture's own host step
    times (measured); else the memory flow's model of the same bytes on ``gpu``
    (transfers.modelled_gpu_timing: latencies measured on the H200 host, specs/gpus.py's bandwidths)."""
    if cap.measured and all(k in (cap.timing.get("host_steps_ns") or {}) for k in FLOW_STEPS):
        steps = cap.timing["host_steps_ns"]
        return sum(float(steps[k]) for k in FLOW_STEPS) / 1e3, (
            "measured on the GPU: this run's allocate, copy in, kernel launch and copy back"
        )
    bytes_in, bytes_out = data_bytes(cap)
    steps = modelled_gpu_timing(bytes_in, bytes_out, gpu, len(cap.inputs), len(cap.outputs))["host_steps_ns"]
    m = flow_model(gpu)
    return sum(float(steps[k]) for k in FLOW_STEPS) / 1e3, (
        f"modelled, not measured, for a {gpu}: allocate, copy {bytes_in:,} bytes in, launch "
        f"({m['launch_ns'] / 1e3:,.0f} µs) and run the kernel at {m['mem_gbs']:,.0f} GB/s, copy "
        f"{bytes_out:,} bytes back; {m['bandwidths']}"
    )


def kernel_only_us(cap: Capture, gpu: str = "H200") -> float:
    """The kernel step alone (launch + its bytes at device-memory bandwidth, or the measured step)."""
    if cap.measured and "kernel" in (cap.timing.get("host_steps_ns") or {}):
        return float(cap.timing["host_steps_ns"]["kernel"]) / 1e3
    bytes_in, bytes_out = data_bytes(cap)
    return modelled_gpu_timing(bytes_in, bytes_out, gpu)["host_steps_ns"]["kernel"] / 1e3


def faster_side(cap: Capture, numpy_us: float, gpu: str = "H200") -> Answer:
    """Which is faster for this launch's data: numpy on the CPU or the kernel on the GPU."""
    g_us, g_source = gpu_time_us(cap, gpu)
    value = "numpy (CPU)" if numpy_us < g_us else "GPU kernel"
    facts = {"numpy_us": numpy_us, "gpu_us": g_us, "kernel_us": kernel_only_us(cap, gpu),
             "n": cap.launch["params"].get("n")}  # fmt: skip
    return Answer(value, facts, g_source)


def data_bytes(cap: Capture) -> tuple[int, int]:
    return (int(sum(a.nbytes for a in cap.inputs.values())), int(sum(a.nbytes for a in cap.outputs.values())))


def copy_share(cap: Capture, gpu: str = "H200") -> Answer:
    """Percent of allocate → copy → kernel → copy → free spent in the two copies: the run's own host
    step times on a GPU capture, else the same bytes over ``gpu``'s nominal link and memory (modelled)."""
    bytes_in, bytes_out = data_bytes(cap)
    if cap.measured:
        steps, source = cap.timing["host_steps_ns"], cap.source
    else:
        model = modelled_gpu_timing(bytes_in, bytes_out, gpu, len(cap.inputs), len(cap.outputs))
        steps = model["host_steps_ns"]
        source = (
            f"modelled: the run's {bytes_in + bytes_out:,} data bytes on a {gpu}, copy and launch latencies "
            f"measured on the H200 host; {flow_model(gpu)['bandwidths']}"
        )
    total = sum(float(v) for v in steps.values())
    copies = float(steps["copy_in"]) + float(steps["copy_out"])
    return Answer(
        round(100 * copies / total, 1) if total else 0.0,
        {"copies_us": copies / 1e3, "kernel_us": float(steps["kernel"]) / 1e3, "bytes_in": bytes_in,
         "bytes_out": bytes_out, "steps": dict(steps)},
        source,
    )  # fmt: skip


# --- memory access (recorded on the simulator) -------------------------------------------------


def _requests(cap: Capture, space: str, op: str | None = None) -> pd.DataFrame:
    if cap.requests is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    r = cap.requests
    keep = r["space"].astype(str) == space
    if op is not None:
        keep &= r["op"].astype(str) == op
    return r[keep]


def worst_sectors_per_request(cap: Capture, op: str | None = None) -> Answer:
    """Sectors per warp request of the global ``op`` (load/store) line that moves the most sectors per
    request, averaged over that line's requests (the number Nsight Compute shows per source line)."""
    r = _requests(cap, "global", op)
    if r.empty:
        return Answer(0, {"requests": 0}, "recorded addresses, simulator")
    per_line = r.groupby(["line", "array"], observed=True).agg(
        sectors=("sectors", "sum"), requests=("sectors", "size"), ideal=("ideal_sectors", "sum")
    )
    per_line["per_request"] = per_line["sectors"] / per_line["requests"]
    worst = per_line.sort_values("per_request").iloc[-1]
    return Answer(
        round(float(worst["per_request"]), 2),
        {"line": int(worst.name[0]), "array": str(worst.name[1]), "requests": int(worst["requests"]),
         "ideal_per_request": float(worst["ideal"] / worst["requests"])},
        "recorded addresses, simulator",
    )  # fmt: skip


def worst_bank_ways(cap: Capture) -> Answer:
    """The most distinct words any shared-memory request put in one bank (1 = conflict-free; 0 = the
    kernel has no shared-memory access)."""
    r = _requests(cap, "shared")
    if r.empty:
        return Answer(0, {"requests": 0}, "recorded addresses, simulator")
    worst = r.sort_values("bank_ways").iloc[-1]
    return Answer(
        int(worst["bank_ways"]),
        {"line": int(worst["line"]), "array": str(worst["array"]), "op": str(worst["op"]),
         "conflicts": int(r["extra_wavefronts"].sum()), "requests": int(len(r))},
        "recorded addresses, simulator",
    )  # fmt: skip


def raced_words(cap: Capture) -> Answer:
    """Shared words two threads touched with no barrier between them (one writing)."""
    haz = cap.hazards
    if haz is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    races = haz[haz["kind"] != "UNINIT"]
    words = int(races[["space", "array", "block", "index"]].drop_duplicates().shape[0]) if len(races) else 0
    return Answer(
        words,
        {"blocks": int(races["block"].nunique()) if len(races) else 0, "kinds": races["kind"].value_counts().to_dict(),
         "correct": bool(cap.check.get("correct"))},
        "recorded addresses, simulator",
    )  # fmt: skip


def any_race(cap: Capture) -> Answer:
    words = raced_words(cap)
    return Answer("yes" if words.value else "no", words.facts, words.source)


def runs_right(cap: Capture) -> Answer:
    """How many of a capture's runs (analysis/races.py) matched the reference in every element."""
    from visualizer.analysis import races

    info = cap.launch.get("runs")
    if cap.runs is None or not info:
        raise ValueError("this capture ran once (capture it with runs=N)")
    table = races.runs_table(cap.runs, info["correct"], info.get("schedules"), cap.source)
    cells = sum(int(np.prod(a.shape[1:])) for a in cap.runs.values())
    seed = info.get("seed")
    how = f"; seeded schedules (seed {seed}, runs 0..{info['count'] - 1})" if seed is not None else ""
    return Answer(
        int(sum(bool(c) for c in info["correct"])),
        {"runs": info["count"], "distinct": info["distinct"], "differing": info["differing_elements"],
         "cells": cells, "verdict": races.verdict(table)},
        f"{cap.source}{how}",
    )  # fmt: skip


def runs_spread(cap: Capture) -> Answer:
    """'all N', 'some' or 'none': how many runs were right."""
    right = runs_right(cap)
    n = right.facts["runs"]
    value = f"all {n}" if right.value == n else "none" if right.value == 0 else "some"
    return Answer(value, right.facts, right.source)


def halo_loads_per_block(cap: Capture, array: str = "u") -> Answer:
    """Global loads of ``array`` by the block that loaded the most (an interior block: tile + halo)."""
    acc = cap.accesses
    if acc is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    loads = acc[(acc["array"].astype(str) == array) & (acc["op"].astype(str) == "load")]
    per_block = loads.groupby("block", observed=True).size()
    block = int(per_block.idxmax())
    tile = int(cap.launch["block"][0]) * int(cap.launch["block"][1])
    distinct = int(loads[loads["block"] == block]["index"].nunique())
    uninit = int(cap.hazards[cap.hazards["kind"] == "UNINIT"]["pairs"].sum()) if len(cap.hazards) else 0
    return Answer(
        int(per_block.max()),
        {"block": block, "tile_cells": tile, "halo": int(per_block.max()) - tile, "distinct": distinct,
         "uninit": uninit},
        "recorded addresses, simulator",
    )  # fmt: skip


def atomics_per_bin(cap: Capture, array: str = "bins") -> pd.Series:
    """Global atomic updates per bin index (bins nobody touched are absent)."""
    acc = cap.accesses
    if acc is None:
        raise ValueError("this capture has no recorded accesses (run it with accesses=True)")
    at = acc[(acc["array"].astype(str) == array) & (acc["op"].astype(str) == "atomic")]
    return at.groupby("index").size().rename("atomics")


def busiest_bin_atomics(cap: Capture) -> Answer:
    """Atomic updates to the busiest global bin: they are serialised on one address."""
    per_bin = atomics_per_bin(cap)
    if per_bin.empty:
        return Answer(0, {"bin": None, "total": 0}, "recorded addresses, simulator")
    return Answer(
        int(per_bin.max()),
        {"bin": int(per_bin.idxmax()), "total": int(per_bin.sum()), "blocks": int(cap.launch["blocks"]),
         "n": int(cap.launch["params"]["n"])},
        "recorded addresses, simulator",
    )  # fmt: skip


# --- FlashAttention's tiling -----------------------------------------------------------------


def score_matrix_kib(naive: Capture) -> Answer:
    """KiB of the N x N score matrix S one (batch, head) of the naive kernel writes to global memory."""
    s = naive.outputs.get("s")
    if s is None:
        s = naive.inputs["s"]
    b, h = s.shape[0], s.shape[1]
    return Answer(
        round(s.nbytes / (b * h) / 1024, 1),
        {"seq_len": int(s.shape[-1]), "total_bytes": int(s.nbytes)},
        naive.source,
    )


def flash_smem_kib(flash: Capture) -> Answer:
    """KiB of shared memory one FlashAttention block holds (its Q, K, V and score tiles)."""
    nbytes = int(flash.launch.get("static_smem_bytes") or 0) + int(
        flash.launch.get("dynamic_smem_bytes") or 0
    )
    extra = sorted(set(flash.outputs) - {"o"})
    return Answer(round(nbytes / 1024, 1), {"bytes": nbytes, "extra_outputs": extra,
                                             "tile": int(flash.launch["params"]["tile"])}, flash.source)  # fmt: skip


# --- grading ----------------------------------------------------------------------------------


# --- SIMT: divergence ---------------------------------------------------------------------------


def branch_efficiency(cap: Capture) -> Answer:
    """The run's branch efficiency (analysis/branches.py: ncu's definition over the source's branches)
    and the numbers behind it."""
    from visualizer.analysis import branches

    rows = cap.branches
    if rows is None:
        raise ValueError("this capture has no branch visits (run it with branches=True)")
    s = branches.summary(rows)
    lanes = branches.counted(rows)
    facts = {**s, "mean_active": float(lanes["active"].mean()) if len(lanes) else 0.0}
    return Answer(round(s["efficiency"], 1) if s["efficiency"] is not None else 100.0, facts, s["source"])


def issue_slots(cap: Capture) -> int:
    """Warp-level executions of the kernel's branch bodies: every visit at which some lane went into the
    body, however many lanes did (a warp runs a body once for all the lanes that take it)."""
    rows = cap.branches
    return int((rows["taken"] > 0).sum())


def divergence_slowdown(lanes: Capture, warps: Capture) -> Answer:
    """How many times longer ``lanes`` runs than ``warps``: measured GPU device time of the clean builds
    when both ran on a GPU, else modelled as the ratio of their warp-level body executions."""
    if lanes.measured and warps.measured and lanes.timing.get("clean_ms") and warps.timing.get("clean_ms"):
        a, b = float(lanes.timing["clean_ms"]), float(warps.timing["clean_ms"])
        facts = {"lanes_us": a * 1e3, "warps_us": b * 1e3}
        return Answer(round(a / b, 2), facts, "measured: GPU device time of each run (clean builds)")
    a, b = issue_slots(lanes), issue_slots(warps)
    facts = {"lanes_slots": a, "warps_slots": b}
    return Answer(
        round(a / b, 2) if b else float("nan"), facts,
        "modelled (warp issue count: each branch body a warp runs counts once, whatever lanes are on)",
    )  # fmt: skip


def grade(guess, answer, tolerance: float = 0.0, accepted=()) -> tuple[bool, str]:
    """(right, how close) for a number within ``tolerance`` (relative) or a choice (``answer``, or any
    of ``accepted`` when the run has several right answers)."""
    if isinstance(answer, str):
        right = guess == answer or guess in accepted
        also = f" (also right: {', '.join(a for a in accepted if a != guess)})" if len(accepted) > 1 else ""
        return right, ("right" + also) if right else f"the run says {' or '.join(accepted) or answer}"
    guess, answer = float(guess), float(answer)
    if answer == 0:
        right = abs(guess) <= tolerance
        return right, "exactly" if guess == 0 else f"off by {guess:g}"
    err = abs(guess - answer) / abs(answer)
    right = err <= tolerance
    if guess == answer:
        return True, "exactly"
    return right, f"off by {guess - answer:+g} ({err:.0%} of the answer)"
