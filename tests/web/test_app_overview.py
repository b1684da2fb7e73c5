"""The app through its entrypoint: first visit runs the URL's kernel; bad links and launches say why."""

from pathlib import Path

from tests.conftest import new_app

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")


def _app(**query):
    return new_app(**query)


def test_first_visit_runs_and_badges_the_backend():
    at = _app(kernel="vector_add", backend="sim", n="100", block="32").run()
    assert not at.exception, [e.value for e in at.exception]
    badges = " ".join(m.value for m in at.sidebar.markdown)
    assert "CUDA simulator on CPU" in badges
    assert any("matches the numpy reference" in s.value for s in at.success)
    assert at.query_params["kernel"] == ["vector_add"] or at.query_params["kernel"] == "vector_add"


def test_malformed_link_falls_back_with_error():
    at = _app(kernel="vector_add", backend="sim", block="banana").run()
    assert not at.exception
    assert any("Bad link" in e.value and "integer" in e.value for e in at.main.error)
    at = _app(kernel="no_such_kernel").run()
    assert not at.exception
    assert any("unknown kernel" in e.value for e in at.main.error)


def test_impossible_launch_shows_error_not_traceback():
    at = _app(kernel="vector_add", backend="sim", n="100", block="0").run()
    assert not at.exception
    assert any("at least 1" in e.value for e in at.main.error)
    # past the compiled engine's thread limit (2^26; fastsim's 2^19 holds only where fastsim runs)
    at = _app(kernel="vector_add", backend="sim", n="70000000", block="256").run()
    assert not at.exception
    assert any("simulator" in e.value for e in at.main.error)


def test_run_button_relaunches_with_new_params():
    at = _app(kernel="vector_add", backend="sim", n="100", block="32").run()
    at.number_input(key="param_vector_add_n").set_value(70).run()  # not run before: Run asked for
    assert at.session_state.capture.launch["params"]["n"] == 100
    assert any("Press **Run**" in w.value for w in at.main.warning)
    at.sidebar.button[0].click().run()
    assert not at.exception
    assert at.session_state.capture.launch["params"]["n"] == 70


def test_exports_tables_and_figures():
    at = _app(kernel="matmul_tiled", backend="sim", n="20", tile="8").run()
    labels = [b.label for b in at.get("download_button")]
    assert {"threads.csv", "threads.parquet", "tiles.csv", "tiles.parquet"} <= set(labels), labels
    at.switch_page("web/pages/grid.py").run()
    assert not at.exception
    assert "Download figure (HTML)" in [b.label for b in at.get("download_button")]


def test_block_is_a_slider_and_a_link_past_its_range_still_explains_itself():
    at = _app(kernel="vector_add", backend="sim", n="100", block="48").run()
    assert at.slider(key="param_vector_add_block").value == 48
    at.slider(key="param_vector_add_block").set_value(64)
    at.sidebar.button[0].click().run()
    assert at.session_state.capture.launch["params"]["block"] == 64
    at = _app(kernel="vector_add", backend="sim", n="100", block="2048").run()
    assert not at.exception
    assert any("1024" in e.value for e in at.main.error)


def test_unrun_parameters_are_named_and_a_configuration_run_before_shows_at_once():
    at = _app(kernel="vector_add", backend="sim", n="100", block="32").run()
    at.number_input(key="param_vector_add_n").set_value(64).run()
    assert at.session_state.capture.launch["params"]["n"] == 100  # a new launch waits for Run...
    notice = next(w.value for w in at.main.warning)
    assert "n=64" in notice and "still the previous run" in notice  # ...and the page says so
    at.button(key="main_run").click().run()  # a Run button where the reader is looking
    assert at.session_state.capture.launch["params"]["n"] == 64
    assert not at.main.warning
    at.number_input(key="param_vector_add_n").set_value(100).run()  # ran before: shown without Run
    assert at.session_state.capture.launch["params"]["n"] == 100
    assert not at.main.warning
    assert at.query_params["n"] in ("100", ["100"])  # and the link follows


def test_a_failed_run_replaces_the_charts_with_its_error():
    at = _app(kernel="vector_add", backend="sim", n="100", block="32").run()
    at.switch_page("web/pages/grid.py").run()
    assert at.get("plotly_chart")
    at.number_input(key="param_vector_add_n").set_value(70_000_000)  # over the compiled engine's limit
    at.sidebar.button(key="sidebar_run").click().run()
    assert any("did not run" in e.value and "67,108,864" in e.value for e in at.main.error), at.main.error
    assert not at.get("plotly_chart")  # no chart of the previous run under the new configuration


def test_deliberately_wrong_demos_say_which_and_why():
    at = _app(kernel="reduction_race", backend="sim", n="256", block="64").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(
        "syncthreads between tree levels" in w.value and "Shared memory" in w.value for w in at.warning
    )
    at = _app(kernel="flash_attention_no_max", backend="sim", seq_len="40", heads="1", head_dim="16").run()
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if "deliberately wrong demo" in w.value]
    assert "overflows float32" in warning and "FlashAttention" in warning and "race" not in warning
