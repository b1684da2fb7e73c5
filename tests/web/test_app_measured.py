"""The recorded launch beside the simulated run (web/measured.py) on the scheduling page and in the timing
panel, from a set recorded here on the simulator, which the page must call simulated, never measured."""

from __future__ import annotations

import json

import pytest

from devtools import ship_h200
from tests.conftest import open_app
from visualizer.analysis import measured_set as ms


@pytest.fixture(scope="module")
def sim_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("measured") / "set"
    assert (
        ship_h200.main(
            ["--out", str(out), "--kernels", "vector_add,vector_add_x4", "--no-lessons", "--backend", "sim"]
        )
        == 0
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ms.SET_ENV, str(out))
        yield out


def _titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def _texts(at) -> list[str]:
    return [c.value for c in at.caption] + [m.value for m in at.markdown]


@pytest.fixture(scope="module")
def nearest_page(sim_set):
    return open_app("scheduling", kernel="vector_add", backend="sim", n="2000", block="64")


def test_scheduling_shows_the_nearest_recorded_launch_and_says_it_is_not_yours(nearest_page):
    at = nearest_page
    heads = [h.value for h in at.subheader]
    assert "The nearest recorded launch, recorded on the simulator (simulated): blocks on its SMs" in heads
    line = "nearest recorded: block=128, n=1000 (yours block=64, n=2000); not your launch"
    assert any(line in t for t in _texts(at))
    assert any("Not your launch." in t for t in _texts(at))
    beside = [
        t for t in _titles(at) if t.startswith("Blocks on each SM over time") and "recorded on the" in t
    ]
    assert len(beside) == 1 and "simulated, not measured" in beside[0] and line in beside[0]
    assert not any("measured on" in t for t in _titles(at))  # a simulator's set is never called measured
    modelled = [t for t in _titles(at) if "modelled (H200" in t]
    assert len(modelled) == 4  # your run's charts are still there, modelled, as before


def test_the_timing_panel_shows_the_recording_beside_the_simulators_caption(nearest_page):
    sidebar = [c.value for c in nearest_page.sidebar.caption] + [
        m.value for m in nearest_page.sidebar.markdown
    ]
    assert any("The nearest recorded launch, recorded on the simulator (simulated)" in t for t in sidebar)
    assert any("This recording has no device time" in t for t in sidebar)


def test_the_same_launch_is_called_the_same(sim_set):
    at = open_app("scheduling", kernel="vector_add", backend="sim", n="1000", block="128")
    heads = [h.value for h in at.subheader]
    assert "The same launch, recorded on the simulator (simulated): blocks on its SMs" in heads
    assert any("the same launch (block=128, n=1000)" in t for t in _texts(at))
    assert not any("Not your launch." in t for t in _texts(at))


def test_a_damaged_set_is_one_caption_and_the_page_still_works(sim_set, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "index.json").write_text("{not json")
    monkeypatch.setenv(ms.SET_ENV, str(broken))
    at = open_app("scheduling", kernel="vector_add", backend="sim", n="1000", block="128")
    assert any(t.startswith("measured set not shown: index.json: not valid JSON") for t in _texts(at))
    assert not any("blocks on its SMs" in h.value for h in at.subheader)


def test_memory_access_shows_the_recorded_requests_beside_yours(sim_set):
    at = open_app("memory_access", kernel="vector_add", backend="sim", n="1000", block="128")
    heads = [h.value for h in at.subheader]
    assert "The same launch, recorded on the simulator (simulated): its memory requests" in heads
    titles = [t for t in _titles(at) if "the recorded launch vs your run (simulated)" in t]
    assert len(titles) == 1 and "simulated, not measured" in titles[0]
    assert "the same per request on every line" in titles[0]  # one launch, recorded twice: same pattern
    metrics = {m.label: m.value for m in at.metric}
    # 31 full warps of 32 consecutive floats (4 sectors each) and one of 8 (1 sector): 125 / 32
    assert metrics["global load sectors / request (recorded)"] == "3.91"
    # the every-warp heat map: yours by default; the recording's warps on the same axes, labelled as its
    heat = [t for t in _titles(at) if t.startswith("Sectors per request, per warp")]
    assert len(heat) == 1 and "recorded addresses, simulator" in heat[0]
    assert any("recorded every one of its 32 warps" in t and "warps (block" in t for t in _texts(at))
    at.radio(key="mem_heat_whose").set_value("recorded").run()
    assert not at.exception, [e.value for e in at.exception]
    heat = [t for t in _titles(at) if t.startswith("Sectors per request, per warp")]
    heat = [t.replace("</sup><br><sup>", " ") for t in heat]  # the label line wraps
    assert len(heat) == 1 and "simulated, not measured; only the warps that recorded" in heat[0], heat


def test_simt_shows_the_recorded_branch_efficiency_and_says_why_no_barrier_waits(sim_set):
    at = open_app("simt", kernel="vector_add", backend="sim", n="4096", block="128")
    heads = [h.value for h in at.subheader]
    assert (
        "The nearest recorded launch, recorded on the simulator (simulated): branch efficiency and barrier waits"
        in heads
    )
    assert any(m.label == "branch efficiency (recorded)" for m in at.metric)
    assert any("nearest recorded: n=1000 (yours n=4096); not your launch" in t for t in _texts(at))
    assert any("made on the simulator, which has no clock" in t for t in _texts(at))


def test_compare_on_the_simulator_shows_the_recorded_pair_and_no_device_time_from_a_simulator(sim_set):
    at = open_app("compare", cmp_pair="vector_add", cmp_backend="sim")
    heads = [h.value for h in at.subheader]
    assert "Recorded on the simulator (simulated): no device time" in heads
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["A: vector_add (recorded)"] == "–" and metrics["B: vector_add_x4 (recorded)"] == "–"
    assert "B/A (recorded)" not in metrics  # no ratio of times nobody measured
    assert any("nearest recorded: n=1000 (yours n=4096); not your launch" in t for t in _texts(at))


def _lesson_run(lesson: str, answer) -> object:
    at = open_app(backend="sim", page="lessons", lesson=lesson)
    key = sorted(w.key for w in (*at.number_input, *at.radio) if str(w.key).startswith("lesson_guess_"))[0]
    next(w for w in (*at.number_input, *at.radio) if w.key == key).set_value(answer).run()
    at.button(key=f"lock_{key}").click().run()
    at.button(key="lesson_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_gpu_time_lesson_names_the_recorded_launch_and_gives_no_answer_from_a_simulator(sim_set):
    at = _lesson_run("cpu_gpu", "GPU kernel")
    heads = [h.value for h in at.subheader]
    assert any(h.startswith("The recorded launch: recorded on the CUDA simulator") for h in heads), heads
    assert any("nearest recorded: block=128 (yours block=256); not your launch" in t for t in _texts(at))
    assert any("it holds no measured answer" in t for t in _texts(at))
    assert not any(m.label.startswith("Q1, measured on") for m in at.metric)


def test_the_shipped_set_if_recorded_is_shown_as_measured(monkeypatch):
    """The set in the package (recorded on the H200), where it has been recorded: labelled measured."""
    monkeypatch.delenv(ms.SET_ENV)
    the_set, why = ms.load_set(ms.SHIPPED_DIR)
    if the_set is None:
        pytest.skip(why)
    at = open_app("scheduling", kernel="vector_add", backend="sim", n="1000", block="128")
    heads = [h.value for h in at.subheader]
    assert f"The same launch, measured on {the_set.device_words()}: blocks on its SMs" in heads
    assert any(the_set.label() in t for t in _titles(at))


@pytest.mark.gpu
def test_a_set_recorded_on_the_gpu_is_labelled_measured_with_its_device_time(tmp_path, monkeypatch):
    """On the GPU machine: record one launch there, then read it beside a simulated run."""
    out = tmp_path / "gpu_set"
    assert (
        ship_h200.main(["--out", str(out), "--kernels", "vector_add", "--no-lessons", "--backend", "gpu"])
        == 0
    )
    the_set, why = ms.load_set(out)
    assert why is None and the_set.measured and the_set.label().startswith("measured on an NVIDIA")
    assert the_set.device["driver"] and the_set.device["cuda_driver"]
    monkeypatch.setenv(ms.SET_ENV, str(out))
    at = open_app("scheduling", kernel="vector_add", backend="sim", n="1000", block="128")
    assert any(h.value.startswith("The same launch, measured on an NVIDIA") for h in at.subheader)
    assert any(
        t.startswith("Blocks on each SM over time") and "measured on an NVIDIA" in t for t in _titles(at)
    )
    sidebar = {m.label: m.value for m in at.sidebar.metric}
    assert sidebar.get("device time (H200)", sidebar.get("device time", "–")).endswith("µs")

    # on the GPU machine the lesson's own run is on its GPU: its answer is measured there (seen on the H200,
    # 2026-12-04: "The measured answer: measured on an NVIDIA H200, 2026-12-04, driver 580.159.04")
    at = _lesson_run("cpu_gpu", "GPU kernel")
    heads = [h.value for h in at.subheader]
    assert any(h.startswith("The measured answer: measured on an NVIDIA") for h in heads), heads


def test_without_a_set_the_pages_say_nothing_of_one(tmp_path, monkeypatch):
    monkeypatch.setenv(ms.SET_ENV, str(tmp_path / "none"))
    at = open_app("scheduling", kernel="vector_add", backend="sim", n="1000", block="128")
    assert not any(
        "recorded" in t or "measured set" in t for t in _texts(at) if "ship_h200" in t or "set" in t
    )
    assert not any("blocks on its SMs" in h.value for h in at.subheader)
