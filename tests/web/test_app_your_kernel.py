"""The Your kernel page through the app's entrypoint: run a pasted kernel, then every page shows it."""

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.usefixtures("visitor_runs_on_fastsim")  # tests/conftest.py: why

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")
TOKEN = "test-key-" + "k" * 32  # the operator's key in these tests (serve makes a random one)
PAGES = ["overview", "grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]


@pytest.fixture(autouse=True)
def _operator_key(monkeypatch):
    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)


def _your_kernel_page(token: str | None = TOKEN) -> AppTest:
    """The Your kernel page in a session that opened the operator's link (``?token=``) unless None."""
    at = AppTest.from_file(ENTRY, default_timeout=600)
    at.query_params["backend"] = "sim"
    if token is not None:
        at.query_params["token"] = token
        at.run()  # the key is judged and taken out of the browser's history; nothing else is drawn
        assert not at.exception, [e.value for e in at.exception]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page("web/pages/your_kernel.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def plain(text: str) -> str:
    """What a reader sees of an escaped message: escapes resolved, zero-width spaces gone."""
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def rendered_markup(text: str) -> list[str]:
    return re.findall(r"(?<!\\)[\[\]()<>*`!:$]", text)


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
        at.switch_page(f"web/pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.session_state["capture"].launch["kernel"] == "matmul_tiled (yours)", page
        if page == "occupancy":  # its re-launch button points back here instead of at the catalog
            assert any("Your kernel: change its block" in c.value for c in at.caption)
    at.switch_page("web/pages/grid.py").run()
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
    assert any("upload a .npy" in plain(e.value) for e in at.error)


def test_under_the_hood_compiles_a_kernel_fed_from_an_uploaded_npy():
    """Issue 39: the compile request carried the uploaded array into JSON ("Object of type ndarray is
    not JSON serializable"); the array is typed by its dtype and shape (float64 here)."""
    import io

    import numpy as np

    at = _your_kernel_page()
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float64))
    at.file_uploader[0].upload("mine.npy", buf.getvalue()).run()
    at.text_input(key="uk_arg_a").set_value("file:mine.npy")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.switch_page("web/pages/under_the_hood.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.main.error, [e.value for e in at.main.error]
    codes = "\n".join(c.value for c in at.main.code)
    assert "ld.global.f64" in codes or "LDG.E.64" in codes, codes[:500]


def test_edited_kernel_with_a_bug_gives_one_line_and_the_page_keeps_working():
    at = _your_kernel_page()
    src = at.text_area(key="uk_source").value.replace("c[i] = a[i] + b[i]", "c[i + 1] = a[i] + b[i]")
    at.text_area(key="uk_source").set_value(src)
    at.text_input(key="uk_arg_c").set_value("zeros:float32:1000")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception
    errors = [plain(e.value) for e in at.error]
    assert errors and "IndexError in thread" in errors[0] and "your_kernel.py line 8" in errors[0], errors
    # a syntax error is shown without running anything, and Run is disabled
    at.text_area(key="uk_source").set_value(src.replace("if i < c.size:", "if i < c.size")).run()
    assert any("syntax error in your_kernel.py line 7" in plain(e.value) for e in at.error)
    assert _button(at, "Run your kernel").disabled


def test_the_run_that_finds_the_key_draws_nothing_but_the_history_scrubber():
    """Issue 36: the key's history entry must be replaced before anything else renders (each URL
    write of a page pushes an entry, and the key's would stay behind it). In a browser, the scrubber
    replaces the entry and asks for the next run (tests/e2e/test_key_history_browser.py)."""
    at = AppTest.from_file(ENTRY, default_timeout=600)
    at.query_params.update(backend="sim", token=TOKEN)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    main = [e for e in at.main if getattr(e, "type", None) != "bidi_component"]
    assert not at.title and not at.sidebar.children and len(at.main.children) <= 1, main
    assert at.query_params["token"] == TOKEN  # untouched by the server: no URL write before the scrub


def test_the_link_with_the_key_turns_code_on_and_leaves_the_url():
    at = _your_kernel_page()
    assert "token" not in at.query_params  # a link copied from the address bar does not carry it
    assert not at.warning, [w.value for w in at.warning]
    assert not _button(at, "Run your kernel").disabled
    at.switch_page("web/pages/grid.py").run()
    at.switch_page("web/pages/your_kernel.py").run()  # remembered in the session
    assert not _button(at, "Run your kernel").disabled


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


@pytest.mark.parametrize("token", [None, TOKEN[:-1], "www.evil.example"])
def test_without_the_key_the_page_says_how_and_runs_nothing(token):
    at = _your_kernel_page(token)
    warnings = " ".join(w.value for w in at.warning)
    assert "?token=" in warnings and "python -m visualizer serve" in warnings, warnings
    if token is not None:  # the page the link opened said so, and the key left the URL
        first = AppTest.from_file(ENTRY, default_timeout=600)
        first.query_params["token"] = token
        first.run().run()  # judged, then the page
        assert (
            any("not this server's" in w.value for w in first.warning) and "token" not in first.query_params
        )
    assert _button(at, "Run your kernel").disabled
    # the button's state is a hint to the browser; the server checks again when a click arrives
    forced = _button(at, "Run your kernel")
    forced.proto.disabled = False  # what a hand-made client could send
    forced.click().run()
    assert (
        not at.exception
        and "capture" not in at.session_state
        or not at.session_state["capture"].launch.get("user_kernel")
    )


def test_the_server_checks_the_key_again_when_run_is_clicked(monkeypatch):
    monkeypatch.setenv("VISUALIZER_ALLOW_USER_CODE", "1")
    at = _your_kernel_page(token=None)
    button = _button(at, "Run your kernel")
    assert not button.disabled
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE")  # between the page being drawn and the click
    button.click().run()  # Streamlit drops a click on a button drawn disabled; the page checks too
    assert not at.exception and any("off" in w.value for w in at.warning)
    assert "capture" not in at.session_state or not at.session_state["capture"].launch.get("user_kernel")


def test_plain_streamlit_run_without_a_key_has_code_off_and_says_how(monkeypatch):
    monkeypatch.delenv("VISUALIZER_TOKEN")
    at = _your_kernel_page(token=None)
    warnings = " ".join(w.value for w in at.warning)
    assert "started without a key" in warnings and "VISUALIZER_ALLOW_USER_CODE=1" in warnings, warnings
    assert _button(at, "Run your kernel").disabled
    at = _your_kernel_page(token="anything-at-all-long-enough")  # no key configured: no key matches
    assert _button(at, "Run your kernel").disabled


def test_the_operator_can_open_code_to_everyone_or_close_it(monkeypatch):
    monkeypatch.setenv("VISUALIZER_ALLOW_USER_CODE", "1")
    assert not _button(_your_kernel_page(token=None), "Run your kernel").disabled
    monkeypatch.setenv("VISUALIZER_ALLOW_USER_CODE", "0")
    at = _your_kernel_page()  # even with the key
    assert _button(at, "Run your kernel").disabled
    assert any("turned it off" in w.value for w in at.warning)


@pytest.mark.parametrize(
    "text", ["www.evil.example", "a@evil.example", "http://evil.example", "[x](http://e.x)"]
)
def test_errors_that_quote_the_visitors_text_link_nothing(text):
    at = _your_kernel_page()
    at.text_input(key="uk_arg_a").set_value(text)
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    (error,) = [e.value for e in at.error]
    assert text in plain(error), error  # shown, character for character...
    assert rendered_markup(error) == [] and not re.search(r"www\.|\w@\w|:/", error)  # ...as text


def test_an_upload_named_like_an_address_is_never_a_link_on_any_page():
    import io

    import numpy as np

    at = _your_kernel_page()
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float32))
    at.file_uploader[0].upload("www.evil.example.npy", buf.getvalue()).run()
    at.text_input(key="uk_arg_a").set_value("file:www.evil.example.npy")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert at.session_state["capture"].launch["params"]["a"] == "file:www.evil.example.npy"
    for page in ("grid", "overview"):
        at.switch_page(f"web/pages/{page}.py").run()
        shown = [
            str(e.value)
            for e in (
                *at.markdown,
                *at.caption,
                *at.warning,
                *at.error,
                *at.sidebar.markdown,
                *at.sidebar.caption,
            )
        ]
        assert any("www.evil.example.npy" in plain(t) for t in shown), page  # it is shown...
        assert not [t for t in shown if re.search(r"www\.", t)], page  # ...and never as an address


# -- uploads: only where code may run, within the session's budget (issue 36) --------------------


def _npy(values) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.asarray(values, dtype=np.float32))
    return buf.getvalue()


def test_a_session_without_the_key_gets_no_uploader():
    at = _your_kernel_page(token=None)
    assert not at.get("file_uploader"), "an upload is read only by a run: no uploader where nothing runs"
    assert any("Uploading `.npy` arrays comes with running your own code" in c.value for c in at.caption)
    assert _your_kernel_page().get("file_uploader")  # the key: the uploader is there


def test_a_keyed_session_over_its_upload_budget_gets_one_line():
    from visualizer.web.uploads import SESSION_UPLOAD_FILES

    at = _your_kernel_page()
    uploader = at.file_uploader[0]
    for i in range(SESSION_UPLOAD_FILES + 1):
        uploader.upload(f"a{i}.npy", _npy([i]))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [plain(e.value) for e in at.error]
    assert (
        len(errors) == 1
        and "not used" in errors[0]
        and f"{SESSION_UPLOAD_FILES + 1} uploaded files" in errors[0]
    )
    assert "\n" not in errors[0]
    assert not at.session_state["uk_kept_uploads"]  # nothing of it kept for the session


def test_a_source_without_a_kernel_says_why_run_is_greyed_out():
    at = _your_kernel_page()
    at.text_area(key="uk_source").set_value(
        "import numpy as np\n\n\ndef add(a, b, c):\n    c[0] = a[0] + b[0]\n"
    )
    at.run()
    assert not at.exception
    assert _button(at, "Run your kernel").disabled
    assert any("no function decorated with `@cuda.jit`" in c.value for c in at.caption), [
        c.value for c in at.caption
    ]


def test_a_pasted_kernel_does_not_inherit_the_examples_reference():
    """A new user pastes their own kernel over the example: the example's `c = a + b` would fail their run."""
    at = _your_kernel_page()
    assert at.text_area(key="uk_reference").value == "c = a + b"
    src = "from numba import cuda\n\n\n@cuda.jit\ndef saxpy(a, x, out):\n    i = cuda.grid(1)\n    if i < out.size:\n        out[i] = a * x[i]\n"
    at.text_area(key="uk_source").set_value(src).run()
    assert not at.exception
    assert at.text_area(key="uk_reference").value == ""
    assert any("reference was cleared" in c.value for c in at.caption)
    at.text_input(key="uk_arg_a").set_value("2.0")
    at.text_input(key="uk_arg_x").set_value("ones:float32:1000")
    at.text_input(key="uk_arg_out").set_value("zeros:float32:1000")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]


def test_a_kernel_no_gpu_compiles_is_refused_on_the_simulator_naming_its_line():
    """The simulator types nothing; the kernel is compiled for a GPU first (engine/capture/ptx.gpu_check)."""
    at = _your_kernel_page()
    src = at.text_area(key="uk_source").value
    src = src.replace("from numba import cuda\n", "from numba import cuda, float32\n\nW = 4\n").replace(
        "    i = cuda.grid(1)\n", "    pad = cuda.shared.array((W, W + 1), float32)\n    i = cuda.grid(1)\n"
    )
    at.text_area(key="uk_source").set_value(src)
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [plain(e.value) for e in at.error]
    assert any(
        "a GPU cannot compile vector_add: typing error at your_kernel.py line 8: "
        "pad = cuda.shared.array((W, W + 1), float32)" in e
        for e in errors
    ), errors
    assert not any("matches the numpy reference" in s.value for s in at.success)
