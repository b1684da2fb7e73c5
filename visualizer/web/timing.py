"""Live timing beside every page, in a fragment so refreshing it never restarts an animation."""

from __future__ import annotations

import time

import numpy as np
import streamlit as st

from visualizer.engine.run.runner import KernelError
from visualizer.specs import catalog
from visualizer.web import measured
from visualizer.web.session import runner_for


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


def fmt_us(us: float | None) -> str:
    return "–" if us is None else fmt_ms(us / 1e3)


DEVICE_TIME_HELP = (
    "GPU time of the kernel alone: CUDA events around each launch, all queued behind a short spin "
    "kernel so the GPU never waits for Python between them (NVIDIA nvbench's method). Median of the repeats."
)
LAUNCH_HELP = (
    "Host time for Python and Numba's dispatcher to queue one launch (a loop of launches, not "
    "synchronised). A real cost of every call: for small kernels it is far more than the GPU time."
)


def kernel_time_metrics(left, right, timing: dict, instrumented_label: str = "instrumented") -> None:
    """Clean and instrumented kernel time side by side; the instrumentation's cost as the delta."""
    measured = "method" in timing and "launch_overhead_us" in timing  # GPU device time
    left.metric("clean kernel", fmt_ms(timing.get("clean_ms")), help=DEVICE_TIME_HELP if measured else None)
    right.metric(
        instrumented_label,
        fmt_ms(timing.get("instrumented_ms")),
        delta=f"×{timing['overhead_ratio']:.2f}" if timing.get("overhead_ratio") else None,
        delta_color="off",
        help=DEVICE_TIME_HELP if measured else None,
    )


def gpu_timing_notes(t: dict) -> list[str]:
    """Captions under the GPU metrics: the cross-checks and the comparison, from timing.json fields."""
    notes = []
    if t.get("torch_ms") is not None:
        line = f"torch, {t.get('torch_op', '')}: {fmt_ms(t['torch_ms'])} on the GPU"
        if t.get("torch_launch_overhead_us") is not None:
            line += f", {fmt_us(t['torch_launch_overhead_us'])} to launch"
        notes.append(line)
    elif t.get("torch_error"):
        notes.append(f"torch baseline failed: {t['torch_error']}")
    if t.get("kernel_span_ns") is not None:
        notes.append(
            f"recorded span (in-kernel %globaltimer, instrumented): {fmt_ms(t['kernel_span_ns'] / 1e6)}"
        )
    if t.get("one_launch_event_ms") is not None:
        notes.append(
            f"events around one launch (the naive way, includes dispatch): {fmt_ms(t['one_launch_event_ms'])}"
        )
    method = t.get("method") or {}
    if method.get("repeats"):
        flushed = "L2 flushed before each (memory-bound)" if method.get("l2_flush") else "warm L2"
        notes.append(
            f"median of {method['repeats']} behind a {method.get('spin_us', 0):,.0f} µs spin; {flushed}"
        )
    return notes


def sim_time_caption(t: dict) -> str:
    """The simulator's times, said for what they are: CPU time of Python simulating each thread, which
    ranks nothing about the kernel (Compare ranks counted sectors and a named model instead)."""
    took = t.get("instrumented_ms") or t.get("clean_ms")
    cpu = t.get("simulator_cpu_s") or {}
    how = "Python running every thread"
    if t.get("sim_engine") == "compiled" and "instrumented_compile" in cpu:
        compile_s = cpu["instrumented_compile"]
        how = "the kernel compiled for the CPU; " + (
            f"compiling it took {fmt_ms(compile_s * 1e3)} more" if compile_s > 0 else "compiled before, kept"
        )
    return (
        "No GPU here: no kernel time is measured, and none is shown. "
        + (f"The simulation took {fmt_ms(took)} of CPU time ({how}); " if took else "")
        + "that is the simulator's speed, not the kernel's, and a clean and an instrumented run's times "
        "differ by its noise. The counts (sectors, wavefronts, bank conflicts, branch efficiency) are on "
        "the pages and in Compare."
    )


def timing_beside(cap) -> None:
    """Timing panel (sidebar): the recorded launch's device time and launch overhead under the simulator's
    caption, which says no kernel time is measured here."""
    match, _ = measured.match_for(cap)
    if match is None:
        return
    st.markdown(f"**{match.heading()}**")
    st.caption(f"{match.set.label()} · {match.line()}")
    recorded, problem = measured.recorded_capture(match)
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


@st.fragment
def timing_panel() -> None:
    cap = st.session_state.get("capture")
    page = st.session_state.get("page")
    if page == "lessons" or (page == "your_kernel" and not (cap and cap.launch.get("user_kernel"))):
        return  # the sidebar's run is not on these pages: only the visitor's own kernel is timed here
    with st.sidebar:
        st.markdown("### Timing")
        if cap is None:
            st.caption("Run a kernel to time it.")
            return
        if page == "your_kernel" and st.session_state.get("uk_error"):
            st.caption("Of your previous run: the last Run failed.")
        if st.button(
            "Time again",
            key="retime",
            help="Re-launch and re-time this kernel; the page does not rerun",
            disabled=bool(cap.launch.get("user_kernel")),  # your kernel: press Run on its page again
        ):
            try:
                fresh = runner_for(cap.launch["backend"]).capture(
                    cap.launch["kernel"], cap.launch["params"], fresh=True
                )
                st.session_state.setdefault("timing_history", []).append(fresh.timing)
            except (catalog.LaunchError, KernelError) as exc:
                st.error(str(exc))
        history = st.session_state.get("timing_history", [])
        t = history[-1] if history else cap.timing  # captures are shared: never modify them
        if cap.measured:
            if "launch_overhead_us" in t:
                st.caption(
                    "Measured on the GPU: device time (CUDA events queued behind a spin kernel, "
                    "as nvbench does) and, separately, the host's launch overhead."
                )
            else:  # a capture recorded before device time was measured this way
                st.caption("Measured on the GPU with CUDA events around single launches (includes dispatch).")
            kernel_time_metrics(st, st, t)  # stacked: the sidebar is too narrow for two columns
            if t.get("launch_overhead_us") is not None:
                st.metric("launch overhead (host)", fmt_us(t["launch_overhead_us"]), help=LAUNCH_HELP)
            if t.get("queue_covered") is False:
                st.warning(
                    "The GPU waited for Python during timing (the spin kernel did not cover the queued "
                    "launches): these device times may include host dispatch."
                )
            peak = cap.launch.get("peak_bandwidth_gbs")
            if t.get("clean_gbs"):
                share = f" ({t['clean_gbs'] / peak:.0%} of {peak:,.0f} GB/s peak)" if peak else ""
                st.caption(f"effective {t['clean_gbs']:,.1f} GB/s{share} · {t['clean_gflops']:,.1f} GFLOP/s")
            for note in gpu_timing_notes(t):
                st.caption(note)
        else:
            st.caption(sim_time_caption(t))
            timing_beside(cap)  # the same launch's device time, recorded on the H200 (shipped)
        baseline = numpy_baseline_ms(cap)
        if baseline is not None:
            st.caption(f"numpy on the CPU (baseline): {fmt_ms(baseline)}")
        if history:
            st.caption("re-timed: " + ", ".join(fmt_ms(h.get("clean_ms")) for h in history[-5:]))
