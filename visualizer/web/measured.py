"""The measured set beside a simulated run: "your run, simulated" next to "the same launch, measured on an
NVIDIA H200" (analysis/measured_set.py), on a machine without a GPU.

Shown only beside a simulator's capture of a built-in kernel (a GPU user sees their own measured run; a
visitor's kernel was never recorded). A launch that was not recorded gets the nearest recorded one, said so
in its heading, its caption and its chart's title; a damaged set is one caption, never a traceback.
"""

from __future__ import annotations

import streamlit as st

from visualizer.analysis import measured_set as ms
from visualizer.analysis import schedule
from visualizer.analysis.capture import Capture
from visualizer.figures import scheduling as sched_figs
from visualizer.web.charts import chart


@st.cache_resource(show_spinner=False, max_entries=16)
def _recorded_capture(root: str, launch_id: str, files: tuple, device: tuple) -> Capture:
    """One recorded launch read back (bounded), once per file sizes: shared, never modified."""
    the_set, why = ms.load_set(root)
    if the_set is None:
        raise ms.SetError(why)
    rec = next((r for r in the_set.launches if r.id == launch_id), None)
    if rec is None:
        raise ms.SetError(f"{launch_id}: no longer in the set")
    return ms.Match(the_set, rec, True, rec.params).capture()


@st.cache_resource(show_spinner=False, max_entries=4)
def _read_set(root: str, stamp: tuple) -> tuple[ms.MeasuredSet | None, str | None]:
    return ms.load_set(root)


def shipped_set() -> tuple[ms.MeasuredSet | None, str | None]:
    """The set (or why none; (None, None) where none is shipped), read once per version of its index.json
    (its size and time)."""
    root = ms.set_dir()
    try:
        st_ = (root / ms.INDEX).stat()
    except FileNotFoundError:  # none recorded yet: nothing to say beside the page
        return None, None
    except OSError:
        return _read_set(str(root), None)  # says why it cannot be read
    return _read_set(str(root), (st_.st_size, st_.st_mtime_ns))


def find(kernel: str, params: dict) -> tuple[ms.Match | None, str | None]:
    """ms.find over the cached set."""
    found, why = shipped_set()
    if found is None:
        return None, why
    match = ms.nearest(found, kernel, params)
    return (match, None) if match is not None else (None, ms.not_recorded(kernel, found))


def match_for(cap: Capture | None) -> tuple[ms.Match | None, str | None]:
    """The recorded launch to show beside ``cap`` (None, and why, where none is shown: a GPU's own run
    needs none, a visitor's kernel was not recorded, no set is shipped)."""
    if cap is None or cap.measured or cap.launch.get("user_kernel"):
        return None, None
    return find(str(cap.launch.get("kernel")), dict(cap.launch.get("params") or {}))


def recorded_capture(match: ms.Match) -> tuple[Capture | None, str | None]:
    try:
        cap = _recorded_capture(
            str(match.set.root),
            match.launch.id,
            tuple(sorted(match.launch.files.items())),
            (match.set.device.get("name"), match.set.recorded_at),
        )
        return cap, None
    except ms.SetError as exc:
        return None, f"The recorded launch could not be read: {exc}"


def chart_source(match: ms.Match) -> str:
    """The chart's label line: where and when it was recorded, and (nearest) that it is not your launch."""
    label = match.set.label()
    return label if match.exact else f"{label}; {match.line()}"


def caption(match: ms.Match) -> str:
    return f"{match.set.label()} · {match.line()} · {match.set.versions_line()}"


def show_heading(match: ms.Match, what: str) -> None:
    """The beside-panel's heading and caption: which launch, where and when it ran."""
    st.subheader(f"{match.heading()}: {what}")
    st.caption(caption(match))
    if match.exact:
        return
    st.caption(
        f":orange[**Not your launch.**] {match.line()[0].upper()}{match.line()[1:]}: the set holds each "
        "kernel's default launch and the lessons' launches; your simulated run above is the one you chose."
    )


def recorded_for(cap: Capture, what: str, needs: bool = True) -> tuple[ms.Match, Capture] | None:
    """The recorded launch beside ``cap``, under its heading (``what`` it shows), or None: the line saying
    why where one is due (a built-in kernel's simulated run), or what kept the recording from being read.
    ``needs``: what the page itself needs of ``cap`` to draw anything."""
    match, why = match_for(cap)
    if match is None or not needs:
        if why and not cap.measured and not cap.launch.get("user_kernel"):
            st.caption(why)
        return None
    show_heading(match, what)
    recorded, problem = recorded_capture(match)
    if recorded is None:
        st.caption(problem)
        return None
    return match, recorded


def schedule_beside(cap: Capture) -> None:
    """Scheduling page: the recorded launch's blocks on the H200's SMs, beside the modelled schedule."""
    got = recorded_for(cap, "blocks on its SMs")
    if got is None:
        return
    match, recorded = got
    blocks = schedule.assign_waves(schedule.block_intervals(recorded.threads))
    chart(sched_figs.sm_timeline_figure(blocks, chart_source(match)), key="sched_measured_timeline")
    sms = int(blocks["sm"].nunique()) if len(blocks) else 0
    span = int(blocks["t_end_ns"].max() - blocks["t_start_ns"].min()) if len(blocks) else 0
    where = (
        "%smid and %globaltimer read inside the kernel's instrumented build, which also timed its barriers"
        if match.set.measured
        else "the simulator's stand-ins for SMs and times"
    )
    st.caption(
        f"{len(blocks):,} blocks on {sms} SMs over {span:,} ns ({where}). Your run above is the simulator's, "
        "on a modelled schedule."
    )


def _fmt_ms(ms_: float | None) -> str:  # as web/timing.fmt_ms (which imports this module)
    if ms_ is None:
        return "–"
    return f"{ms_ * 1e3:.1f} µs" if ms_ < 1 else f"{ms_:.2f} ms"


def _device_name(match: ms.Match) -> str:
    return str(match.set.device.get("name") or "the recording device")


def accesses_beside(cap: Capture) -> tuple[ms.Match, Capture] | None:
    """Memory access page: per source line, sectors or wavefronts per request, the recorded launch's
    beside your simulated run's (the same launch: counted over the blocks the GPU recorded). Returns the
    recording where it has requests (the page's every-warp heat map offers its warps), else None."""
    from visualizer.analysis import gpu_accesses
    from visualizer.figures.memory import side_by_side_figure

    got = recorded_for(cap, "its memory requests", needs=cap.requests is not None)
    if got is None:
        return None
    match, recorded = got
    if recorded.requests is None or not len(recorded.requests):
        st.caption("This recording has no memory accesses (its launch was recorded without the access lens).")
        return None
    name = _device_name(match)
    blocks = ((recorded.launch.get("accesses") or {}).get("sample") or {}).get("blocks")
    if match.exact and blocks is not None:  # one launch: your run's requests of the blocks the GPU recorded
        table = gpu_accesses.side_by_side(cap.requests, recorded.requests, blocks)
        sides = (("sim", "your run, simulated (the recorded blocks)"), ("gpu", f"recorded on {name}"))
        what = f"your run (simulated) vs {name}"
    else:  # two launches (or a recording of every thread): the pattern per request
        table = gpu_accesses.sizes_side_by_side(recorded.requests, cap.requests)
        sides = (("small", f"the recorded launch ({name})"), ("big", "your run, simulated"))
        what = "the recorded launch vs your run (simulated)"
    table.attrs["source"] = chart_source(match)
    chart(side_by_side_figure(table, sides=sides, what=what), key="mem_measured_chart")
    counts = recorded_counters(recorded.launch.get("accesses") or {})
    if counts:
        cols = st.columns(len(counts))
        for col, (name, value) in zip(cols, counts.items(), strict=True):
            col.metric(f"{name} (recorded)", f"{value:,.2f}" if isinstance(value, float) else f"{value:,}")
        sampled = (recorded.launch.get("accesses") or {}).get("sample")
        st.caption(
            "Counted over the warps that recorded ("
            + ("the sampled blocks' warps" if sampled else "every warp")
            + f"), {match.set.label()}."
        )
    capped = (recorded.launch.get("capped") or {}).get("requests")
    if capped:
        st.caption(f"The set ships the first {capped[0]:,} of the {capped[1]:,} recorded requests.")
    return match, recorded


def recorded_warps(match: ms.Match, recorded: Capture, yours) -> tuple:
    """The every-warp heat map's choice: (the recording's requests labelled with its device, date and launch,
    the line saying which warps it holds against your run's every warp)."""
    req = recorded.requests.copy()
    req.attrs["source"] = f"{chart_source(match)}; only the warps that recorded"
    warps = req[["block", "warp"]].drop_duplicates()
    blocks = sorted(int(b) for b in warps["block"].unique())
    yours_n = len(yours[["block", "warp"]].drop_duplicates()) if yours is not None else 0
    shown = ", ".join(str(b) for b in blocks[:8]) + (
        f" and {len(blocks) - 8} more" if len(blocks) > 8 else ""
    )
    line = (
        f"{_device_name(match)} recorded {len(warps):,} warps (block{'s' if len(blocks) > 1 else ''} {shown}): "
        f"a GPU's warps record their own accesses only where sampled; your simulated run recorded every one of "
        f"its {yours_n:,} warps" + ("." if match.exact else f" ({match.line()}).")
    )
    return req, line


def recorded_counters(summ: dict) -> dict:
    """The recording's memory counters, as the page's own: sectors per global request, shared wavefronts per
    request and bank conflicts (only those the launch has)."""
    out: dict = {}
    for short, word in (("ld", "load"), ("st", "store")):
        req = summ.get(f"global_{short}_requests")
        if isinstance(req, int) and req > 0 and isinstance(summ.get(f"global_{short}_sectors"), int):
            out[f"global {word} sectors / request"] = summ[f"global_{short}_sectors"] / req
    for short, word in (("ld", "load"), ("st", "store")):
        req = summ.get(f"shared_{short}_requests")
        if isinstance(req, int) and req > 0 and isinstance(summ.get(f"shared_{short}_wavefronts"), int):
            out[f"shared {word} wavefronts / request"] = summ[f"shared_{short}_wavefronts"] / req
    return out


def simt_beside(cap: Capture) -> None:
    """SIMT page: the recorded launch's branch efficiency and barrier waits (a GPU's clock), which the
    simulator cannot measure, beside your run's lanes."""
    from visualizer.analysis import branches

    got = recorded_for(cap, "branch efficiency and barrier waits")
    if got is None:
        return
    match, recorded = got
    c1, c2, c3 = st.columns(3)
    rows = recorded.branches
    eff = branches.efficiency(rows) if rows is not None and len(rows) else None
    c1.metric("branch efficiency (recorded)", "–" if eff is None else f"{eff:.1f}%")
    bars = recorded.barriers
    if bars is not None and len(bars):
        summ = branches.barrier_summary(bars)
        c2.metric("barrier wait, median (recorded)", f"{summ['wait_ns_median']:,.0f} ns")
        c3.metric("barrier wait, longest (recorded)", f"{summ['wait_ns_max']:,} ns")
        st.caption(
            f"{summ['arrivals']:,} warp arrivals timed at {summ['sites']} syncthreads (%globaltimer on "
            f"{_device_name(match)}, 32 ns steps): {match.set.label()}."
        )
    elif bars is not None:
        st.caption("The recorded launch reached no `cuda.syncthreads()`.")
    else:
        st.caption(
            "No barrier waits in this recording: "
            + (
                "it was made on the simulator, which has no clock."
                if not match.set.measured
                else "not recorded."
            )
        )


def device_times(sides: list[tuple[str, dict]]) -> tuple:
    """Compare on the simulator: each side's shipped recording (measured_set.device_time: the same launch or
    the nearest, its device and date), or the one line why there is none."""
    out = []
    for kernel, params in sides:
        match, why = find(kernel, params)
        if match is None:
            out.append(why or "no measured set is shipped with this install")
            continue
        recorded, problem = recorded_capture(match)
        out.append(problem if recorded is None else ms.device_time(match, recorded))
    return tuple(out)


def compare_beside(sides: list[tuple[str, dict]]) -> None:
    """Compare page on the simulator: A's and B's device time as recorded (the simulator has none), each
    the same launch or the nearest recorded, said so; B/A only where both were measured."""
    found = [find(kernel, params) for kernel, params in sides]
    if any(m is None for m, _ in found):
        why = next(w for m, w in found if m is None)
        if why:  # none at all where no set is shipped
            st.caption(f"No recorded device time beside this pair: {why}")
        return
    matches = [m for m, _ in found]
    the_set = matches[0].set
    st.subheader(
        f"Device time, measured on {the_set.device_words()}"
        if the_set.measured
        else "Recorded on the simulator (simulated): no device time"
    )
    st.caption(f"{the_set.label()} · {the_set.versions_line()}")
    times = []
    cols = st.columns(3)
    for col, name, match in zip(cols, ("A", "B"), matches, strict=False):
        recorded, problem = recorded_capture(match)
        ms_ = (
            (recorded.timing.get("clean_ms") if recorded is not None else None) if the_set.measured else None
        )
        times.append(ms_)
        col.metric(f"{name}: {match.launch.kernel} (recorded)", _fmt_ms(ms_))
        col.caption(problem or match.line())
    if all(t is not None and t > 0 for t in times):
        cols[2].metric("B/A (recorded)", f"×{times[1] / times[0]:.2f}")
        if not all(m.exact for m in matches):
            cols[2].caption(
                "At least one side is the nearest recorded launch, not yours: the ratio is theirs."
            )


def lesson_beside(questions, caps: dict, values: dict, answers: list, fmt) -> None:
    """Lessons whose answer the simulator can only model (a GPU time): the same question answered from the
    recorded launch, measured on the H200, beside the modelled answer. Only for the same launch (a nearest
    one is named, not answered for); ``fmt(value, unit)`` as the page formats its answers."""
    import dataclasses

    modelled = [i for i, a in enumerate(answers) if str(getattr(a, "source", "")).startswith("modelled")]
    if not modelled or any(c.measured or c.launch.get("user_kernel") for c in caps.values()):
        return
    found = {role: match_for(cap) for role, cap in caps.items()}
    missing = [why for m, why in found.values() if m is None]
    if missing:
        if missing[0]:  # none at all where no set is shipped
            st.caption(f"No measured answer beside the modelled one: {missing[0]}")
        return
    matches = {role: m for role, (m, _) in found.items()}
    the_set = next(iter(matches.values())).set
    st.subheader(
        f"The measured answer: {the_set.label()}"
        if the_set.measured
        else f"The recorded launch: {the_set.label()}"
    )
    for role, m in matches.items():
        st.caption(f"{role}: {m.line()}" if len(matches) > 1 else m.line())
    if not the_set.measured:
        st.caption("This set was recorded on the simulator: it holds no measured answer.")
        return
    if not all(m.exact for m in matches.values()):
        st.caption(
            "Not your launch, so no measured answer is given for it: the set holds the lesson's launch at its "
            "first settings."
        )
        return
    recorded = {}
    for role, m in matches.items():
        rec, problem = recorded_capture(m)
        if rec is None:
            st.caption(problem)
            return
        # the same launch from the same seed has the same arrays, which the set does not ship
        recorded[role] = dataclasses.replace(rec, inputs=caps[role].inputs, outputs=caps[role].outputs)
    for i in modelled:
        q = questions[i]
        try:
            answer = q.answer(recorded, values)
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            st.caption(
                f"Q{i + 1}: no measured answer from the recording ({' '.join(str(exc).split())[:120]})"
            )
            continue
        if not str(answer.source).startswith("measured"):
            continue
        st.metric(f"Q{i + 1}, measured on {the_set.device_words()}", fmt(answer.value, q.unit))
        st.caption(f"Computed from the recorded launch: {answer.source}")
