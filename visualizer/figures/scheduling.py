"""Scheduling figures: blocks on SMs over time, one SM's warps, resident warps, waves arriving.

Pure builders (DataFrame in, ``go.Figure`` out) over the tables of ``visualizer.analysis.schedule``. Time axes
are LINEAR in nanoseconds since the kernel's first timestamp (never a date axis, never rounded to ms);
every title carries the table's source label: measured (GPU), simulated, or modelled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from visualizer.analysis import schedule
from visualizer.analysis.occupancy import ARCHS, occupancy
from visualizer.figures.common import animation_controls, place_controls
from visualizer.specs.launch import ceil_div

MAX_BARS = 5000  # above this many intervals, draw WebGL line segments instead of SVG bars
MAX_SEGMENTS = 80_000  # SM timeline: beyond this many blocks show the first SMs' rows only (payload)
MAX_COLOUR_GROUPS = 12  # waves beyond this share colours in equal ranges of waves
MAX_LINE_SMS = 16  # more SMs than this: concurrency as an SM x time heatmap
TIME_BINS = 300  # columns of the concurrency heatmap
MAX_FRAMES = 120  # wave animation: more waves are sampled evenly (the first and last always kept)
FRAME_MS = 700
PALETTE = qualitative.Plotly + qualitative.Safe  # 21 distinct colours

EMPTY, EARLIER, CURRENT = 0, 1, 2
WAVE_COLOURS = [
    [0.0, "#ececec"],
    [1 / 3, "#ececec"],
    [1 / 3, "#9ecae1"],
    [2 / 3, "#9ecae1"],
    [2 / 3, "#08519c"],
    [1.0, "#08519c"],
]


def _title(text: str, source: str) -> dict:
    return {"text": f"{text}<br><sup>{source}</sup>", "x": 0.01, "xanchor": "left"}


def _groups(values: np.ndarray, what: str) -> tuple[np.ndarray, list[str]]:
    """Colour group of each value and the groups' legend names: one per distinct value up to
    MAX_COLOUR_GROUPS, else equal ranges of values."""
    if not len(values):
        return np.zeros(0, np.int64), []
    lo, hi = int(values.min()), int(values.max())
    if hi - lo + 1 <= MAX_COLOUR_GROUPS:
        return values - lo, [f"{what} {v}" for v in range(lo, hi + 1)]
    width = ceil_div((hi - lo + 1), MAX_COLOUR_GROUPS)
    n = (hi - lo) // width + 1
    names = [f"{what}s {lo + g * width}–{min(lo + (g + 1) * width - 1, hi)}" for g in range(n)]
    return (values - lo) // width, names


def _timeline_traces(
    start: np.ndarray,
    end: np.ndarray,
    row: np.ndarray,
    height: float,
    group: np.ndarray,
    names: list[str],
    customdata: np.ndarray,
    hovertemplate: str,
    showlegend: bool = True,
) -> list[go.BaseTraceType]:
    """Horizontal intervals [start, end) at y=row: go.Bar (base=start, x=duration) up to MAX_BARS,
    else Scattergl segments (x = start, end, gap) so 10^5 intervals still render."""
    traces: list[go.BaseTraceType] = []
    big = len(start) > MAX_BARS
    for g, name in enumerate(names):
        pick = np.flatnonzero(group == g)
        if not len(pick):
            continue
        colour = PALETTE[g % len(PALETTE)]
        s, e, y = start[pick], end[pick], row[pick]
        if not big:
            traces.append(
                go.Bar(
                    base=s,
                    x=e - s,
                    y=y,
                    width=height,
                    orientation="h",
                    name=name,
                    marker={"color": colour, "line": {"width": 0}},
                    customdata=customdata[pick],
                    hovertemplate=hovertemplate,
                    showlegend=showlegend,
                )
            )
        else:
            # float32 holds every integer ns below 2^24 exactly; later times need float64
            xtype = np.float32 if len(e) and e.max() < 2**24 else np.float64
            gap = np.full(len(pick), np.nan)
            xs = np.column_stack([s, e, gap]).ravel().astype(xtype)
            ys = np.column_stack([y, y, gap]).ravel().astype(np.float32)
            cd = np.repeat(customdata[pick][:, 0].astype(np.int32), 3)  # hover: the first column only
            traces.append(
                go.Scattergl(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=name,
                    line={"color": colour, "width": 4},
                    customdata=cd,
                    hovertemplate=hovertemplate.split("<br>")[0] + "<extra></extra>",
                    showlegend=showlegend,
                )
            )
    return traces


def sm_timeline_figure(blocks: pd.DataFrame, source: str, color_by: str = "wave") -> go.Figure:
    """Each SM's row holds the blocks it ran, at their real start and duration in ns.

    Blocks resident on an SM at the same time get separate lanes inside the SM's row (``slot`` from
    ``schedule.assign_waves``, computed here when missing). ``color_by``: "wave" or "block".
    """
    if color_by not in ("wave", "block"):
        raise ValueError(f"color_by must be 'wave' or 'block', not {color_by!r}")
    if "slot" not in blocks.columns or "wave" not in blocks.columns:
        blocks = schedule.assign_waves(blocks)
    fig = go.Figure()
    title = "Blocks on each SM over time"
    if len(blocks) > MAX_SEGMENTS:  # draw whole SM rows, as many as fit, and say so
        per_sm = blocks.groupby("sm").size().sort_index()
        keep = per_sm.index[per_sm.cumsum().to_numpy() <= MAX_SEGMENTS]
        keep = keep if len(keep) else per_sm.index[:1]
        title += (
            f" (SMs {keep.min()}–{keep.max()} of {per_sm.index.max() + 1} shown: "
            f"{len(blocks):,} blocks are too many to draw)"
        )
        blocks = blocks[blocks["sm"].isin(keep)]
    elif len(blocks) and int(blocks["sm"].min()) > 0:  # a GPU may put a small launch on its last SMs
        title += f" (SMs {int(blocks['sm'].min())}–{int(blocks['sm'].max())}: no block ran on the others)"
    fig.update_layout(title=_title(title, source), barmode="overlay")
    if not len(blocks):
        fig.add_annotation(
            text="no blocks recorded", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )
        return fig
    start = blocks["t_start_ns"].to_numpy().astype(np.int64)
    end = blocks["t_end_ns"].to_numpy().astype(np.int64)
    sm = blocks["sm"].to_numpy().astype(np.int64)
    slot = blocks["slot"].to_numpy().astype(np.int64)
    lanes = int(slot.max()) + 1
    lane_h = 0.9 / lanes
    row = sm - 0.45 + lane_h * (slot + 0.5)
    wave = blocks["wave"].to_numpy().astype(np.int64) + 1  # waves count from 1, as the page says
    group, names = _groups(
        wave if color_by == "wave" else blocks[color_by].to_numpy().astype(np.int64), color_by
    )
    customdata = np.column_stack([blocks["block"].to_numpy(), sm, start, end, end - start, wave]).astype(
        np.int64
    )
    hover = (
        "block %{customdata[0]}<br>SM %{customdata[1]}<br>start %{customdata[2]} ns"
        "<br>end %{customdata[3]} ns<br>duration %{customdata[4]} ns<br>wave %{customdata[5]}<extra></extra>"
    )
    fig.add_traces(_timeline_traces(start, end, row, lane_h, group, names, customdata, hover))
    first = int(sm.min())  # rows from the first SM used (0 unless a GPU chose its last SMs)
    n_rows = int(sm.max()) + 1 - first
    fig.update_layout(
        xaxis={"title": "time since kernel start (ns)", "type": "linear", "rangemode": "tozero"},
        yaxis={
            "title": "SM",
            "type": "linear",
            "range": [first + n_rows - 0.5, first - 0.5],  # the lowest SM at the top
            "autorange": False,
            "dtick": 1 if n_rows <= 40 else None,
        },
        height=int(np.clip(140 + 9 * n_rows, 320, 1300)),
        legend={"title": {"text": color_by}},
        hovermode="closest",
    )
    return fig


def warp_timeline_figure(warps: pd.DataFrame, sm: int, source: str | None = None) -> go.Figure:
    """The warps one SM held over time: one row per resident warp slot (warps that overlap in time take
    different rows, so the row count is the SM's peak resident warps), coloured by block."""
    source = source or schedule.source_of(warps)
    mine = warps[warps["sm"] == sm]
    fig = go.Figure()
    fig.update_layout(title=_title(f"Warps resident on SM {sm} over time", source), barmode="overlay")
    if not len(mine):
        fig.add_annotation(
            text=f"SM {sm} ran no warps in this launch",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
        )
        return fig
    start = mine["t_start_ns"].to_numpy().astype(np.int64)
    end = mine["t_end_ns"].to_numpy().astype(np.int64)
    slot = schedule.greedy_slots(np.zeros(len(mine), np.int64), start, end).astype(np.int64)
    block = mine["block"].to_numpy().astype(np.int64)
    order = np.unique(block, return_inverse=True)[1]  # neighbouring blocks get different colours
    group = order % len(PALETTE)
    customdata = np.column_stack(
        [block, mine["warp"].to_numpy(), start, end, end - start, mine["active_threads"].to_numpy()]
    ).astype(np.int64)
    hover = (
        "block %{customdata[0]} warp %{customdata[1]}<br>start %{customdata[2]} ns"
        "<br>end %{customdata[3]} ns<br>duration %{customdata[4]} ns"
        "<br>active lanes %{customdata[5]}<extra></extra>"
    )
    names = [f"blocks ≡ {g} (mod {len(PALETTE)})" for g in range(len(PALETTE))]
    fig.add_traces(_timeline_traces(start, end, slot, 0.85, group, names, customdata, hover, False))
    rows = int(slot.max()) + 1
    fig.update_layout(
        xaxis={"title": "time since kernel start (ns)", "type": "linear", "rangemode": "tozero"},
        yaxis={"title": "resident warp slot", "range": [rows - 0.5, -0.5], "autorange": False},
        height=int(np.clip(160 + 12 * rows, 300, 1000)),
        hovermode="closest",
    )
    return fig


def binned_mean(steps: pd.DataFrame, edges: np.ndarray, column: str = "warps") -> np.ndarray:
    """Time-weighted mean of one step function (rows t_ns, value) in each [edges[i], edges[i+1])."""
    t = steps["t_ns"].to_numpy().astype(np.float64)
    v = steps[column].to_numpy().astype(np.float64)
    area = np.r_[0.0, np.cumsum(v[:-1] * np.diff(t))]
    # area is piecewise linear in time, so interpolating it at the bin edges is exact
    at = np.interp(edges, t, area, left=0.0, right=area[-1])
    return np.diff(at) / np.diff(edges)


def concurrency_figure(
    conc: pd.DataFrame,
    theoretical_warps: float | None = None,
    *,
    num_sms: int | None = None,
    device: pd.DataFrame | None = None,
    source: str | None = None,
) -> go.Figure:
    """Resident warps per SM over time (``schedule.concurrency(..., by="sm")``) with the device average
    (all ``num_sms`` SMs, idle ones as 0) and the theoretical warps per SM as a dashed line.

    Up to MAX_LINE_SMS SMs: one step line per SM. More: an SM x time heatmap of the time-weighted mean
    in TIME_BINS bins, with the device average below it.
    """
    source = source or schedule.source_of(conc)
    sms = np.sort(conc["sm"].unique())
    num_sms = num_sms or len(sms)
    if device is None:
        device = _device_from(conc)
    t_max = float(conc["t_ns"].max()) if len(conc) else 1.0
    t_max = max(t_max, 1.0)
    peak = float(conc["warps"].max()) if len(conc) else 0.0
    y_max = max(peak, theoretical_warps or 0.0, 1.0) * 1.08
    avg = go.Scatter(
        x=device["t_ns"].to_numpy(),
        y=device["warps"].to_numpy() / num_sms,
        mode="lines",
        line={"shape": "hv", "width": 3, "color": "black"},
        name=f"device average (over {num_sms} SMs)",
        hovertemplate="%{x} ns: %{y:.2f} warps per SM on average<extra></extra>",
    )
    title = _title("Resident warps per SM over time", source)
    if len(sms) <= MAX_LINE_SMS:
        fig = go.Figure()
        for s in sms:
            steps = conc[conc["sm"] == s]
            fig.add_trace(
                go.Scatter(
                    x=np.r_[0, steps["t_ns"].to_numpy()],
                    y=np.r_[0, steps["warps"].to_numpy()],
                    mode="lines",
                    line={"shape": "hv", "width": 1.5},
                    name=f"SM {s}",
                    hovertemplate=f"SM {s}" + ": %{y} warps from %{x} ns<extra></extra>",
                )
            )
        fig.add_trace(avg)
        avg_row = None
        fig.update_layout(
            xaxis={"title": "time since kernel start (ns)", "range": [0, t_max], "autorange": False},
            yaxis={"title": "resident warps", "range": [0, y_max], "autorange": False},
        )
    else:
        edges = np.linspace(0.0, t_max, TIME_BINS + 1)
        z = np.zeros((len(sms), TIME_BINS), np.float32)
        for i, (_, steps) in enumerate(conc.groupby("sm", sort=True)):
            z[i] = binned_mean(steps, edges)
        fig = make_subplots(
            rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06
        )
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=((edges[:-1] + edges[1:]) / 2).astype(np.float32),
                y=sms.astype(np.int32),
                zmin=0,
                zmax=y_max / 1.08,
                colorscale="Viridis",
                colorbar={"title": {"text": "warps"}, "len": 0.7, "y": 0.64},
                hovertemplate="SM %{y}, t ≈ %{x:.0f} ns: %{z:.1f} warps (bin mean)<extra></extra>",
                name="warps per SM",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(avg, row=2, col=1)
        avg_row = 2
        fig.update_layout(
            xaxis={"range": [0, t_max], "autorange": False},
            xaxis2={"title": "time since kernel start (ns)", "range": [0, t_max], "autorange": False},
            yaxis={"title": "SM", "autorange": "reversed"},
            yaxis2={"title": "warps / SM", "range": [0, y_max], "autorange": False},
            height=int(np.clip(260 + 3 * len(sms), 450, 900)),
        )
    if theoretical_warps is not None:
        line = {"dash": "dash", "color": "crimson", "width": 2}
        kwargs = {"row": avg_row, "col": 1} if avg_row else {}
        fig.add_hline(
            y=theoretical_warps,
            line=line,
            annotation_text=f"theoretical {theoretical_warps:g} warps/SM",
            annotation_position="top left",
            **kwargs,
        )
    fig.update_layout(title=title, hovermode="closest", legend={"orientation": "h", "y": -0.18})
    return fig


def _device_from(conc: pd.DataFrame) -> pd.DataFrame:
    """Device-wide step function (sum over SMs) from per-SM step rows."""
    if not len(conc):
        return pd.DataFrame({"t_ns": [], "warps": []})
    ordered = conc.sort_values(["sm", "t_ns"], kind="stable")
    delta = ordered.groupby("sm")["warps"].diff().fillna(ordered["warps"])
    events = pd.DataFrame({"t_ns": ordered["t_ns"].to_numpy(), "d": delta.to_numpy()})
    steps = events.groupby("t_ns", sort=True)["d"].sum().cumsum()
    return pd.DataFrame({"t_ns": steps.index.to_numpy(), "warps": steps.to_numpy()})


def wave_frames(blocks: pd.DataFrame, num_sms: int, source: str | None = None) -> pd.DataFrame:
    """Blocks arriving on the SMs wave by wave, as a frames table: one row per wave shown (at most
    MAX_FRAMES), with the (slot × SM) cell states (this wave's block / a slot an earlier wave used /
    never used), the block in each cell, and the frame's sentence. The sentence says how many SMs got
    no block at all (idle SMs) or, when every SM got one, how many slots are empty."""
    source = source or schedule.source_of(blocks)
    if "wave" not in blocks.columns or "wave_position" not in blocks.columns:
        blocks = schedule.assign_waves(blocks)
    num_sms = max(int(num_sms), int(blocks["sm"].max()) + 1 if len(blocks) else 1)
    slots = int(blocks["wave_position"].max()) + 1 if len(blocks) else 1
    wave = blocks["wave"].to_numpy().astype(np.int64)
    sm = blocks["sm"].to_numpy().astype(np.int64)
    pos = blocks["wave_position"].to_numpy().astype(np.int64)
    block = blocks["block"].to_numpy().astype(np.int64)
    n_waves = int(wave.max()) + 1 if len(blocks) else 1
    shown = (
        np.arange(n_waves)
        if n_waves <= MAX_FRAMES
        else np.unique(np.r_[np.linspace(0, n_waves - 1, MAX_FRAMES).round().astype(np.int64), n_waves - 1])
    )
    # first wave each (slot, SM) cell is used in, to mark cells earlier waves used
    first_use = np.full((slots, num_sms), np.iinfo(np.int64).max)
    np.minimum.at(first_use, (pos, sm), wave)
    order = np.argsort(wave, kind="stable")
    wave_sorted = wave[order]
    # a partial last wave: fewer blocks than the first wave
    tail = n_waves > 1 and int((wave == n_waves - 1).sum()) < int((wave == 0).sum())
    per_wave = int((wave == 0).sum())  # the blocks a full wave holds (the first wave is full if any is)
    rows = []
    for w in (int(x) for x in shown):
        z = np.where(first_use < w, EARLIER, EMPTY).astype(np.int8)
        ids = np.full((slots, num_sms), -1, np.int64)
        lo, hi = np.searchsorted(wave_sorted, [w, w + 1])
        mine = order[lo:hi]
        z[pos[mine], sm[mine]] = CURRENT
        ids[pos[mine], sm[mine]] = block[mine]
        used = len(np.unique(sm[mine]))
        if n_waves == 1:
            text = f"One wave: all {len(mine):,} blocks at once, on {used} of {num_sms} SMs"
        else:
            text = (
                f"Wave {w + 1} of {n_waves}{' (the tail)' if w == n_waves - 1 and tail else ''}: "
                f"{len(mine):,} blocks on {used} of {num_sms} SMs"
            )
        # idle SMs (no block at all) vs empty slots (an SM that runs fewer blocks than it can hold)
        empty = per_wave - len(mine)
        if used < num_sms:
            text += f": {num_sms - used} SMs idle"
        elif empty > 0:
            text += f": every SM busy, {empty:,} of {per_wave:,} slots empty"
        rows.append({"wave": w, "cells": z, "blocks": ids, "text": text})
    frames = pd.DataFrame(rows)
    frames.attrs.update(source=source, num_sms=num_sms, slots=slots, waves=n_waves)
    return frames


def waves_animation_figure(blocks: pd.DataFrame, num_sms: int, source: str | None = None) -> go.Figure:
    """Blocks arriving on the SMs wave by wave: x = SM, y = resident slot (the block's position in its
    SM's wave), one frame per wave (:func:`wave_frames`, drawn by :func:`waves_frames_figure`)."""
    return waves_frames_figure(wave_frames(blocks, num_sms, source))


def waves_frames_figure(frames: pd.DataFrame) -> go.Figure:
    """Draw :func:`wave_frames`: dark cells hold that wave's blocks, light cells held a block in an
    earlier wave but none now (empty slots: the tail), grey cells were never used."""
    source, num_sms, slots, n_waves = (frames.attrs[k] for k in ("source", "num_sms", "slots", "waves"))
    rows = list(frames.itertuples(index=False))
    hover = "SM %{x}, slot %{y}<br>block %{customdata} (-1: none in this wave)<extra></extra>"
    base = go.Heatmap(
        z=rows[0].cells,
        customdata=rows[0].blocks,
        x=np.arange(num_sms),
        y=np.arange(slots),
        zmin=0,
        zmax=2,
        colorscale=WAVE_COLOURS,
        showscale=False,
        xgap=1,
        ygap=1,
        hovertemplate=hover,
    )
    animated = [
        go.Frame(
            data=[go.Heatmap(z=f.cells, customdata=f.blocks)],
            traces=[0],
            name=str(f.wave),
            layout={"title": _title(f.text, source)},
        )
        for f in rows
    ]
    wave_names = [str(f.wave) for f in rows]
    wave_labels = [str(f.wave + 1) for f in rows]  # waves count from 1 for people
    menus, sliders = animation_controls(wave_names, wave_labels, "wave ", -0.14, FRAME_MS)
    fig = go.Figure(data=[base], frames=animated)
    fig.update_layout(
        title=_title(rows[0].text, source),
        xaxis={"title": "SM", "range": [-0.5, num_sms - 0.5], "autorange": False},
        yaxis={
            "title": "resident slot",
            "range": [-0.5, slots - 0.5],
            "autorange": False,
            "tickmode": "linear" if slots <= 16 else "auto",  # whole slots only, never ±0.4
            "tick0": 0,
            "dtick": 1 if slots <= 16 else None,
            "tickformat": "d",
        },
        updatemenus=menus,
        sliders=sliders,
        height=int(np.clip(300 + 14 * slots, 460, 820)),
        margin={"t": 110, "b": 140},
        annotations=[
            {
                "text": "dark: this wave's blocks · light: a slot an earlier wave used, empty now · grey: never used",
                "showarrow": False,
                "x": 0,
                "y": 1.02,
                "xref": "paper",
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 11},
            }
        ],
    )
    if n_waves == 1:  # nothing to step through
        fig.layout.updatemenus, fig.layout.sliders = (), ()
        fig.update_layout(margin={"b": 60})
    else:
        place_controls(fig)
    return fig


REGISTER_STEPS = (32, 64, 96, 128, 168, 255)


def wave_suggestion(arch: str, max_threads: int, block: int = 256) -> dict:
    """A vector_add launch that runs in several waves and whose tail leaves half the SMs idle on ``arch``.

    Within ``max_threads`` (the simulator's limit), the fewest registers per thread that give two full
    waves and a third of one block for half the SMs (the scheduler spreads a wave one block per SM, so
    the other half get none); if even 255 registers/thread leave too many resident threads, as many
    full waves as fit and that tail. Returns {"n", "block", "regs", "blocks", "waves",
    "blocks_per_wave", "tail_blocks", "idle_sms"}.
    """
    spec = ARCHS[arch]
    best = None
    for regs in REGISTER_STEPS:
        occ = occupancy(spec, block, regs, 0, 0)
        if not occ.launchable:
            continue
        per_wave = occ.blocks_per_sm * spec.num_sms
        fits = max_threads // block  # blocks the limit allows
        tail = spec.num_sms // 2  # one block each for half the SMs: the other half sit idle
        full = min(2, max((fits - tail) // per_wave, 0))
        if full == 0:
            continue
        blocks = full * per_wave + tail
        best = {"n": blocks * block, "block": block, "regs": regs, "blocks": blocks, "waves": full + 1,
                "blocks_per_wave": per_wave, "tail_blocks": tail,
                "idle_sms": spec.num_sms - tail}  # fmt: skip
        if full == 2:
            break
    if best is None:
        raise ValueError(f"no launch within {max_threads:,} threads fills one wave of {spec.label}")
    return best
