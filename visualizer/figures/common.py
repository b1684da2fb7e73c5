"""Pieces every figure builder shares: the data-source label and Plotly animation controls."""

from __future__ import annotations

from visualizer.analysis.provenance import source_of  # noqa: F401  (figures' one label reader)

# jump straight to a frame: no tween, and redraw (heatmaps and images need it: plotly.js#1221)
_STILL = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}


SOURCE_LINE_CHARS = 100  # a longer source line would run past a chart half a 1280-px page wide


def titled(text: str, source: str) -> dict:
    """A layout title with the data source underneath (a long source on several lines, split at '; ')."""
    lines, line = [], ""
    for part in source.split("; ") if len(source) > SOURCE_LINE_CHARS else [source]:
        if line and len(line) + len(part) + 2 > SOURCE_LINE_CHARS:
            lines.append(line + ";")
            line = part
        else:
            line = f"{line}; {part}" if line else part
    lines.append(line)
    sup = "<br>".join(f"<sup>{x}</sup>" for x in lines)
    return {"text": f"{text}<br>{sup}", "x": 0.01, "xanchor": "left"}


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


CONTROLS_GAP_PX = 74  # from the plot area's bottom edge: x tick labels and the x-axis title fit above
BUTTONS_PX = 40  # the Play/Pause row, above the slider
CONTROLS_PX = BUTTONS_PX + 90  # and the slider: current-value label, rail, step labels
LEGEND_PX = 50  # a horizontal legend under the controls
SLIDER_LEN = 0.94


def place_controls(fig, gap_px: int = CONTROLS_GAP_PX) -> None:
    """Put a figure's Play/Pause and frame slider a fixed number of pixels under its plot area.

    Plotly places them in paper units (fractions of the plot height), so a fixed fraction lands on
    the tick labels or the axis title of a short plot; this converts pixels for the figure's own
    height and margins and grows the bottom margin so the controls sit below the axis title,
    inside the figure.
    """
    layout = fig.layout
    top = layout.margin.t if layout.margin.t is not None else 100
    legend_below = layout.legend.y is not None and layout.legend.y < 0  # moves under the controls
    bottom = max(
        layout.margin.b if layout.margin.b is not None else 80,
        gap_px + CONTROLS_PX + (LEGEND_PX if legend_below else 0),
    )
    old_bottom = layout.margin.b if layout.margin.b is not None else 80
    height = (layout.height or 450) + max(bottom - old_bottom, 0)  # the plot area keeps its size
    plot_px = max(height - top - bottom, 60)
    y = -gap_px / plot_px
    fig.update_layout(margin={"b": bottom}, height=height)
    # buttons on their own row, the slider under them across the whole width: neither can cover
    # the other's labels, however narrow the chart
    for menu in layout.updatemenus:
        menu.update(y=y, yanchor="top", x=0, xanchor="left")
    for slider in layout.sliders:
        # len < 1: the last step's label is centred on the rail's end and must not run off the chart
        slider.update(y=y - BUTTONS_PX / plot_px, yanchor="top", x=0, len=SLIDER_LEN, pad={"t": 0, "b": 0})
    if legend_below:
        layout.legend.update(y=-(gap_px + CONTROLS_PX) / plot_px, yanchor="top", x=0, xanchor="left")
