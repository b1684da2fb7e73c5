"""Figures of recorded memory accesses: sectors of one warp request, shared-memory banks, a
per-warp heatmap of sectors per request, raced words. DataFrames in (visualizer/analysis/memory.py),
go.Figure out; every title says where the numbers come from: the table's own label ("recorded
addresses, simulator", or "measured (GPU, sampled warps)" for the kernel's own recording on a GPU)."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from visualizer.analysis.memory import BANKS, SECTOR_BYTES, SOURCE, WORD_BYTES
from visualizer.analysis.provenance import source_of
from visualizer.figures.common import titled


def _src(df: pd.DataFrame) -> str:
    """The table's label (a GPU recording's or the simulator's); the simulator's for unlabelled ones."""
    return str(df.attrs.get("source") or SOURCE)


LANE_SCALE = "Turbo"


def _request_title(request: pd.Series) -> str:
    return (
        f"block {request['block']}, warp {request['warp']}: line {request['line']} "
        f"{request['op']} of {request['array']} (execution {request['occurrence']})"
    )


def sector_figure(lanes: pd.DataFrame, request: pd.Series) -> go.Figure:
    """Each 32-byte sector the request touches is a row; each lane's bytes sit in it, coloured by lane."""
    if lanes.empty:
        raise ValueError("the request has no recorded accesses")
    sector = lanes["offset_bytes"] // SECTOR_BYTES
    order = sorted(sector.unique())
    labels = {
        s: f"sector {s} (bytes {s * SECTOR_BYTES}–{s * SECTOR_BYTES + SECTOR_BYTES - 1})" for s in order
    }
    y = [labels[s] for s in sector]
    fig = go.Figure()
    fig.add_bar(  # the sectors themselves: what the memory system moves
        y=[labels[s] for s in order], x=[SECTOR_BYTES] * len(order), base=[0] * len(order), orientation="h",
        marker={"color": "rgba(0,0,0,0)", "line": {"color": "#555", "width": 1}}, hoverinfo="skip",
        showlegend=False, name="sector",
    )  # fmt: skip
    fig.add_bar(
        y=y,
        x=lanes["bytes"],
        base=(lanes["offset_bytes"] % SECTOR_BYTES).to_numpy(),
        orientation="h",
        marker={
            "color": lanes["lane"].astype(int),
            "colorscale": LANE_SCALE,
            "cmin": 0,
            "cmax": 31,
            "colorbar": {"title": "lane"},
            "line": {"color": "white", "width": 0.5},
        },  # fmt: skip
        text=lanes["lane"].astype(str),
        textposition="inside",
        customdata=np.stack([lanes["lane"], lanes["index"], lanes["offset_bytes"]], axis=1),
        hovertemplate="lane %{customdata[0]}<br>element %{customdata[1]}<br>byte offset %{customdata[2]}"
        "<extra></extra>",
        showlegend=False,
        name="lanes",
    )
    ideal = int(request["ideal_sectors"])
    fig.update_layout(
        barmode="overlay",
        title=titled(
            f"{len(order)} sectors for {int(request['lanes'])} lanes (ideal {ideal})",
            f"block {request['block']} warp {request['warp']}, line {request['line']} · {_src(lanes)}",
        ),
        xaxis={"title": "byte within the 32-byte sector", "range": [0, SECTOR_BYTES], "dtick": 4},
        yaxis={
            "title": None,
            "autorange": "reversed",
            "categoryorder": "array",
            "categoryarray": [labels[s] for s in order],
        },  # fmt: skip
        height=max(260, 60 + 22 * len(order)),
        margin={"l": 10, "r": 10, "t": 70, "b": 40},
    )
    return fig


def bank_figure(lanes: pd.DataFrame, request: pd.Series) -> go.Figure:
    """32 bank columns; each distinct word the request touches is a cell in its bank's column,
    stacked; a bank with more than one word is a conflict (red), lanes sharing a word broadcast."""
    if lanes.empty:
        raise ValueError("the request has no recorded accesses")
    words = (lanes["offset_bytes"] // WORD_BYTES).to_numpy()
    df = pd.DataFrame({"word": words, "lane": lanes["lane"].to_numpy(), "index": lanes["index"].to_numpy()})
    per_word = df.groupby("word").agg(lanes=("lane", list), index=("index", "first")).reset_index()
    per_word["bank"] = per_word["word"] % BANKS
    per_word["row"] = per_word.groupby("bank").cumcount()
    ways = per_word.groupby("bank")["word"].transform("size")
    rows = int(per_word["row"].max()) + 1
    z = np.full((rows, BANKS), np.nan)
    text = np.full((rows, BANKS), "", dtype=object)
    hover = np.full((rows, BANKS), "", dtype=object)
    for w, row, bank, n, lane_list, idx in zip(
        per_word["word"],
        per_word["row"],
        per_word["bank"],
        ways,
        per_word["lanes"],
        per_word["index"],
        strict=True,
    ):
        z[row, bank] = 1.0 if n > 1 else 0.0
        text[row, bank] = str(lane_list[0]) if len(lane_list) == 1 else f"{lane_list[0]}+{len(lane_list) - 1}"
        hover[row, bank] = (
            f"bank {bank}, word {w} (element {idx})<br>lanes {lane_list}<br>{n} word(s) in this bank"
        )
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(BANKS)),
            y=list(range(rows)),
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            zmin=0,
            zmax=1,
            showscale=False,
            colorscale=[[0, "#4caf50"], [1, "#e53935"]],
            xgap=2,
            ygap=2,
        )  # fmt: skip
    )
    ways_max = int(request["bank_ways"])
    waves = int(request.get("wavefronts", max(ways_max, 1)))
    extra = int(request.get("extra_wavefronts", max(ways_max - 1, 0)))
    if extra <= 0:
        verdict = "conflict-free" + (f" ({waves} wavefronts)" if waves > 1 else "")
    elif waves == ways_max and extra == ways_max - 1:
        verdict = f"{ways_max}-way bank conflict ({extra} extra wavefronts)"
    else:  # 8- and 16-byte accesses: served by half- or quarter-warps, counted per phase
        verdict = f"{waves} wavefronts, {extra} extra (bank conflicts; busiest bank {ways_max} words)"
    fig.update_layout(
        title=titled(f"Shared-memory banks: {verdict}", f"{_request_title(request)} · {_src(lanes)}"),
        xaxis={"title": "bank (4-byte word address mod 32)", "dtick": 1, "range": [-0.5, BANKS - 0.5]},
        yaxis={"title": "word", "autorange": "reversed", "dtick": 1},
        height=max(240, 130 + 26 * rows),
        margin={"l": 10, "r": 10, "t": 80, "b": 40},
    )
    return fig


def requests_heatmap(req: pd.DataFrame, space: str = "global", max_warps: int = 64) -> go.Figure:
    """Sectors per request (global) or bank ways (shared), per warp x source line/array/op."""
    r = req[req["space"].astype(str) == space]
    if r.empty:
        raise ValueError(f"no {space} memory requests were recorded")
    metric = "sectors" if space != "shared" else "bank_ways"
    r = r.assign(
        who=r["block"].astype(str) + "/" + r["warp"].astype(str),
        what="line " + r["line"].astype(str) + ": " + r["op"].astype(str) + " " + r["array"].astype(str),
    )
    warps = r[["block", "warp", "who"]].drop_duplicates().sort_values(["block", "warp"])["who"].tolist()
    shown = warps[:max_warps]
    grid = r[r["who"].isin(shown)].pivot_table(index="what", columns="who", values=metric, aggfunc="mean")
    grid = grid.reindex(columns=shown)
    label = "sectors per request" if metric == "sectors" else "bank ways per request"
    more = f" (first {max_warps} of {len(warps)} warps)" if len(warps) > max_warps else ""
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(),
            x=grid.columns.tolist(),
            y=grid.index.tolist(),
            colorscale="YlOrRd",
            zmin=1,
            zmax=32,
            colorbar={"title": label.split(" per")[0], "tickvals": [1, 4, 8, 16, 32]},
            hovertemplate="warp %{x} (block/warp)<br>%{y}<br>" + label + " %{z:.1f}<extra></extra>",
        )  # fmt: skip
    )
    fig.update_layout(
        title=titled(f"{label.capitalize()}, per warp and source line{more}", _src(req)),
        xaxis={"title": "block / warp", "type": "category"},
        yaxis={"title": None, "type": "category"},
        height=max(300, 130 + 34 * len(grid)),
        margin={"l": 10, "r": 10, "t": 70, "b": 50},
    )
    return fig


def raced_words_figure(haz: pd.DataFrame) -> go.Figure:
    """Which shared words raced in which block (cell = number of thread pairs on that word)."""
    races = haz[haz["kind"] != "UNINIT"]
    if races.empty:
        raise ValueError("no races were recorded")
    n = races.groupby(["block", "array", "index"])["pairs"].max().reset_index()
    n["word"] = n["array"] + "[" + n["index"].astype(str) + "]"
    words = n.drop_duplicates("word").sort_values(["array", "index"])["word"].tolist()
    grid = n.pivot_table(index="block", columns="word", values="pairs", aggfunc="sum").reindex(columns=words)
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(),
            x=words,
            y=[f"block {b}" for b in grid.index],
            colorscale="Reds",
            zmin=0,
            colorbar={"title": "pairs", "dtick": 1},
            hovertemplate="%{y}, %{x}: %{z} racing thread pair(s)<extra></extra>",
        )  # fmt: skip
    )
    fig.update_layout(
        title=titled(f"{len(n)} raced shared words in {grid.shape[0]} blocks", _src(haz)),
        xaxis={"title": "shared word", "type": "category"},
        yaxis={"title": None, "type": "category", "autorange": "reversed"},
        height=max(280, 130 + 24 * grid.shape[0]),
        margin={"l": 10, "r": 10, "t": 70, "b": 60},
    )
    return fig


def source_html(lines: list[str], first_line: int, highlight: int | None) -> str:
    """Kernel source as an HTML block with line numbers and one highlighted line (escaped).

    A long line wraps under its own text (a hanging indent past the line number) instead of running
    out of a half-width column: scrolled sideways, the highlighted access was cut off on a projector.
    """
    out = []
    for i, text in enumerate(lines):
        n = first_line + i
        style = "background:#ffe08a;font-weight:600;" if n == highlight else ""
        out.append(
            f'<div style="{style}white-space:pre-wrap;overflow-wrap:anywhere;padding-left:6ch;'
            f'text-indent:-6ch;">{n:4d}  {html.escape(text.rstrip())}</div>'
        )
    return (
        '<div style="font-family:monospace;font-size:13px;line-height:1.45;border:1px solid #ddd;'
        'border-radius:6px;padding:6px;">' + "".join(out) + "</div>"
    )


SIM_VS_GPU = (("sim", "simulator"), ("gpu", "GPU (sampled warps)"))
SMALL_VS_BIG = (("small", "small launch (GPU)"), ("big", "this launch (GPU)"))


def side_by_side_figure(
    table: pd.DataFrame, height: int = 340, sides=SIM_VS_GPU, what: str | None = None
) -> go.Figure:
    """Sectors (global) or wavefronts (shared) per request, per source line: two recordings' bars side
    by side (analysis/gpu_accesses.side_by_side: simulator and GPU; sizes_side_by_side: two sizes).
    ``what``: the title's words for the two (default: from ``sides``)."""
    x = [f"L{r.line} {r.op} {r.array}" for r in table.itertuples()]
    fig = go.Figure()
    for (side, name), color in zip(sides, ("#607d8b", "#76b900"), strict=True):
        fig.add_trace(go.Bar(x=x, y=table[f"per_request_{side}"], name=name, marker_color=color,
                             customdata=table["unit"],
                             hovertemplate="%{x}: %{y:.3g} %{customdata} per request<extra>" + name + "</extra>"))  # fmt: skip
    agree = bool(table["agree"].all()) if len(table) else True
    if sides[0][0] == "sim":  # one launch, two recorders: every count agrees
        what = what or "simulator vs GPU"
        verdict = (
            "the two recordings agree on every line" if agree else "the recordings differ (see the table)"
        )
    else:  # two launches: the pattern per request
        what = what or "small vs this size, on the GPU"
        verdict = "the same per request on every line" if agree else "some lines change with the size"
    fig.update_layout(
        title=titled(f"Per source line, {what}: {verdict}", source_of(table)),
        barmode="group", height=height, yaxis_title="sectors or wavefronts per request",
        margin={"t": 80, "b": 90}, legend={"orientation": "h", "y": -0.3},
    )  # fmt: skip
    return fig
