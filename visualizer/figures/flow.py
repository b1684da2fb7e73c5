"""The airflow animation: a field of the lattice-Boltzmann flow (vorticity or speed) as frames over
steps, with Play and a slider; and the lift-like trace of the mean transverse velocity."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from visualizer.figures.common import animation_controls, place_controls, titled

FIELDS = {
    "vorticity": ("vorticity (curl of u, per step)", "RdBu_r"),
    "speed": ("speed |u| (cells per step)", "Viridis"),
}


def _scale(stack: np.ndarray, field: str) -> tuple[float, float]:
    """One colour scale for every frame (a frame's own would flicker); vorticity centred on 0 and
    clipped at the 97th percentile so the wake, not the obstacle's corners, sets it."""
    if field == "vorticity":
        v = float(np.percentile(np.abs(stack), 97)) or 1e-6
        return -v, v
    return 0.0, float(stack.max()) or 1e-6


def flow_animation(run: dict, solid: np.ndarray, field: str, title: str, source: str) -> go.Figure:
    """``run``: engine/capture/steps.py's reply (``at`` and the field stacked over frames)."""
    stack = np.asarray(run[field], dtype=np.float32)
    label, colours = FIELDS[field]
    lo, hi = _scale(stack, field)
    ny, nx = stack.shape[1:]
    # the obstacle drawn on top in grey: NaN where fluid so the field shows through
    body = np.where(solid > 0, 1.0, np.nan)

    def heat(k: int) -> go.Heatmap:
        return go.Heatmap(z=stack[k], zmin=lo, zmax=hi, colorscale=colours, colorbar={"title": label},
                          hovertemplate="x %{x}, y %{y}: %{z:.4f}<extra></extra>")  # fmt: skip

    wall = go.Heatmap(z=body, colorscale=[[0, "#555"], [1, "#555"]], showscale=False, hoverinfo="skip")
    names = [str(s) for s in run["at"]]
    frames = [go.Frame(data=[heat(k)], name=names[k], traces=[0]) for k in range(len(names))]
    fig = go.Figure(data=[heat(len(names) - 1), wall], frames=frames)
    menus, sliders = animation_controls(names, names, "step ", -0.1, 120)
    sliders[0]["active"] = len(names) - 1
    # cells square on screen: the plot's height follows the domain's aspect ratio
    fig.update_layout(
        title=titled(title, source), updatemenus=menus, sliders=sliders,
        height=int(min(600, max(120, 640 * ny / nx)) + 140), margin={"t": 80, "l": 50, "r": 20, "b": 60},
        xaxis={"title": "x (cell)", "constrain": "domain"},
        yaxis={"title": "y (cell)", "scaleanchor": "x", "constrain": "domain"},
    )  # fmt: skip
    place_controls(fig)
    return fig


def lift_trace(run: dict, title: str, source: str) -> go.Figure:
    """The transverse velocity u_y at a probe in the wake (the domain's centre) over the steps: it swings
    from + to - once the wake sheds vortices from alternate sides."""
    fig = go.Figure(go.Scatter(x=run["at"], y=run["uy_probe"], mode="lines+markers", name="u_y at the probe"))
    fig.update_layout(title=titled(title, source), height=300, xaxis_title="step",
                      yaxis_title="u_y in the wake (cells per step)", margin={"t": 80})  # fmt: skip
    return fig
