"""The host-side life of one run: allocate -> copy host->device -> kernel -> copy device->host -> free,
with each step's measured duration (``timing["host_steps_ns"]``) and the CUDA call it stands for.

JIT compile time (``timing["compile_ns"]``) is shown beside the flow, never inside it.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from visualizer.analysis.transfers import flow_steps, fmt_bytes, fmt_us, modelled_gpu_label
from visualizer.figures.common import frame_slider, frame_step, place_controls, play_pause, titled

VIEWS = {
    "timeline": "timeline (µs, one step after another)",
    "log": "duration (log scale)",
    "percent": "share of the flow (%)",
}
STEP_COLORS = {
    "allocate": "#9467bd",
    "copy_in": "#1f77b4",
    "kernel": "#2ca02c",
    "copy_out": "#ff7f0e",
    "free": "#8c564b",
}
PLOT_PX = 300  # height of the bars' plot area
GPU_CLOCK_LABEL = "measured (GPU): host wall time of each step, synchronised with the device"
SIM_CLOCK_LABEL = "simulator wall time on the CPU (the simulator 'copies' are numpy copies)"


def compile_label(launch: dict) -> str:
    if launch["backend"] == "gpu":
        return "JIT compile + warm-up launch of both builds"
    return "kernel build + setup (simulator: no machine code)"


def _tick(r: dict) -> str:
    extra = f" · {fmt_bytes(r['bytes'])}" if r["bytes"] is not None else ""
    return f"<b>{r['label']}</b><br><span style='font-size:11px'>{r['call']}{extra}</span>"


def _hover(r: dict, measured: bool) -> str:
    lines = [
        f"<b>{r['label']}</b>",
        f"CUDA: {r['call']}",
        f"here (Numba): {r['numba']}",
        f"starts {fmt_us(r['start_us'])} into the flow",
        f"takes {fmt_us(r['dur_us'])} ({r['share']:.1f} % of the flow)",
    ]
    if r["bytes"] is not None:
        lines.append(f"moves {fmt_bytes(r['bytes'])} of data arrays")
        if r["dur_us"] > 0:
            rate = r["bytes"] / (r["dur_us"] * 1e-6) / 1e9
            lines.append(f"{rate:,.2f} GB/s" + ("" if measured else " (numpy copy on the CPU)"))
    return "<br>".join(lines)


def memory_flow_figure(
    timing: dict,
    launch: dict,
    bytes_in: int,
    bytes_out: int,
    view: str = "timeline",
    animate: bool = False,
    modelled_gpu: str | None = None,
) -> go.Figure:
    """Horizontal step bars: sequential on a linear µs axis, durations on a log axis, or shares in %.

    ``modelled_gpu``: ``timing`` is :func:`modelled_gpu_timing` for that GPU, and the figure says so.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
    measured = launch["backend"] == "gpu" and modelled_gpu is None
    rows = flow_steps(timing, launch, bytes_in, bytes_out)
    labels = [_tick(r) for r in rows]
    total = sum(r["dur_us"] for r in rows)
    if view == "timeline":
        x = [r["dur_us"] for r in rows]
        base = [r["start_us"] for r in rows]
        x_axis = {"title": "time since the first step (µs, linear)", "type": "linear",
                  "range": [0, max(total, 1e-3) * 1.02]}  # fmt: skip
    elif view == "log":
        x = [max(r["dur_us"], 1e-3) for r in rows]
        base = None
        lo = math.floor(math.log10(min(x)))  # bars start a decade below the shortest step
        hi = math.log10(max(x)) + 0.3
        x_axis = {"title": "duration (µs, log scale)", "type": "log", "range": [lo, hi]}
    else:
        x = [r["share"] for r in rows]
        base = None
        x_axis = {"title": "share of the flow's time (%)", "type": "linear", "range": [0, 105]}
    text = [
        f"{fmt_us(r['dur_us'])}" if view != "percent" else f"{r['share']:.1f} %  ({fmt_us(r['dur_us'])})"
        for r in rows
    ]
    bar = go.Bar(
        y=labels, x=x, base=base, orientation="h", text=text, textposition="auto",
        marker={"color": [STEP_COLORS[r["key"]] for r in rows]},
        hovertext=[_hover(r, measured) for r in rows], hovertemplate="%{hovertext}<extra></extra>",
        cliponaxis=False,
    )  # fmt: skip
    clock = GPU_CLOCK_LABEL if measured else SIM_CLOCK_LABEL
    if modelled_gpu is not None:
        clock = modelled_gpu_label(modelled_gpu)
        bar.hovertext = [h.replace(" (numpy copy on the CPU)", " (modelled)") for h in bar.hovertext]
    fig = go.Figure(data=[bar])
    compile_ms = float(timing.get("compile_ns", 0)) / 1e6
    title = titled(f"Memory flow of {launch['kernel']}: {fmt_us(total)} in 5 steps", clock)
    top = 66 + 22 * title["text"].count("<br>")  # room for each line of the source
    fig.update_layout(
        title={**title, "x": 0},
        height=PLOT_PX + top + (190 if animate else 60),
        margin={"l": 20, "r": 30, "t": top, "b": 190 if animate else 60},
        xaxis={**x_axis, "autorange": False, "zeroline": False},
        yaxis={
            "categoryorder": "array",
            "categoryarray": labels,
            "autorange": "reversed",
            "automargin": True,
        },
        showlegend=False,
        bargap=0.35,
        annotations=[]
        if modelled_gpu is not None
        else [
            {
                "text": f"not in the flow: {compile_label(launch)} {compile_ms:,.1f} ms",
                "xref": "paper",
                "yref": "paper",
                "x": 1,
                "y": 1.0,
                "xanchor": "right",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 12, "color": "#555"},
            }  # fmt: skip
        ],
    )
    if animate:
        _add_steps_animation(fig, rows, x, text, PLOT_PX)
    return fig


def _add_steps_animation(fig: go.Figure, rows: list[dict], x: list[float], text: list[str], plot_px: int):
    """One frame per step: the bars up to that step appear, later ones are still empty."""
    frames, steps = [], []
    for k, r in enumerate(rows):
        shown_x = [v if i <= k else 0 for i, v in enumerate(x)]
        shown_text = [t if i <= k else "" for i, t in enumerate(text)]
        frames.append(go.Frame(name=r["key"], data=[go.Bar(x=shown_x, text=shown_text)], traces=[0]))
        steps.append(frame_step(r["key"], f"{k + 1}. {r['label']}"))
    fig.frames = frames
    fig.update_layout(
        sliders=[frame_slider(steps, "step ", -60 / plot_px, active=len(steps) - 1)],  # opens on all 5 steps
        updatemenus=[play_pause(-150 / plot_px, frame_ms=900, from_current=False)],
    )
    place_controls(fig)
