"""The launched grid as blocks x threads, coloured by block, warp, lane, SM or active/idle, with an
animation of the order threads started in.

Layout:

* 1-D launches (grid and block both 1-D): one row per block, x = thread in the block.
* 2-D/3-D launches: each thread at its global 2-D position, x = blockIdx.x * blockDim.x + threadIdx.x,
  y = blockIdx.y * blockDim.y + threadIdx.y (z slices, if any, stacked below), with block borders drawn.

Above ``AGGREGATE_ABOVE`` threads the cells become warps (1-D; consecutive blocks grouped if still too
many) or blocks (2-D; square groups of blocks if still too many), so a 1M-thread launch stays a few MB.

The animation's frames are buckets of the threads' start: measured ``t_start_ns`` on a GPU; on the
simulator, the order it recorded threads in (its host clock is no GPU time, so only the order is used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale

from visualizer.figures.common import frame_slider, frame_step, place_controls, play_pause
from visualizer.specs.launch import ceil_div

AGGREGATE_ABOVE = 50_000  # threads: above this, one cell per warp (1-D) or per block (2-D)
MAX_CELLS = 32_768  # cells in an aggregated view: a 1M-thread launch of 128-thread blocks is 8192 x 4 warps
MAX_FRAMES = 30
FRAME_CELLS = 1_250_000  # cells x frames sent at most (int8 each): keeps the figure JSON under ~5 MB
BORDER_LINES_MAX = 256  # block borders drawn only while there are at most this many per axis

COLOR_BY = {
    "block": "block",
    "warp": "warp",
    "lane": "lane",
    "sm": "SM",
    "active": "active / idle",
}

# Colour codes in the heatmap's z: 0 and 1 are fixed meanings, then the palette of the chosen colouring.
NOT_STARTED, IDLE = 0, 1
NOT_STARTED_COLOR = "#ececec"
IDLE_COLOR = "#8c8c8c"
NO_THREAD_COLOR = (
    "#f6e7c1"  # a lane of a block's last warp that has no thread (blockDim not a multiple of 32)
)
ACTIVE_COLOR = "#2ca02c"
PARTIAL_COLOR = "#ff7f0e"
# D3's ten hues without its grey (grey means idle here); ids cycle through them
CYCLE = [c for c in qualitative.D3 if c.upper() != "#7F7F7F"]
LANE_COLORS = sample_colorscale("Viridis", [i / 31 for i in range(32)])

GPU_ORDER_LABEL = "measured start time"
SIM_ORDER_LABEL = "simulator order (blocks run one after another; not GPU timing)"


def is_two_d(launch: dict) -> bool:
    grid, block = launch["grid"], launch["block"]
    return grid[1] > 1 or grid[2] > 1 or block[1] > 1 or block[2] > 1


def cell_level(launch: dict) -> str:
    """What one heatmap cell is: a thread, or (above AGGREGATE_ABOVE threads) a warp or a block."""
    if launch["threads"] <= AGGREGATE_ABOVE:
        return "thread"
    return "block" if is_two_d(launch) else "warp"


def available_colorings(launch: dict) -> list[str]:
    """The colourings that mean something at this launch's cell level (a warp cell has no lane)."""
    level = cell_level(launch)
    if level == "thread":
        return list(COLOR_BY)
    if level == "warp":
        return ["block", "warp", "sm", "active"]
    return ["block", "sm", "active"]


@dataclass
class _Cells:
    """Where every thread lands: a rows x cols canvas, in axis units given by x0/dx and y0/dy."""

    level: str
    rows: int
    cols: int
    cell: np.ndarray  # canvas index (row * cols + col) of every thread, in table order
    group: int = 1  # blocks per cell (warp level: per row; block level: per side)
    x0: float = 0.0
    dx: float = 1.0
    y0: float = 0.0
    dy: float = 1.0
    x_title: str = ""
    y_title: str = ""


def _cells(threads: pd.DataFrame, launch: dict) -> _Cells:
    gx, gy, gz = launch["grid"]
    bdx, bdy, bdz = launch["block"]
    tpb, blocks = launch["threads_per_block"], launch["blocks"]
    level = cell_level(launch)
    if level == "thread" and not is_two_d(launch):
        row = threads["block"].to_numpy(np.int64)
        col = threads["thread"].to_numpy(np.int64)
        return _Cells(level, blocks, tpb, row * tpb + col, x_title="threadIdx.x", y_title="blockIdx.x")
    if level == "thread":
        col = threads["block_x"].to_numpy(np.int64) * bdx + threads["thread_x"].to_numpy(np.int64)
        row = (
            (threads["block_z"].to_numpy(np.int64) * gy + threads["block_y"].to_numpy(np.int64)) * bdz
            + threads["thread_z"].to_numpy(np.int64)
        ) * bdy + threads["thread_y"].to_numpy(np.int64)
        cols, rows = gx * bdx, gz * gy * bdz * bdy
        y_title = "global y = blockIdx.y·blockDim.y + threadIdx.y" + (" (z slices stacked)" if gz > 1 else "")
        return _Cells(
            level, rows, cols, row * cols + col, x_title="global x = blockIdx.x·blockDim.x + threadIdx.x",
            y_title=y_title,
        )  # fmt: skip
    if level == "warp":
        wpb = ceil_div(tpb, 32)
        group = max(1, ceil_div(blocks * wpb, MAX_CELLS))
        rows = ceil_div(blocks, group)
        row = threads["block"].to_numpy(np.int64) // group
        col = threads["warp"].to_numpy(np.int64)
        return _Cells(
            level, rows, wpb, row * wpb + col, group=group, y0=(group - 1) / 2, dy=group,
            x_title="warp in block (32 threads each)", y_title="blockIdx.x",
        )  # fmt: skip
    side_y = gy * gz
    group = 1
    while ceil_div(gx, group) * ceil_div(side_y, group) > MAX_CELLS:
        group += 1
    cols, rows = ceil_div(gx, group), ceil_div(side_y, group)
    col = threads["block_x"].to_numpy(np.int64) // group
    row = (threads["block_z"].to_numpy(np.int64) * gy + threads["block_y"].to_numpy(np.int64)) // group
    return _Cells(
        level, rows, cols, row * cols + col, group=group, x0=(group - 1) / 2, dx=group, y0=(group - 1) / 2,
        dy=group, x_title="blockIdx.x", y_title="blockIdx.y" + (" (z slices stacked)" if gz > 1 else ""),
    )  # fmt: skip


def _order_key(threads: pd.DataFrame, measured: bool) -> np.ndarray:
    """Measured start ns on a GPU; on the simulator, each thread's position in its recorded order."""
    start = threads["t_start_ns"].to_numpy(np.int64)
    if measured:
        return start
    rank = np.empty(len(start), np.int64)
    rank[np.argsort(start, kind="stable")] = np.arange(len(start))
    return rank


def _palette(color_by: str) -> list[str]:
    return {"lane": LANE_COLORS, "active": [ACTIVE_COLOR, PARTIAL_COLOR]}.get(color_by, CYCLE)


def _colorscale(palette: list[str]) -> list[list]:
    """A stepped colour scale: code c (0 .. n-1) is exactly colour c."""
    colors = [NOT_STARTED_COLOR, IDLE_COLOR, *palette]
    n = len(colors)
    scale = []
    for code, color in enumerate(colors):
        scale += [[code / n, color], [(code + 1) / n, color]]
    return scale


def _as_int32(cols: list[np.ndarray]) -> np.ndarray:
    return np.stack([np.asarray(c, np.int64) for c in cols], axis=-1).astype(np.int32)


def _start_units(key: np.ndarray, measured: bool) -> tuple[np.ndarray, str]:
    """Start values for the hover, in int32: ns while they fit, else µs; simulator order as is."""
    if not measured:
        return key, "order"
    if len(key) and key.max() >= 2**31:
        return key // 1000, "µs"
    return key, "ns"


def _thread_cells(threads, launch, cells, color_by, key, measured):
    n = cells.rows * cells.cols
    active = threads["active"].to_numpy(bool)
    value = {
        "block": threads["block"].to_numpy(np.int64) % len(CYCLE),
        "warp": threads["warp"].to_numpy(np.int64) % len(CYCLE),
        "lane": threads["lane"].to_numpy(np.int64),
        "sm": threads["sm"].to_numpy(np.int64) % len(CYCLE),
        "active": np.zeros(len(threads), np.int64),
    }[color_by]
    code = np.where(active, value + 2, IDLE)
    z = np.full(n, NOT_STARTED, np.int8)
    z[cells.cell] = code
    start = np.full(n, np.iinfo(np.int64).max, np.int64)
    start[cells.cell] = key
    three_d = launch["grid"][2] > 1 or launch["block"][2] > 1
    dims = ["x", "y", "z"] if three_d else ["x", "y"]
    shown, unit = _start_units(key, measured)
    fields = [threads[f"block_{d}"] for d in dims] + [threads[f"thread_{d}"] for d in dims]
    fields += [threads[c] for c in ("warp", "lane", "global_id", "sm", "active")] + [shown]
    custom = np.zeros((n, len(fields)), np.int32)
    custom[cells.cell] = _as_int32(fields)
    k = len(dims)
    idx = ", ".join(f"%{{customdata[{i}]}}" for i in range(k))
    tid = ", ".join(f"%{{customdata[{k + i}]}}" for i in range(k))
    f = 2 * k
    sm_note = "" if measured else " (modelled)"
    hover = (
        f"blockIdx ({idx})<br>threadIdx ({tid})<br>warp %{{customdata[{f}]}} · lane %{{customdata[{f + 1}]}}"
        f"<br>global index %{{customdata[{f + 2}]}}<br>SM %{{customdata[{f + 3}]}}{sm_note}"
        f"<br>active %{{customdata[{f + 4}]}} (1 = did work, 0 = idle)<br>{_start_hover(f + 5, unit)}"
        "<extra></extra>"
    )
    return z, start, custom.reshape(cells.rows, cells.cols, -1), hover


def _start_hover(i: int, unit: str) -> str:
    if unit == "order":
        return f"started #%{{customdata[{i}]}} in the simulator's order"
    return f"started %{{customdata[{i}]}} {unit} after the first thread (measured)"


def _aggregated_cells(threads, launch, cells, color_by, key, measured):
    n = cells.rows * cells.cols
    df = pd.DataFrame(
        {
            "cell": cells.cell,
            "block": threads["block"].to_numpy(np.int64),
            "block_x": threads["block_x"].to_numpy(np.int64),
            "block_y": threads["block_y"].to_numpy(np.int64),
            "block_z": threads["block_z"].to_numpy(np.int64),
            "thread": threads["thread"].to_numpy(np.int64),
            "warp": threads["warp"].to_numpy(np.int64),
            "global_id": threads["global_id"].to_numpy(np.int64),
            "sm": threads["sm"].to_numpy(np.int64),
            "active": threads["active"].to_numpy(np.int64),
            "start": key,
        }
    )
    agg = df.groupby("cell", sort=True).agg(
        block0=("block", "min"), block1=("block", "max"), bx0=("block_x", "min"), bx1=("block_x", "max"),
        by0=("block_y", "min"), by1=("block_y", "max"), bz0=("block_z", "min"), bz1=("block_z", "max"),
        t0=("thread", "min"), t1=("thread", "max"), warp=("warp", "min"), g0=("global_id", "min"),
        g1=("global_id", "max"), sm0=("sm", "min"), sm1=("sm", "max"), active=("active", "sum"),
        count=("active", "size"), start=("start", "min"),
    )  # fmt: skip
    where = agg.index.to_numpy()
    cycle = len(CYCLE)
    if color_by == "active":
        value = np.where(agg["active"] == agg["count"], 0, 1)
    else:
        value = {"block": agg["block0"], "warp": agg["warp"], "sm": agg["sm0"]}[color_by].to_numpy() % cycle
    code = np.where(agg["active"].to_numpy() > 0, value + 2, IDLE)
    z = np.full(n, NOT_STARTED, np.int8)
    z[where] = code
    start = np.full(n, np.iinfo(np.int64).max, np.int64)
    start[where] = agg["start"].to_numpy()
    shown, unit = _start_units(agg["start"].to_numpy(), measured)
    sm_note = "" if measured else " (modelled)"
    if cells.level == "warp":
        names = ["block0", "block1", "warp", "t0", "t1", "g0", "g1", "sm0", "sm1", "active", "count"]
        blocks = "block %{customdata[0]}" if cells.group == 1 else "blocks %{customdata[0]}–%{customdata[1]}"
        head = (
            f"{blocks} · warp %{{customdata[2]}} (threadIdx.x %{{customdata[3]}}–%{{customdata[4]}})"
            "<br>global index %{customdata[5]}–%{customdata[6]}"
        )
    else:
        names = ["bx0", "bx1", "by0", "by1", "bz0", "bz1", "block0", "block1", "g0", "g1", "sm0", "sm1"]
        names += ["active", "count"]
        if cells.group == 1:
            head = "blockIdx (%{customdata[0]}, %{customdata[2]}, %{customdata[4]}) · block %{customdata[6]}"
        else:
            head = (
                "blockIdx.x %{customdata[0]}–%{customdata[1]}, .y %{customdata[2]}–%{customdata[3]}, "
                ".z %{customdata[4]}–%{customdata[5]}<br>blocks %{customdata[6]}–%{customdata[7]}"
            )
        head += "<br>global index %{customdata[8]}–%{customdata[9]}"
    m = len(names)
    hover = (
        f"{head}<br>SM %{{customdata[{m - 4}]}}–%{{customdata[{m - 3}]}}{sm_note}"
        f"<br>active %{{customdata[{m - 2}]}} of %{{customdata[{m - 1}]}} threads"
        f"<br>{_start_hover(m, unit)} (first thread of the cell)<extra></extra>"
    )
    custom = np.zeros((n, m + 1), np.int32)
    custom[where] = _as_int32([agg[c].to_numpy() for c in names] + [shown])
    return z, start, custom.reshape(cells.rows, cells.cols, -1), hover


def _border_lines(launch: dict, cells: _Cells) -> go.Scatter | None:
    """Block borders (2-D) or warp boundaries (1-D) as one line trace; none when they would be a smear."""
    if cells.level != "thread":
        return None
    gx, gy, gz = launch["grid"]
    bdx, bdy, bdz = launch["block"]
    xs: list[float | None] = []
    ys: list[float | None] = []
    top, bottom = -0.5, cells.rows - 0.5
    left, right = -0.5, cells.cols - 0.5
    if is_two_d(launch):
        if gx > BORDER_LINES_MAX or gy * gz > BORDER_LINES_MAX:
            return None
        for i in range(1, gx):
            xs += [i * bdx - 0.5, i * bdx - 0.5, None]
            ys += [top, bottom, None]
        for j in range(1, gy * gz):
            xs += [left, right, None]
            ys += [j * bdy * bdz - 0.5, j * bdy * bdz - 0.5, None]
        name, width, dash = "block border", 2, "solid"
    else:
        warps = ceil_div(launch["threads_per_block"], 32)
        for w in range(1, warps):
            xs += [w * 32 - 0.5, w * 32 - 0.5, None]
            ys += [top, bottom, None]
        if not xs:
            return None
        name, width, dash = "warp boundary (every 32 threads)", 1, "dot"
    return go.Scatter(
        x=xs, y=ys, mode="lines", line={"color": "black", "width": width, "dash": dash},
        hoverinfo="skip", name=name, showlegend=True,
    )  # fmt: skip


def _color_key(color_by: str, level: str, animate: bool) -> dict:
    """The colour bar that keys block / warp / lane / SM colours (ids cycle through the palette)."""
    if color_by == "active":
        return {}
    name = COLOR_BY[color_by]
    if color_by == "lane":
        # 34 codes share the bar, a few px each on a short plot: "idle" and "not started" would print
        # over each other and over lane 0, so they are legend swatches instead (grid_figure)
        ticks = [(2 + lane, f"lane {lane}" if lane == 0 else str(lane)) for lane in (0, 8, 16, 24, 31)]
        return {
            "title": {"text": name, "side": "top"}, "tickvals": [t for t, _ in ticks],
            "ticktext": [label for _, label in ticks], "len": 1.0, "thickness": 14, "x": 1.01,
            "tickfont": {"size": 11}, "y": 0.5, "yanchor": "middle", "outlinewidth": 0, "tickmode": "array",
        }  # fmt: skip
    else:
        n = len(CYCLE)
        ticks = [(2 + i, f"{name} {i}, {i + n}, …" if i == 0 else f"{i}, {i + n}, …") for i in range(n)]
    if level != "thread" and color_by != "lane":
        ticks[0] = (2, f"{name} 0, {len(CYCLE)}, … (of the {level}'s first thread)")
    ticks = [(IDLE, "idle")] + ([(NOT_STARTED, "not started")] if animate else []) + ticks
    return {
        "title": {"text": name, "side": "top"}, "tickvals": [t for t, _ in ticks],
        "ticktext": [label for _, label in ticks], "len": 1.0, "thickness": 14, "x": 1.01,
        "tickfont": {"size": 11}, "y": 0.5, "yanchor": "middle", "outlinewidth": 0, "tickmode": "array",
    }  # fmt: skip


def _no_thread_lanes(launch: dict, cells: _Cells) -> go.Heatmap | None:
    """1-D thread view: the lanes of each block's last warp that have no thread, drawn as their own cells
    right of the block's threads (a warp always has 32 lanes; blockDim.x need not fill them)."""
    tpb = launch["threads_per_block"]
    if cells.level != "thread" or is_two_d(launch) or tpb % 32 == 0:
        return None
    lanes = ceil_div(tpb, 32) * 32 - tpb
    return go.Heatmap(
        z=np.zeros((cells.rows, lanes), np.int8), x0=tpb, dx=1, y0=0, dy=1, zmin=0, zmax=1,
        colorscale=[[0, NO_THREAD_COLOR], [1, NO_THREAD_COLOR]], showscale=False,
        hovertemplate=(
            f"blockIdx %{{y}} · lane %{{x}} of the block (lane {tpb % 32}–31 of its last warp)<br>"
            f"no thread: blockDim.x = {tpb} leaves {lanes} of the warp's 32 lanes empty<extra></extra>"
        ),
        name="no thread", ygap=1 if cells.rows <= 200 else 0,
    )  # fmt: skip


def _legend_swatch(name: str, color: str) -> go.Scatter:
    return go.Scatter(
        x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
        marker={"symbol": "square", "size": 12, "color": color, "line": {"color": "#444", "width": 1}},
    )  # fmt: skip


def _frame_thresholds(start: np.ndarray, max_frames: int) -> np.ndarray:
    """Ascending thresholds on the order key, the last one admitting every cell."""
    started = start[start != np.iinfo(np.int64).max]
    if not len(started):
        return np.zeros(1, np.int64)
    values = np.unique(started)
    if len(values) <= max_frames:
        return values
    lo, hi = float(values[0]), float(values[-1])
    edges = lo + (hi - lo) * np.arange(1, max_frames + 1) / max_frames
    edges = np.ceil(edges).astype(np.int64)
    edges[-1] = values[-1]
    return np.unique(edges)


def _frame_label(threshold: int, measured: bool, total: int, started: int, unit: str) -> str:
    if measured:
        when = f"{threshold / 1e3:,.2f} µs" if threshold >= 1000 else f"{threshold:,} ns"
        return f"{when}: {started:,}/{total:,} {unit}"
    return f"{started:,}/{total:,} {unit}"


def grid_figure(
    threads: pd.DataFrame, launch: dict, color_by: str, animate: bool, max_frames: int = 24
) -> go.Figure:
    """The grid as a heatmap of threads (or warps/blocks for big launches), optionally animated."""
    if color_by not in COLOR_BY:
        raise ValueError(f"color_by must be one of {', '.join(COLOR_BY)}, got {color_by!r}")
    if color_by not in available_colorings(launch):
        raise ValueError(
            f"colouring by {COLOR_BY[color_by]} needs one cell per thread; this launch is drawn per "
            f"{cell_level(launch)} (over {AGGREGATE_ABOVE:,} threads)"
        )
    if len(threads) != launch["threads"]:
        raise ValueError(f"threads table has {len(threads):,} rows for a {launch['threads']:,}-thread launch")
    measured = launch["backend"] == "gpu"
    cells = _cells(threads, launch)
    key = _order_key(threads, measured)
    build = _thread_cells if cells.level == "thread" else _aggregated_cells
    z, start, custom, hover = build(threads, launch, cells, color_by, key, measured)
    palette = _palette(color_by)
    ncodes = 2 + len(palette)
    heat = go.Heatmap(
        z=z.reshape(cells.rows, cells.cols),
        x0=cells.x0, dx=cells.dx, y0=cells.y0, dy=cells.dy,
        zmin=-0.5, zmax=ncodes - 0.5, colorscale=_colorscale(palette),
        showscale=color_by != "active", colorbar=_color_key(color_by, cells.level, animate),
        customdata=custom, hovertemplate=hover,
        xgap=1 if cells.level != "thread" and cells.cols <= 200 else 0,
        ygap=1 if (cells.level != "thread" or not is_two_d(launch)) and cells.rows <= 200 else 0,
    )  # fmt: skip
    traces: list = [heat]
    empty_lanes = _no_thread_lanes(launch, cells)
    if empty_lanes is not None:  # after the heatmap: frames replace trace 0 only
        traces.append(empty_lanes)
    lines = _border_lines(launch, cells)
    if lines is not None:
        traces.append(lines)
    if color_by in ("active", "lane"):  # the other colourings key idle and not started on their colour bar
        traces.append(_legend_swatch("idle (did no work, e.g. past n)", IDLE_COLOR))
        if color_by == "active":
            traces.insert(1, _legend_swatch("active (did work)", ACTIVE_COLOR))
        if cells.level != "thread" and color_by == "active":
            traces.insert(2, _legend_swatch(f"{cells.level} partly idle", PARTIAL_COLOR))
        if animate:
            traces.append(_legend_swatch("not started yet", NOT_STARTED_COLOR))
    if empty_lanes is not None:
        traces.append(_legend_swatch("no thread (empty lane)", NO_THREAD_COLOR))
    legend_items = sum(1 for t in traces if t.type == "scatter")

    gx, gy, gz = launch["grid"]
    bdx, bdy, bdz = launch["block"]
    shape = "×".join(str(v) for v in (gx, gy, gz)[: 3 if gz > 1 else 2 if gy > 1 else 1])
    bshape = "×".join(str(v) for v in (bdx, bdy, bdz)[: 3 if bdz > 1 else 2 if bdy > 1 else 1])
    per = {"thread": "", "warp": " · one cell per warp", "block": " · one cell per block"}[cells.level]
    if cells.group > 1:
        per += f" (groups of {cells.group}{'×' + str(cells.group) if cells.level == 'block' else ''} blocks)"
    title = (
        f"{launch['kernel']}: grid {shape} × block {bshape} = {launch['threads']:,} threads · "
        f"coloured by {COLOR_BY[color_by]}{per}<br><sup>{launch['source']}</sup>"
    )
    cols = cells.cols + (empty_lanes.z.shape[1] if empty_lanes is not None else 0)
    x_range = [cells.x0 - cells.dx / 2, cells.x0 + cells.dx * (cols - 0.5)]
    y_range = [cells.y0 + cells.dy * (cells.rows - 0.5), cells.y0 - cells.dy / 2]  # row 0 on top
    two_d = is_two_d(launch)
    plot_px = 520 if two_d else int(min(520, max(160, 28 * cells.rows)))
    bottom = 220 if animate else 60  # x-axis title, then the slider and Play/Pause under it
    height = plot_px + (80 if legend_items <= 3 else 105) + bottom
    fig = go.Figure(data=traces)
    fig.update_layout(
        # at the figure's top edge, above a legend of two rows
        # pad: plotly anchors a two-line title by its last line, so its first line needs room above
        title={"text": title, "x": 0, "xanchor": "left", "y": 0.99, "yref": "container", "yanchor": "top",
               "pad": {"t": 14}},
        height=height,
        # a legend of more than three items takes two rows above the plot: room for them under the title
        margin={"l": 60, "r": 20 if color_by == "active" else 150, "t": 80 if legend_items <= 3 else 105,
                "b": bottom},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 1, "xanchor": "right"},
        plot_bgcolor="white",
        xaxis={"title": cells.x_title, "range": x_range, "autorange": False, "showgrid": False,
               "zeroline": False, "constrain": "domain", **_whole_ticks(cols, cells.x0, cells.dx, 16)},
        yaxis={"title": cells.y_title, "range": y_range, "autorange": False, "showgrid": False,
               "zeroline": False, **({"scaleanchor": "x", "constrain": "domain"} if two_d else {}),
               **_whole_ticks(cells.rows, cells.y0, cells.dy, 16 if two_d else 40)},
    )  # fmt: skip
    if animate:
        controls_y = (-60 / plot_px, -175 / plot_px)  # slider, buttons: in plot-height units below the axis
        _add_animation(fig, z, start, cells, measured, max_frames, controls_y)
        place_controls(fig, gap_px=64)
    return fig


def _whole_ticks(n: int, start: float, step: float, most: int) -> dict:
    """Ticks on whole cells for a short axis (a 1-thread grid's axis would otherwise read -0.4..0.4)."""
    if n > most:
        return {"tickformat": "d"}
    return {"tickmode": "linear", "tick0": start, "dtick": step, "tickformat": "d"}


def _add_animation(fig: go.Figure, z, start, cells: _Cells, measured: bool, max_frames: int, controls_y):
    """Frames of the cells started by each threshold; Play/Pause and a slider below the x-axis title."""
    cap = min(max_frames, MAX_FRAMES, FRAME_CELLS // (cells.rows * cells.cols))
    thresholds = _frame_thresholds(start, max(2, cap))
    total = int((start != np.iinfo(np.int64).max).sum())
    unit = "threads" if cells.level == "thread" else f"{cells.level}s"
    frames, steps = [], []
    for i, t in enumerate(thresholds):
        shown = start <= t
        frame_z = np.where(shown, z, NOT_STARTED).astype(np.int8).reshape(cells.rows, cells.cols)
        name = str(i)
        label = _frame_label(int(t), measured, total, int(shown.sum()), unit)
        frames.append(go.Frame(name=name, data=[go.Heatmap(z=frame_z)], traces=[0]))
        steps.append(frame_step(name, label))
    what = GPU_ORDER_LABEL if measured else SIM_ORDER_LABEL
    fig.frames = frames
    # The figure opens on the complete picture (the last frame, where the slider starts); Play replays
    # the order from the first frame.
    fig.data[0].z = frames[-1].data[0].z
    fig.update_layout(
        sliders=[
            frame_slider(
                steps,
                f"{what}: started by " if measured else f"{what}: started ",
                controls_y[0],
                active=len(frames) - 1,
            )  # fmt: skip
        ],
        updatemenus=[play_pause(controls_y[1], frame_ms=350, from_current=False)],
    )
