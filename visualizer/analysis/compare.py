"""Two captures side by side: the same metrics for both, their ratio, and one line per difference.

Pure pandas. ``metrics(cap)`` reads one Capture into a tidy table of (metric, unit, value, source);
``compare(a, b)`` lines two of them up; ``lines(a, b)`` does the same per source line of the recorded
memory accesses; ``differences(...)`` states what changed, one sentence each ("transpose_tiled: 32 →
4 sectors per global store request"; "3.10x faster (device time, measured)").

Where a number comes from is kept per cell: a GPU capture's device time is *measured*; the simulator
has no GPU time (its row is empty there, with the reason), and the CPU time the simulation took has a
row of its own that says so and is never ranked. Accesses are ``recorded addresses, simulator``;
``modelled_us`` is a named model of device time from the recorded sectors (``MODEL_NOTE``), and beside it
``recorded_device_us`` the device time of the same launch (or the nearest, said so) in the measured set
shipped with the app (analysis/measured_set.py), labelled with its device and date; ``sass_instructions``
counts the compiled kernel's SASS (a static count: ptxas and nvdisasm, run by the caller); occupancy is
``modelled (occupancy calculator)`` from the registers the GPU build reported; branch efficiency comes
from the SIMT lens when the capture recorded branches. A metric a capture did not record is NaN with
the reason in ``note``, never a guess. ``differences`` says first whether B's output is wrong and how
many hazards it has, then time: measured where both sides ran on a GPU, else the modelled time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from visualizer.analysis.asm import SASS_COUNT_WHAT, SASS_SOURCE, sass_count_of
from visualizer.analysis.provenance import MEASURED_GPU, labelled, modelled
from visualizer.specs.gpus import H200_HBM_GBS, SECTOR_BYTES

ACCESS_SOURCE = "recorded addresses, simulator"
OCCUPANCY_SOURCE = modelled("occupancy calculator, registers and shared memory of the GPU build")
WORK_SOURCE = modelled("the kernel spec's bytes and flops")
NOT_RECORDED = "not recorded"
BRANCH_EFFICIENCY = "branch_efficiency"
BRANCH_NOTE = "not recorded: capture with the SIMT lens (branches) to count it"
SIM_TIME_SOURCE = "CPU time of the simulation (on this machine), not kernel time"
NO_GPU_TIME = "no GPU time on the simulator (see the modelled time and the counts)"
MODEL_NOTE = (
    f"global sectors recorded × {SECTOR_BYTES} B ÷ {H200_HBM_GBS:,.0f} GB/s (an H200's HBM3e, measured copy): "
    "memory traffic only, every sector from DRAM, no cache, latency or launch"
)
MODEL_SOURCE = modelled(MODEL_NOTE)
CHECK_SOURCE = "the outputs checked against the reference"
SASS_INSTRUCTIONS = "sass_instructions"
SASS_NOTE = (
    "not counted: needs the kernel compiled by ptxas and read back by nvdisasm "
    "(pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm)"
)
RECORDED_TIME = "recorded_device_us"
RECORDED_NOTE = "not looked up: no shipped recording asked for"
RECORDED_GPU_NOTE = "a GPU capture: its own device time is measured (device_ms)"

# metric -> (unit, what it means, lower is better?)
METRICS: dict[str, tuple[str, str, bool | None]] = {
    "wrong_elements": ("", "output elements that differ from the reference", True),
    "hazards": ("", "hazards (unordered threads, one word)", True),
    "device_ms": ("ms", "kernel time, clean build", True),
    "instrumented_ms": ("ms", "kernel time, instrumented build", True),
    "modelled_us": ("µs", "modelled time (memory traffic)", True),
    "recorded_device_us": ("µs", "device time of the shipped recording (clean build)", True),  # RECORDED_TIME
    "sim_cpu_ms": ("ms", "CPU time of the simulation (not kernel time)", None),
    "sim_engine": ("", "simulator engine that ran it (compiled or fastsim)", None),
    "launch_overhead_us": ("µs", "host launch overhead", True),
    "bytes_moved": ("B", "bytes the kernel moves", None),
    "gbs": ("GB/s", "bandwidth, clean build", False),
    "threads": ("", "threads launched", None),
    "blocks": ("", "blocks launched", None),
    "sms_used": ("", "SMs that ran a block", None),
    "registers_per_thread": ("", "registers per thread (GPU build)", None),
    "static_smem_bytes": ("B", "static shared memory per block", None),
    "occupancy": ("%", "theoretical occupancy", False),
    "occupancy_limiter": ("", "what limits blocks per SM", None),
    "global_ld_sectors_per_request": ("sectors", "per global load request", True),
    "global_st_sectors_per_request": ("sectors", "per global store request", True),
    "global_ld_requests": ("", "global load requests", True),
    "global_st_requests": ("", "global store requests", True),
    "shared_ld_wavefronts_per_request": ("wavefronts", "per shared load request", True),
    "shared_st_wavefronts_per_request": ("wavefronts", "per shared store request", True),
    "shared_bank_conflicts": ("", "extra shared wavefronts (bank conflicts)", True),
    BRANCH_EFFICIENCY: ("%", "branch efficiency", False),
    SASS_INSTRUCTIONS: ("", SASS_COUNT_WHAT, None),
}
COLUMNS = ["metric", "unit", "what", "value", "text", "source", "note"]


def _wrong_elements(cap) -> tuple[float | None, str]:
    """(output elements that differ from the reference, note); None when nothing was checked."""
    check = cap.check or {}
    outs = check.get("outputs") or {}
    if check.get("correct") is None or not outs:
        return None, "not checked: no reference"
    return float(sum(int(o.get("mismatches", 0)) for o in outs.values())), ""


def _hazards(cap) -> float | None:
    """Read-after-write, write-after-read and write-after-write hazards recorded (None: not recorded)."""
    summ = cap.launch.get("accesses")
    if not summ or "hazards" not in summ:
        return None
    return float(sum(int(summ["hazards"].get(k, 0)) for k in ("RAW", "WAR", "WAW")))


def _modelled_us(summ: dict | None) -> float | None:
    """MODEL_NOTE's device time from every recorded global sector (None: sampled warps or no record)."""
    if not summ or summ.get("sample") is not None:
        return None
    sectors = int(summ.get("global_ld_sectors", 0)) + int(summ.get("global_st_sectors", 0))
    return sectors * SECTOR_BYTES / H200_HBM_GBS / 1e3  # bytes / (GB/s) = ns; / 1e3 = µs


def branch_efficiency(cap) -> float | None:
    """Branch efficiency (%) the SIMT lens recorded for this capture, if it ran with it."""
    summ = cap.launch.get("branches")
    eff = summ.get("efficiency") if isinstance(summ, dict) else None
    return None if eff is None else float(eff)


def _row(metric: str, value, source: str, note: str = "", text: str | None = None) -> dict:
    unit, what, _ = METRICS[metric]
    if isinstance(value, str):
        text, value = value, math.nan
    elif value is None:
        value, note = math.nan, note or NOT_RECORDED
    return {"metric": metric, "unit": unit, "what": what, "value": float(value), "text": text or "",
            "source": source if not note else "", "note": note}  # fmt: skip


def _per_request(summ: dict, space_op: str, total_key: str) -> float | None:
    req = summ.get(f"{space_op}_requests", 0)
    return summ[total_key] / req if req else None


def _shared_wavefronts(cap, op: str) -> float | None:
    """Mean bank ways (wavefronts) per shared request of ``op``, from the requests table."""
    req = cap.requests
    if req is None or not len(req):
        return None
    sel = req[(req["space"].astype(str) == "shared") & (req["op"].astype(str) == op)]
    if not len(sel):
        return None
    if "wavefronts" in sel:
        return float(sel["wavefronts"].mean())
    return float(np.maximum(sel["bank_ways"].to_numpy(), 1).mean())


def _ptxas_registers(known) -> tuple[int, str, dict] | None:
    """(registers per thread, arch, ptxas -v's resources) of a compile (``{"resources", "arch"}``: the
    caller's, or a visitor's kernel's ``gpu_compile``), where its register count is one a GPU could have."""
    res = known.get("resources") if isinstance(known, dict) else None
    regs = res.get("registers") if isinstance(res, dict) else None
    if isinstance(regs, int) and 1 <= regs <= 255:
        return regs, str(known.get("arch"))[:8], res
    return None


def _counted(launch: dict, compiled) -> tuple[int, str, dict, str] | None:
    """ptxas's count of the kernel, as ``_ptxas_registers`` gives it plus where it was compiled (``""`` or
    ``", in its sandbox"``): the caller's compile (``compiled``) where it has one, else a visitor's kernel's,
    compiled in its sandbox before the simulator ran it (``launch['gpu_compile']``). Both the registers row
    and occupancy read it, so the two rows never disagree."""
    if isinstance(compiled, dict) and isinstance(compiled.get("resources"), dict):
        got = _ptxas_registers({"resources": compiled["resources"], "arch": compiled.get("arch")})
        return None if got is None else (*got, "")
    got = _ptxas_registers(launch.get("gpu_compile"))
    return None if got is None else (*got, ", in its sandbox")


def _occupancy(cap, compiled=None) -> tuple[float | None, str, str]:
    """(occupancy 0..100, limiter, note) from the GPU build's registers: a GPU capture's own, ptxas's count
    where the kernel was compiled (``compiled``, or a visitor's kernel's ``gpu_compile``), else None."""
    res = cap.launch.get("clean") or {}
    regs = res.get("registers_per_thread")
    note = ""
    counted = _counted(cap.launch, compiled) if regs is None else None
    if counted is not None:
        regs, arch, resources, _ = counted
        note = f"registers counted by ptxas -v ({arch}, clean build)"
        smem = resources.get("smem_bytes")
        res = {"static_smem_bytes": smem if isinstance(smem, int) and 0 <= smem < 1 << 20 else 0}
    if regs is None:
        return None, "", "not recorded: the simulator compiles nothing (see Under the hood for ptxas's count)"
    from visualizer.analysis.occupancy import occupancy

    cc = str(cap.launch.get("compute_capability") or "9.0").replace(".", "")
    try:
        occ = occupancy(
            f"sm_{cc}",
            cap.launch["threads_per_block"],
            int(regs),
            smem_dynamic=int(cap.launch.get("dynamic_smem_bytes", 0)),
            smem_static=int(res.get("static_smem_bytes", 0)),
        )
    except (ValueError, KeyError) as exc:
        return None, "", f"not computed: {exc}"
    return 100.0 * occ.occupancy, ", ".join(occ.limiters), note


def _sass(cap, compiled) -> tuple[int | None, str, str]:
    """(SASS instructions, source, note): ``compiled`` as counted by the caller (a dict with
    ``instructions`` and ``arch``, or a one-line reason), else a visitor's kernel's count made in its
    sandbox before the simulator ran it (``launch['gpu_compile']``)."""
    if isinstance(compiled, str):
        return None, "", compiled
    known = cap.launch.get("gpu_compile")
    where = ""
    if isinstance(compiled, dict):
        count, arch = sass_count_of(compiled.get("instructions")), compiled.get("arch")
    elif isinstance(known, dict):
        count, arch, where = (
            sass_count_of(known.get("sass_instructions")),
            known.get("arch"),
            ", in its sandbox",
        )
    else:
        count, arch = None, None
    if count is None:
        return None, "", SASS_NOTE
    return count, f"{SASS_SOURCE}, {str(arch or 'sm_90')[:8]}{where}", ""


def _recorded(cap, recorded) -> tuple[float | None, str, str]:
    """(device time in µs, source, note) of the shipped recording of this launch (or the nearest):
    ``recorded`` as ``measured_set.device_time`` gives it, or a one-line reason there is none."""
    if cap.measured:
        return None, "", RECORDED_GPU_NOTE
    if cap.launch.get("user_kernel"):
        return None, "", "your own kernel: the shipped set records built-in kernels only"
    if isinstance(recorded, str):
        return None, "", recorded
    if not isinstance(recorded, dict):
        return None, "", RECORDED_NOTE
    ms = recorded.get("ms")
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not math.isfinite(ms) or ms <= 0:
        return None, "", str(recorded.get("why") or "no device time in the recording")
    source = str(recorded.get("source"))
    return float(ms) * 1e3, source if recorded.get("exact") else f"{source}; {recorded.get('line')}", ""


def _registers_row(launch: dict, compiled) -> dict:
    """Registers per thread: a GPU capture's clean build's, else ptxas -v's count where the kernel was compiled
    (here, or a visitor's kernel in its sandbox: the count occupancy uses)."""
    regs = (launch.get("clean") or {}).get("registers_per_thread")
    if regs is not None:
        return _row("registers_per_thread", regs, MEASURED_GPU)
    counted = _counted(launch, compiled)
    if counted is not None:
        regs, arch, _, where = counted
        return _row("registers_per_thread", regs, f"compiled (ptxas -v, {arch}{where})")
    return _row("registers_per_thread", None, MEASURED_GPU)


def metrics(cap, compiled=None, recorded=None) -> pd.DataFrame:
    """One capture's numbers: a row per METRICS entry (value NaN and a note where not recorded).

    ``compiled``: its SASS instruction count (``{"instructions", "arch"}``) or why none; ``recorded``: the
    shipped recording's device time of this launch (``measured_set.device_time``) or why none."""
    t, launch = cap.timing, cap.launch
    summ = launch.get("accesses")
    no_acc = "not recorded: capture with accesses (simulator)"
    wrong, wrong_note = _wrong_elements(cap)
    hazards = _hazards(cap)
    gpu = cap.measured
    modelled_us = _modelled_us(summ)
    rows = [
        _row("wrong_elements", wrong, CHECK_SOURCE, wrong_note),
        _row("hazards", hazards, ACCESS_SOURCE, "" if hazards is not None else no_acc),
        _row("device_ms", t.get("clean_ms") if gpu else None, MEASURED_GPU, "" if gpu else NO_GPU_TIME),
        _row(
            "instrumented_ms",
            t.get("instrumented_ms") if gpu else None,
            MEASURED_GPU,
            "" if gpu else NO_GPU_TIME,
        ),
        _row(
            "modelled_us",
            modelled_us,
            MODEL_SOURCE,
            ""
            if modelled_us is not None
            else ("not modelled: only sampled warps recorded" if summ else no_acc),
        ),
        _row(RECORDED_TIME, *_recorded(cap, recorded)),
        _row(
            "sim_cpu_ms",
            None if gpu else (t.get("clean_ms") or t.get("instrumented_ms")),
            SIM_TIME_SOURCE,
            "" if not gpu else "measured device time above",
        ),
        _row(
            "sim_engine",
            None if gpu else launch.get("sim_engine"),
            launch["source"],
            "a GPU capture" if gpu else ("" if launch.get("sim_engine") else "not said (an older capture)"),
        ),
        _row(
            "launch_overhead_us",
            t.get("launch_overhead_us"),
            MEASURED_GPU,
            "" if t.get("launch_overhead_us") is not None else "measured on a GPU only",
        ),
        _row("bytes_moved", t.get("bytes_moved"), WORK_SOURCE),
        _row("gbs", t.get("clean_gbs"), MEASURED_GPU, "" if t.get("clean_gbs") else "measured on a GPU only"),
        _row("threads", launch.get("threads"), "launch"),
        _row("blocks", launch.get("blocks"), "launch"),
        _row("sms_used", int(cap.threads["sm"].nunique()), launch["source"]),
        _registers_row(launch, compiled),
        _row("static_smem_bytes", launch.get("static_smem_bytes"), "launch"),
    ]
    occ, limiter, note = _occupancy(cap, compiled)
    if occ is not None and note:  # counted by ptxas: said in the source, not as a reason it is missing
        source, note = f"{OCCUPANCY_SOURCE}; {note}", ""
    else:
        source = OCCUPANCY_SOURCE
    rows.append(_row("occupancy", occ, source, note))
    rows.append(_row("occupancy_limiter", limiter or None, source, note))
    for key in ("global_ld", "global_st"):
        per = _per_request(summ, key, f"{key}_sectors") if summ else None
        rows.append(_row(f"{key}_sectors_per_request", per, ACCESS_SOURCE, "" if per is not None else
                         (no_acc if not summ else "no such requests")))  # fmt: skip
        rows.append(_row(f"{key}_requests", summ.get(f"{key}_requests") if summ else None, ACCESS_SOURCE,
                         "" if summ else no_acc))  # fmt: skip
    for op, short in (("load", "ld"), ("store", "st")):
        w = _shared_wavefronts(cap, op) if summ else None
        rows.append(_row(f"shared_{short}_wavefronts_per_request", w, ACCESS_SOURCE, "" if w is not None else
                         (no_acc if not summ else "no such requests")))  # fmt: skip
    bank = (summ["shared_ld_bank_conflicts"] + summ["shared_st_bank_conflicts"]) if summ else None
    rows.append(_row("shared_bank_conflicts", bank, ACCESS_SOURCE, "" if summ else no_acc))
    branch = branch_efficiency(cap)
    where = (launch.get("branches") or {}).get("source") or launch["source"]
    rows.append(_row(BRANCH_EFFICIENCY, branch, where, "" if branch is not None else BRANCH_NOTE))
    rows.append(_row(SASS_INSTRUCTIONS, *_sass(cap, compiled)))
    return labelled(pd.DataFrame(rows, columns=COLUMNS), launch["source"], column=False)


def name_of(cap) -> str:
    """A capture's short name: the kernel and its parameters (``transpose_tiled rows=64 cols=64``)."""
    params = " ".join(f"{k}={v}" for k, v in (cap.launch.get("params") or {}).items())
    return f"{cap.launch['kernel']} {params} [{cap.launch['backend']}]".replace("  ", " ")


def labels(a, b) -> tuple[str, str]:
    """Short names of two captures: their kernels, or what differs when the kernel is the same
    (``stride=32`` / ``stride=1``, ``sim`` / ``gpu``)."""
    la, lb = a.launch, b.launch
    if la["kernel"] != lb["kernel"]:
        return la["kernel"], lb["kernel"]
    pa, pb = la.get("params") or {}, lb.get("params") or {}
    diff = [k for k in {**pa, **pb} if pa.get(k) != pb.get(k)]
    if diff:
        return (" ".join(f"{k}={pa.get(k)}" for k in diff), " ".join(f"{k}={pb.get(k)}" for k in diff))
    if la["backend"] != lb["backend"]:
        return la["backend"], lb["backend"]
    ea, eb = la.get("sim_engine"), lb.get("sim_engine")
    if ea and eb and ea != eb:  # the same launch on the simulator's two engines
        return ea, eb
    return "A", "B"


def compare(a, b, compiled=(None, None), recorded=(None, None)) -> pd.DataFrame:
    """Metrics of two captures side by side: metric, unit, what, a, b, ratio (b / a), and each
    side's source and note. ``ratio`` is NaN where either side was not recorded. ``compiled`` and
    ``recorded``: each side's SASS count and shipped recording, as ``metrics`` takes them;
    ``attrs['recorded']`` names the recording's device and date where either side has one."""
    ma, mb = metrics(a, compiled[0], recorded[0]), metrics(b, compiled[1], recorded[1])
    out = ma[["metric", "unit", "what"]].copy()
    out["a"], out["b"] = ma["value"].to_numpy(), mb["value"].to_numpy()
    out["a_text"], out["b_text"] = ma["text"].to_numpy(), mb["text"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = out["b"] / out["a"]
    out["ratio"] = ratio.where(np.isfinite(ratio) & (out["metric"] != "sim_cpu_ms"))  # never ranked
    out["a_source"], out["b_source"] = ma["source"].to_numpy(), mb["source"].to_numpy()
    out["a_note"], out["b_note"] = ma["note"].to_numpy(), mb["note"].to_numpy()
    source = a.source if a.source == b.source else f"A: {a.source}; B: {b.source}"
    out.attrs["names"] = (name_of(a), name_of(b))
    out.attrs["labels"] = labels(a, b)
    shown = [r for r in recorded if isinstance(r, dict) and r.get("short")]
    if shown:
        out.attrs["recorded"] = str(shown[0]["short"])
        out.attrs["recorded_nearest"] = not all(r.get("exact") for r in shown)
    return labelled(out, source, column=False)


def lines(a, b) -> pd.DataFrame:
    """Per source line of each kernel (recorded accesses): sectors and wavefronts per request, A and B.

    One row per (side, line, array, space, op), from ``launch['accesses']['per_line']``
    (analysis/memory.line_summary); empty when neither capture recorded accesses.
    """
    cols = ["side", "kernel", "line", "array", "space", "op", "requests", "sectors_per_request",
            "ideal_per_request", "bank_conflicts", "max_bank_ways", "wavefronts_per_request"]  # fmt: skip
    rows = []
    for side, cap in (("A", a), ("B", b)):
        for r in (cap.launch.get("accesses") or {}).get("per_line", []):
            # bundles saved before wavefronts were counted (issue 23) have no wavefronts_per_request
            rows.append({"side": side, "kernel": cap.launch["kernel"],
                         **{k: r.get(k, math.nan) for k in cols[2:]}})  # fmt: skip
    return labelled(pd.DataFrame(rows, columns=cols), ACCESS_SOURCE, column=False)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "—"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def _count(n: float, word: str) -> str:
    return f"{n:,.0f} {word}{'' if n == 1 else 's'}"


def _verdicts(table: pd.DataFrame, name_b: str) -> list[str]:
    """Whether B's output is wrong and whether it races, said before any speed (a fast wrong kernel is
    not an improvement)."""
    rows = table.set_index("metric")
    out = []
    w = rows.loc["wrong_elements"] if "wrong_elements" in rows.index else None
    if w is not None and not math.isnan(w["b"]) and w["b"] > 0:
        was = "" if math.isnan(w["a"]) else (" (A's is right)" if w["a"] == 0 else f" (A: {_fmt(w['a'])})")
        out.append(f"{name_b}'s output is wrong: {_count(w['b'], 'element')} differ from the reference{was}")
    elif w is not None and not math.isnan(w["a"]) and w["a"] > 0 and w["b"] == 0:
        out.append(f"{name_b}'s output is right; A's was wrong ({_count(w['a'], 'element')} differed)")
    h = rows.loc["hazards"] if "hazards" in rows.index else None
    if h is not None and not math.isnan(h["b"]) and h["b"] > 0:
        was = "" if math.isnan(h["a"]) else f" (A has {_fmt(h['a'])})"
        out.append(f"{name_b} has {_count(h['b'], 'hazard')}: threads touch one word with no barrier "
                   f"between them{was}")  # fmt: skip
    elif h is not None and not math.isnan(h["a"]) and h["a"] > 0 and h["b"] == 0:
        out.append(f"{name_b} has no hazards (A had {_fmt(h['a'])})")
    return out


def _recorded_line(table: pd.DataFrame, r, name_b: str) -> str:
    """The shipped recording's device time of A and B (its device, date, and whether these are your
    launches), and where the memory-traffic model above ranks them the other way, that it does."""
    speed = r.a / r.b
    word = "faster" if speed > 1 else "slower"
    label = str(r.b_source or r.a_source).split("; ")[0]
    nearest = "nearest recorded" in f"{r.a_source} {r.b_source}"
    which = (
        "the nearest recorded launches, not yours: the ratio is theirs" if nearest else "the same launches"
    )
    line = (
        f"{name_b}: {max(speed, 1 / speed):.2f}x {word} on the shipped recording (device time {_fmt(r.a)} → "
        f"{_fmt(r.b)} µs, {label}; {which})"
    )
    model = table.set_index("metric").loc["modelled_us"] if "modelled_us" in set(table["metric"]) else None
    if (
        model is not None
        and model["a"] > 0
        and model["b"] > 0
        and model["a"] != model["b"]
        and (model["a"] > model["b"]) != (speed > 1)
    ):
        line += (
            "; the memory-traffic model ranks them the other way: it counts DRAM sectors only, no latency, "
            "caches, instructions or launch"
        )
    return line


def differences(table: pd.DataFrame) -> list[str]:
    """One sentence per metric that differs between A and B, naming B: first whether B's output is wrong
    and whether it races, then time (device time where both were measured on a GPU, else the modelled
    time, its model named, and beside it the device time of the shipped recording where it has both
    launches or the nearest), then the counts in METRICS order.

    The simulation's CPU time is never among them: it says how long Python took, not the kernel.
    Metrics equal on both sides, or not recorded on one, are left out.
    """
    name_b = table.attrs.get("labels", ("A", "B"))[1]
    out = _verdicts(table, name_b)
    timed = []
    for r in table.itertuples(index=False):
        if r.metric in ("wrong_elements", "hazards", "sim_cpu_ms"):
            continue
        if r.metric == "occupancy_limiter":
            if r.a_text and r.b_text and r.a_text != r.b_text:
                out.append(f"{name_b}: occupancy limited by {r.b_text} (was {r.a_text})")
            continue
        if r.metric == "sim_engine":
            if r.a_text and r.b_text and r.a_text != r.b_text:
                out.append(f"{name_b}: simulated on the {r.b_text} engine (A on {r.a_text})")
            continue
        if math.isnan(r.a) or math.isnan(r.b) or r.a == r.b:
            continue
        unit = f" {r.unit}" if r.unit and r.unit != "%" else r.unit
        if r.metric == RECORDED_TIME and r.a > 0 and r.b > 0:
            timed.append(_recorded_line(table, r, name_b))
            continue
        if r.metric in ("device_ms", "instrumented_ms", "modelled_us") and r.a > 0 and r.b > 0:
            if r.metric == "modelled_us" and not math.isnan(table.set_index("metric").loc["device_ms", "b"]):
                continue  # measured device time is there: the model is in the table, not a headline
            speed = r.a / r.b
            word = "faster" if speed > 1 else "slower"
            times = speed if speed > 1 else 1 / speed
            where = "measured on the GPU" if r.metric != "modelled_us" else f"modelled: {MODEL_NOTE}"
            timed.append(
                f"{name_b}: {times:.2f}x {word} ({r.what}: {_fmt(r.a)} → {_fmt(r.b)}{unit}, {where})"
            )
        else:
            out.append(f"{name_b}: {_fmt(r.a)} → {_fmt(r.b)}{unit} {r.what}")
    verdicts = len(_verdicts(table, name_b))
    return out[:verdicts] + timed + out[verdicts:]


def as_text(table: pd.DataFrame) -> str:
    """The table and its differences as plain text (the CLI prints this)."""
    name_a, name_b = table.attrs.get("names", ("A", "B"))
    head = ["metric", "A", "B", "B/A", "source / note"]
    body = []
    for r in table.itertuples(index=False):
        a = r.a_text or _fmt(r.a)
        b = r.b_text or _fmt(r.b)
        ratio = "" if r.ratio != r.ratio else f"{r.ratio:.3g}x"
        la, lb = r.a_note or r.a_source, r.b_note or r.b_source
        body.append(
            [
                f"{r.what}{f' ({r.unit})' if r.unit else ''}",
                a,
                b,
                ratio,
                la if la == lb else f"A: {la}; B: {lb}",
            ]
        )
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(4)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    text = [f"A: {name_a}", f"B: {name_b}", "", fmt.format(*head)]
    text += [fmt.format(*row) for row in body]
    diffs = differences(table)
    text += ["", "differences:"] + [f"  {d}" for d in diffs] if diffs else ["", "no differences recorded"]
    return "\n".join(text)
