"""The Grid layout and Memory flow pages through the app's entrypoint, on the simulator."""

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app
from visualizer.figures.grid import IDLE, NOT_STARTED, SIM_ORDER_LABEL
from visualizer.figures.memory_flow import SIM_CLOCK_LABEL

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")


def _page(page: str, **query) -> AppTest:
    return open_app(page, **{"backend": "sim", **query})


def _figure(at: AppTest, i: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[i].proto.spec)


def _array(value) -> np.ndarray:
    """A figure array as sent to the browser: a plain list, or plotly's typed {dtype, bdata, shape}."""
    if isinstance(value, dict) and "bdata" in value:
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = [int(s) for s in str(value.get("shape", len(data))).split(",")]
        return data.reshape(shape)
    return np.asarray(value)


def test_grid_page_shows_idle_threads_and_simulator_order():
    at = _page("grid", kernel="vector_add", n="200", block="48")
    fig = _figure(at)
    last = len(fig["frames"]) - 1
    assert last > 0 and fig["layout"]["sliders"][0]["active"] == last  # opens on the complete picture
    np.testing.assert_array_equal(_array(fig["data"][0]["z"]), _array(fig["frames"][-1]["data"][0]["z"]))
    assert (_array(fig["frames"][0]["data"][0]["z"]) == NOT_STARTED).any()
    z = _array(fig["frames"][-1]["data"][0]["z"])  # the last frame: every thread has started
    assert z.shape == (5, 48)  # ceil(200 / 48) = 5 blocks, one row each
    assert (z == IDLE).sum() == 40 and (z[4, 8:] == IDLE).all()  # threads 200..239 did no work
    assert fig["layout"]["sliders"][0]["currentvalue"]["prefix"].startswith(SIM_ORDER_LABEL)
    assert "simulated" in fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["autorange"] is False
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["idle"] == "40" and metrics["warps per block"] == "2"


def test_colour_by_widget_changes_the_figure():
    at = _page("grid", kernel="vector_add", n="200", block="48")
    before = _figure(at)
    at.radio(key="grid_color_by").set_value("lane").run()
    assert not at.exception
    after = _figure(at)
    assert "coloured by lane" in after["layout"]["title"]["text"]
    assert not np.array_equal(_array(before["data"][0]["z"]), _array(after["data"][0]["z"]))
    at.toggle(key="grid_animate").set_value(False).run()
    assert not at.exception and not _figure(at).get("frames")
    assert (_array(_figure(at)["data"][0]["z"]) == IDLE).sum() == 40  # the finished grid, no frames


def test_matmul_tiled_renders_in_2d():
    at = _page("grid", kernel="matmul_tiled", n="20", tile="8")
    fig = _figure(at)
    z = _array(fig["frames"][-1]["data"][0]["z"])
    assert z.shape == (24, 24)  # 3 x 3 blocks of 8 x 8 threads at their global positions
    assert (z[20:, :] == IDLE).all() and (z[:, 20:] == IDLE).all() and (z[:20, :20] != IDLE).all()
    assert fig["layout"]["xaxis"]["title"]["text"].startswith("global x")
    assert any(t.get("name") == "block border" for t in fig["data"])
    assert len(fig["frames"]) > 1


def test_memory_flow_page_shows_five_steps():
    at = _page("memory_flow", kernel="vector_add", n="200", block="48")
    fig = _figure(at)
    bar = fig["data"][0]
    assert len(bar["y"]) == 5
    assert "cudaMalloc" in bar["y"][0] and "cudaFree" in bar["y"][4]
    assert "vector_add<<<5, 48>>>" in bar["y"][2]
    assert "1.6 kB" in bar["y"][1] and "800 B" in bar["y"][3]  # a, b in; c out (200 float32 each)
    assert SIM_CLOCK_LABEL in fig["layout"]["title"]["text"]
    assert any("not in the flow" in a["text"] for a in fig["layout"]["annotations"])
    assert len(at.dataframe[0].value) == 5
    at.radio(key="flow_view").set_value("log").run()
    assert not at.exception and _figure(at)["layout"]["xaxis"]["type"] == "log"
    at.toggle(key="flow_animate").set_value(True).run()
    assert not at.exception and len(_figure(at)["frames"]) == 5


def test_memory_flow_models_latencies_and_says_so_on_the_chart():
    from visualizer.analysis.transfers import modelled_gpu_timing

    at = _page("memory_flow", kernel="vector_add", n="1000", block="128")
    modelled = _figure(at, 1)
    title = modelled["layout"]["title"]["text"]
    assert "modelled (not measured) for a H200" in title and "121 µs" in title and "13.2 GB/s" in title
    want = modelled_gpu_timing(8_000, 4_000, "H200", arrays_in=2, arrays_out=1)["host_steps_ns"]
    steps = ["allocate", "copy_in", "kernel", "copy_out", "free"]
    durations = dict(zip(steps, _array(modelled["data"][0]["x"]), strict=True))
    assert durations["kernel"] == pytest.approx(want["kernel"] / 1e3) and durations["kernel"] > 20  # µs
    assert durations["copy_in"] == pytest.approx(want["copy_in"] / 1e3)  # 2 arrays: a and b
    (kernel,) = [m for m in at.metric if m.label == "kernel (modelled)"]
    assert kernel.value.endswith("µs") and not kernel.value.endswith(" ns")
    assert any("mostly latency" in c.value for c in at.caption)
    at.selectbox(key="flow_gpu").set_value("T4").run()
    assert "nominal peaks of a T4" in _figure(at, 1)["layout"]["title"]["text"]


def test_memory_flow_of_a_gpu_run_sets_the_model_beside_the_measured_steps():
    """A simulator capture relabelled as a GPU one (the page only reads it; real GPU runs: test_app_gpu)."""
    import dataclasses

    at = _page("memory_flow", kernel="vector_add", n="1000", block="128")
    cap = at.session_state.capture
    launch = {**cap.launch, "backend": "gpu", "device_name": "NVIDIA H200", "compute_capability": "9.0"}
    host = {"allocate": 90e3, "copy_in": 250e3, "kernel": 30e3, "copy_out": 40e3, "free": 10e3}
    at.session_state.capture = dataclasses.replace(
        cap, launch=launch, timing={**cap.timing, "host_steps_ns": host}
    )
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Measured beside modelled" in [h.value for h in at.subheader]
    measured, modelled = _figure(at, 0), _figure(at, 1)
    assert "measured (GPU)" in measured["layout"]["title"]["text"]
    assert "modelled (not measured) for a H200" in modelled["layout"]["title"]["text"]
    table = at.dataframe[-1].value
    assert list(table["measured (µs)"]) == [90.0, 250.0, 30.0, 40.0, 10.0]
    assert table["modelled, H200 (µs)"].iloc[2] > 20  # the launch latency
