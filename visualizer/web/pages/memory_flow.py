"""Memory flow: allocate -> copy in -> kernel -> copy out -> free, with each step's time and CUDA call."""

import pandas as pd
import streamlit as st

from visualizer.analysis.transfers import (
    MODEL_GPUS,
    flow_model,
    flow_steps,
    fmt_bytes,
    fmt_us,
    modelled_gpu_label,
    modelled_gpu_timing,
)
from visualizer.figures.memory_flow import VIEWS, compile_label, memory_flow_figure
from visualizer.web.charts import chart
from visualizer.web.session import from_link, require_capture, show_link_notices, to_link

st.title("Memory flow")
st.markdown(
    "A GPU kernel only sees device memory, so every run is five host-side steps: **allocate** device "
    "buffers, **copy** the inputs **host → device**, launch the **kernel**, **copy** the results "
    "**device → host**, and **free** the buffers. **Try:** run *Vector add* with a large `n` on the GPU "
    "and switch to the log view: the two copies can cost more than the kernel, which is why real code "
    "keeps data on the device between kernels."
)
cap = require_capture()
launch, timing = cap.launch, cap.timing
bytes_in = int(sum(a.nbytes for a in cap.inputs.values()))
bytes_out = int(sum(a.nbytes for a in cap.outputs.values()))

show_link_notices(from_link("flow_view", "timeline", list(VIEWS)), from_link("flow_animate", False))
left, right = st.columns([3, 1])
view = left.radio("view", list(VIEWS), format_func=VIEWS.get, horizontal=True, key="flow_view")
animate = right.toggle("step through", key="flow_animate", help="one frame per step")
to_link("flow_view", "flow_animate")

try:
    rows = flow_steps(timing, launch, bytes_in, bytes_out)
    fig = memory_flow_figure(timing, launch, bytes_in, bytes_out, view=view, animate=animate)
except (ValueError, KeyError) as exc:
    st.error(f"No memory-flow timing for this run: {exc}")
    st.stop()

total_us = sum(r["dur_us"] for r in rows)
kernel_us = next(r["dur_us"] for r in rows if r["key"] == "kernel")
if not cap.measured:
    st.markdown("**Measured here: the simulator on the CPU**")
chart(fig, key="flow_chart")
# the numbers under the chart they sum up, so the chart starts on a 720-px screen
c1, c2, c3, c4 = st.columns([2, 2, 3, 2])  # data in / out is the longest value
c1.metric("whole flow", fmt_us(total_us))
c2.metric("kernel share", f"{100 * kernel_us / total_us:.1f} %" if total_us else "–")
unit_in, unit_out = fmt_bytes(bytes_in).split()[-1], fmt_bytes(bytes_out).split()[-1]
c3.metric(
    "data in / out",
    f"{fmt_bytes(bytes_in).split()[0]} / {fmt_bytes(bytes_out)}"  # one unit when both share it
    if unit_in == unit_out
    else f"{fmt_bytes(bytes_in)} / {fmt_bytes(bytes_out)}",
)
c4.metric(
    "compile time",
    fmt_us(float(timing.get("compile_ns", 0)) / 1e3),
    help=compile_label(launch) + "; paid once per kernel build, so it is not part of the flow",
)

table = pd.DataFrame(
    {
        "step": [r["label"] for r in rows],
        "CUDA call": [r["call"] for r in rows],
        "start (µs)": [round(r["start_us"], 2) for r in rows],
        "duration (µs)": [round(r["dur_us"], 2) for r in rows],
        "share (%)": [round(r["share"], 2) for r in rows],
        "data arrays moved": [fmt_bytes(r["bytes"]) if r["bytes"] is not None else "" for r in rows],
    }
)
st.dataframe(table, hide_index=True)
if cap.measured:
    clock = (
        "Measured (GPU): host wall-clock time of each step, synchronised with the device before and after; "
        "the kernel step includes launch overhead (the sidebar's CUDA-event times do not)."
    )
else:
    how = (
        "its kernel step is the kernel compiled for the CPU, its build time apart (compile time)"
        if launch.get("sim_engine") == "compiled"
        else "its kernel runs every CUDA thread as Python code, one after another on one OS thread"
    )
    clock = (
        f"Simulator wall time on the CPU (the simulator 'copies' are numpy copies and {how}), so the "
        "proportions say nothing about a real GPU."
    )
st.caption(
    f"{clock} Bytes are the kernel's data arrays: inputs ({', '.join(cap.inputs)}) go to the device, "
    f"outputs ({', '.join(cap.outputs)}) come back. The capture also copies the zeroed outputs and the "
    f"instrumentation's trace buffers both ways, so the timed copies move more than these bytes. "
    f"Data source: {cap.source}."
)

st.subheader("The same bytes on a GPU (modelled)" if not cap.measured else "Measured beside modelled")
show_link_notices(from_link("flow_gpu", "H200", list(MODEL_GPUS)))
gpu = st.selectbox(
    "GPU model (modelled)", list(MODEL_GPUS), key="flow_gpu",
    format_func=lambda g: f"{g}: {MODEL_GPUS[g]['link']}, {MODEL_GPUS[g]['mem']}"
    + (" (as measured on the H200)" if MODEL_GPUS[g].get("measured") else " (nominal peaks)"),
)  # fmt: skip
to_link("flow_gpu")
arrays_in, arrays_out = len(cap.inputs), len(cap.outputs)
modelled = modelled_gpu_timing(bytes_in, bytes_out, gpu, arrays_in, arrays_out)
steps = modelled["host_steps_ns"]
copies_ns = steps["copy_in"] + steps["copy_out"]
g1, g2 = st.columns(2)
g1.metric("copies (modelled)", fmt_us(copies_ns / 1e3))
g2.metric(
    "kernel (modelled)",
    fmt_us(steps["kernel"] / 1e3),
    delta=f"copies take ×{copies_ns / steps['kernel']:,.0f} the kernel's time" if steps["kernel"] else None,
    delta_color="off",
)
chart(
    memory_flow_figure(modelled, launch, bytes_in, bytes_out, view=view, animate=animate, modelled_gpu=gpu),
    key="flow_modelled_chart",
)
m = flow_model(gpu)
crossover = m["h2d_latency_ns"] * m["h2d_gbs"]  # bytes where a host→device copy's bytes cost its latency
st.caption(
    f"{modelled_gpu_label(gpu)}; bandwidths: {m['bandwidths']}. Each of the {arrays_in} input array(s) pays the host→device latency and "
    f"each of the {arrays_out} output(s) the device→host one, before a byte moves: below about "
    f"{fmt_bytes(crossover)} a host→device copy is mostly latency. The device memory ({m['mem_gbs']:,.0f} GB/s) "
    f"is ×{m['mem_gbs'] / m['h2d_gbs']:,.0f} the host link's {m['h2d_gbs']:g} GB/s, which is why real code "
    "keeps data on the device between kernels."
    + (
        " On the simulator the measured chart above is numpy copies and slow Python, so it says little "
        "about a GPU."
        if not cap.measured
        else ""
    )
)
if cap.measured:
    measured_steps = cap.timing["host_steps_ns"]
    st.dataframe(
        pd.DataFrame(
            {
                "step": [r["label"] for r in rows],
                "measured (µs)": [round(float(measured_steps[r["key"]]) / 1e3, 2) for r in rows],
                f"modelled, {gpu} (µs)": [round(steps[r["key"]] / 1e3, 2) for r in rows],
            }
        ),
        hide_index=True,
    )
    st.caption(
        f"Measured: this run on {launch['device_name']} (host wall time of each step, synchronised). "
        "Modelled: the constants above for the kernel's data arrays only; the run's own copies also "
        "move the zeroed outputs and the trace buffers, and its kernel is the instrumented build."
    )
