"""The scheduling page through the app's entrypoint: simulator (modelled) and, where present, the GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")
PAGE = "web/pages/scheduling.py"


def _page(**query) -> AppTest:
    return open_app("scheduling", **query)


def _charts(at: AppTest) -> dict[str, dict]:
    """Every plotly chart on the page by its full title (first line, then the source line)."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def _chart(at: AppTest, starts: str) -> dict:
    return next(
        s for title, s in _charts(at).items() if title.startswith(starts) and "simulated" not in title
    )


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture(scope="module")
def sim_page() -> AppTest:
    return _page(kernel="vector_add", backend="sim", n="2000", block="64")


def test_simulator_page_is_modelled(sim_page):
    at = sim_page
    titles = list(_charts(at))
    modelled = [t for t in titles if "modelled (H200" in t]
    assert len(modelled) == 4, titles  # SM timeline, warps, concurrency, waves
    # the expander shows what the simulator really recorded, labelled as such
    assert [t.split("<br>")[0] for t in titles if "simulated" in t] == ["Blocks on each SM over time"]
    waves = _chart(at, "One wave: all 32 blocks at once")
    assert len(waves["frames"]) == 1  # 32 blocks: one (partial) wave on the modelled H200
    assert _metric(at, "tail") == "none"
    assert any(b.key == "sched_suggest" for b in at.button)  # a launch with waves is one click away
    assert waves["layout"]["xaxis"]["range"] == [-0.5, 131.5]
    assert any("Modelled" in c.value for c in at.caption)  # a caption, so the chart starts above the fold
    assert any("one after another" in e.label for e in at.expander)
    assert _metric(at, "SMs used") == "32 of 132"
    assert _metric(at, "theoretical occupancy") == "100%"  # 32 blocks x 2 warps = 64 of 64


def test_changing_the_gpu_model_changes_the_modelled_figures():
    at = _page(kernel="vector_add", backend="sim", n="2000", block="64")
    before = _charts(at)
    at.selectbox(key="sched_gpu").set_value("T4").run()
    assert not at.exception, [e.value for e in at.exception]
    after = _charts(at)
    assert before != after
    waves = _chart(at, "One wave")
    assert waves["layout"]["xaxis"]["range"] == [-0.5, 39.5]  # T4: 40 SMs, H200: 132
    assert "T4" in waves["layout"]["title"]["text"] and "modelled" in waves["layout"]["title"]["text"]
    assert _metric(at, "SMs used") == "32 of 40"
    assert _metric(at, "blocks per wave") == "640"  # 40 SMs x 16 blocks (T4's block limit)


def test_registers_change_the_first_wave():
    at = _page(kernel="vector_add", backend="sim", n="2000", block="64")
    assert _metric(at, "blocks per wave") == "4,224"  # H200: 132 SMs x 32 blocks
    # 128 regs x 64 threads: Rw = 4096 -> 4 warps per sub-partition, 16 per SM, 8 blocks of 2 warps
    at.number_input(key="sched_regs").set_value(128).run()
    assert not at.exception
    assert _metric(at, "blocks per wave") == "1,056"
    assert _metric(at, "theoretical occupancy") == "25%"


def test_sm_selector_picks_the_warp_view_and_clamps_to_the_model():
    at = _page(kernel="vector_add", backend="sim", n="2000", block="64")
    at.number_input(key="sm").set_value(5).run()
    assert not at.exception
    assert "modelled" in _chart(at, "Warps resident on SM 5 over time")["layout"]["title"]["text"]
    at.number_input(key="sm").set_value(100).run()
    assert "SM 100 ran no warps" in json.dumps(_chart(at, "Warps resident on SM 100 over time"))
    at.selectbox(key="sched_gpu").set_value("T4").run()  # 40 SMs: SM 100 does not exist there
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="sm").value == 39


def test_unlaunchable_model_is_an_error_line_not_a_traceback():
    at = _page(kernel="vector_add", backend="sim", n="2000", block="1024")
    at.number_input(key="sched_regs").set_value(255).run()  # 255 regs x 1024 threads > 64K registers
    assert not at.exception
    assert any("cannot run on the modelled H200" in e.value for e in at.error)


@pytest.mark.gpu
def test_gpu_page_is_measured():
    at = _page(kernel="vector_add", backend="gpu", n=str(1 << 20), block="256")
    charts = _charts(at)
    assert len(charts) == 4
    assert all("measured (GPU)" in title for title in charts), list(charts)
    assert not any("modelled" in title for title in charts)
    assert _metric(at, "theoretical occupancy") != "–"
    waves = _chart(at, "Wave 1")
    assert len(waves["frames"]) >= 1


def test_suggested_launch_runs_in_several_waves_with_a_tail():
    at = _page(kernel="vector_add", backend="sim", n="2000", block="64")
    at.selectbox(key="sched_gpu").set_value("T4").run()
    at.button(key="sched_suggest").click().run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.selectbox(key="kernel_pick").value == "vector_add"
    waves = int(_metric(at, "waves"))
    assert waves >= 3 and _metric(at, "tail") != "none"
    # the suggested tail really idles SMs, and the caption beside the tail metric says so
    (caption,) = [c.value for c in at.caption if "full wave(s) of" in c.value]
    assert "cannot reach all 40 SMs, so at least 20 SMs get none" in caption, caption
    assert "whole SMs sat idle 0%" not in caption and "this tail is idle SMs" in caption
    assert "20 SMs idle" in _chart(at, "Wave 1 of ")["frames"][-1]["layout"]["title"]["text"]
    assert _chart(at, "Wave 1 of ")["layout"]["sliders"][0]["steps"][-1]["label"] == str(waves)
