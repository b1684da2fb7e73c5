"""The Compare and Under the hood pages through the app's entrypoint (AppTest)."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")


def _app(**query):
    at = AppTest.from_file(ENTRY, default_timeout=600)
    for k, v in query.items():
        at.query_params[k] = v
    return at


def _text(at) -> str:
    """The page's markdown as a reader sees it (escapes and zero-width spaces of as_text removed)."""
    return "\n".join(m.value for m in at.main.markdown).replace("\\", "").replace("\u200b", "")


def test_compare_page_from_a_link():
    at = _app(
        page="compare", cmp_pair="transpose", cmp_backend="sim", kernel="vector_add", backend="sim"
    ).run()
    assert not at.exception, [e.value for e in at.exception]
    text = _text(at)
    assert "transpose_tiled: 32 → 4 sectors per global store request" in text, text
    assert "cmp_pair=transpose" in text and "page=compare" in text  # the link reproduces the pair
    assert at.get("plotly_chart")
    # on the simulator the headline is what it can count, its model named; never the simulation's CPU time
    changed = next(m.value for m in at.main.markdown if m.value.startswith("- ")).replace("\\", "")
    first = changed.splitlines()[0].replace("\u200b", "")
    assert first.startswith("- transpose_tiled: 4.50x faster (modelled time (memory traffic)"), first
    assert "CPU" not in changed and "slower" not in changed  # (no shipped set in the suite's page tests)
    assert not any("not recorded yet" in c.value for c in at.main.caption)  # the stale branch note
    table = next(d.value for d in at.main.dataframe if "what" in d.value.columns)
    branch = table[table["what"] == "branch efficiency"].iloc[0]
    assert branch.iloc[2] == 100.0 and branch.iloc[3] == 100.0  # A and B: counted by the SIMT lens


def test_compare_custom_pair_and_bad_parameters():
    at = _app(page="compare", cmp_pair="custom", cmp_a="strided_copy", cmp_b="strided_copy",
              cmp_a_params="n=1024 stride=32", cmp_b_params="n=1024 stride=1", cmp_backend="sim").run()  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    assert "stride=1: 32 → 4 sectors per global load request" in _text(at)
    at.text_input(key="cmp_b_params").set_value("stride=99 <script>").run()
    assert not at.exception
    assert len(at.main.error) == 1 and "Cannot run this pair" in at.main.error[0].value
    assert "<script>" not in at.main.error[0].value  # escaped: shown, never rendered


def test_under_the_hood_page():
    at = _app(
        page="under_the_hood", kernel="transpose_tiled", backend="sim", rows="64", cols="64", tile="32"
    ).run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.main.metric}
    assert metrics["shared memory"] == "4,096 B" and int(metrics["registers"]) > 0
    assert "occupancy" in metrics
    codes = "\n".join(c.value for c in at.main.code)
    assert "STS" in codes or "st.shared" in codes


def test_occupancy_page_counts_registers_with_ptxas():
    at = _app(page="occupancy", kernel="matmul_tiled", backend="sim", n="32", tile="16").run()
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="occ_ptxas").click().run()
    assert not at.exception
    assert any(
        "ptxas -v" in c.value
        and "sm_90" in c.value
        and "clean build" in c.value
        and "2,048 B static" in c.value
        for c in at.main.caption
    )


def test_overview_offers_the_chrome_trace():
    at = _app(kernel="matmul_tiled", backend="sim", n="20", tile="8").run()
    assert not at.exception
    assert "timeline.trace.json" in [b.label for b in at.get("download_button")]


def test_under_the_hood_shows_a_visitors_kernel_compiled_in_its_sandbox(monkeypatch):
    """After Run your kernel, Under the hood compiles the visitor's kernel (its module runs only in a
    fresh sandbox, with the visitor's permission) and lines the PTX up with the visitor's source."""
    from tests.conftest import open_app

    key = "compare-test-key-" + "k" * 32
    monkeypatch.setenv("VISUALIZER_TOKEN", key)
    at = open_app("your_kernel", backend="sim", token=key)
    at.radio(key="uk_backend").set_value("sim")
    next(b for b in at.button if b.label == "Run your kernel").click().run()
    assert any("matches the numpy reference" in s.value for s in at.success), [e.value for e in at.error]
    at.switch_page("web/pages/under_the_hood.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.main.error, [e.value for e in at.main.error]
    codes = "\n".join(c.value for c in at.main.code)
    assert "ld.global" in codes or "LDG" in codes, codes[:500]
    notes = " ".join(c.value for c in at.main.caption)
    assert "unknown kernel" not in notes and "were not recorded for your kernel" in notes, notes


def test_under_the_hood_refuses_a_visitors_kernel_without_the_key(monkeypatch):
    from tests.conftest import open_app

    key = "compare-test-key-" + "k" * 32
    monkeypatch.setenv("VISUALIZER_TOKEN", key)
    at = open_app("your_kernel", backend="sim", token=key)
    at.radio(key="uk_backend").set_value("sim")
    next(b for b in at.button if b.label == "Run your kernel").click().run()
    monkeypatch.setenv("VISUALIZER_ALLOW_USER_CODE", "0")  # the operator closed visitor code since
    at.switch_page("web/pages/under_the_hood.py").run()
    assert not at.exception
    (err,) = [e.value for e in at.main.error]
    assert "runs its code" in err and not at.main.code


def test_compare_lbm_layouts_counts_the_sectors_of_each():
    at = _app(
        page="compare", cmp_pair="lbm_layout", cmp_backend="sim", kernel="vector_add", backend="sim"
    ).run(timeout=600)
    assert not at.exception, [e.value for e in at.exception]
    text = _text(at)
    assert "lbm_soa" in text and "sectors per global load request" in text, text
    assert at.get("plotly_chart")


def test_compare_on_the_simulator_puts_the_shipped_h200_time_beside_the_modelled_one(monkeypatch):
    """A fresh clone with no GPU: the shipped recording's device time right after the modelled time, in the
    chart with its device and date, and the kernels' SASS counted; never the simulation's CPU time."""
    import json

    from visualizer.analysis import measured_set as ms
    from visualizer.engine.capture import ptx

    monkeypatch.delenv(ms.SET_ENV)
    the_set, why = ms.load_set(ms.SHIPPED_DIR)
    if the_set is None or not the_set.measured:
        pytest.skip(why or "the shipped set was recorded on the simulator")
    at = _app(page="compare", cmp_pair="transpose", cmp_backend="sim").run()
    assert not at.exception, [e.value for e in at.exception]
    changed = next(m.value for m in at.main.markdown if m.value.startswith("- "))
    lines = changed.replace("\\", "").replace("\u200b", "").splitlines()
    assert lines[0].startswith("- transpose_tiled: 4.50x faster (modelled time (memory traffic)"), lines
    assert "on the shipped recording (device time" in lines[1] and the_set.label() in lines[1], lines
    assert "the same launches" in lines[1] and not any("CPU" in x for x in lines)
    titles = [
        a["text"].replace("<br>", " ")
        for c in at.get("plotly_chart")
        for a in json.loads(c.proto.spec)["layout"].get("annotations", [])
    ]
    assert f"device time (µs, measured on H200, {the_set.date})" in titles, titles
    table = next(d.value for d in at.main.dataframe if "what" in d.value.columns)
    sass = table[table["what"].str.startswith("SASS instructions")].iloc[0]
    if ptx.tool("ptxas") and ptx.tool("nvdisasm"):
        assert sass.iloc[2] > 10 and sass.iloc[3] > 10, sass
