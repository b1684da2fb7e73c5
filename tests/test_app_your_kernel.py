"""The Your kernel page through the app's entrypoint: run a pasted kernel, then every page shows it."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from visualizer.userkernel.client import user_code_allowed

ENTRY = str(Path(__file__).resolve().parents[1] / "visualizer" / "app.py")
PAGES = ["overview", "grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]


def _your_kernel_page() -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=180)
    at.query_params["backend"] = "sim"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page("app_pages/your_kernel.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def test_example_runs_and_every_page_shows_the_users_capture():
    at = _your_kernel_page()
    at.selectbox(key="uk_example").set_value("matmul_tiled").run()
    assert "TILE = 16" in at.text_area(key="uk_source").value
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("`C` matches the numpy reference" in s.value for s in at.success)
    cap = at.session_state["capture"]
    assert cap.launch["kernel"] == "matmul_tiled (yours)" and cap.launch["user_kernel"]
    for page in PAGES:
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.session_state["capture"].launch["kernel"] == "matmul_tiled (yours)", page
        if page == "occupancy":  # its re-launch button points back here instead of at the catalog
            assert any("Your kernel: change its block" in c.value for c in at.caption)
    at.switch_page("app_pages/grid.py").run()
    assert at.get("plotly_chart"), "the grid page draws the user's kernel"


def test_uploaded_npy_is_an_argument(tmp_path):
    import io

    import numpy as np

    at = _your_kernel_page()
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float32))
    at.file_uploader[0].upload("mine.npy", buf.getvalue()).run()
    at.text_input(key="uk_arg_a").set_value("file:mine.npy")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cap = at.session_state["capture"]
    np.testing.assert_array_equal(cap.inputs["a"], np.arange(1000, dtype=np.float32))
    # a typed server path is refused: only uploads are read
    at.text_input(key="uk_arg_a").set_value("file:/etc/hostname.npy")
    _button(at, "Run your kernel").click().run()
    assert any("upload a .npy" in e.value for e in at.error)


def test_edited_kernel_with_a_bug_gives_one_line_and_the_page_keeps_working():
    at = _your_kernel_page()
    src = at.text_area(key="uk_source").value.replace("c[i] = a[i] + b[i]", "c[i + 1] = a[i] + b[i]")
    at.text_area(key="uk_source").set_value(src)
    at.text_input(key="uk_arg_c").set_value("zeros:float32:1000")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and "IndexError in thread" in errors[0] and "your_kernel.py line 8" in errors[0], errors
    # a syntax error is shown without running anything, and Run is disabled
    at.text_area(key="uk_source").set_value(src.replace("if i < c.size:", "if i < c.size")).run()
    assert any("syntax error in your_kernel.py line 7" in e.value for e in at.error)
    assert _button(at, "Run your kernel").disabled


def test_a_failed_run_marks_the_results_below_it_as_the_previous_runs():
    at = _your_kernel_page()
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert [s.value for s in at.success if "matches the numpy reference" in s.value]
    assert not any(s.value.startswith("Previous run") for s in at.success)
    src = at.text_area(key="uk_source").value.replace("c[i] = a[i] + b[i]", "c[i + 1] = a[i] + b[i]")
    at.text_area(key="uk_source").set_value(src)
    at.text_input(key="uk_arg_c").set_value("zeros:float32:1000")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and any("IndexError in thread" in e.value for e in at.error)
    greens = [s.value for s in at.success if "matches the numpy reference" in s.value]
    assert greens and all(g.startswith("Previous run: ") for g in greens), greens
    assert any(h.value.startswith("Your previous run: ") for h in at.subheader)
    assert any("Of your previous run" in c.value for c in at.sidebar.caption)  # its timing too


def test_user_code_is_on_only_for_localhost_unless_the_operator_says_so():
    assert user_code_allowed("localhost", env={})[0]
    assert user_code_allowed("127.0.0.1", env={})[0]
    off, why = user_code_allowed("0.0.0.0", env={})
    assert not off and "VISUALIZER_ALLOW_USER_CODE=1" in why
    assert not user_code_allowed(None, env={})[0]
    assert user_code_allowed("0.0.0.0", env={"VISUALIZER_ALLOW_USER_CODE": "1"})[0]
    assert not user_code_allowed("localhost", env={"VISUALIZER_ALLOW_USER_CODE": "0"})[0]


@pytest.mark.parametrize("address", ["0.0.0.0"])
def test_page_says_how_to_enable_when_off(address, monkeypatch):
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)
    at = AppTest.from_file(ENTRY, default_timeout=180)
    at.query_params["backend"] = "sim"
    at.run()
    from streamlit import config

    old = config.get_option("server.address")
    config.set_option("server.address", address)
    try:
        at.switch_page("app_pages/your_kernel.py").run()
    finally:
        config.set_option("server.address", old)
    assert not at.exception
    assert any("VISUALIZER_ALLOW_USER_CODE=1" in w.value for w in at.warning)
    assert _button(at, "Run your kernel").disabled
