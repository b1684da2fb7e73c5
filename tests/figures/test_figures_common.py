"""Shared figure pieces: controls placed in pixels under the plot, titles that fit."""

import plotly.graph_objects as go
import pytest

from visualizer.figures.common import (
    CONTROLS_PX,
    SOURCE_LINE_CHARS,
    animation_controls,
    place_controls,
    titled,
)


def _animated(height: int, bottom: int, legend_y: float | None = None) -> go.Figure:
    menus, sliders = animation_controls(["0", "1"], ["a", "b"], "step ", -0.1, 300)
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1]), frames=[go.Frame(name="0"), go.Frame(name="1")])
    fig.update_layout(height=height, margin={"t": 80, "b": bottom}, updatemenus=menus, sliders=sliders)
    if legend_y is not None:
        fig.update_layout(legend={"orientation": "h", "y": legend_y})
    return fig


@pytest.mark.parametrize("height", [360, 700])
def test_controls_sit_the_same_pixels_under_any_plot(height):
    fig = _animated(height, 60)
    plot_before = height - 80 - 60
    place_controls(fig, gap_px=70)
    layout = fig.layout
    assert layout.margin.b >= 70 + CONTROLS_PX  # room for them inside the figure
    plot_px = layout.height - layout.margin.t - layout.margin.b
    assert plot_px == plot_before  # the figure grew; the plot kept its size
    menu, slider = layout.updatemenus[0], layout.sliders[0]
    assert menu.y * plot_px == pytest.approx(-70)  # 70 px under the plot, whatever its height
    assert slider.y < menu.y and slider.x == 0 and slider.len > 0.9  # a row of its own
    assert -slider.y * plot_px + 90 <= layout.margin.b  # the slider's labels stay inside the figure


def test_a_legend_under_the_plot_moves_under_the_controls():
    fig = _animated(500, 60, legend_y=-0.3)
    place_controls(fig)
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert fig.layout.legend.y * plot_px <= fig.layout.sliders[0].y * plot_px - 80


def test_long_sources_wrap_at_their_parts():
    short = titled("T", "simulated (CUDA simulator; SM ids and times modelled)")
    assert short["text"] == "T<br><sup>simulated (CUDA simulator; SM ids and times modelled)</sup>"
    parts = ["measured (GPU): the compiled kernel's static shared memory on NVIDIA H200", "limits of H200",
             "yellow: up to the 227 KB opt-in maximum (dynamic smem only)"]  # fmt: skip
    text = titled("T", "; ".join(parts))["text"]
    lines = text.split("<br>")[1:]
    assert len(lines) >= 2 and all(len(x) <= SOURCE_LINE_CHARS + len("<sup></sup>;") for x in lines)
    assert all(part in text for part in parts)  # split between parts, nothing lost
