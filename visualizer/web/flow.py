"""Airflow over a wing, animated: the lattice-Boltzmann step kernel launched step after step by a host
loop (engine/capture/steps.py, in a worker of the app's backend), frames of the flow drawn with Play and
a slider. The lesson ``airflow`` (web/lessons.py) draws this section under its memory-access answers."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

import streamlit as st

from visualizer.analysis.provenance import MEASURED_GPU, SIMULATED
from visualizer.engine.run.runner import KernelError, get_runner, resolve_backend
from visualizer.figures.flow import flow_animation, lift_trace
from visualizer.specs.catalog import LaunchError
from visualizer.specs.flow import SHAPES, obstacle, reynolds
from visualizer.web.charts import chart
from visualizer.web.session import as_text

# sizes a class can watch: on the simulator a few seconds per run on a 2-core machine (the compiled
# engine: ~20 ms a step at 200 x 50 cells, loaded), on a GPU the full size and thousands of steps
SIM_SIZES = {"160 x 40": (160, 40), "200 x 50": (200, 50), "400 x 100": (400, 100)}
GPU_SIZES = {"400 x 100": (400, 100), "800 x 200": (800, 200), "1600 x 400": (1600, 400)}
SIM_STEPS = (200, 400, 800, 1600)
GPU_STEPS = (2000, 5000, 10000, 20000)
FRAMES = 40  # frames per run, whatever its steps
KEEP = 6  # runs kept in memory, per app process

_runs: OrderedDict = OrderedDict()
_lock = threading.Lock()


def flow_params(size: tuple[int, int], shape: int) -> dict:
    """The step's parameters for a domain: Re about 100-200 at every size (tau set from the size)."""
    nx, ny = size
    u = 100  # thousandths of a cell per step
    length = 2 * max(2.0, ny / 10) if shape == 0 else max(8.0, ny * 0.4)
    re = 150 if shape == 0 else 300
    tau = round(1000 * (0.5 + 3 * (u / 1000) * length / re))
    return {"nx": nx, "ny": ny, "shape": shape, "angle": 12, "u_milli": u, "tau_milli": max(505, tau)}


def run_flow(backend: str, params: dict, steps: int) -> tuple[dict | None, str | None]:
    """(the host loop's reply, None) or (None, a one-line error); kept per launch."""
    every = max(1, steps // FRAMES)
    key = (backend, tuple(sorted(params.items())), steps)
    with _lock:
        if key in _runs:
            _runs.move_to_end(key)
            return _runs[key], None
    try:
        t0 = time.perf_counter()
        reply = get_runner(backend).steps("lbm_soa", params, steps=steps, every=every)
        reply["wall_s"] = time.perf_counter() - t0
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc))
    with _lock:
        _runs[key] = reply
        while len(_runs) > KEEP:
            _runs.popitem(last=False)
    return reply, None


def animation_section(shape_name: str) -> None:
    """The animated flow: widgets for the size and steps, a button, the animation and the probe trace."""
    backend = resolve_backend(getattr(st.session_state.get("config"), "backend", "auto"))
    on_gpu = backend == "gpu"
    sizes, step_choices = (GPU_SIZES, GPU_STEPS) if on_gpu else (SIM_SIZES, SIM_STEPS)
    shape = 1 if shape_name == "wing" else 0
    st.subheader("4. Watch the air flow")
    st.markdown(
        "The host launches `lbm_soa` once per step, swapping `f_in` and `f_out` between launches, and copies "
        "the state back every few steps for a frame: the way a simulation runs on a GPU. "
        + (
            "On the GPU: the full size, thousands of steps."
            if on_gpu
            else "On the simulator each launch runs compiled for this CPU; a bigger grid or more steps take "
            "longer (400 x 100 cells: about 0.1 s a step on a 2-core machine). Vortices start to shed "
            "behind the cylinder after a few thousand steps: on a GPU, or with patience."
        )
    )
    c1, c2, c3 = st.columns(3)
    size_name = c1.selectbox("grid (cells)", list(sizes), index=0, key="lbm_size")
    steps = c2.selectbox("steps", step_choices, index=1, key="lbm_steps")
    field = c3.radio("show", ("vorticity", "speed"), horizontal=True, key="lbm_field")
    params = flow_params(sizes[size_name], shape)
    st.caption(
        f"{SHAPES[shape]}, inflow {params['u_milli'] / 1000:.2f} cells/step, tau {params['tau_milli'] / 1000:.3f}: "
        f"Reynolds number ≈ {reynolds(params):.0f}."
    )
    key = ("lbm_go", backend, size_name, steps, shape)
    if st.button(f"Run {steps:,} steps", key="lbm_run", type="primary"):
        st.session_state[key] = True
    if not st.session_state.get(key):
        return
    with st.spinner(
        f"Running {steps:,} steps of {size_name} cells on the {'GPU' if on_gpu else 'CUDA simulator'}…"
    ):
        run, error = run_flow(backend, params, steps)
    if error:
        st.error(error, icon=":material/error:")
        return
    source = (
        f"{MEASURED_GPU}: the kernel's own output, every {run['every']} steps"
        if on_gpu
        else f"{SIMULATED}: the kernel's own output, every {run['every']} steps"
    )
    per_step = run["seconds"] / max(run["timed_steps"], 1)
    solid = obstacle(run["params"])
    title = f"{field.capitalize()} of the flow past a {SHAPES[shape]}, {size_name} cells"
    chart(flow_animation(run, solid, field, title, source), key="lbm_anim")
    chart(lift_trace(run, "Transverse velocity in the wake (vortex shedding makes it swing)", source),
          key="lbm_lift")  # fmt: skip
    how = "measured on the GPU, host loop and frame copies included" if on_gpu else (
        "measured wall time of the simulator's host loop on this machine (CPU time of the simulation, not "
        "GPU time)"
    )  # fmt: skip
    st.caption(
        f"{run['timed_steps']:,} steps took {run['seconds']:.2f} s: {per_step * 1e3:.2f} ms a step ({how})."
    )
