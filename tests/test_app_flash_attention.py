"""The FlashAttention page through the app's entrypoint on the CUDA simulator, and its timing builder."""

import base64
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from visualizer.figures.attention import TIMING_STYLES, attention_timing_figure, timing_source

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/flash_attention.py"
SMALL = {"seq_len": 40, "tile": 16, "head_dim": 16, "heads": 1, "batch": 1, "causal": 1}
TIMINGS = json.loads((ROOT / "docs" / "attention_h200.json").read_text())


def open_page(kernel: str, direct: bool = False, **params) -> AppTest:
    """The page after a first visit with these URL parameters (direct: the link opens this page)."""
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=120)
    at.query_params["kernel"] = kernel
    at.query_params["backend"] = "sim"
    for name, value in params.items():
        at.query_params[name] = str(value)
    if not direct:
        at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> dict[str, dict]:
    """Figures by the first words of their titles."""
    out = {}
    for element in at.get("plotly_chart"):
        fig = json.loads(element.proto.spec)
        out[fig["layout"]["title"]["text"].split(",")[0].split(":")[0]] = fig
    return out


def array(values) -> np.ndarray:
    """A trace's values from the chart's JSON (plotly sends numeric arrays base64-encoded)."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    return np.asarray(values, dtype=float)


def loop_chart(at: AppTest) -> dict:
    (fig,) = [f for title, f in charts(at).items() if title.startswith("FlashAttention (FA2 order)")]
    return fig


@pytest.fixture
def flash_page() -> AppTest:
    return open_page("flash_attention", **SMALL)


def test_flash_page_renders_loop_row_state_smem_and_timing(flash_page):
    at = flash_page
    assert not at.error
    figs = charts(at)
    loop = loop_chart(at)
    assert "Q tile 1 " in loop["layout"]["title"]["text"]  # the middle of 3 Q tiles by default
    assert len(loop["frames"]) == 2  # causal: K/V tiles 0 and 1; tile 2 skipped
    assert "simulated" in loop["layout"]["title"]["text"]
    (row,) = [f for t, f in figs.items() if t.startswith("Online softmax")]
    assert len(row["data"]) == 3 and "simulated" in row["layout"]["title"]["text"]
    (gauge,) = [f for t, f in figs.items() if t.startswith("Shared memory per block")]
    assert "of 49,152 bytes (fits)" in gauge["layout"]["title"]["text"]  # sm_90's 48 KB static limit
    assert "227 KB opt-in" in gauge["layout"]["title"]["text"]
    (timing,) = [f for t, f in figs.items() if t.startswith("Attention forward vs seq_len")]
    assert "measured (GPU): NVIDIA H200" in timing["layout"]["title"]["text"]
    assert any("nothing on this page is GPU time" in w.value for w in at.warning)
    assert any("matches the float64 numpy reference" in s.value for s in at.success)
    assert not [t for t in figs if t.startswith("Loop orders")]  # FA1 comparison is off at first


def test_q_tile_picker_changes_the_loop_figure(flash_page):
    at = flash_page
    before = loop_chart(at)
    at.number_input(key="q_tile").set_value(2).run()
    assert not at.exception, [e.value for e in at.exception]
    after = loop_chart(at)
    assert "Q tile 2 " in after["layout"]["title"]["text"]
    assert len(after["frames"]) == 3 and after["frames"] != before["frames"]
    at.number_input(key="row").set_value(7).run()  # Q tile 2 holds queries 32..39: rows 0..7
    assert not at.exception
    (row,) = [f for t, f in charts(at).items() if t.startswith("Online softmax")]
    assert row["layout"]["title"]["text"].startswith("Online softmax of query row 7 of Q tile 2")
    m = array(row["data"][0]["y"])
    assert len(m) == 3 and (np.diff(m) >= 0).all()  # the running max never falls


def test_fa1_toggle_adds_the_modelled_loop_orders(flash_page):
    at = flash_page
    at.toggle(key="fa_fa1").set_value(True).run()
    assert not at.exception
    (orders,) = [f for t, f in charts(at).items() if t.startswith("Loop orders")]
    assert "modelled" in orders["layout"]["title"]["text"]
    assert len(orders["data"]) == 2  # FA1 and FA2 side by side


def test_smem_what_if_over_the_static_limit(flash_page):
    at = flash_page
    at.select_slider(key="fa_smem_tile").set_value(64)
    at.select_slider(key="fa_smem_head_dim").set_value(128).run()
    assert not at.exception
    (gauge,) = [f for t, f in charts(at).items() if t.startswith("Shared memory per block")]
    assert (
        "does NOT fit" in gauge["layout"]["title"]["text"] and "modelled" in gauge["layout"]["title"]["text"]
    )


def test_q_tile_and_row_come_from_the_link():
    at = open_page("flash_attention", direct=True, q_tile=2, row=3, **SMALL)
    assert at.number_input(key="q_tile").value == 2 and at.number_input(key="row").value == 3
    assert "Q tile 2 " in loop_chart(at)["layout"]["title"]["text"]


def test_gpu_capture_also_shows_this_sessions_kernel_times(flash_page):
    """The page only reads the capture, so a simulator capture relabelled as a GPU one exercises the
    GPU branch here (the numbers are made up; a real GPU run is covered by the GPU tests)."""
    at = flash_page
    cap = at.session_state.capture
    launch = {**cap.launch, "backend": "gpu", "device_name": "NVIDIA H200", "compute_capability": "9.0"}
    timing = {
        **cap.timing,
        "clean_ms": 0.02,
        "instrumented_ms": 0.03,
        "overhead_ratio": 1.5,
        "clean_gflops": 2.6,
    }
    at.session_state.capture = dataclasses.replace(cap, launch=launch, timing=timing)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("nothing on this page is GPU time" in w.value for w in at.warning)
    labels = {m.label: m.value for m in at.metric}
    assert labels["clean kernel"] == "20.0 µs" and labels["instrumented kernel"] == "30.0 µs"
    assert any("This session's run" in m.value for m in at.markdown)


def test_other_kernel_explains_and_loads_the_example():
    at = open_page("vector_add", n=256, block=64)
    assert any("need a **flash_attention** run" in i.value for i in at.info)
    assert not [t for t in charts(at) if t.startswith("FlashAttention")]
    assert [t for t in charts(at) if t.startswith("Attention forward vs seq_len")]  # recorded timings stay

    at.button(key="fa_load_example").click().run()
    assert not at.exception, [e.value for e in at.exception]
    cap = at.session_state.capture
    assert cap.launch["kernel"] == "flash_attention"
    assert cap.launch["params"] == {
        "batch": 1,
        "causal": 1,
        "head_dim": 32,
        "heads": 1,
        "seq_len": 80,
        "tile": 16,
    }
    loop = loop_chart(at)
    assert len(loop["frames"]) == 3  # 5 Q tiles, the middle one (2) visits K/V tiles 0..2
    assert at.sidebar.selectbox(key="kernel_pick").value == "flash_attention"


# --- the timing builder --------------------------------------------------------------------


def test_recorded_timing_file():
    assert TIMINGS["measured_on"].startswith("NVIDIA H200") and TIMINGS["date"] == "2026-11-30"
    assert {"numba", "numba-cuda", "torch", "numpy"} <= set(TIMINGS["versions"])
    rows = TIMINGS["rows"]
    assert len(rows) == 26 and {r["seq_len"] for r in rows} == {512, 1024, 2048, 4096, 8192}
    cfg = TIMINGS["config"]
    for r in rows:  # the stored TFLOP/s follow from the stored times
        flops = 4 * cfg["batch"] * cfg["heads"] * r["seq_len"] ** 2 * cfg["head_dim"]
        assert r["tflops"] == pytest.approx(flops / (r["ms"] * 1e-3) / 1e12, rel=0.01)


def test_attention_timing_figure():
    source = timing_source(TIMINGS)
    assert source == "measured (GPU): NVIDIA H200 (sm_90, 132 SMs), 2026-11-30"
    fig = attention_timing_figure(TIMINGS["rows"], source, "batch 1, 8 heads")
    impls = {r["impl"] for r in TIMINGS["rows"]}
    assert impls == set(TIMING_STYLES)
    assert len(fig.data) == 3 * len(impls)  # time, TFLOP/s, peak memory: one line each per implementation
    assert {t.name for t in fig.data if t.showlegend} == impls  # one legend entry per implementation
    assert (
        fig.layout.yaxis.type == "log"
        and fig.layout.yaxis2.type == "linear"
        and fig.layout.yaxis3.type == "log"
    )
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [512, 1024, 2048, 4096, 8192]
    assert "measured (GPU): NVIDIA H200" in fig.layout.title.text and "2026-11-30" in fig.layout.title.text
    (numpy_time,) = [t for t in fig.data if t.name == "numpy float64 (CPU)" and t.xaxis == "x"]
    assert list(numpy_time.x) == [512]  # timed at one length only: one marker
    flash = [t for t in fig.data if t.name == "ours flash (clean)"]
    assert list(flash[0].x) == [512, 1024, 2048, 4096, 8192] and flash[0].y[-1] == 6.414
    with pytest.raises(ValueError):
        attention_timing_figure([{"seq_len": 512, "impl": "x"}], source)


def test_blocks_without_recorded_softmax_state_say_so():
    # 5 Q tiles x 13 heads = 65 blocks: the kernel records m and l for the first 64 only
    at = open_page("flash_attention", seq_len=40, tile=8, head_dim=16, heads=13, batch=1, causal=0)
    at.number_input(key="fa_head").set_value(12)
    at.number_input(key="q_tile").set_value(4).run()  # block 4 + 5 * 12 = 64
    assert not at.exception, [e.value for e in at.exception]
    assert any("first 64 blocks only" in i.value for i in at.info)
    assert "Q tile 4 (queries 32–39, head 12" in loop_chart(at)["layout"]["title"]["text"]
    assert not [t for t in charts(at) if t.startswith("Online softmax")]
