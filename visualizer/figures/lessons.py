"""Small figures the lessons add beside the existing builders: each from a run's own tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from visualizer.figures.common import titled

HEIGHT = 360


def _layout(fig: go.Figure, title: str, source: str, height: int = HEIGHT) -> go.Figure:
    fig.update_layout(
        title=titled(title, source), height=height, margin={"l": 10, "r": 10, "t": 80, "b": 40},
        showlegend=False,
    )  # fmt: skip
    return fig


def time_bars_figure(rows: list[tuple[str, float, str]], title: str) -> go.Figure:
    """Horizontal bars of times in µs on a log axis: (label, µs, where the number comes from)."""
    if not rows:
        raise ValueError("no times to compare")
    labels = [r[0] for r in rows]
    values = [max(r[1], 1e-3) for r in rows]
    fig = go.Figure(
        go.Bar(
            y=labels, x=values, orientation="h", marker_color=(["#1f77b4", "#76B900", "#2ca02c"] * len(rows))[: len(rows)],
            text=[f"{v:,.2f} µs" for v in values], textposition="auto", textangle=0,
            hovertext=[r[2] for r in rows], hoverinfo="text+x",
        )
    )  # fmt: skip
    # bars on a log axis start at its left edge: start it a decade below the shortest, so no bar is a
    # sliver just because the axis began where it ends (and a short bar's label goes beside it, level)
    lo, hi = np.log10(min(values)) - 1, np.log10(max(values)) + 0.2
    ticks = [m * 10.0**d for d in range(int(np.floor(lo)), int(np.ceil(hi)) + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if lo <= np.log10(t) <= hi]  # 1-2-5 steps: plain numbers, not 7 8 9 0.1 2 3
    fig.update_xaxes(type="log", title="µs (log scale)", range=[lo, hi], autorange=False,
                     tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])  # fmt: skip
    fig.update_yaxes(automargin=True)
    return _layout(fig, title, " · ".join(sorted({r[2].split(":")[0] for r in rows})))


def block_loads_figure(acc: pd.DataFrame, block: int, shape: tuple[int, int], array: str = "u") -> go.Figure:
    """Which cells of ``array`` one block loaded from global memory (its tile and its halo)."""
    loads = acc[
        (acc["array"].astype(str) == array) & (acc["op"].astype(str) == "load") & (acc["block"] == block)
    ]
    if loads.empty:
        raise ValueError(f"block {block} loaded nothing from {array}")
    rows, cols = loads["i0"].to_numpy(np.int64), loads["i1"].to_numpy(np.int64)
    r0, r1, c0, c1 = rows.min(), rows.max(), cols.min(), cols.max()
    z = np.zeros((r1 - r0 + 1, c1 - c0 + 1))
    np.add.at(z, (rows - r0, cols - c0), 1)
    z[z == 0] = np.nan
    fig = go.Figure(
        go.Heatmap(
            z=z, x=np.arange(c0, c1 + 1), y=np.arange(r0, r1 + 1), colorscale=[[0, "#9ecae1"], [1, "#08519c"]],
            showscale=False, xgap=1, ygap=1,
            hovertemplate="u[%{y}, %{x}]: loaded %{z} time(s)<extra></extra>",
        )
    )  # fmt: skip
    fig.update_yaxes(autorange="reversed", title="row of u", scaleanchor="x")
    fig.update_xaxes(title="column of u")
    return _layout(
        fig, f"Block {block}: the {len(loads):,} cells it loaded from global memory (tile + halo)",
        "recorded addresses, simulator", height=420,
    )  # fmt: skip


def atomics_figure(per_bin: pd.Series, nbins: int, kernel: str) -> go.Figure:
    """Global atomic updates per bin: how many had to queue on each address."""
    x = np.arange(nbins)
    y = per_bin.reindex(x, fill_value=0).to_numpy()
    fig = go.Figure(go.Bar(x=x, y=y, marker_color="#d62728" if kernel == "histogram_global" else "#76B900",
                           hovertemplate="bin %{x}: %{y} global atomics<extra></extra>"))  # fmt: skip
    fig.update_xaxes(title="bin")
    fig.update_yaxes(title="global atomic updates")
    return _layout(fig, f"{kernel}: atomic updates per global bin", "recorded addresses, simulator")


def bytes_figure(rows: list[tuple[str, float]], source: str) -> go.Figure:
    """Bars of bytes on a log axis (e.g. the N×N score matrix vs one block's shared-memory tiles)."""
    fig = go.Figure(
        go.Bar(y=[r[0] for r in rows], x=[r[1] for r in rows], orientation="h", marker_color="#9467bd",
               text=[f"{r[1] / 1024:,.1f} KiB" for r in rows], textposition="auto", textangle=0)
    )  # fmt: skip
    fig.update_xaxes(title="bytes", rangemode="tozero")
    fig.update_yaxes(automargin=True)
    return _layout(fig, "Bytes of attention scores each way holds", source)


def pair_bars_figure(rows: list[tuple[str, float]], title: str, axis: str, source: str) -> go.Figure:
    """Horizontal bars of one count for each side of a before/after (label, value)."""
    if not rows:
        raise ValueError("nothing to compare")
    fig = go.Figure(
        go.Bar(y=[r[0] for r in rows], x=[r[1] for r in rows], orientation="h",
               marker_color=(["#d62728", "#76B900", "#1f77b4"] * len(rows))[: len(rows)],
               text=[f"{r[1]:,.4g}" for r in rows], textposition="auto", textangle=0,
               hovertemplate="%{y}: %{x:,}<extra></extra>")
    )  # fmt: skip
    fig.update_xaxes(title=axis, rangemode="tozero")
    fig.update_yaxes(automargin=True, autorange="reversed")
    return _layout(fig, title, source, height=260 + 30 * len(rows))
