"""Pieces every figure builder shares: the data-source label and Plotly animation controls."""

from __future__ import annotations

import pandas as pd

# jump straight to a frame: no tween, and redraw (heatmaps and images need it: plotly.js#1221)
_STILL = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}


def source_of(df: pd.DataFrame) -> str:
    """The data-source label a trace table carries (its ``source`` column, else ``attrs``)."""
    if "source" in df.columns and len(df):
        return str(df["source"].iloc[0])
    return str(df.attrs.get("source", "unknown source"))


def titled(text: str, source: str) -> dict:
    """A layout title with the data source underneath."""
    return {"text": f"{text}<br><sup>{source}</sup>", "x": 0.01, "xanchor": "left"}


def play_pause(y: float, frame_ms: int, from_current: bool = True) -> dict:
    """Play and Pause buttons, left-aligned at paper height y (an ``updatemenus`` entry)."""
    play = {"frame": {"duration": frame_ms, "redraw": True}, "fromcurrent": from_current,
            "transition": {"duration": 0}, "mode": "immediate"}  # fmt: skip
    return {
        "type": "buttons", "direction": "left", "x": 0, "y": y, "xanchor": "left", "yanchor": "top",
        "pad": {"t": 0, "r": 10}, "showactive": False,
        "buttons": [
            {"label": "▶ Play", "method": "animate", "args": [None, play]},
            {"label": "❚❚ Pause", "method": "animate", "args": [[None], _STILL]},
        ],
    }  # fmt: skip


def frame_step(name: str, label: str) -> dict:
    """A slider step that jumps to frame ``name``."""
    return {"label": label, "method": "animate", "args": [[name], _STILL]}


def frame_slider(steps: list[dict], prefix: str, y: float, active: int = 0, x: float = 0.0) -> dict:
    """A slider over the frames, from x to the right edge (a ``sliders`` entry)."""
    return {
        "active": active, "x": x, "len": 1 - x, "y": y, "xanchor": "left", "yanchor": "top", "pad": {"t": 10},
        "currentvalue": {"prefix": prefix, "font": {"size": 13}}, "steps": steps,
    }  # fmt: skip


def animation_controls(names, labels, prefix: str, y: float, frame_ms: int) -> tuple[list, list]:
    """(updatemenus, sliders): Play/Pause at the left of y, a slider over the frames beside them."""
    steps = [frame_step(n, lab) for n, lab in zip(names, labels, strict=True)]
    return [play_pause(y, frame_ms)], [frame_slider(steps, prefix, y + 0.04, x=0.16)]
