"""The Memory access page, driven through the app's entrypoint on the CUDA simulator."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app

ROOT = Path(__file__).resolve().parents[2]
PAGE = "web/pages/memory_access.py"
SOURCE = "recorded addresses, simulator"


def open_page(kernel: str, **params) -> AppTest:
    return open_app("memory_access", kernel=kernel, backend="sim", **params)


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


def request_widgets(at: AppTest) -> dict:
    """The chosen access, block, warp and execution (their keys name the kernel and the access)."""
    line = next(s for s in at.selectbox if str(s.key).startswith("mem_line_"))
    boxes = {str(n.key).split("_")[1]: n.value for n in at.number_input if str(n.key).startswith("mem_")}
    return {"line": line.value, **boxes}


def test_a_link_reopens_the_same_line_block_and_warp():
    at = open_page("transpose_naive", rows=64, cols=64, tile=32)
    line = next(s for s in at.selectbox if str(s.key).startswith("mem_line_"))
    other = next(o for o in line.options if o != line.value)  # not the worst access the page opens on
    line.set_value(other).run()
    next(n for n in at.number_input if str(n.key).startswith("mem_block_")).set_value(2).run()
    next(n for n in at.number_input if str(n.key).startswith("mem_warp_")).set_value(5).run()
    assert not at.exception, [e.value for e in at.exception]
    chosen = request_widgets(at)
    assert chosen["block"] == 2 and chosen["warp"] == 5 and chosen["line"] == other
    title = charts(at)[0]["layout"]["title"]["text"]
    link = {k: at.query_params[k] for k in at.query_params}
    assert (
        link["mem_block"] == "2"
        and link["mem_warp"] == "5"
        and link["mem_line"].startswith(other.split(":")[0][5:] + "-")
    )

    # a new visitor opening that link sees the same request
    again = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
    for k, v in link.items():
        again.query_params[k] = v
    again.run()
    assert not again.exception, [e.value for e in again.exception]
    assert request_widgets(again) == chosen
    assert charts(again)[0]["layout"]["title"]["text"] == title
    assert not again.warning


def test_a_bad_request_in_the_link_falls_back_with_a_notice():
    at = open_page("transpose_naive", rows=32, cols=32, tile=32)
    worst = request_widgets(at)
    for query, word in (
        ({"mem_line": "9999-load-x"}, "mem_line=9999"),
        ({"mem_line": "abc", "mem_block": "-3"}, "mem_block=-3"),
        ({"mem_block": "1e9", "mem_warp": "99999", "mem_exec": "x"}, "mem_warp=99999"),
    ):
        bad = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
        for k, v in {"kernel": "transpose_naive", "backend": "sim", "rows": "32", "cols": "32",
                     "tile": "32", "page": "memory_access", **query}.items():  # fmt: skip
            bad.query_params[k] = v
        bad.run()
        assert not bad.exception, [e.value for e in bad.exception]
        notices = [w.value.replace("\\", "").replace("\u200b", "") for w in bad.warning]  # escaped
        assert len(notices) == len(query) and any(word in n for n in notices), notices
        assert request_widgets(bad) == worst  # the defaults: the worst request
        assert charts(bad)


def test_deltas_compare_only_the_same_kernel_and_read_as_plain_numbers():
    at = open_page("transpose_naive", rows=32, cols=32, tile=32)
    assert not [m for m in at.metric if m.proto.delta]  # nothing to compare with yet
    at.radio(key="mem_variant_transpose_naive").set_value("transpose_tiled").run()
    deltas = {m.label: m.proto.delta for m in at.metric if m.proto.delta}
    assert deltas["global store sectors / request"] == "-28 vs naive", deltas
    assert all("vs naive" in d and "e+" not in d and "e-" not in d for d in deltas.values()), deltas
    at.selectbox(key="mem_kernel").set_value("reduction").run()  # another kernel: no deltas against it
    assert not at.exception, [e.value for e in at.exception]
    assert not [m.proto.delta for m in at.metric if m.proto.delta]
    assert all("e+" not in m.value for m in at.metric)


@pytest.fixture
def operator_key(monkeypatch):
    from tests.web.test_app_current_kernel import TOKEN

    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)


def test_record_my_kernel_records_where_it_ran(operator_key):
    """A visitor's kernel that ran on a GPU is recorded on the GPU again (its sampled warps, measured),
    never silently on the simulator; one that ran on the simulator, on the simulator."""
    from tests.web.test_app_current_kernel import _ran_yours, plain

    at = _ran_yours()
    at.switch_page(PAGE).run()
    assert any("again on the CUDA simulator with every access recorded" in plain(i.value) for i in at.info)
    import dataclasses

    cap = at.session_state["capture"]  # as if it had run on a GPU
    at.session_state["capture"] = dataclasses.replace(
        cap, launch={**cap.launch, "backend": "gpu", "compute_capability": "9.0"}
    )
    at.run()
    assert any("again on the GPU, where the warps of a few blocks" in plain(i.value) for i in at.info)
    at.button(key="mem_record_yours").click().run()
    assert at.session_state["uk_backend"] == "gpu" and at.session_state["uk_accesses"] is True
    assert at.session_state["page"] == "your_kernel"  # this machine has no GPU: the run says so there
    assert at.error and not at.exception


@pytest.mark.gpu
def test_record_my_kernel_on_the_gpu_draws_its_sampled_warps(operator_key):
    from tests.web.test_app_current_kernel import _ran_yours

    at = _ran_yours("matmul_tiled", backend="gpu")
    assert at.session_state["capture"].launch["backend"] == "gpu"
    at.switch_page(PAGE).run()
    at.button(key="mem_record_yours").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    cap = at.session_state["capture"]
    assert at.session_state["page"] == "memory_access" and cap.launch["backend"] == "gpu"
    assert cap.launch["accesses"]["source"] == "measured (GPU, sampled warps)"
    captions = " ".join(c.value for c in at.caption)
    assert "measured (GPU, sampled warps)" in captions and "sampled warps" in captions
    titles = [json.dumps(c["layout"]["title"]) for c in charts(at)]
    assert titles and all("measured (GPU, sampled warps)" in t for t in titles), titles


def test_flash_attention_shows_its_view_loads_and_the_first_request_is_the_charts():
    """q, k and v are loaded through views (``qh = q[b, h]``) in a device function: their loads are in
    the table; and on a line two arrays share (store_tile's sQ and sKP stores) the execution box
    starts at the request the chart draws, not at an execution that array never had."""
    at = open_page("flash_attention", seq_len=40)
    assert not at.exception and not at.error
    assert float(metric(at, "global load sectors / request")) > 0
    choices = at.selectbox(key="mem_line_visualizer.kernels.attention").options
    assert {"q", "k", "v"} <= {c.split()[-2] for c in choices if "load" in c and "(global)" in c}
    assert not [i for i in at.info if "did not execute this access" in i.value]
    occ = next(n for n in at.number_input if n.label == "execution").value
    assert f"(execution {occ})" in charts(at)[0]["layout"]["title"]["text"]
