"""The SIMT lens's figures: one warp's lanes at each branch line (animated over its visits), and one
block's barrier timeline (each warp's work and its wait at each barrier)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from visualizer.analysis.branches import NOT_SHOWN
from visualizer.figures.common import animation_controls, place_controls, source_of, titled

NO_VISIT, NOT_REACHED, NOT_TAKEN, TAKEN = 0, 1, 2, 3
STATES = {NO_VISIT: "no visit", NOT_REACHED: "not reached", NOT_TAKEN: "not taken", TAKEN: "taken"}
STATE_COLORS = ["#f4f4f4", "#bdbdbd", "#e6550d", "#3182bd"]  # no visit, not reached, not taken, taken
MAX_FRAMES = 120  # a loop of more visits shows its first ones (the slider says how many there are)
LABEL_CHARS = 44


def _label(line: int, kind: str, text: str) -> str:
    text = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    return f"L{line} {text}" if text else f"L{line} {kind}"


def warp_visits(rows: pd.DataFrame, block: int, warp: int) -> int:
    """How many visits the warp made to its most visited branch (the frames of its lane strip)."""
    w = rows.loc[(rows["block"] == block) & (rows["warp"] == warp), "visit"]
    return int(w.max() + 1) if len(w) else 0


def lane_strip_frames(
    rows: pd.DataFrame, sites: pd.DataFrame, block: int, warp: int, visit: int | None = None
) -> pd.DataFrame:
    """One warp's visits as frames: frame k holds each branch site's k-th visit, per lane the state
    taken / not taken / not reached (the lane was not among those evaluating it) / no visit (the warp
    evaluated that site fewer than k+1 times). Columns: frame, site, label, lane, state. With ``visit``,
    that visit's frame alone (a page that picks the visit itself, so that its link can say which)."""
    w = rows[(rows["block"] == block) & (rows["warp"] == warp)]
    labels = {
        int(s.site): _label(int(s.line), str(s.kind), str(getattr(s, "text", "")))
        for s in sites.itertuples(index=False)
        if s.kind not in NOT_SHOWN
    }
    order = sorted(labels)
    n_frames = int(min(MAX_FRAMES, w["visit"].max() + 1)) if len(w) else 1
    first = 0
    if visit is not None:
        first, n_frames = int(visit), 1
    lanes = np.arange(32, dtype=np.int64)
    state = np.full((n_frames, len(order), 32), NO_VISIT, np.int8)
    pos = {s: i for i, s in enumerate(order)}
    for r in w[(w["visit"] >= first) & (w["visit"] < first + n_frames)].itertuples(index=False):
        act = (int(r.active_mask) >> lanes) & 1
        tak = (int(r.taken_mask) >> lanes) & 1
        state[r.visit - first, pos[r.site]] = np.where(
            tak == 1, TAKEN, np.where(act == 1, NOT_TAKEN, NOT_REACHED)
        )
    f, s, lane = np.meshgrid(np.arange(first, first + n_frames), np.arange(len(order)), lanes, indexing="ij")
    out = pd.DataFrame(
        {
            "frame": f.ravel(),
            "site": np.asarray(order, np.int64)[s.ravel()] if order else np.zeros(0, np.int64),
            "lane": lane.ravel(),
            "state": state.ravel(),
        }
    )
    out["label"] = out["site"].map(labels)
    out.attrs.update(
        source=source_of(rows), block=block, warp=warp, visits=int(w["visit"].max() + 1) if len(w) else 0,
        visit=visit,
    )  # fmt: skip
    return out


def lane_strip_figure(frames: pd.DataFrame, kernel: str | None = None) -> go.Figure:
    """A 32-lane strip per branch line, coloured by state, with a slider over the warp's visits (one
    visit's strip, no slider, for frames of one ``visit``)."""
    labels = list(dict.fromkeys(frames.sort_values("site")["label"]))
    names = sorted(frames["frame"].unique().tolist()) if len(frames) else [0]
    n_frames = len(names)
    colorscale = []
    for i, c in enumerate(STATE_COLORS):
        colorscale += [[i / 4, c], [(i + 1) / 4, c]]

    def z_of(k: int) -> np.ndarray:
        f = frames[frames["frame"] == k].sort_values(["site", "lane"])
        return f["state"].to_numpy().reshape(len(labels), 32) if len(f) else np.zeros((len(labels), 32))

    def heat(k: int) -> go.Heatmap:
        z = z_of(k)
        return go.Heatmap(
            z=z, x=list(range(32)), y=labels, zmin=-0.5, zmax=3.5, colorscale=colorscale, xgap=1, ygap=3,
            customdata=np.vectorize(STATES.get)(z), showscale=False,
            hovertemplate="lane %{x}<br>%{y}<br>%{customdata}<extra></extra>",
        )  # fmt: skip

    block, warp, visits = frames.attrs.get("block"), frames.attrs.get("warp"), frames.attrs.get("visits", 0)
    one = frames.attrs.get("visit") is not None
    fig = go.Figure(
        data=[heat(names[0])], frames=[] if one else [go.Frame(data=[heat(k)], name=str(k)) for k in names]
    )
    for state, color in zip(STATES.values(), STATE_COLORS, strict=True):  # the legend: one marker per state
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=state,
                                 marker={"size": 12, "symbol": "square", "color": color}))  # fmt: skip
    if one:
        shown = f"visit {names[0]} of visits 0-{visits - 1}" if visits > 1 else "its one visit"
    elif visits > n_frames:
        shown = f"the first {n_frames} of {visits} visits"
    else:
        shown = f"{visits} visit" + ("" if visits == 1 else "s")
    fig.update_layout(
        title=titled(
            f"{kernel + ': b' if kernel else 'B'}lock {block}, warp {warp}, which lanes took each branch ({shown})",
            source_of(frames),
        ),
        xaxis={"title": "lane", "dtick": 4, "range": [-0.5, 31.5]},
        yaxis={"autorange": "reversed", "automargin": True},
        height=max(200, 104 + 26 * len(labels)),  # the strip and its controls fit a 720-px screen
        margin={"t": 64, "l": 10, "r": 10, "b": 50},
        # compact, so its four entries fit beside two branch lines without a scroll bar
        legend={"orientation": "v", "y": 1.08, "yanchor": "top", "x": 1.01, "xanchor": "left",
                "font": {"size": 11}, "tracegroupgap": 0, "itemwidth": 30},
    )  # fmt: skip
    if n_frames > 1 and not one:
        menus, sliders = animation_controls(
            [str(k) for k in names], [str(k) for k in names], "visit ", -0.25, 600
        )
        fig.update_layout(updatemenus=menus, sliders=sliders)
        place_controls(fig, gap_px=60)
    return fig


BAR_COLORS = {"work": "#9ecae1", "wait": "#e6550d"}


def barrier_timeline_figure(segments: pd.DataFrame, block: int) -> go.Figure:
    """One block: per warp, its work segments and its wait at each barrier (ns); the warp that arrived
    last at a barrier (the one the others waited for) has its wait outlined in black."""
    fig = go.Figure()
    for what in ("work", "wait"):
        s = segments[segments["what"] == what]
        fig.add_trace(
            go.Bar(
                y=s["warp"].map("warp {:02d}".format), x=s["end_ns"] - s["start_ns"], base=s["start_ns"],
                orientation="h", name=what, marker={"color": BAR_COLORS[what],
                "line": {"color": np.where(s["last"], "black", BAR_COLORS[what]).tolist(), "width": 1.5}},
                customdata=np.stack([s["line"], s["instance"], s["last"].map({True: "arrived last", False: ""})],
                                    axis=-1) if len(s) else None,
                hovertemplate=f"{what} %{{x:,}} ns from %{{base:,}} ns<br>barrier at line %{{customdata[0]}} "
                "(barrier %{customdata[1]})<br>%{customdata[2]}<extra></extra>",
            )
        )  # fmt: skip
    warps = int(segments["warp"].nunique()) if len(segments) else 1
    fig.update_layout(
        title=titled(
            f"Block {block}: each warp's work and its wait at each syncthreads", source_of(segments)
        ),
        barmode="overlay",
        xaxis={"title": f"ns since {segments.attrs.get('origin', 'the first barrier arrival')}"},
        yaxis={"categoryorder": "category descending", "title": None},
        height=min(520, max(260, 140 + 22 * warps)),
        margin={"t": 80, "l": 10, "r": 10, "b": 50},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return fig
