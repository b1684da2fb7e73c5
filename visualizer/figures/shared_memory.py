"""Shared-memory figures: matmul_tiled's tile loop, the reduction tree, and the race demo beside it.

Pure builders (DataFrame/arrays in, ``go.Figure`` out). Every number drawn comes from the tables a
kernel recorded (``tiles``, ``reduction_tree``) or its outputs; every title names that source.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizer.figures.common import animation_controls, place_controls, source_of, titled

FRAME_MS = 900
MAX_BLOCKS_SHOWN = 2048  # race comparison: beyond this, show the first blocks and count the rest

# tile colours: this step's tile, tiles earlier steps loaded, the C tile being accumulated
CURRENT = "rgba(255, 140, 0, 0.85)"
DONE = "rgba(100, 149, 237, 0.35)"
C_RGB = "46, 139, 87"
GRID = "rgba(128, 128, 128, 0.35)"

ACTIVE = "#ff8c00"  # thread tid < stride: writes s[tid]
READ = "#1f77b4"  # slot s[tid + stride]: read by an active thread
IDLE = "#c8c8c8"
MISMATCH = "#d62728"


def _rects(boxes: list[tuple[int, int, int, int]]) -> tuple[list, list]:
    """Closed outlines of (row0, col0, rows, cols) boxes in matrix coordinates, gaps between them."""
    xs: list = []
    ys: list = []
    for row0, col0, rows, cols in boxes:
        xs += [col0, col0 + cols, col0 + cols, col0, col0, None]
        ys += [row0, row0, row0 + rows, row0 + rows, row0, None]
    return xs, ys


def _union(boxes: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """The bounding box (row0, col0, rows, cols) of some boxes."""
    r0 = min(b[0] for b in boxes)
    c0 = min(b[1] for b in boxes)
    r1 = max(b[0] + b[2] for b in boxes)
    c1 = max(b[1] + b[3] for b in boxes)
    return r0, c0, r1 - r0, c1 - c0


def _tile_grid(n: int, tile: int) -> tuple[list, list]:
    """Lines at every tile boundary of an n x n matrix (one trace, gaps between lines)."""
    cuts = [*range(0, n, tile), n]
    xs: list = []
    ys: list = []
    for c in cuts:
        xs += [c, c, None, 0, n, None]
        ys += [0, n, None, c, c, None]
    return xs, ys


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}" if k == 1 else f"{k} {noun}s"


def _fmt_ns(t: int) -> str:
    return f"{t:,} ns"


# ---------------------------------------------------------------------------------------------
# matmul_tiled: the tile loop of one block


def matmul_tile_frames(tiles: pd.DataFrame, launch: dict, block_x: int, block_y: int) -> pd.DataFrame:
    """The tile loop of ``matmul_tiled`` for block (block_x, block_y) as a frames table: two rows per
    step (phase "load": after the first syncthreads, the A and B tiles the block recorded are in
    shared memory; "multiply": after the second, their product is in the C tile). Boxes are
    (row0, col0, rows, cols) as recorded, so partial edge tiles keep their true size; ``a_done`` /
    ``b_done`` outline the tiles of earlier steps; times are ns after the block's first load."""
    mine = tiles[(tiles["block_x"] == block_x) & (tiles["block_y"] == block_y)]
    if mine.empty:
        raise ValueError(f"block ({block_x}, {block_y}) has no recorded tiles")
    a_tiles = mine[mine["operand"] == "A"].sort_values("step")
    b_tiles = mine[mine["operand"] == "B"].sort_values("step")
    a_boxes = [tuple(int(v) for v in r) for r in a_tiles[["row0", "col0", "rows", "cols"]].to_numpy()]
    b_boxes = [tuple(int(v) for v in r) for r in b_tiles[["row0", "col0", "rows", "cols"]].to_numpy()]
    a_t, b_t = a_tiles["t_ns"].to_numpy(np.int64), b_tiles["t_ns"].to_numpy(np.int64)
    t_first = int(min(a_t.min(), b_t.min()))
    c_box = (a_boxes[0][0], b_boxes[0][1], a_boxes[0][2], b_boxes[0][3])  # A's rows by B's columns
    steps, rows = len(a_boxes), []
    for step in range(steps):
        for multiplied in (False, True):
            rows.append(
                {
                    "name": f"{step}-{'mul' if multiplied else 'load'}",
                    "label": f"{step + 1}·{'multiply' if multiplied else 'load'}",
                    "step": step, "phase": "multiply" if multiplied else "load",
                    "products": step + 1 if multiplied else step,  # tile products in C after the frame
                    "a": a_boxes[step], "b": b_boxes[step], "c": c_box,
                    "a_done": _union(a_boxes[:step]) if step else None,
                    "b_done": _union(b_boxes[:step]) if step else None,
                    "a_t": int(a_t[step]), "b_t": int(b_t[step]),
                    "a_after_ns": int(a_t[step]) - t_first, "b_after_ns": int(b_t[step]) - t_first,
                }
            )  # fmt: skip
    frames = pd.DataFrame(rows)
    frames.attrs.update(steps=steps, block=(block_x, block_y), source=launch["source"])
    return frames


def matmul_tiles_figure(tiles: pd.DataFrame, launch: dict, block_x: int, block_y: int) -> go.Figure:
    """The tile loop of ``matmul_tiled`` for block (block_x, block_y), two frames per step
    (:func:`matmul_tile_frames`, drawn by :func:`matmul_frames_figure`)."""
    return matmul_frames_figure(matmul_tile_frames(tiles, launch, block_x, block_y), launch)


def _tile_trace(box, name: str, tile: int, t_ns: int) -> go.Scatter:
    cx, cy = _rects([box])
    r0, c0, rows, cols = box
    return go.Scatter(
        x=cx, y=cy, fill="toself", fillcolor=CURRENT, mode="lines", line={"color": "black", "width": 2},
        name=f"{name} tile in shared memory",
        text=f"{name}[{r0}:{r0 + rows}, {c0}:{c0 + cols}] · {rows}×{cols}"
        + (" (partial edge tile)" if (rows, cols) != (tile, tile) else "")
        + f"<br>recorded at t = {_fmt_ns(int(t_ns))}",
        hoveron="fills", hoverinfo="text",
    )  # fmt: skip


def _done_trace(box, name: str) -> go.Scatter:
    # earlier tiles are contiguous along the block's band, so one outline of their union keeps each
    # frame O(1) however many steps there are (the tile grid shows the seams)
    dx, dy = _rects([box] if box is not None else [])
    return go.Scatter(
        x=dx or [None], y=dy or [None], fill="toself", fillcolor=DONE, mode="lines",
        line={"color": "rgba(100, 149, 237, 0.9)", "width": 1}, name=f"{name} tiles of earlier steps",
        hoverinfo="skip",
    )  # fmt: skip


def _frame_traces(f, steps: int, tile: int) -> list[go.Scatter]:
    """A done, A current, B done, B current, C tile, C label: the animated traces of one frame."""
    alpha = 0.1 + 0.75 * f.products / steps
    ccx, ccy = _rects([f.c])
    return [
        _done_trace(f.a_done, "A"),
        _tile_trace(f.a, "A", tile, f.a_t),
        _done_trace(f.b_done, "B"),
        _tile_trace(f.b, "B", tile, f.b_t),
        go.Scatter(
            x=ccx, y=ccy, fill="toself", fillcolor=f"rgba({C_RGB}, {alpha:.3f})", mode="lines",
            line={"color": f"rgb({C_RGB})", "width": 2}, name="C tile (accumulating)",
            text=f"C tile: {f.products} of {steps} tile products accumulated", hoveron="fills", hoverinfo="text",
        ),
        go.Scatter(
            x=[f.c[1] + f.c[3] / 2], y=[f.c[0] + f.c[2] / 2], mode="text", text=[f"{f.products}/{steps}"],
            textfont={"size": 14, "color": "black"}, hoverinfo="skip", showlegend=False,
        ),
    ]  # fmt: skip


def _frame_title(f, steps: int, block: tuple[int, int], clock: str, source: str) -> dict:
    (ra0, ca0, ra, ca), (rb0, cb0, rb, cb) = f.a, f.b
    head = f"block ({block[0]}, {block[1]}) · step {f.step + 1} of {steps}: "
    if f.phase == "multiply":
        text = (
            f"{head}multiplied sA·sB into the C tile → 2nd syncthreads"
            f"<br>C tile holds {f.step + 1} of {steps} tile products; now the tiles may be overwritten"
        )
    else:
        text = (
            f"{head}loaded A[{ra0}:{ra0 + ra}, {ca0}:{ca0 + ca}] and B[{rb0}:{rb0 + rb}, {cb0}:{cb0 + cb}] "
            f"→ 1st syncthreads<br>recorded at +{_fmt_ns(f.a_after_ns)} (A), +{_fmt_ns(f.b_after_ns)} (B) "
            f"after this block's first load<br>({clock})"
        )
    return titled(text, source)


def matmul_frames_figure(frames: pd.DataFrame, launch: dict) -> go.Figure:
    """Draw :func:`matmul_tile_frames`: A, B and C side by side over the tile grid, one animation frame
    per row."""
    n, tile = int(launch["params"]["n"]), int(launch["params"]["tile"])
    source, steps, block = launch["source"], frames.attrs["steps"], frames.attrs["block"]
    clock = (
        "measured with %globaltimer"
        if launch["backend"] == "gpu"
        else "simulator host clock: gives the simulator's order, not GPU time"
    )
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(f"A ({n}×{n})", f"B ({n}×{n})", f"C = A·B ({n}×{n})"),
        horizontal_spacing=0.05,
    )
    grid_x, grid_y = _tile_grid(n, tile)
    for col in (1, 2, 3):
        fig.add_trace(
            go.Scatter(x=grid_x, y=grid_y, mode="lines", line={"color": GRID, "width": 1},
                       hoverinfo="skip", showlegend=False),
            row=1, col=col,
        )  # fmt: skip
    animated = list(range(3, 9))  # the six traces of _frame_traces, after the three grids
    rows = list(frames.itertuples(index=False))
    fig.frames = [
        go.Frame(
            name=f.name,
            data=_frame_traces(f, steps, tile),
            traces=animated,
            layout={"title": _frame_title(f, steps, block, clock, source)},
        )
        for f in rows
    ]
    for trace, col in zip(_frame_traces(rows[0], steps, tile), (1, 1, 2, 2, 3, 3), strict=True):
        fig.add_trace(trace, row=1, col=col)
    for i in (1, 2, 3):
        suffix = "" if i == 1 else str(i)
        fig.layout[f"xaxis{suffix}"].update(range=[0, n], autorange=False, constrain="domain", title="column")
        fig.layout[f"yaxis{suffix}"].update(
            range=[n, 0], autorange=False, scaleanchor=f"x{suffix}", constrain="domain", title="row"
        )
    menus, sliders = animation_controls(list(frames["name"]), list(frames["label"]), "step ", -0.12, FRAME_MS)
    fig.update_layout(
        title=_frame_title(rows[0], steps, block, clock, source),
        height=620,
        margin={"t": 175, "b": 190},
        legend={"orientation": "h", "y": -0.5},
        updatemenus=menus,
        sliders=sliders,
        hovermode="closest",
    )
    place_controls(fig)
    return fig


def _block_tree(tree: pd.DataFrame, block: int, block_size: int) -> np.ndarray:
    """values[level, slot] for one block, NaN where nothing was recorded."""
    mine = tree[tree["block"] == block]
    if mine.empty:
        raise ValueError(f"block {block} has no recorded reduction tree")
    levels = int(np.log2(block_size)) + 1
    values = np.full((levels, block_size), np.nan)
    values[mine["step"].to_numpy(), mine["row"].to_numpy()] = mine["value"].to_numpy()
    return values


ARC_FOOT = 0.03  # arcs land at the bottom of their row, right on top of the slots' bars


def _arcs(stride: int) -> tuple[list, list]:
    """Arcs from slot tid + stride down into slot tid for every active tid (y in [0, 1])."""
    xs: list = []
    ys: list = []
    u = np.linspace(0.0, 1.0, 9)
    for tid in range(stride):
        src, dst = tid + stride, tid
        xs += [*(src + (dst - src) * u), None]
        ys += [*(ARC_FOOT + 0.85 * np.sin(np.pi * u)), None]
    return xs, ys


def reduction_tree_frames(
    tree: pd.DataFrame, block: int, block_size: int, kernel: str = "reduction"
) -> pd.DataFrame:
    """The shared-memory tree of one block as a frames table, one row per level (0 = the values each
    thread loaded): the stride, every slot's recorded value after the level and its role (adds / is
    read / idle), the frame's title and the value axis that fits it. The last level compares s[0]
    with the sum of the values the block loaded (what s[0] must end up holding)."""
    source = source_of(tree)
    values = _block_tree(tree, block, block_size)
    levels = values.shape[0]
    expected = float(np.nansum(values[0]))
    barrier = kernel != "reduction_race"
    rows = []
    for level in range(levels):
        stride = block_size >> level if level else 0
        roles = (
            [ACTIVE] * block_size
            if level == 0
            else [ACTIVE if s < stride else READ if s < 2 * stride else IDLE for s in range(block_size)]
        )
        after = "after syncthreads" if barrier else "NO syncthreads (race)"
        if level == 0:
            text = f"block {block} · level 0: each thread loads one element into s[tid] → syncthreads"
        else:
            who = "thread 0 adds" if stride == 1 else f"threads 0–{stride - 1} add"
            text = (
                f"block {block} · level {level} of {levels - 1}: stride {stride}, {who} "
                f"s[tid + {stride}] into s[tid] → {after}"
            )
            if not barrier:
                text += "<br>each bar: what its thread saw in its own slot right after its add"
        if level == levels - 1:
            got = values[level, 0]
            verdict = "✓ equals" if got == expected else "✗ differs from"
            text += f"<br>s[0] = {got:g} {verdict} the expected block sum {expected:g}"
        # this level's values fill the axis: level 0's loads would be slivers on the final sum's scale
        shown = values[level][np.isfinite(values[level])]
        top = max(float(shown.max()) if shown.size else 1.0, expected if level == levels - 1 else 0.0, 1e-9)
        bottom = min(0.0, float(shown.min()) if shown.size else 0.0)
        rows.append(
            {
                "level": level, "stride": stride, "values": values[level], "colours": roles,
                "title": text, "last": level == levels - 1,
                "y_range": [bottom - 0.08 * (top - bottom) * (bottom < 0), top + 0.1 * (top - bottom)],
            }
        )  # fmt: skip
    frames = pd.DataFrame(rows)
    frames.attrs.update(source=source, block=block, block_size=block_size, expected=expected, levels=levels)
    return frames


def reduction_tree_figure(
    tree: pd.DataFrame, block: int, block_size: int, kernel: str = "reduction"
) -> go.Figure:
    """The shared-memory tree of one block, one frame per level (:func:`reduction_tree_frames`, drawn
    by :func:`reduction_frames_figure`). Top: which thread adds which slot at that level (arcs from
    s[tid + stride] into s[tid]); bottom: every slot's recorded value after the level."""
    return reduction_frames_figure(reduction_tree_frames(tree, block, block_size, kernel))


def _tree_traces(f, block_size: int, expected: float) -> list:
    """Arcs, arc feet, slot values and (last level) the expected sum: the animated traces of one level."""
    ax, ay = _arcs(f.stride)
    slots = np.arange(block_size)
    return [
        go.Scatter(x=ax or [None], y=ay or [None], mode="lines", line={"color": ACTIVE, "width": 1.5},
                   hoverinfo="skip", name="s[tid] += s[tid + stride]"),
        go.Scatter(x=list(range(f.stride)) or [None], y=[ARC_FOOT] * f.stride or [None], mode="markers",
                   marker={"symbol": "triangle-down", "size": 8, "color": ACTIVE}, hoverinfo="skip",
                   showlegend=False),
        go.Bar(x=slots, y=f.values, marker={"color": f.colours}, customdata=slots,
               hovertemplate="s[%{customdata}] = %{y}<extra></extra>", name="shared-memory slot value",
               showlegend=False),
        go.Scatter(x=[-0.5, block_size - 0.5] if f.last else [None], y=[expected, expected] if f.last else [None],
                   mode="lines", line={"color": MISMATCH, "dash": "dash", "width": 2},
                   name=f"expected block sum {expected:g}", hoverinfo="skip"),
    ]  # fmt: skip


def _level0_hint(level: int) -> list[dict]:
    """Level 0 has no adds yet: say so where the arcs will be, rather than leave the row empty."""
    # always one annotation, hidden after level 0: a frame's empty list would not remove it
    return [{"text": "level 0: no adds yet · press ▶ Play or drag the slider to watch the tree halve",
             "xref": "paper", "yref": "y domain", "x": 0.5, "y": 0.5, "showarrow": False,
             "font": {"size": 13, "color": "#555"}, "visible": level == 0}]  # fmt: skip


def reduction_frames_figure(frames: pd.DataFrame) -> go.Figure:
    """Draw :func:`reduction_tree_frames`: the adds on top, the slot values below, one frame per level."""
    source, block_size, expected = (
        frames.attrs["source"],
        frames.attrs["block_size"],
        frames.attrs["expected"],
    )
    rows = list(frames.itertuples(index=False))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.28, 0.72], vertical_spacing=0.01)
    for trace, row in zip(_tree_traces(rows[0], block_size, expected), (1, 1, 2, 2), strict=True):
        fig.add_trace(trace, row=row, col=1)
    for colour, label in (
        (ACTIVE, "tid < stride: adds into its slot"),
        (READ, "slot read by tid − stride"),
        (IDLE, "idle this level"),
    ):
        fig.add_trace(
            go.Bar(x=[None], y=[None], marker={"color": colour}, name=label, hoverinfo="skip"), row=2, col=1
        )
    names = [str(f.level) for f in rows]
    fig.frames = [
        go.Frame(
            name=str(f.level),
            data=_tree_traces(f, block_size, expected),
            traces=[0, 1, 2, 3],
            layout={
                "title": titled(f.title, source),
                "yaxis2": {"range": f.y_range, "autorange": False},
                "annotations": _level0_hint(f.level),
            },
        )
        for f in rows
    ]
    menus, sliders = animation_controls(names, [f"level {n}" for n in names], "", -0.12, FRAME_MS)
    fig.update_layout(
        title=titled(rows[0].title, source),
        height=620,
        margin={"t": 120, "b": 190},
        bargap=0.1,
        legend={"orientation": "h", "y": -0.45},
        updatemenus=menus,
        sliders=sliders,
        xaxis={"range": [-0.5, block_size - 0.5], "autorange": False, "showticklabels": False},
        yaxis={"range": [0, 1], "autorange": False, "visible": False},
        xaxis2={
            "range": [-0.5, block_size - 0.5],
            "autorange": False,
            "title": "shared-memory slot = thread tid",
        },
        yaxis2={"range": rows[0].y_range, "autorange": False, "title": "value (axis fits each level)"},
        annotations=_level0_hint(0),
    )
    place_controls(fig)
    return fig


# ---------------------------------------------------------------------------------------------
# the race demo beside the correct reduction


GROUP_GAP = 0.2  # between blocks' groups of three bars
RACE_BAR_OFFSET = (1 - GROUP_GAP) / 3  # the race bar's centre, from its block's x


def race_comparison_figure(
    correct_partial: np.ndarray, race_partial: np.ndarray, expected: np.ndarray, source: str
) -> go.Figure:
    """Per-block partial sums: numpy's expected value, ``reduction`` and ``reduction_race``.

    Blocks where a kernel's sum differs from the expected one are marked in red.
    """
    correct = np.asarray(correct_partial, np.float64)
    race = np.asarray(race_partial, np.float64)
    want = np.asarray(expected, np.float64)
    nblocks = len(want)
    bad_correct = correct != want
    bad_race = race != want
    shown = min(nblocks, MAX_BLOCKS_SHOWN)
    blocks = np.arange(shown)
    fig = go.Figure()
    for name, vals, bad, colour in (
        ("expected (numpy)", want, np.zeros(nblocks, bool), "#7f7f7f"),
        ("reduction (with syncthreads)", correct, bad_correct, "#2ca02c"),
        ("reduction_race (no syncthreads)", race, bad_race, "#ff7f0e"),
    ):
        fig.add_trace(
            go.Bar(
                x=blocks,
                y=vals[:shown].astype(np.float32),
                name=name,
                marker={
                    "color": colour,
                    "line": {"color": np.where(bad[:shown], MISMATCH, colour).tolist(), "width": 2},
                },
                hovertemplate=f"{name}<br>block %{{x}}: %{{y}}<extra></extra>",
            )
        )
    wrong = np.flatnonzero(bad_race[:shown])
    if wrong.size:
        # over the race bar: the third of three grouped bars, each a third of the group's width
        fig.add_trace(
            go.Scatter(
                x=wrong + RACE_BAR_OFFSET,
                y=np.maximum(want, race)[wrong] * 1.04 + 0.5,
                mode="markers",
                marker={"symbol": "x", "color": MISMATCH, "size": 9},
                name="race result ≠ expected",
                hoverinfo="skip",
            )
        )
    summary = (
        f"reduction: {int(bad_correct.sum())} of {nblocks} blocks wrong · "
        f"reduction_race: {int(bad_race.sum())} of {nblocks} blocks wrong"
    )
    if shown < nblocks:
        summary += f" (first {shown} blocks shown)"
    fig.update_layout(
        title=titled(f"Per-block partial sums — {summary}", source),
        barmode="group",
        xaxis={"title": "block", "tickformat": "d", **({"dtick": 1} if shown <= 32 else {})},
        yaxis_title="partial sum",
        height=420,
        margin={"t": 90},
        legend={"orientation": "h", "y": -0.25},
        bargap=GROUP_GAP,
        bargroupgap=0,
    )
    return fig


def race_tree_diff_figure(tree_ok: pd.DataFrame, tree_race: pd.DataFrame, block: int) -> go.Figure:
    """Where the racy tree departs from the correct one: race − correct per level and slot.

    Both kernels loaded the same inputs, so level 0 agrees; the first level with a non-zero cell
    is where a thread read a partner's slot before the partner had added into it.
    """
    source = source_of(tree_race)
    block_size = int(max(tree_ok["row"].max(), tree_race["row"].max())) + 1
    ok = _block_tree(tree_ok, block, block_size)
    race = _block_tree(tree_race, block, block_size)
    diff = race - ok
    levels = diff.shape[0]
    differs = np.nan_to_num(np.abs(diff)) > 0
    bad_levels = np.flatnonzero(differs.any(axis=1))
    if bad_levels.size:
        first = int(bad_levels[0])
        headline = (
            f"block {block}: the race first diverges at level {first} "
            f"({_count(int(differs[first].sum()), 'slot')}), "
            f"{_count(int(differs.sum()), 'differing slot value')} in all"
        )
    else:
        headline = f"block {block}: no divergence — this run's race happened to read every slot in time"
    # saturate the colours at the 90th percentile of the differences, so small early errors stay
    # visible beside the large ones they grow into (hover shows the exact values)
    nonzero = np.abs(diff[differs])
    span = max(float(np.percentile(nonzero, 90)) if nonzero.size else 0.0, 1.0)
    fig = go.Figure(
        go.Heatmap(
            z=diff.astype(np.float32),
            x=np.arange(block_size),
            y=np.arange(levels),
            zmin=-span,
            zmax=span,
            colorscale="RdBu",
            reversescale=True,
            colorbar={"title": f"race − correct<br>(colours capped at ±{span:g})"},
            customdata=np.stack([ok, race], axis=-1).astype(np.float32),
            hovertemplate="level %{y}, slot %{x}<br>correct %{customdata[0]}<br>race %{customdata[1]}"
            "<extra></extra>",
            xgap=1 if block_size <= 128 else 0,
            ygap=1,
        )
    )
    fig.update_layout(
        title=titled(headline, source),
        xaxis={
            "title": "shared-memory slot = thread tid",
            "range": [-0.5, block_size - 0.5],
            "autorange": False,
        },
        yaxis={"title": "level", "range": [levels - 0.5, -0.5], "autorange": False, "dtick": 1},
        height=360,
        margin={"t": 90},
    )
    return fig
