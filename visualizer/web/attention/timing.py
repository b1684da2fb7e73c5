"""Timings: this session's runs and the H200 recording of attention_bench beside torch SDPA."""

import json

import pandas as pd
import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.figures.attention import (
    SDPA_DEFAULT,
    TIMING_ALIASES,
    attention_timing_figure,
    rerun_command,
    timing_modes,
    timing_ms_table,
    timing_rows,
    timing_source,
)
from visualizer.web.attention.common import ATTENTION_KERNELS, timings_file
from visualizer.web.charts import chart
from visualizer.web.session import (
    from_link,
    show_link_notices,
    to_link,
)
from visualizer.web.timing import kernel_time_metrics


def _read_timings() -> dict | None:
    """The recorded timings document, or None after a one-line error (the rest of the page still works)."""
    try:
        doc = json.loads(timings_file().read_text())
        if not timing_modes(doc):
            raise ValueError("no recorded run in it")
        return doc
    except FileNotFoundError:
        why = "not recorded yet (on a GPU: python -m visualizer.tools.attention_bench --json FILE)"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__  # without this machine's path
    except ValueError as exc:
        why = str(exc).splitlines()[0]
    st.error(f"Cannot read the recorded timings {timings_file().name}: {why}")
    return None


def session_timing(cap: Capture) -> None:
    """This session's own GPU run of an attention kernel, next to the recorded table."""
    t = cap.timing
    st.markdown(
        f"**This session's run** — measured (GPU) on {cap.launch['device_name']}: `{cap.launch['kernel']}` "
        f"{cap.launch['params']} (device time, launches queued behind a spin kernel; median after warm-up)."
    )
    c1, c2, c3 = st.columns(3)
    kernel_time_metrics(c1, c2, t, "instrumented kernel")
    c3.metric("clean TFLOP/s", f"{t['clean_gflops'] / 1e3:.2f}" if t.get("clean_gflops") else "–")


def _pick_mode(cap: Capture, modes: list[str]) -> str:
    """Causal or not, kept in the link; at first the mode of this session's attention run."""
    p = cap.launch["params"]
    ran = "causal" if cap.launch["kernel"] in ATTENTION_KERNELS and p.get("causal") else "non-causal"
    show_link_notices(from_link("fa_timing_mode", ran if ran in modes else modes[0], modes))
    if st.session_state.fa_timing_mode not in modes:  # a file recorded since holds other modes
        st.session_state.fa_timing_mode = modes[0]
    mode = st.radio(
        "attention mask",
        modes,
        key="fa_timing_mode",
        horizontal=True,
        label_visibility="collapsed",  # one row: the options say what they are; the chart sits under it
        help="causal: each query attends only to keys at or before it, so half the score matrix is skipped",
    )
    to_link("fa_timing_mode")
    return mode


def _headline(df: pd.DataFrame) -> str | None:
    """Ours (fast) against SDPA's default and our teaching kernel at the longest recorded length."""
    longest = df[df["seq_len"] == df["seq_len"].max()]
    ms = dict(zip(longest["impl"].map(lambda i: TIMING_ALIASES.get(i, i)), longest["ms"], strict=True))
    names = dict(
        zip(longest["impl"].map(lambda i: TIMING_ALIASES.get(i, i)), longest["implementation"], strict=True)
    )
    fast, sdpa, teaching = "ours fast (clean)", SDPA_DEFAULT, "ours flash (clean)"
    if fast not in ms or sdpa not in ms:
        return None
    ratio = ms[sdpa] / ms[fast]
    line = (
        f"At seq_len {int(longest['seq_len'].iloc[0])} our fast kernel takes {ms[fast]:.3g} ms and "
        f"{names[sdpa]} {ms[sdpa]:.3g} ms: "
        + (f"ours is {ratio:.2f}× faster" if ratio >= 1 else f"SDPA's default is {1 / ratio:.2f}× faster")
    )
    if teaching in ms:
        line += (
            f"; the teaching kernel takes {ms[teaching]:.3g} ms ({ms[teaching] / ms[fast]:.2f}× the fast one)"
        )
    return line + "."


def timing_section(cap: Capture) -> None:
    st.subheader("H200 timings: ours vs PyTorch (unfused, SDPA)")
    if cap.measured:
        if cap.launch["kernel"] in ATTENTION_KERNELS:
            session_timing(cap)
        st.caption("The chart and tables below are a recorded H200 run, not this session's run.")
    else:
        st.caption(  # a caption, not a box: the chart must start above a 720-px projector's fold
            ":orange[**Nothing on this page is GPU time from this session**] (it runs on the CUDA simulator: "
            "CPU time of Python running every thread). The chart and tables below are a recorded NVIDIA H200 "
            "run, not this session's."
        )
    doc = _read_timings()
    if doc is None:
        return
    mode = _pick_mode(cap, timing_modes(doc))
    run = doc["runs"][mode]
    try:
        df = timing_rows(doc, mode)
        cfg = run["config"]
        note = (
            f"batch {cfg['batch']}, {cfg['heads']} heads, head_dim {cfg['head_dim']}, {cfg['dtype']}, {mode}"
        )
        source = timing_source(run)
        fig = attention_timing_figure(df, source, note)
    except (ValueError, KeyError, TypeError) as exc:
        st.error(f"Cannot draw the recorded timings {timings_file().name}: {exc}")
        return
    chart(fig, key="fa_timing_chart")
    headline = _headline(df)
    if headline:
        st.markdown(headline)
    table = timing_ms_table(df)
    st.markdown(
        f"**Milliseconds per forward pass, {mode}** (median device time; None: not timed at that length)"
    )
    st.dataframe(table, column_config={c: st.column_config.NumberColumn(format="%.4g") for c in table})
    with st.expander("All recorded columns: launch overhead, TFLOP/s, memory, registers, occupancy, error"):
        shown = df.drop(columns=["causal"]).rename(columns=RECORDED_COLUMNS)
        first = [c for c in RECORDED_COLUMNS.values() if c in shown.columns]
        st.dataframe(
            shown[first + [c for c in shown.columns if c not in first]],
            hide_index=True,
            column_config={
                c: st.column_config.NumberColumn(format="%.2e")
                for c in ("max |error| vs torch unfused", "rel. error vs float64")
            },
        )
        st.caption(" ".join(f"**{k}**: {cfg[k]}." for k in DEFINED if cfg.get(k)))
    versions = ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items() if v)
    recorded = (
        f"Recorded by attention_bench; to run it again: `{rerun_command(run['command'])}`"
        if run.get("command")
        else f"Converted from {run.get('converted_from', 'an unnamed source')}"
    )
    st.caption(
        f"{source}; {note}. SDPA is torch.nn.functional.scaled_dot_product_attention: *default* as a user "
        "calls it (torch picks a backend), *math* forced to its reference backend; all fp32 with TF32 off. "
        f"Versions: {versions}. {recorded} ({timings_file().name})."
    )


# attention_bench's columns as the expander shows them, in this order (others follow as recorded)
RECORDED_COLUMNS = {
    "implementation": "implementation",
    "seq_len": "seq_len",
    "ms": "ms (median)",
    "launch_us": "launch µs",
    "tflops": "TFLOP/s",
    "peak_mb": "peak MB",
    "registers": "registers",
    "smem_bytes": "smem B",
    "local_bytes": "local B/thread",
    "warps_per_sm": "warps per SM",
    "occupancy": "occupancy",
    "rel_err_f64": "rel. error vs float64",
    "max_abs_err": "max |error| vs torch unfused",
    "backend": "SDPA backend",
    "queue_covered": "queue covered",
    "impl": "recorded as",
}


DEFINED = ("timing", "launch_us", "flops", "peak_mb", "rel_err_f64", "max_abs_err", "registers", "backend")
