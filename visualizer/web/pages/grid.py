"""Grid layout: the launched grid as blocks x threads, coloured by block/warp/lane/SM/activity,
with an animation of the order threads started in."""

import streamlit as st

from visualizer.figures.grid import (
    AGGREGATE_ABOVE,
    COLOR_BY,
    GPU_ORDER_LABEL,
    SIM_ORDER_LABEL,
    available_colorings,
    cell_level,
    grid_figure,
    is_two_d,
)
from visualizer.specs.launch import ceil_div
from visualizer.web.charts import chart
from visualizer.web.did_work import did_work
from visualizer.web.session import from_link, require_capture, show_link_notices, to_link

st.title("Grid layout")
st.markdown(
    "A kernel launch is a **grid of blocks**, each a block of **threads**; the hardware runs threads in "
    "**warps** of 32 consecutive threads, on **SMs**. Every cell below is one thread the kernel recorded. "
    "**Try:** run *Vector add* with `n=200, block=48`, colour by *active / idle* and press ▶: the last "
    "block overhangs the data, and each block's second warp has threads in only 16 of its 32 lanes. Then run *Matrix multiply* "
    "to see a 2-D grid, and compare the simulator's order with a GPU's measured start times."
)
cap = require_capture()
launch = cap.launch
threads = cap.threads

options = available_colorings(launch)
show_link_notices(from_link("grid_color_by", "active", options), from_link("grid_animate", True))
if st.session_state.get("grid_color_by") not in options:
    st.session_state.grid_color_by = "active" if "active" in options else options[0]
left, right = st.columns([3, 1])
color_by = left.radio(
    "colour by", options, format_func=COLOR_BY.get, horizontal=True, key="grid_color_by",
    help="idle threads (no work, e.g. past n) are grey in every colouring",
)  # fmt: skip
animate = right.toggle("animate", key="grid_animate", help="Play replays the order threads started in")
to_link("grid_color_by", "grid_animate")

try:
    fig = grid_figure(threads, launch, color_by, animate)
except (ValueError, KeyError) as exc:
    st.error(f"Cannot draw this grid: {exc}")
    st.stop()
chart(fig, key="grid_chart")  # right under the controls: on a 720-px projector it starts on screen

work_label, active, work_help = did_work(cap)
warps_per_block = ceil_div(launch["threads_per_block"], 32)
last_warp_lanes = launch["threads_per_block"] - 32 * (warps_per_block - 1)
c1, c2, c3, c4 = st.columns(4)
c1.metric("threads launched", f"{launch['threads']:,}")
c2.metric(work_label, f"{active:,}", help=work_help)
c3.metric("idle" if work_label == "did work" else "the rest", f"{launch['threads'] - active:,}",
          help=f"threads launched that did not count as '{work_label}'")  # fmt: skip
c4.metric(
    "warps per block",
    warps_per_block,
    help=f"the last warp has threads in only {last_warp_lanes} of its 32 lanes"
    if last_warp_lanes < 32
    else "every warp is full",
)

notes = []
level = cell_level(launch)
if is_two_d(launch):
    notes.append(
        "2-D launch: each thread sits at its global position (x = blockIdx.x·blockDim.x + threadIdx.x, "
        "y = blockIdx.y·blockDim.y + threadIdx.y)"
        + ("; black lines are block borders." if level == "thread" else ", drawn here one block per cell.")
    )
else:
    notes.append(
        "1-D launch: one row per block"
        + ("; dotted lines split each block into warps of 32 threads." if level == "thread" else ".")
    )
if level != "thread":
    notes.append(
        f"Over {AGGREGATE_ABOVE:,} threads, so one cell per {level}: hover shows the {level} range, its active "
        "thread count and its SMs; lane colouring needs one cell per thread."
    )
if animate and len(fig.frames) <= 1:
    notes.append(
        "Every thread's recorded start fell on the same timer tick, so there is a single frame: "
        "try a bigger launch to see blocks start at different times."
    )
elif animate:
    if cap.measured:
        notes.append(
            f"Animation frames: {GPU_ORDER_LABEL} (each thread's %globaltimer at its start, bucketed); a cell "
            "lights up once it has started."
        )
    else:
        notes.append(
            f"Animation frames: {SIM_ORDER_LABEL}. The simulator's host clock only gives an order; "
            "use the GPU backend for measured start times."
        )
if launch.get("recorded_per") == "warp":
    notes.append("This launch recorded SM and times once per warp (lane 0); all lanes of a warp share them.")
if not cap.measured:
    notes.append("SM ids are modelled on the simulator (blocks placed round-robin over 132 SMs).")
st.caption(" ".join(notes) + f" Data source: {cap.source}.")
