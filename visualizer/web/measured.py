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


def match_for(cap: Capture | None) -> tuple[ms.Match | None, str | None]:
    """The recorded launch to show beside ``cap`` (None, and why, where none is shown: a GPU's own run
    needs none, a visitor's kernel was not recorded, no set is shipped)."""
    if cap is None or cap.measured or cap.launch.get("user_kernel"):
        return None, None
    return ms.find(str(cap.launch.get("kernel")), dict(cap.launch.get("params") or {}))


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


def schedule_beside(cap: Capture) -> None:
    """Scheduling page: the recorded launch's blocks on the H200's SMs, beside the modelled schedule."""
    match, why = match_for(cap)
    if match is None:
        if why and not cap.measured and not cap.launch.get("user_kernel"):
            st.caption(why)
        return
    show_heading(match, "blocks on its SMs")
    recorded, problem = recorded_capture(match)
    if recorded is None:
        st.caption(problem)
        return
    blocks = schedule.assign_waves(schedule.block_intervals(recorded.threads))
    chart(sched_figs.sm_timeline_figure(blocks, chart_source(match)), key="sched_measured_timeline")
    sms = int(blocks["sm"].nunique()) if len(blocks) else 0
    span = int(blocks["t_end_ns"].max() - blocks["t_start_ns"].min()) if len(blocks) else 0
    where = (
        "%smid and %globaltimer read inside the kernel" if match.set.measured else "the simulator's stand-ins"
    )
    st.caption(
        f"{len(blocks):,} blocks on {sms} SMs over {span:,} ns ({where}; the instrumented build, with the "
        "lenses' probes). Your run above is the simulator's, on a modelled schedule."
    )


def timing_beside(cap: Capture) -> None:
    """Timing panel (sidebar): the recorded launch's device time and launch overhead under the simulator's
    caption, which says no kernel time is measured here."""
    from visualizer.web.timing import fmt_ms, fmt_us

    match, _ = match_for(cap)
    if match is None:
        return
    st.markdown(f"**{match.heading()}**")
    st.caption(f"{match.set.label()} · {match.line()}")
    recorded, problem = recorded_capture(match)
    if recorded is None:
        st.caption(problem)
        return
    t = recorded.timing
    if not match.set.measured or t.get("clean_ms") is None or t.get("launch_overhead_us") is None:
        st.caption("This recording has no device time (it was not made on a GPU).")
        return
    st.metric(
        "device time (H200)" if "H200" in match.set.device_words() else "device time", fmt_ms(t["clean_ms"])
    )
    st.metric("launch overhead (host)", fmt_us(t["launch_overhead_us"]))
    st.caption(
        "Device time: CUDA events around launches queued behind a spin kernel (the clean build, median); "
        "the host's launch overhead is Python and Numba queueing one launch."
    )
