"""Races you can watch happen: which cells of an output differ over N runs, and each run's result.

Tables from analysis/races.py in, go.Figure out; every title carries the tables' source label.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from visualizer.figures.common import source_of, titled


def cells_heatmap(cells: pd.DataFrame, title: str | None = None) -> go.Figure:
    """The output as a grid: each cell coloured by how many distinct values it took over the runs
    (1: the same in every run)."""
    rows = int(cells["row"].max()) + 1 if len(cells) else 0
    cols = int(cells["col"].max()) + 1 if len(cells) else 0
    z = np.full((rows, cols), np.nan)
    hover = np.full((rows, cols), "", dtype=object)
    for r in cells.itertuples(index=False):
        z[r.row, r.col] = r.distinct
        hover[r.row, r.col] = (
            f"{r.array}[{r.index}]: {r.distinct} distinct value(s) over the runs; run 0 {r.first:g}, "
            f"lowest {r.low:g}, highest {r.high:g}"
        )
    name = cells["array"].iloc[0] if len(cells) else "output"
    differ = int(cells["differs"].sum()) if len(cells) else 0
    text = title or f"{name}: {differ} of {len(cells)} cells differ across runs (colour: distinct values)"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=hover,
            hoverinfo="text",
            colorscale=[[0, "#e8f0e8"], [1, "#c0392b"]],
            zmin=1,
            zmax=max(2.0, float(np.nanmax(z)) if z.size else 2.0),
            colorbar={"title": "distinct"},
        )  # fmt: skip
    )
    fig.update_layout(
        title=titled(text, source_of(cells)), yaxis={"autorange": "reversed", "title": "row"},
        xaxis={"title": "column"}, height=360, margin={"t": 80},
    )  # fmt: skip
    return fig


def runs_strip(table: pd.DataFrame, output: str, expected: float | None = None) -> go.Figure:
    """One marker per run: the output's total in that run, coloured right / wrong (grey: no reference)."""
    col = f"total_{output}"
    colours = ["#7f8c8d" if pd.isna(c) else "#27ae60" if c else "#c0392b" for c in table["correct"]]
    labels = ["no reference" if pd.isna(c) else "right" if c else "wrong" for c in table["correct"]]
    waits = table["delays"] if "delays" in table else pd.Series([""] * len(table))
    waited = [f"; warps delayed before {w}" if w else "" for w in waits]
    fig = go.Figure(
        go.Scatter(
            x=table["run"],
            y=table[col],
            mode="markers+text",
            marker={"size": 16, "color": colours},
            text=[f"#{o}" for o in table["outcome"]],
            textposition="top center",
            customdata=np.stack([labels, table["outcome"], waited], axis=1),
            hovertemplate="run %{x}: total %{y:g} (%{customdata[0]}; outcome %{customdata[1]}%{customdata[2]})"
            "<extra></extra>",
            name="runs",
        )  # fmt: skip
    )
    if expected is not None:
        fig.add_hline(y=expected, line_dash="dot", annotation_text="reference total")
    fig.update_layout(
        title=titled(f"sum of {output} in each run (label: which distinct outcome)", source_of(table)),
        xaxis={"title": "run", "dtick": 1}, yaxis={"title": f"sum of {output}"}, height=300, margin={"t": 80},
    )  # fmt: skip
    return fig
