"""The sidebar's kernel controls (kernel, backend, parameters, Run, timing) only where a page uses them."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")


def open_app(**query) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=600)
    for k, v in {"kernel": "vector_add", "backend": "sim", "n": "200", "block": "48", **query}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if "token" in query:  # that run only judged the key (web/guard.py take_token): now the page
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def kernel_controls(at: AppTest) -> dict:
    """What of the kernel controls the sidebar draws (the page list is always there)."""
    side = at.sidebar
    return {
        "kernel": any(s.key == "kernel_pick" for s in side.selectbox),
        "backend": any(r.key == "backend_pick" for r in side.radio),
        "params": any(str(w.key).startswith("param_") for w in (*side.slider, *side.number_input)),
        "run": any(b.key == "sidebar_run" for b in side.button),
        "timing": any("Timing" in m.value for m in side.markdown),
    }


@pytest.mark.parametrize("page", ["lessons", "your_kernel"])
def test_pages_with_their_own_launch_have_no_kernel_controls(page):
    at = open_app(page=page)
    assert not any(kernel_controls(at).values()), kernel_controls(at)
    assert at.sidebar.radio(key="_nav_pages") is not None  # the page list stays
    assert "capture" not in at.session_state  # nothing ran for a sidebar that is not there
    at.radio(key="_nav_pages").set_value("grid").run()  # a page that uses them: drawn, and run
    assert not at.exception, [e.value for e in at.exception]
    assert all(kernel_controls(at).values()), kernel_controls(at)
    assert at.session_state.capture.launch["params"] == {"n": 200, "block": 48}
    assert at.get("plotly_chart")


@pytest.mark.parametrize("page", ["overview", "grid", "memory_access", "occupancy"])
def test_pages_that_use_the_sidebars_kernel_show_its_controls(page):
    at = open_app(page=page)
    assert all(kernel_controls(at).values()), kernel_controls(at)


def test_your_kernels_capture_is_kept_and_timed_when_it_is_the_first_page(monkeypatch):
    monkeypatch.setenv("VISUALIZER_TOKEN", "sidebar-test-key-0123456789")  # the operator's key...
    at = open_app(page="your_kernel", token="sidebar-test-key-0123456789")  # ...in the link
    at.radio(key="uk_backend").set_value("sim")
    next(b for b in at.button if b.label == "Run your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state.capture.launch["user_kernel"]
    assert kernel_controls(at)["timing"]  # the visitor's own kernel is timed here
    at.radio(key="_nav_pages").set_value("grid").run()
    assert at.session_state.capture.launch["user_kernel"]  # not replaced by the sidebar's first run


def test_block_slider_starts_at_one_and_the_capture_is_named_in_words():
    at = open_app(page="grid")
    block = at.sidebar.slider(key="param_vector_add_block")
    assert block.min == 1 and block.value == 48
    captions = [c.value for c in at.sidebar.caption]
    assert "showing: vector_add (n=200, block=48)" in captions, captions
    assert not any("{" in c for c in captions)  # no raw dict
    zero = open_app(page="grid", block="0")  # a link may still ask for zero threads: a box, and its error
    assert zero.sidebar.number_input(key="param_vector_add_block").value == 0
    assert any("at least 1" in e.value for e in zero.main.error)


def test_the_sidebar_says_which_simulator_engine_ran():
    """One short caption under the backend badge: the compiled engine (the default), or fastsim and why."""
    from visualizer.web.session import engine_caption

    at = open_app(page="grid")
    said = " ".join(m.value for m in at.sidebar.markdown)
    assert "Engine: compiled (the kernel compiled for the CPU)." in said
    assert at.session_state.capture.launch["sim_engine"] == "compiled"
    note = "the accesses lens is not on the compiled engine yet"
    assert engine_caption({"sim_engine": "fastsim", "sim_engine_note": note}) == f"Engine: fastsim ({note})."
