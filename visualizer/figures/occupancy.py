"""Occupancy figures: the calculator's sweeps and limits (modelled) and active warps over time.

Builders are pure (numbers or DataFrames in, ``go.Figure`` out). The data helpers turn a threads
table into active warps per SM over time with an event sweep (measured on a GPU), or model the same
for the CUDA simulator, whose blocks run one at a time and so say nothing about occupancy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizer.analysis.occupancy import (
    LIMIT_NAMES,
    WARP_SIZE,
    Arch,
    Occupancy,
    get_arch,
    sweep_threads,
)
from visualizer.analysis.occupancy_timeline import (  # noqa: F401  (the page and tests import them from here too)
    SIM_ACHIEVED_SOURCE,
    ImpactSweeps,
    _sm_areas,
    achieved_warps_per_sm,
    active_warps_over_time,
    max_dynamic_smem_optin,
    modelled_active_warps,
    modelled_label,
    occupancy_opted_in,
)

KB = 1024
LINE_COLOUR = "#1f77b4"
CURRENT_COLOUR = "#d62728"
LIMITER_COLOUR = "#d62728"
OTHER_COLOUR = "#9aa5b1"
ACHIEVED_COLOUR = "#2ca02c"
BUILD_COLOURS = {"instrumented": "#ff7f0e", "clean": "#2ca02c"}
LIMIT_LABELS = {
    "warps": "warps",
    "registers": "registers",
    "shared_memory": "shared memory",
    "blocks": "block slots",
    "barriers": "barriers",
}
IMPACT_TITLES = (  # short: three titles side by side must fit a 1280-px-wide page without touching
    "varying block size",
    "varying registers per thread",
    "varying shared memory per block",
)
CURRENT_NAME = "this configuration"


def _hover(points: list[tuple[int, Occupancy]]) -> np.ndarray:
    return np.array([[r.blocks_per_sm, 100 * r.occupancy] for _, r in points])


def impact_figure(sweeps: ImpactSweeps, kernel_regs: dict[str, int] | None = None) -> go.Figure:
    """Three step charts as in Nsight Compute's occupancy section: warps per SM as one input varies.

    The current configuration is a red marker in each panel; ``kernel_regs`` ({"instrumented": 40,
    "clean": 22}) draws the compiled builds' register counts as vertical lines.
    """
    spec, current, optin = sweeps.arch, sweeps.current, sweeps.max_dynamic_smem
    panels = [
        (
            sweeps.threads_sweep,
            sweeps.threads,
            1,
            "threads per block",
            [0, spec.max_threads_per_block + WARP_SIZE],
        ),
        (sweeps.regs_sweep, sweeps.regs, 1, "registers per thread", [0, spec.max_regs_per_thread + 1]),
        (
            sweeps.smem_sweep,
            sweeps.smem_dynamic,
            KB,
            "dynamic shared memory per block (KB)",
            [0, max(optin, sweeps.smem_dynamic) / KB * 1.02 + 1],
        ),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=IMPACT_TITLES, horizontal_spacing=0.07)
    y_top = spec.max_warps_per_sm * 1.1
    for col, (points, x_now, unit, x_title, x_range) in enumerate(panels, start=1):
        fig.add_trace(
            go.Scatter(
                x=[x / unit for x, _ in points],
                y=[r.warps_per_sm for _, r in points],
                customdata=_hover(points),
                mode="lines",
                line={"shape": "hv", "color": LINE_COLOUR, "width": 2},
                name="warps per SM",
                legendgroup="sweep",
                showlegend=col == 1,
                hovertemplate=f"{x_title} %{{x}}<br>%{{y}} warps/SM = %{{customdata[0]}} blocks"
                "<br>occupancy %{customdata[1]:.1f}%<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=[x_now / unit],
                y=[current.warps_per_sm],
                mode="markers",
                marker={"size": 13, "color": CURRENT_COLOUR, "line": {"width": 2, "color": "white"}},
                name=CURRENT_NAME,
                legendgroup="current",
                showlegend=col == 1,
                hovertemplate=f"{CURRENT_NAME}: {x_title} %{{x}}<br>%{{y}} warps/SM "
                f"({100 * current.occupancy:.1f}%)<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=x_title, range=x_range, autorange=False, row=1, col=col)
        fig.update_yaxes(range=[0, y_top], autorange=False, row=1, col=col)
    for build, count in (kernel_regs or {}).items():
        fig.add_trace(
            go.Scatter(
                x=[count, count],
                y=[0, spec.max_warps_per_sm],
                mode="lines",
                line={"dash": "dot", "width": 2, "color": BUILD_COLOURS.get(build, "#7f7f7f")},
                name=f"{build} build: {count} regs/thread",
                hovertemplate=f"the {build} build compiled to {count} registers per thread<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(title_text="active warps per SM", row=1, col=1)
    fig.update_layout(
        title={"text": f"Theoretical occupancy — {modelled_label(spec)}"},
        height=400,
        margin={"t": 90, "b": 50, "l": 60, "r": 20},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def limits_figure(result: Occupancy) -> go.Figure:
    """Blocks per SM each limit allows; the limiter(s) in red, the resulting count as a dashed line.

    Limits far above the hardware's block slots (e.g. 228 blocks of 1 KB shared memory) would flatten
    the chart, so bars are cut at twice the block-slot limit and say so in their text.
    """
    names = list(LIMIT_NAMES)
    values = [result.limits[n] for n in names]
    cap = 2 * result.arch.max_blocks_per_sm
    texts, heights, cut = [], [], []
    for name, value in zip(names, values, strict=True):
        heights.append(min(value or 0, cap))
        cut.append(value is not None and value > cap)
        if value is None:
            texts.append("not in the formula before sm_90" if name == "barriers" else "no limit")
        else:
            texts.append(f"{value} (bar cut)" if value > cap else str(value))
    fig = go.Figure(
        go.Bar(
            x=[LIMIT_LABELS[n] for n in names],
            y=heights,
            text=texts,
            textposition="outside",
            cliponaxis=False,
            marker={
                "color": [LIMITER_COLOUR if n in result.limiters else OTHER_COLOUR for n in names],
                "pattern": {"shape": ["/" if c else "" for c in cut]},
            },
            customdata=names,
            hovertemplate="%{x}: %{text} blocks per SM<extra></extra>",
            name="blocks per SM allowed",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[LIMIT_LABELS[names[0]], LIMIT_LABELS[names[-1]]],
            y=[result.blocks_per_sm] * 2,
            mode="lines",
            line={"dash": "dash", "color": "black", "width": 1},
            name=f"active blocks per SM = {result.blocks_per_sm}",
        )
    )
    limiter_text = " and ".join(LIMIT_LABELS[n] for n in result.limiters)
    fig.update_layout(
        title={
            # two short lines: the chart sits beside the sliders, half a 1280-px page wide
            "text": f"Blocks per SM each limit allows<br>limiter: {limiter_text}"
            f"<br><sup>{modelled_label(result.arch)}</sup>"
        },
        yaxis={"title": "blocks per SM", "range": [0, cap * 1.2], "autorange": False},
        height=380,
        showlegend=True,
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 105, "b": 50},
    )
    return fig


def measured_points_figure(
    history: list[dict], arch: str | Arch, regs: int, smem_static: int = 0, smem_dynamic: int = 0
) -> go.Figure:
    """The predicted occupancy-vs-block-size curve with each run's achieved occupancy as a point.

    ``history`` rows: threads, achieved and theoretical (fractions 0..1), kernel, source.
    """
    spec = get_arch(arch)
    points = sweep_threads(
        spec, regs, smem_dynamic, smem_static, max_dynamic_smem=max_dynamic_smem_optin(spec, smem_static)
    )
    fig = go.Figure(
        go.Scatter(
            x=[x for x, _ in points],
            y=[100 * r.occupancy for _, r in points],
            mode="lines",
            line={"shape": "hv", "color": LINE_COLOUR, "width": 2},
            name=f"predicted, {regs} regs/thread, {smem_static + smem_dynamic} B shared memory",
            hovertemplate="%{x} threads/block: %{y:.1f}% predicted<extra></extra>",
        )
    )
    if history:
        threads = [h["threads"] for h in history]
        labels = [f"{h.get('kernel', '')} {h.get('params', '')}<br>{h.get('source', '')}" for h in history]
        fig.add_trace(
            go.Scatter(
                x=threads,
                y=[100 * h["theoretical"] for h in history],
                mode="markers",
                marker={"symbol": "circle-open", "size": 13, "color": CURRENT_COLOUR, "line": {"width": 2}},
                name="theoretical for that run",
                text=labels,
                hovertemplate="%{x} threads/block: %{y:.1f}% theoretical<br>%{text}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=threads,
                y=[100 * h["achieved"] for h in history],
                mode="markers+text",
                marker={"size": 11, "color": ACHIEVED_COLOUR},
                text=[str(i + 1) for i in range(len(history))],
                textposition="top center",
                customdata=labels,
                name="achieved in that run"
                + (
                    " (modelled: simulator)"
                    if any("modelled" in str(h.get("source", "")) for h in history)
                    else ""
                ),
                hovertemplate="run %{text}: %{x} threads/block, %{y:.1f}% achieved<br>%{customdata}"
                "<extra></extra>",
            )
        )
    sources = sorted({h.get("source", "") for h in history} - {""})
    runs = f"runs: {'; '.join(sources)}" if sources else "no runs yet"
    fig.update_layout(
        title={
            "text": f"Occupancy vs block size<br><sup>curve: {modelled_label(spec)}; {runs}</sup>",
        },
        xaxis={"title": "threads per block", "range": [0, spec.max_threads_per_block + WARP_SIZE]},
        yaxis={"title": "occupancy (% of max warps per SM)", "range": [0, 110], "autorange": False},
        height=400,
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 80},
    )
    return fig


# ---------------------------------------------------------------------------------------------------
# Achieved occupancy: active warps per SM over time


def _binned(active: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Mean active warps of each SM in each time bin (rows: SMs that ran warps)."""
    rows = [np.diff(np.interp(edges, t, area)) / np.diff(edges) for _, t, _, area in _sm_areas(active)]
    return np.array(rows) if rows else np.zeros((0, len(edges) - 1))


def achieved_figure(
    active: pd.DataFrame, theoretical_warps: float, source: str, bins: int = 300, per_sm_lines: int = 8
) -> go.Figure:
    """Active warps per SM over time: mean over the SMs that ran blocks, with their spread.

    Up to ``per_sm_lines`` SMs are drawn one line each, otherwise as a min–max band. The time-average
    (achieved) and the theoretical value are horizontal lines; the first wave and the tail are annotated.
    """
    attrs = active.attrs
    unit = attrs.get("time_unit", "ns")
    fig = go.Figure()
    if active.empty:
        fig.add_annotation(text="no warps ran: nothing to show", showarrow=False, x=0.5, y=0.5, xref="paper")
        fig.update_layout(title={"text": f"Active warps per SM over time — {source}"})
        return fig
    t_end = float(active["t"].max())
    edges = np.linspace(0.0, t_end if t_end > 0 else 1.0, bins + 1)
    per_sm = _binned(active, edges)
    achieved = achieved_warps_per_sm(active)
    used = per_sm.shape[0]
    x = edges[:-1]
    step = {"shape": "hv"}
    if used <= per_sm_lines:
        for sm, row in zip(sorted(active["sm"].unique()), per_sm, strict=True):
            fig.add_trace(
                go.Scatter(x=x, y=row, mode="lines", line={**step, "width": 1}, opacity=0.5, name=f"SM {sm}")
            )
    else:
        fig.add_trace(
            go.Scatter(x=x, y=per_sm.min(axis=0), mode="lines", line={**step, "width": 0}, showlegend=False)
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=per_sm.max(axis=0),
                mode="lines",
                line={**step, "width": 0},
                fill="tonexty",
                fillcolor="rgba(31,119,180,0.2)",
                name=f"min–max over the {used} SMs",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=per_sm.mean(axis=0),
            mode="lines",
            line={**step, "color": LINE_COLOUR, "width": 2},
            name=f"mean over the {used} SMs that ran blocks",
        )
    )
    for level, line, name in (
        (theoretical_warps, {"dash": "dash", "color": CURRENT_COLOUR}, f"theoretical: {theoretical_warps:g} warps/SM"),
        (achieved, {"color": ACHIEVED_COLOUR, "width": 2}, f"achieved (time-average while busy): {achieved:.1f} warps/SM"),
    ):  # fmt: skip
        fig.add_trace(go.Scatter(x=[0, t_end], y=[level] * 2, mode="lines", line=line, name=name))
    tail_start = attrs.get("tail_start")
    if tail_start is not None and tail_start < t_end:
        fig.add_vrect(
            x0=tail_start,
            x1=t_end,
            fillcolor="gray",
            opacity=0.12,
            line_width=0,
            annotation_text="tail: all blocks started",
            annotation_position="top left",
        )
    warps_per_block = attrs.get("warps_per_block", 1)
    blocks_per_sm = int(theoretical_warps // warps_per_block) if warps_per_block else 0
    if blocks_per_sm and attrs.get("num_sms"):
        wave = attrs["num_sms"] * blocks_per_sm
        fig.add_annotation(
            text=f"first wave: {attrs['num_sms']} SMs × {blocks_per_sm} blocks/SM = {wave:,} blocks; "
            f"this launch has {attrs['blocks']:,} blocks = "
            + (
                f"{attrs['blocks'] / wave:.2f} waves"
                if attrs["blocks"] >= wave
                else f"{attrs['blocks'] / wave:.1%} of one wave"
            ),
            xref="paper",
            yref="paper",
            x=0,
            y=1.0,
            xanchor="left",
            yanchor="bottom",
            showarrow=False,
        )
    y_top = max(theoretical_warps, float(per_sm.max())) * 1.2 + 1
    fig.update_layout(
        title={"text": f"Active warps per SM over time<br><sup>{source}</sup>"},
        xaxis={"title": f"time since kernel start ({unit})", "range": [0, t_end], "autorange": False},
        yaxis={"title": "active warps per SM", "range": [0, y_top], "autorange": False},
        height=460,
        legend={"orientation": "h", "y": -0.3, "yanchor": "top"},  # under the x-axis title
        margin={"t": 100, "b": 150},
    )
    return fig
