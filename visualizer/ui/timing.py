"""Live timing beside every page, in a fragment so refreshing it never restarts an animation."""

from __future__ import annotations

import time

import numpy as np
import streamlit as st

from visualizer import catalog
from visualizer.runner import KernelError
from visualizer.ui.session import runner_for


def numpy_baseline_ms(cap) -> float | None:
    """The kernel's numpy reference on this CPU, median of 3 (a baseline, not the kernel)."""
    if cap.launch.get("user_kernel"):
        return None  # a user's kernel has no catalog reference (its check ran in the worker)
    spec = catalog.get(cap.launch["kernel"])
    inputs = {**cap.inputs, **{k: np.zeros_like(v) for k, v in cap.outputs.items()}}
    times = []
    for _ in range(3):
        t = time.perf_counter()
        spec.reference(inputs, cap.launch["params"])
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.2f} ms"


def kernel_time_metrics(left, right, timing: dict, instrumented_label: str = "instrumented") -> None:
    """Clean and instrumented kernel time side by side; the instrumentation's cost as the delta."""
    left.metric("clean kernel", fmt_ms(timing.get("clean_ms")))
    right.metric(
        instrumented_label,
        fmt_ms(timing.get("instrumented_ms")),
        delta=f"×{timing['overhead_ratio']:.2f}" if timing.get("overhead_ratio") else None,
        delta_color="off",
    )


@st.fragment
def timing_panel() -> None:
    cap = st.session_state.get("capture")
    with st.sidebar:
        st.markdown("### Timing")
        if cap is None:
            st.caption("Run a kernel to time it.")
            return
        if st.button(
            "Time again",
            key="retime",
            help="Re-launch and re-time this kernel; the page does not rerun",
            disabled=bool(cap.launch.get("user_kernel")),  # your kernel: press Run on its page again
        ):
            try:
                fresh = runner_for(cap.launch["backend"]).capture(cap.launch["kernel"], cap.launch["params"])
                st.session_state.setdefault("timing_history", []).append(fresh.timing)
            except (catalog.LaunchError, KernelError) as exc:
                st.error(str(exc))
        history = st.session_state.get("timing_history", [])
        t = history[-1] if history else cap.timing  # captures are shared: never modify them
        if cap.measured:
            st.caption("Measured on the GPU with CUDA events (median after warm-up).")
            kernel_time_metrics(st, st, t)  # stacked: the sidebar is too narrow for two columns
            peak = cap.launch.get("peak_bandwidth_gbs")
            if t.get("clean_gbs"):
                share = f" ({t['clean_gbs'] / peak:.0%} of {peak:,.0f} GB/s peak)" if peak else ""
                st.caption(f"effective {t['clean_gbs']:,.1f} GB/s{share} · {t['clean_gflops']:,.1f} GFLOP/s")
            if t.get("torch_ms"):
                st.caption(f"torch on this GPU: {fmt_ms(t['torch_ms'])} ({t.get('torch_op', '')})")
        else:
            st.caption(
                "Simulator wall time on the CPU: not GPU time; the ratio only shows the probes' cost here."
            )
            st.metric("simulated, clean", fmt_ms(t.get("clean_ms")))
            st.metric("simulated, instrumented", fmt_ms(t.get("instrumented_ms")))
        baseline = numpy_baseline_ms(cap)
        if baseline is not None:
            st.caption(f"numpy on the CPU (baseline): {fmt_ms(baseline)}")
        if history:
            st.caption("re-timed: " + ", ".join(fmt_ms(h.get("clean_ms")) for h in history[-5:]))
