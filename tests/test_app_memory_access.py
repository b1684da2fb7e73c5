"""The Memory access page, driven through the app's entrypoint on the CUDA simulator."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
PAGE = "app_pages/memory_access.py"
SOURCE = "recorded addresses, simulator"


def open_page(kernel: str, **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=180)
    at.query_params["kernel"] = kernel
    at.query_params["backend"] = "sim"
    for name, value in params.items():
        at.query_params[name] = str(value)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_transpose_what_if_naive_tiled_padded():
    at = open_page("transpose_naive", rows=32, cols=32, tile=32)
    assert not at.error
    assert metric(at, "global store sectors / request") == "32"
    sector, heat = charts(at)
    assert "32 sectors for 32 lanes (ideal 4)" in sector["layout"]["title"]["text"]  # the worst access first
    assert all(SOURCE in f["layout"]["title"]["text"] for f in (sector, heat))
    assert any(
        "background:#ffe08a" in h.proto.body and "out[x, y] = inp[y, x]" in h.proto.body
        for h in at.get("html")
    )

    at.radio(key="mem_variant_transpose_naive").set_value("transpose_tiled").run()
    assert not at.exception
    assert metric(at, "global store sectors / request") == "4"
    assert metric(at, "shared load bank conflicts") == "992"
    bank = charts(at)[0]
    assert "32-way bank conflict (31 extra wavefronts)" in bank["layout"]["title"]["text"]

    at.radio(key="mem_variant_transpose_naive").set_value("transpose_padded").run()
    assert metric(at, "shared load bank conflicts") == "0"
    assert "conflict-free" in charts(at)[0]["layout"]["title"]["text"]


def test_strided_copy_stride_control_and_race_table():
    at = open_page("strided_copy", n=64, stride=1, block=32)
    assert metric(at, "global load sectors / request") == "4"
    at.select_slider(key="mem_stride").set_value(32).run()
    assert not at.exception
    assert metric(at, "global load sectors / request") == "32"

    at.selectbox(key="mem_kernel").set_value("reduction_race").run()
    assert not at.exception
    assert int(metric(at, "raced shared words").replace(",", "")) > 0
    assert any("Hazards:" in e.proto.label for e in at.expander)
