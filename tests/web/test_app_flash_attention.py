"""The FlashAttention page through the app's entrypoint on the CUDA simulator, and its timing builder."""

import base64
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app
from visualizer.figures.attention import (
    TIMING_ALIASES,
    TIMING_STYLES,
    attention_timing_figure,
    timing_label,
    timing_modes,
    timing_ms_table,
    timing_rows,
    timing_source,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = "web/pages/flash_attention.py"
SMALL = {"seq_len": 40, "tile": 16, "head_dim": 16, "heads": 1, "batch": 1, "causal": 1}
# real H200 rows in attention_bench's JSON format (tests/data: converted, not the page's recording)
SAMPLE_FILE = ROOT / "tests" / "data" / "attention_timings_sample.json"
SAMPLE = json.loads(SAMPLE_FILE.read_text())
RECORDED_FILE = ROOT / "docs" / "attention_timings_h200.json"  # the page's own, recorded on the H200
TIMINGS_ENV = "VISUALIZER_ATTENTION_TIMINGS"


@pytest.fixture(autouse=True)
def sample_timings(monkeypatch):
    """The page reads the sample document unless a test points it elsewhere."""
    monkeypatch.setenv(TIMINGS_ENV, str(SAMPLE_FILE))


def open_page(kernel: str, direct: bool = False, **params) -> AppTest:
    """The page after a first visit with these URL parameters (direct: the link opens this page)."""
    return open_app("flash_attention", direct=direct, kernel=kernel, backend="sim", **params)


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
    assert "measured (GPU)" in timing["layout"]["title"]["text"]
    assert any("Nothing on this page is GPU time" in c.value for c in at.caption)
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
    assert not any("Nothing on this page is GPU time" in c.value for c in at.caption)
    labels = {m.label: m.value for m in at.metric}
    assert labels["clean kernel"] == "20.0 µs" and labels["instrumented kernel"] == "30.0 µs"
    assert any("This session's run" in m.value for m in at.markdown)


def test_other_kernel_explains_and_loads_the_example():
    at = open_page("vector_add", n=256, block=64)
    assert any(
        "need **flash_attention** (example" in i.value and "flash_attention_fast" in i.value for i in at.info
    )
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


# --- the recorded timings: page section and builders ----------------------------------------


def timing_chart(at: AppTest) -> dict:
    (fig,) = [f for t, f in charts(at).items() if t.startswith("Attention forward vs seq_len")]
    return fig


def legend(fig: dict) -> list[str]:
    return [t["name"] for t in fig["data"] if t.get("showlegend", True)]


def time_traces(fig: dict) -> dict[str, dict]:
    """The time panel's traces (the first axis) by legend name."""
    return {t["name"]: t for t in fig["data"] if t.get("xaxis", "x") == "x"}


def expected_times(doc: dict, mode: str) -> dict[str, dict[int, float]]:
    """{label: {seq_len: ms}} of one mode, straight from the document's rows."""
    backends = [
        r.get("backend")
        for r in doc["rows"]
        if TIMING_ALIASES.get(r["impl"], r["impl"]) == "torch sdpa default fp32"
    ]
    out: dict[str, dict[int, float]] = {}
    for r in doc["rows"]:
        if bool(r["causal"]) == (mode == "causal"):
            out.setdefault(timing_label(r["impl"], backends), {})[r["seq_len"]] = r["ms"]
    return out


def check_timing_chart(fig: dict, doc: dict, mode: str) -> None:
    """One legend entry and one time trace per implementation of ``mode``, holding its recorded times."""
    want = expected_times(doc, mode)
    assert sorted(legend(fig)) == sorted(want)
    for name, trace in time_traces(fig).items():
        assert dict(zip(array(trace["x"]).astype(int), array(trace["y"]), strict=True)) == pytest.approx(
            want[name]
        )
    run = doc["runs"][mode]
    title = fig["layout"]["title"]["text"]
    assert title.count("measured (GPU)") == 1 and run["measured_on"]["gpu"] in title and run["date"] in title
    assert "queued behind a spin kernel" in title and mode in title


def test_timing_chart_follows_the_run_and_the_mask_choice(flash_page):
    at = flash_page  # a causal run: the causal timings first
    assert at.radio(key="fa_timing_mode").value == "causal"
    check_timing_chart(timing_chart(at), SAMPLE, "causal")
    at.radio(key="fa_timing_mode").set_value("non-causal").run()
    assert not at.exception, [e.value for e in at.exception]
    check_timing_chart(timing_chart(at), SAMPLE, "non-causal")
    assert at.query_params["fa_timing_mode"] == "non-causal"
    (table,) = [d.value for d in at.dataframe if "implementation" == d.value.index.name]
    want = expected_times(SAMPLE, "non-causal")
    assert list(table.index) == legend(timing_chart(at))  # the table's rows in legend order
    for name, times in want.items():
        assert table.loc[name].dropna().to_dict() == pytest.approx(
            {f"seq_len {n}": ms for n, ms in times.items()}
        )
    assert any("our fast kernel takes" in m.value for m in at.markdown)


def test_timing_mode_comes_from_the_link_and_a_bad_one_is_ignored():
    at = open_page("flash_attention", direct=True, fa_timing_mode="causal", **{**SMALL, "causal": 0})
    assert at.radio(key="fa_timing_mode").value == "causal"
    check_timing_chart(timing_chart(at), SAMPLE, "causal")
    at = open_page("flash_attention", direct=True, fa_timing_mode="sideways", **{**SMALL, "causal": 0})
    assert not at.error and at.radio(key="fa_timing_mode").value == "non-causal"


@pytest.mark.parametrize(
    "content",
    [
        None,
        "{not json",
        '{"kind": "something else", "runs": {"causal": {}}}',
        '{"kind": "visualizer.attention_bench timings", "runs": {"causal": {"config": {}}}, "rows": []}',
    ],
    ids=["missing", "not-json", "other-kind", "no-rows"],
)
def test_unreadable_timings_give_one_line_and_the_page_still_works(monkeypatch, tmp_path, content):
    path = tmp_path / "timings.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv(TIMINGS_ENV, str(path))
    at = open_page("flash_attention", **SMALL)
    (error,) = at.error
    assert "timings.json" in error.value and "\n" not in error.value
    assert not [t for t in charts(at) if t.startswith("Attention forward")]
    assert loop_chart(at)["frames"]  # the rest of the page is there


@pytest.mark.skipif(not RECORDED_FILE.exists(), reason="docs/attention_timings_h200.json not recorded yet")
@pytest.mark.parametrize("mode", ["non-causal", "causal"])
def test_the_recorded_h200_file_renders_every_implementation(monkeypatch, mode):
    monkeypatch.delenv(TIMINGS_ENV)
    doc = json.loads(RECORDED_FILE.read_text())
    if mode not in timing_modes(doc):
        pytest.skip(f"no {mode} run recorded")
    at = open_page("flash_attention", direct=True, fa_timing_mode=mode, **SMALL)
    assert not at.error
    check_timing_chart(timing_chart(at), doc, mode)
    for name in legend(timing_chart(at)):  # a student reads names, not the bench's spellings
        assert name not in TIMING_STYLES and name not in TIMING_ALIASES
    said = " ".join(c.value for c in at.main.caption)
    assert "visualizer.tools.attention_bench" in said  # the command that runs today
    assert "-m visualizer.attention_bench" not in said  # the module moved: that one fails


def test_attention_timing_figure_from_the_sample():
    for mode in timing_modes(SAMPLE):
        rows = timing_rows(SAMPLE, mode)
        fig = attention_timing_figure(rows, timing_source(SAMPLE["runs"][mode]), "batch 1")
        impls = list(dict.fromkeys(rows["impl"]))
        has_memory = "peak_mb" in rows and rows["peak_mb"].notna().any()
        assert len(fig.data) == (3 if has_memory else 2) * len(impls)  # one line per panel and implementation
        names = [t.name for t in fig.data if t.showlegend]
        assert names == list(dict.fromkeys(rows["implementation"]))  # legend order is the rows' order
        order = list(TIMING_STYLES)
        ranks = [order.index(TIMING_ALIASES.get(i, i)) for i in impls]
        assert ranks == sorted(ranks)
        assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "linear"
        assert list(fig.layout.xaxis.tickvals) == sorted(rows["seq_len"].unique())
        # the legend sits under the x-axis titles, inside the figure's bottom margin
        assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"
        plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        legend_rows = -(-len(impls) // 2)
        assert -fig.layout.legend.y * plot_px + legend_rows * 24 <= fig.layout.margin.b


def test_memory_panel_appears_when_peak_memory_was_recorded():
    rows = timing_rows(SAMPLE, "non-causal")
    rows["peak_mb"] = rows["seq_len"] * 4 * 8 * 64 / 2**20  # any positive column
    fig = attention_timing_figure(rows, "measured (GPU): somewhere")
    assert len(fig.data) == 3 * rows["impl"].nunique() and fig.layout.yaxis3.type == "log"
    with pytest.raises(ValueError):
        attention_timing_figure([{"seq_len": 512, "impl": "x"}], "measured (GPU): somewhere")


def test_timing_labels_are_readable_and_name_sdpas_backend():
    for impl, same in TIMING_ALIASES.items():  # docs/benchmarks.md's spellings mean the same thing
        assert timing_label(impl) == timing_label(same)
    assert len({timing_label(i) for i in TIMING_STYLES}) == len(TIMING_STYLES)
    assert "memory-efficient" in timing_label("torch sdpa default fp32", ["efficient_attention"])
    assert "not recorded" in timing_label("SDPA default")
    both = timing_label("SDPA default", ["efficient_attention", "flash_attention", "efficient_attention"])
    assert both.count("kernel") == 2
    assert timing_label("something new") == "something new"


def test_timing_rows_refuse_what_they_cannot_read():
    with pytest.raises(ValueError, match="not an attention_bench"):
        timing_rows({"rows": SAMPLE["rows"]}, "causal")
    with pytest.raises(ValueError, match="no causal run"):
        timing_rows({**SAMPLE, "runs": {"non-causal": SAMPLE["runs"]["non-causal"]}}, "causal")
    with pytest.raises(ValueError, match="missing"):
        timing_rows(
            {**SAMPLE, "rows": [{k: v for k, v in r.items() if k != "ms"} for r in SAMPLE["rows"]]}, "causal"
        )
    table = timing_ms_table(timing_rows(SAMPLE, "causal"))
    assert table.notna().sum().sum() == sum(1 for r in SAMPLE["rows"] if r["causal"])


def test_timing_source_says_where_when_and_how():
    run = SAMPLE["runs"]["causal"]
    source = timing_source(run)
    assert source.startswith(f"measured (GPU): {run['measured_on']['gpu']} ({run['measured_on']['sm']}, ")
    assert run["date"] in source and "launches queued behind a spin kernel" in source
    timed = {**run, "time_utc": "13:04:05", "config": {**run["config"], "repeats": 7}}
    assert f"{run['date']} 13:04 UTC" in timing_source(timed) and "of 7 launches" in timing_source(timed)


def test_blocks_without_recorded_softmax_state_say_so():
    # 5 Q tiles x 13 heads = 65 blocks: the kernel records m and l for the first 64 only
    at = open_page("flash_attention", seq_len=40, tile=8, head_dim=16, heads=13, batch=1, causal=0)
    at.number_input(key="fa_head").set_value(12)
    at.number_input(key="q_tile").set_value(4).run()  # block 4 + 5 * 12 = 64
    assert not at.exception, [e.value for e in at.exception]
    assert any("first 64 blocks only" in i.value for i in at.info)
    assert "Q tile 4 (queries 32–39, head 12" in loop_chart(at)["layout"]["title"]["text"]
    assert not [t for t in charts(at) if t.startswith("Online softmax")]


# --- the fast kernel (flash_attention_fast): rectangular tiles, paired causal blocks -------------

# 3 Q tiles of 128 rows, 5 K/V tiles of 64 keys; causal: block 0 computes Q tiles 2 and 0, block 1 Q tile 1
FAST_SMALL = {"seq_len": 260, "head_dim": 32, "heads": 1, "batch": 1, "causal": 1}


def row_chart(at: AppTest) -> dict:
    (fig,) = [f for t, f in charts(at).items() if t.startswith("Online softmax")]
    return fig


def test_fast_kernel_page_maps_q_tiles_to_paired_blocks():
    at = open_page("flash_attention_fast", **FAST_SMALL)
    assert not at.error
    loop = loop_chart(at)
    title = loop["layout"]["title"]["text"]
    assert "Q tile 1 (queries 128–255, head 0" in title and "S tiles 128 x 64" in title  # the middle one
    assert len(loop["frames"]) == 4 and "simulated" in title
    assert any("block x = 1 computes the middle Q tile only" in c.value for c in at.caption)
    assert any("matches the float64 numpy reference" in s.value for s in at.success)
    assert any("Nothing on this page is GPU time" in c.value for c in at.caption)
    assert not [t for t in at.toggle if t.key == "fa_fa1"]  # the FA1 model is the teaching kernel's

    at.number_input(key="q_tile").set_value(0).run()
    assert not at.exception, [e.value for e in at.exception]
    loop = loop_chart(at)
    assert "Q tile 0 (queries 0–127, block (0, 0, 0)" in loop["layout"]["title"]["text"]
    assert len(loop["frames"]) == 2  # causal: K/V tiles 0 and 1 of 5
    (caption,) = [c.value for c in at.caption if "pair Q tiles" in c.value]
    assert "block x = 0 also computes Q tile 2" in caption and "3 tiles right of the diagonal" in caption
    row = row_chart(at)
    assert row["layout"]["title"]["text"].startswith("Online softmax of query row 0 of Q tile 0")
    m = array(row["data"][0]["y"])
    assert len(m) == 2 and (np.diff(m) >= 0).all()  # the second part's own two steps

    at.number_input(key="q_tile").set_value(2).run()  # queries 256-259: rows 0..3
    assert at.number_input(key="row").max == 3
    assert len(loop_chart(at)["frames"]) == 5 and len(array(row_chart(at)["data"][0]["y"])) == 5


def test_fast_kernel_shared_memory_is_k_and_v_only():
    at = open_page("flash_attention_fast", **{**FAST_SMALL, "seq_len": 150, "causal": 0})
    (gauge,) = [f for t, f in charts(at).items() if t.startswith("Shared memory per block")]
    text = gauge["layout"]["title"]["text"]
    assert "18,432 of 49,152 bytes (fits)" in text and "modelled: sK + sV" in text  # 2 x 64 x (32+4) floats
    assert any("There is no sQ" in c.value and "S, P and O stay in registers" in c.value for c in at.caption)
    # non-causal: one Q tile per block, block x = Q tile (the middle of 2 by default)
    assert any("Block (1, 0, 0) holds queries 128–149 in registers" in c.value for c in at.caption)
    at.select_slider(key="fa_fast_head_dim").set_value(128).run()
    assert not at.exception
    (gauge,) = [f for t, f in charts(at).items() if t.startswith("Shared memory per block")]
    assert "16,896 of 49,152 bytes" in gauge["layout"]["title"]["text"]  # 2 x 16 x (128+4) floats
    assert at.query_params["fa_fast_head_dim"] == "128"


def test_other_kernel_loads_the_fast_example():
    at = open_page("vector_add", n=256, block=64)
    at.button(key="fa_load_fast_example").click().run()
    assert not at.exception, [e.value for e in at.exception]
    cap = at.session_state.capture
    assert cap.launch["kernel"] == "flash_attention_fast"
    assert cap.launch["params"] == {"batch": 1, "causal": 1, "head_dim": 64, "heads": 1, "seq_len": 200}
    assert at.sidebar.selectbox(key="kernel_pick").value == "flash_attention_fast"
    loop = loop_chart(at)  # 2 Q tiles in one block: Q tile 1 (the default) is its long part
    assert "Q tile 1 (queries 128–199, block (0, 0, 0)" in loop["layout"]["title"]["text"]
    assert len(loop["frames"]) == 4


# --- "break it": the teaching kernel with one invariant removed ----------------------------------


def break_chart(at: AppTest) -> dict:
    (fig,) = [f for t, f in charts(at).items() if t.startswith("Broken")]
    return fig


def test_break_it_toggle_runs_each_broken_build_and_shows_where_it_departs(flash_page):
    at = flash_page
    assert not [t for t in charts(at) if t.startswith("Broken")]  # off at first
    at.toggle(key="fa_break").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    fig = break_chart(at)
    title = fig["layout"]["title"]["text"]
    assert "drop the rescale of O" in title and "simulated" in title and "float64 numpy reference" in title
    n_rows = SMALL["seq_len"] * SMALL["heads"]
    errors, causes = array(fig["data"][0]["y"]), array(fig["data"][-1]["y"])
    assert len(errors) == len(causes) == n_rows
    # rows whose running max never grew after the first K/V tile are right, the others wrong
    assert (errors[causes == 0] < 1e-4).all() and (errors[causes > 0] > 1e-4).all()
    wrong = int((causes > 0).sum())
    assert f"{wrong} of {n_rows} rows wrong" in title
    assert any(f"{wrong:,} of {n_rows:,} query rows are wrong" in m.value for m in at.markdown)
    assert any("exp(m_old − m_new)" in m.value for m in at.markdown)
    assert at.query_params["fa_break"] == "1"

    at.radio(key="fa_break_variant").set_value("no_max").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="fa_break_scale_no_max").value == 30  # where the overflow shows
    fig = break_chart(at)
    assert "drop the max subtraction" in fig["layout"]["title"]["text"]
    scores = array(fig["data"][-1]["y"])
    assert (scores > 88.72).any()  # some rows pass ln(float32 max) ...
    overflowed = fig["data"][1]  # ... and are drawn as inf/NaN crosses
    assert overflowed["name"] == "inf/NaN" and len(array(overflowed["x"])) >= int((scores > 88.72).sum())
    assert any("ln(float32 max)" in m.value for m in at.markdown)

    at.number_input(key="fa_break_scale_no_max").set_value(1).run()  # small scores: no overflow
    fig = break_chart(at)
    assert "— 0 of" in fig["layout"]["title"]["text"] and len(fig["data"]) == 2  # no inf/NaN trace
    assert any("The teaching kernel on these same inputs" in m.value for m in at.markdown)


def test_break_it_from_a_link_and_a_bad_scale_is_refused_in_one_line():
    at = open_page(
        "flash_attention", **SMALL, fa_break=1, fa_break_variant="no_max", fa_break_scale_no_max=1000
    )
    assert at.number_input(key="fa_break_scale_no_max").value == 30
    assert any("1000 was ignored" in w.value and "no\\_max" in w.value for w in at.warning)  # escaped
    assert "drop the max subtraction" in break_chart(at)["layout"]["title"]["text"]


def test_a_broken_build_chosen_in_the_sidebar_shows_its_departure():
    at = open_page("flash_attention_no_rescale", **SMALL)
    assert not at.error
    assert any("deliberately broken build" in w.value for w in at.warning)
    assert break_chart(at)
    assert any("the first Q tile's rows" in m.value for m in at.markdown)  # its own "Try:"
    assert not any("watch the skipped tiles" in m.value for m in at.markdown)  # no tile loop drawn here
