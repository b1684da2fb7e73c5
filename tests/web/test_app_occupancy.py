"""The Occupancy page through the app's entrypoint, on the simulator."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.conftest import open_app

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")
PAGE = "web/pages/occupancy.py"


def _page(**query) -> AppTest:
    return open_app("occupancy", **{"backend": "sim", **query})


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _charts(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _impact(at) -> dict:
    """The what-if chart (three panels: block size, registers, shared memory)."""
    return next(c for c in _charts(at) if "xaxis3" in c["layout"])


def _current_point(spec: dict, axis: str = "x2") -> tuple:
    marker = next(t for t in spec["data"] if t.get("xaxis", "x") == axis and t.get("mode") == "markers")
    return marker["x"][0], marker["y"][0]


def test_page_renders_with_capture_defaults_and_source_labels():
    at = _page(kernel="vector_add", n="512", block="128")
    assert at.slider(key="occ_threads").value == 128
    assert at.slider(key="occ_regs").value == 32  # simulator: nothing compiled, 32 assumed
    assert at.selectbox(key="occ_arch").value == "sm_90"
    metrics = _metrics(at)
    assert metrics["blocks / SM"] == "16" and metrics["occupancy"] == "100.0%"
    assert metrics["achieved"] == "needs a GPU"  # no headline number on the simulator
    assert any("6.2% of the warp slots" in c.value for c in at.caption)  # 4 blocks of 4 warps, 4 of 132 SMs
    charts = _charts(at)
    assert len(charts) == 4
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert all("modelled" in t for t in titles), titles
    assert "H200 / H100 (sm_90)" in _impact(at)["layout"]["title"]["text"]
    # the simulator's timestamps are not an occupancy measurement
    assert sum("not meaningful" in t for t in titles) == 1
    history = at.session_state.occupancy_history
    assert [(h["threads"], h["theoretical"]) for h in history] == [(128, 1.0)]


def test_registers_take_over_as_limiter():
    at = _page(kernel="vector_add", n="512", block="128")
    before = _impact(at)
    at.slider(key="occ_regs").set_value(128).run()
    assert not at.exception
    metrics = _metrics(at)
    assert metrics["limiter"] == "registers" and metrics["blocks / SM"] == "4"
    assert "Limited by registers" in " ".join(c.value for c in at.caption)  # the calculator's reason
    after = _impact(at)
    assert _current_point(before) == (32, 64) and _current_point(after) == (128, 16)

    at.slider(key="occ_threads").set_value(1024).run()
    assert not at.exception
    assert _metrics(at)["limiter"] == "registers" and _metrics(at)["blocks / SM"] == "0"
    assert any("Cannot launch (registers)" in e.value for e in at.error)


def test_bad_shared_memory_shows_message_not_exception():
    at = _page(kernel="vector_add", n="512", block="128")
    at.slider(key="occ_static").set_value(4096).run()
    at.slider(key="occ_smem_kb").set_value(227).run()
    assert not at.exception
    assert any("opt-in limit" in e.value and "232,448" in e.value for e in at.error)
    assert _metrics(at)["blocks / SM"] == "0" and _metrics(at)["limiter"] == "shared memory"
    # a smaller GPU generation: 100 KB is over the T4's 64 KB
    at.slider(key="occ_static").set_value(0).run()
    at.slider(key="occ_smem_kb").set_value(100).run()
    at.selectbox(key="occ_arch").set_value("sm_75").run()
    assert not at.exception
    assert any("T4" in e.value for e in at.error)
    assert _metrics(at)["warps / SM"] == "0 / 32"
    # within the limit, shared memory becomes the limiter: 1 KB reserve + 100 KB in a 228 KB carveout
    at.selectbox(key="occ_arch").set_value("sm_90").run()
    assert _metrics(at)["limiter"] == "shared memory" and _metrics(at)["blocks / SM"] == "2"


def test_relaunch_with_slider_block_size_adds_a_point():
    at = _page(kernel="vector_add", n="512", block="128")
    at.slider(key="occ_threads").set_value(256).run()
    at.button(key="occ_relaunch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state.capture.launch["params"] == {"n": 512, "block": 256}
    assert at.slider(key="param_vector_add_block").value == 256  # the sidebar follows
    history = at.session_state.occupancy_history
    assert [h["threads"] for h in history] == [128, 256]
    points = _charts(at)[3]
    achieved = next(t for t in points["data"] if t["name"].startswith("achieved in that run"))
    assert achieved["x"] == [128, 256]


def test_relaunch_rules_for_tile_and_power_of_two_kernels():
    at = _page(kernel="reduction", n="256", block="64")
    at.slider(key="occ_threads").set_value(96).run()
    assert at.button(key="occ_relaunch").disabled
    assert any("power of two" in c.value for c in at.caption)

    at = _page(kernel="matmul_tiled", n="16", tile="8")
    assert at.slider(key="occ_static").value == 2 * 8 * 8 * 4
    at.slider(key="occ_threads").set_value(128).run()
    assert any("tile=11 (121 threads)" in c.value for c in at.caption)
    at.button(key="occ_relaunch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state.capture.launch["params"]["tile"] == 11
