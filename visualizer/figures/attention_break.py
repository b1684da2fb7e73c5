"""The "break it" view: where a deliberately broken FlashAttention build's output departs from the reference.

Pure builders (arrays in, DataFrame / ``go.Figure`` / sentences out, no Streamlit). The per-row
error is the broken kernel's output against the float64 numpy reference; the per-row cause (how
far the running max grew after the first K/V tile, or the row's largest score) is numpy on the
same Q and K, and the figure says which is which.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizer.figures.common import titled
from visualizer.specs.attention import OVERFLOW_SCORE, attention_reference

VARIANTS = {
    "no_rescale": "drop the rescale of O when the running max grows",
    "no_max": "drop the max subtraction: exp(S) instead of exp(S − m)",
}
ERROR_FLOOR = 1e-9  # an exactly right row is drawn here on the log axis (hover says 0)
WRONG_COLOUR, RIGHT_COLOUR, NONFINITE_COLOUR = "#d62728", "#7f7f7f", "#000000"


def _scores(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    """S = Q Kᵀ / √d in float64, masked keys (causal: key > query) at -inf; shape (b, h, n, n)."""
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], s, -np.inf)
    return s


def break_rows(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    o: np.ndarray,
    causal: bool,
    tile: int,
    rtol: float,
    atol: float,
) -> pd.DataFrame:
    """One row per query row (batch, head, row): the broken output's error and the two causes.

    ``error``: max |o - reference| over the row's features (inf where o has inf/NaN); ``wrong``: any
    feature outside rtol/atol (as the capture's check); ``growth``: how much the row's running max
    grew after its first K/V tile of ``tile`` keys (m_final - m_first_tile; 0: the max was in the
    first tile); ``max_score``: the row's largest score q·k/√d (exp overflows float32 above
    OVERFLOW_SCORE).
    """
    want = attention_reference(q, k, v, causal).astype(np.float64)
    got = o.astype(np.float64)
    finite = np.isfinite(got).all(axis=-1)
    diff = np.abs(got - want)
    error = np.where(finite, np.nan_to_num(diff, nan=0.0).max(axis=-1), np.inf)
    close = np.isclose(got, want, rtol=rtol, atol=atol).all(axis=-1)
    s = _scores(q, k, causal)
    first = s[..., : min(tile, s.shape[-1])].max(axis=-1)
    final = s.max(axis=-1)
    b, h, n = o.shape[:3]
    bb, hh, rr = np.meshgrid(np.arange(b), np.arange(h), np.arange(n), indexing="ij")
    return pd.DataFrame(
        {
            "batch": bb.ravel(),
            "head": hh.ravel(),
            "row": rr.ravel(),
            "error": error.ravel(),
            "nonfinite": ~finite.ravel(),
            "wrong": ~close.ravel(),
            "growth": (final - first).ravel(),
            "max_score": final.ravel(),
        }
    )


def break_summary(rows: pd.DataFrame, variant: str) -> str:
    """What the chart shows, in sentences computed from ``rows`` (so each is true of it)."""
    wrong = rows["wrong"]
    n, n_wrong = len(rows), int(wrong.sum())
    head = f"{n_wrong:,} of {n:,} query rows are wrong."
    if variant == "no_rescale":
        still = rows["growth"] == 0
        grew = ~still
        line = (
            f"{head} Of the {int(still.sum()):,} rows whose running max was already in their first K/V tile, "
            f"{int((still & ~wrong).sum()):,} are right; of the {int(grew.sum()):,} rows whose max grew "
            f"later, {int((grew & wrong).sum()):,} are wrong"
        )
        if (grew & wrong).any():
            worst = rows[grew & wrong].sort_values("error").iloc[-1]
            line += (
                f" (the worst, head {int(worst['head'])} row {int(worst['row'])}, is off by "
                f"{worst['error']:.3g} after its max grew by {worst['growth']:.3g})"
            )
        return line + "."
    over = rows["max_score"] > OVERFLOW_SCORE
    line = (
        f"{head} {int(over.sum()):,} rows have a score above {OVERFLOW_SCORE:.1f} = ln(float32 max), "
        f"and {int((over & wrong).sum()):,} of them are wrong ({int((over & rows['nonfinite']).sum()):,} "
        f"inf/NaN); of the {int((~over).sum()):,} rows below it, {int((~over & ~wrong).sum()):,} are right"
    )
    below = ~over & wrong
    blew = int((below & rows["nonfinite"]).sum())
    if blew:
        line += (
            f"; {blew} rows below it still became inf/NaN: each exp was finite, but their sum l or the "
            "weighted sum O passed float32's maximum"
        )
    if int(below.sum()) > blew:
        line += f"; {int(below.sum()) - blew} rows below it are off without an inf/NaN"
    return line + "."


def break_why(variant: str) -> str:
    """The invariant the variant breaks (true of the kernel whatever the launch)."""
    if variant == "no_rescale":
        return (
            "**Why:** the online softmax keeps O and l as sums of exp(s − m) against the *same* running max m. "
            "When a K/V tile raises m from m_old to m_new, the kernel must multiply O and l by "
            "exp(m_old − m_new) before adding the new tile. This build still rescales l but not O, so the "
            "O accumulated before the jump is too large by exp(m_new − m_old) relative to l: a row whose max "
            "was in its first tile never needs a rescale and stays exact; the more a row's max grows later, "
            "the further off it ends up."
        )
    return (
        "**Why:** softmax(s) = exp(s − m) / Σ exp(s − m) for any m, so in exact arithmetic the max subtraction "
        "changes nothing. In float32, exp overflows to inf above ln(3.4·10³⁸) ≈ 88.7: this build computes "
        "exp(s), so a row with one score above that gets an infinite l and an inf/NaN output. Subtracting "
        "the running max keeps every exponent ≤ 0, so every exp(s − m) is in (0, 1] and nothing overflows. "
        "Raise logit_scale to push more rows over the line."
    )


def break_figure(rows: pd.DataFrame, variant: str, source: str, title: str) -> go.Figure:
    """Two panels over every query row (head by head): the broken output's per-row error against the
    reference (log scale; wrong rows red, inf/NaN rows as black crosses at the top) and the cause."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    x = np.arange(len(rows))
    finite_err = rows["error"][np.isfinite(rows["error"])]
    top = max(float(finite_err.max()) if len(finite_err) else 1.0, 1.0) * 10
    shown = np.clip(np.where(np.isfinite(rows["error"]), rows["error"], top), ERROR_FLOOR, None)
    label = [
        f"head {h}, batch {b}, query row {r}"
        for b, h, r in rows[["batch", "head", "row"]].itertuples(index=False)
    ]
    cause = "growth" if variant == "no_rescale" else "max_score"
    cause_title = (
        "growth of the running max after the first K/V tile (m_final − m_first tile)"
        if variant == "no_rescale"
        else "the row's largest score q·k/√d (exp overflows float32 above the dashed line)"
    )
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        row_heights=[0.55, 0.45],
        subplot_titles=("max |error| of the row's output vs the float64 reference (log scale)", cause_title),
    )
    colours = np.where(rows["wrong"], WRONG_COLOUR, RIGHT_COLOUR)
    hover = [
        f"{lab}<br>{'inf/NaN' if nf else f'max |error| {e:.3g}'}<br>{'WRONG' if w else 'right'}"
        f"<br>{cause}: {c:.3g}"
        for lab, e, nf, w, c in zip(
            label, rows["error"], rows["nonfinite"], rows["wrong"], rows[cause], strict=True
        )
    ]
    finite = ~rows["nonfinite"].to_numpy()
    fig.add_trace(
        go.Scatter(
            x=x[finite],
            y=shown[finite],
            mode="markers",
            marker={"color": colours[finite], "size": 6},
            hovertext=np.array(hover)[finite],
            hovertemplate="%{hovertext}<extra></extra>",
            name="error",
        ),
        1,
        1,
    )
    if (~finite).any():
        fig.add_trace(
            go.Scatter(
                x=x[~finite],
                y=shown[~finite],
                mode="markers",
                name="inf/NaN",
                marker={"color": NONFINITE_COLOUR, "symbol": "x", "size": 8},
                hovertext=np.array(hover)[~finite],
                hovertemplate="%{hovertext}<extra></extra>",
            ),
            1,
            1,
        )
    fig.add_trace(
        go.Bar(
            x=x,
            y=rows[cause],
            marker={"color": colours},
            name=cause,
            hovertext=hover,
            hovertemplate="%{hovertext}<extra></extra>",
        ),
        2,
        1,
    )
    if variant == "no_max":
        fig.add_hline(y=OVERFLOW_SCORE, line_dash="dash", line_color="#000", row=2, col=1)
    fig.update_yaxes(type="log", range=[math.log10(ERROR_FLOOR), math.log10(top) + 0.3], row=1, col=1)
    fig.update_yaxes(title_text="max |error|", row=1, col=1)
    fig.update_yaxes(title_text="m growth" if variant == "no_rescale" else "largest score", row=2, col=1)
    # head (and batch) boundaries: the x axis is every query row, one head after another
    n = int(rows["row"].max()) + 1 if len(rows) else 1
    starts = list(range(0, len(rows), n))
    many_batches = rows["batch"].max() > 0
    ticks = [
        f"batch {rows['batch'].iloc[i]}, head {rows['head'].iloc[i]}"
        if many_batches
        else f"head {rows['head'].iloc[i]}"
        for i in starts
    ]
    fig.update_xaxes(tickvals=starts, ticktext=ticks, row=2, col=1)
    fig.update_xaxes(title_text="query row (all rows of each head, one head after another)", row=2, col=1)
    for s in starts[1:]:
        fig.add_vline(x=s - 0.5, line_color="#bbb", line_width=1)
    t = titled(title, source)
    extra = t["text"].count("<br>") - 1
    fig.update_layout(
        title=t,
        showlegend=False,
        height=450 + 20 * extra,
        margin={"t": 100 + 20 * extra, "b": 50, "l": 60, "r": 20},
        bargap=0.1,
    )
    return fig
