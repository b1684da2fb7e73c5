"""Two captures on the same axes: one panel per metric, A and B as two bars on that panel's one scale."""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizer.figures.common import source_of, titled

# the metrics drawn, in order (analysis/compare.METRICS names them); others stay in the table
DRAWN = (
    "device_ms", "modelled_us", "recorded_device_us", "hazards", "launch_overhead_us",
    "global_ld_sectors_per_request", "global_st_sectors_per_request", "shared_ld_wavefronts_per_request",
    "shared_st_wavefronts_per_request", "branch_efficiency", "sass_instructions", "occupancy",
)  # fmt: skip
TIMES = ("device_ms", "modelled_us", "recorded_device_us")  # drawn even where A and B are equal
SHORT_WHAT = {  # a panel's title where the table's words would not fit a ninth of the chart
    "recorded_device_us": "device time",
    "sass_instructions": "SASS instructions (static)",
}
COLORS = ("#8c8c8c", "#0b5fff")  # A grey ("before"), B blue ("after")


def _short_source(source: str) -> str:
    s = str(source)
    for word in ("measured", "simulated", "recorded", "modelled", "compiled"):
        if s.startswith(word):
            return word
    return s.split(" ")[0] if s else "not recorded"


def _panel_title(r, attrs: dict) -> str:
    """'sectors per global store request (sectors, recorded)'; the recording's device time as 'device time
    (µs, measured on H200, 2026-12-04)', '…, nearest' where it is the nearest recorded launch, not yours."""
    source = _short_source(r.a_source or r.b_source)
    if r.Index == "recorded_device_us" and attrs.get("recorded"):
        where = str(attrs["recorded"]).removeprefix("NVIDIA ")  # four lines of a ninth of the chart at most
        source = f"{source} on {where}{', nearest' if attrs.get('recorded_nearest') else ''}"
    return f"{SHORT_WHAT.get(r.Index, r.what)} ({r.unit + ', ' if r.unit else ''}{source})"


def compare_figure(table: pd.DataFrame, height: int = 360) -> go.Figure:
    """Paired bars per metric from ``analysis.compare.compare``; a metric neither side recorded, or a count
    equal on both sides, is left out (the table keeps it; times are always drawn); one that only one side recorded shows
    that side alone (the other is named "not recorded"). The shipped recording's device time names its
    device and date (``attrs['recorded']``), and says where it is the nearest recorded launch, not yours."""
    rows = (
        table[table["metric"].isin(DRAWN)]
        .set_index("metric")
        .reindex([m for m in DRAWN if m in set(table["metric"])])
    )
    timed = rows.index.isin(TIMES)
    rows = rows[~(rows["a"].isna() & rows["b"].isna()) & (timed | (rows["a"] != rows["b"]))]
    la, lb = table.attrs.get("labels", ("A", "B"))
    n = max(len(rows), 1)
    width = max(12, 130 // n)  # characters a panel's title holds before it runs into its neighbour's
    titles = ["<br>".join(textwrap.wrap(_panel_title(r, table.attrs), width)) for r in rows.itertuples()]
    fig = make_subplots(
        rows=1, cols=n, subplot_titles=titles or ["nothing recorded on both"], horizontal_spacing=0.04
    )
    for i, r in enumerate(rows.itertuples(), start=1):
        sides = (("A", la, COLORS[0], r.a, r.a_note), ("B", lb, COLORS[1], r.b, r.b_note))
        for side, label, color, value, note in sides:
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            absent = "none" if note == "no such requests" else "not recorded"
            fig.add_trace(
                go.Bar(
                    x=[f"{side}: {label}"], y=[0 if missing else value], name=f"{side}: {label}",
                    marker_color=color, showlegend=i == 1, legendgroup=side,
                    text=[absent if missing else f"{value:.3g}"], textposition="outside",
                    hovertemplate=f"{side} ({label}): %{{text}} {r.unit}<extra>{r.what}</extra>",
                ),
                row=1, col=i,
            )  # fmt: skip
        top = max(v for v in (r.a, r.b) if not (isinstance(v, float) and math.isnan(v)))
        fig.update_yaxes(range=[0, top * 1.25 if top > 0 else 1], row=1, col=i)
        fig.update_xaxes(showticklabels=False, row=1, col=i)
    fig.update_annotations(font_size=11)
    fig.update_layout(
        title=titled(
            f"{la} (A) vs {lb} (B): times, and the counts that differ (own scale each)",
            source_of(table),
        ),
        height=height, bargap=0.25, margin={"t": 150, "b": 30, "l": 40, "r": 10},
        legend={"orientation": "h", "y": -0.05, "x": 0},
    )  # fmt: skip
    return fig


def lines_figure(lines: pd.DataFrame, height: int = 320) -> go.Figure:
    """Sectors per global request (and bank ways of shared ones) per source line, A and B side by side,
    one y scale for both (``analysis.compare.lines``)."""
    fig = go.Figure()
    for side, color in (("A", COLORS[0]), ("B", COLORS[1])):
        sel = lines[lines["side"] == side]
        if sel.empty:
            continue
        y = [
            r.sectors_per_request
            if r.space != "shared"
            else float(r.wavefronts_per_request)
            if r.wavefronts_per_request == r.wavefronts_per_request  # not NaN (an older bundle)
            else float(max(r.max_bank_ways, 1))
            for r in sel.itertuples()
        ]
        x = [f"{side} {r.kernel} L{r.line} {r.array} {r.op}" for r in sel.itertuples()]
        units = ["sectors/request" if r.space != "shared" else "wavefronts/request" for r in sel.itertuples()]
        fig.add_trace(go.Bar(x=x, y=y, name=side, marker_color=color, customdata=units,
                             hovertemplate="%{x}: %{y:.3g} %{customdata}<extra></extra>"))  # fmt: skip
    fig.update_layout(
        title=titled("Per source line: sectors per global request, wavefronts per shared request", source_of(lines)),
        height=height, yaxis_title="per request", margin={"t": 80, "b": 100},
    )  # fmt: skip
    return fig
