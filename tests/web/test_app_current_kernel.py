"""The visitor's kernel as the current kernel: sidebar, URL and every page name it; links carry it."""

import base64
import io
import json
import re
import zlib

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app
from visualizer.web.current_kernel import (
    LINK_MAX_BYTES,
    LINK_MAX_CHARS,
    KernelLink,
    LinkError,
    decode_link,
    encode_link,
)

pytestmark = pytest.mark.usefixtures("visitor_runs_on_fastsim")  # tests/conftest.py: why

TOKEN = "test-key-" + "c" * 32  # the operator's key in these tests
PAGES = ["overview", "grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]


@pytest.fixture(autouse=True)
def _operator_key(monkeypatch):
    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)


def _app(query: dict | None = None, token: str | None = TOKEN) -> AppTest:
    """The app after a first visit with ``query`` (the operator's key too, unless ``token`` is None)."""
    return open_app(**(query or {"backend": "sim"}), **({"token": token} if token is not None else {}))


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def _ran_yours(example: str = "vector_add", accesses: bool = False, backend: str = "sim") -> AppTest:
    """A session that ran an example on the Your kernel page (the simulator, or ``backend``)."""
    at = _app({"backend": backend})
    at.switch_page("web/pages/your_kernel.py").run()
    if example != "vector_add":
        at.selectbox(key="uk_example").set_value(example).run()
    at.radio(key="uk_backend").set_value(backend)
    if accesses:
        at.checkbox(key="uk_accesses").check()
    _button(at, "Run your kernel").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert at.session_state["capture"].launch["user_kernel"]
    return at


def plain(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def sidebar_text(at) -> str:
    return " ".join(
        plain(str(e.value)).replace("**", "") for e in (*at.sidebar.markdown, *at.sidebar.caption)
    )


# -- the link format, on its own ------------------------------------------------------------------

STATE = KernelLink(
    source="from numba import cuda\n\n@cuda.jit\ndef k(a):\n    a[0] = 1\n",
    kernel="k",
    grid=(2,),
    block=(32,),
    args={"a": "zeros:float32:64"},
    reference=("a = a",),
    backend="sim",
)


def _pack(obj) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def test_a_link_round_trips_and_is_bounded():
    text = encode_link(STATE)
    assert text is not None and re.fullmatch(r"[A-Za-z0-9_-]+", text)
    assert decode_link(text) == STATE
    big = KernelLink(
        **{**STATE.__dict__, "source": "".join(f"# {i:08x} {i * 7919 % 10007}\n" for i in range(9000))}
    )
    assert encode_link(big) is None  # over LINK_MAX_CHARS packed: no link rather than a cut one


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "empty"),
        ("x" * (LINK_MAX_CHARS + 1), "the limit is"),
        ("abc$%^", "urlsafe base64"),
        ("AAAA", "does not unpack"),
        (_pack(b"\0" * (LINK_MAX_BYTES * 4)), "unpacks to more than"),  # a small link, a huge text
        (_pack(b"[" * 200_000), "does not unpack"),  # nesting deep enough to exhaust the parser
        (_pack({**STATE.as_json(), "v": 2}), "version"),
        (_pack({**STATE.as_json(), "run": True}), "field this app does not know"),
        (_pack({**STATE.as_json(), "kernel": "os.system"}), "not a Python identifier"),
        (_pack({**STATE.as_json(), "grid": [0]}), "whole number"),
        (_pack({**STATE.as_json(), "block": [1, 1, 1, 1]}), "1 to 3 numbers"),
        (_pack({**STATE.as_json(), "grid": [True]}), "whole number"),
        (_pack({**STATE.as_json(), "args": {"a": ["x"]}}), "not text"),
        (_pack({**STATE.as_json(), "args": {"a": "x" * 10_000}}), "over"),
        (_pack({**STATE.as_json(), "source": "#" * 210_000}), "source is over"),
        (_pack({**STATE.as_json(), "backend": "remote"}), "backend"),
        (_pack({**STATE.as_json(), "accesses": "yes"}), "true or false"),
        (_pack([1, 2]), "version"),
    ],
)
def test_a_hostile_link_is_refused_in_one_line(text, why):
    with pytest.raises(LinkError) as err:
        decode_link(text)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_bad_link_is_one_line_on_the_page_and_the_app_keeps_serving():
    at = _app({"page": "grid", "yk": _pack(b"\0" * (LINK_MAX_BYTES * 4))})
    errors = [plain(e.value) for e in at.error]
    assert any("The link's kernel was not loaded" in e and "unpacks to more than" in e for e in errors), (
        errors
    )
    assert "yk" not in at.query_params
    at.switch_page("web/pages/grid.py").run()  # the built-in kernels still run
    assert not at.exception and at.get("plotly_chart")


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_link_with_a_lone_surrogate_is_one_line_and_your_kernel_keeps_serving(token):
    """Issue 36: JSON's "\\ud800" in a shared link's source crashed Your kernel for whoever opened it."""
    text = _pack({**STATE.as_json(), "source": STATE.source + "# \ud800\n"})
    at = _app({"backend": "sim", "yk": text}, token=token)
    at.switch_page("web/pages/your_kernel.py").run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [plain(e.value) for e in at.error]
    assert any("The link's kernel was not loaded" in e and "lone surrogate" in e for e in errors), errors
    assert "yk" not in at.query_params
    assert "\ud800" not in at.text_area(key="uk_source").value  # the example, not the link's text


# -- the current kernel in the sidebar, the URL and the pages -------------------------------------


def test_after_your_run_the_sidebar_url_and_every_page_name_your_kernel():
    at = _ran_yours()
    for page in PAGES:
        at.switch_page(f"web/pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        side = sidebar_text(at)
        assert "Kernel: vector_add (yours)" in side, (page, side)
        assert not any(s.label == "Kernel" for s in at.sidebar.selectbox), page  # no built-in picker
        assert not [b for b in at.sidebar.button if b.label == "Run"], page
        assert "kernel" not in at.query_params and "n" not in at.query_params, (page, dict(at.query_params))
        assert decode_link(at.query_params["yk"]).kernel == "vector_add", page
        assert at.query_params["page"] == page
        named = [plain(c.value) for c in at.caption if plain(c.value).startswith("Kernel: ")]
        assert named and "vector_add (yours), from the Your kernel page" in named[0], (page, named)
    # the built-in kernel comes back only when asked for, and then it is named and linked
    at.sidebar.button(key="sidebar_builtin").click().run()
    assert not at.exception
    assert not at.session_state["capture"].launch.get("user_kernel")
    assert any(s.label == "Kernel" for s in at.sidebar.selectbox)
    assert "yk" not in at.query_params and at.query_params["kernel"] == "vector_add"


def test_scheduling_says_its_suggestion_is_a_built_in_kernel_instead_of_replacing_yours():
    at = _ran_yours()
    at.switch_page("web/pages/scheduling.py").run()
    assert not at.exception
    assert not [b for b in at.button if b.label.startswith("Run n=")]
    assert any("not your kernel, so there is no button" in plain(c.value) for c in at.caption)
    assert at.session_state["capture"].launch["user_kernel"]
    # the built-in kernel's own view keeps its button
    at.sidebar.button(key="sidebar_builtin").click().run()
    assert [b for b in at.button if b.label.startswith("Run n=")]


def test_examples_on_built_in_pages_say_they_replace_your_kernel():
    at = _ran_yours()
    at.switch_page("web/pages/flash_attention.py").run()
    assert any("in place of yours" in c.value for c in at.caption)


def test_shared_memory_draws_your_kernel_and_runs_it_n_times():
    """Shared memory takes the visitor's kernel (it used to offer only built-in examples): its shared
    requests' bank ways from its own recording, then its own launch run N times in its sandbox."""
    at = _ran_yours("reduction", accesses=True)
    at.switch_page("web/pages/shared_memory.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("in place of yours" in c.value for c in at.caption)  # no built-in example offered
    assert not [b for b in at.button if b.label.startswith("Load ")]
    assert any("shared requests recorded" in plain(c.value) for c in at.caption)
    assert at.get("plotly_chart")
    go = at.button(key="smem_yours_runs_go")
    go.click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    verdict = " ".join(plain(m.value) for m in at.markdown if "run" in m.value.lower())
    assert "runs" in verdict and "8" in verdict, verdict
    assert at.session_state["capture"].launch["user_kernel"]  # still the visitor's kernel
    kept = at.session_state["_visitor_reruns"]
    (runs_cap,) = kept.values()
    assert runs_cap.launch["kernel_name"] == "block_sum" and runs_cap.launch["runs"]["count"] == 8


def test_shared_memory_offers_to_record_your_kernel_first():
    at = _ran_yours("reduction")
    at.switch_page("web/pages/shared_memory.py").run()
    assert not at.exception
    assert any("not recorded when it ran" in plain(i.value) for i in at.info)
    at.button(key="smem_record_yours").click().run()
    assert at.session_state["page"] == "shared_memory"
    assert at.session_state["capture"].requests is not None and at.get("plotly_chart")


def test_memory_access_runs_your_kernel_n_times():
    at = _ran_yours(accesses=True)
    at.switch_page("web/pages/memory_access.py").run()
    assert not any("python -m visualizer capture --source" in plain(c.value) for c in at.caption)
    at.button(key="mem_yours_runs_go").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert any("gave one output" in plain(c.value) for c in at.caption)  # vector add has no race


# -- a shared link ---------------------------------------------------------------------------------


def test_a_shared_link_opens_the_same_kernel_and_runs_it_only_with_the_key():
    teacher = _ran_yours("matmul_tiled")
    teacher.switch_page("web/pages/grid.py").run()
    link = dict(teacher.query_params)
    assert "token" not in link and decode_link(link["yk"]).kernel == "matmul_tiled"
    # a student who may run code (opened the operator's link): it runs, and the linked page is shown
    student = _app(link)
    cap = student.session_state["capture"]
    assert cap.launch["kernel"] == "matmul_tiled (yours)" and cap.check["correct"]
    assert student.session_state["page"] == "grid" and student.get("plotly_chart")
    assert "matmul_tiled (yours)" in sidebar_text(student)
    assert student.query_params["yk"] == link["yk"]  # the same kernel, the same link
    # without the key: the form is filled, nothing runs, and the page says why
    stranger = _app(link, token=None)
    assert stranger.session_state["page"] == "your_kernel"
    assert "TILE = 16" in stranger.text_area(key="uk_source").value
    assert stranger.session_state["uk_grid"] == ",".join(str(g) for g in decode_link(link["yk"]).grid)
    assert "capture" not in stranger.session_state
    infos = [plain(i.value) for i in stranger.info]
    assert any("filled in below, not run" in i for i in infos), infos
    assert any("off for this browser session" in w.value for w in stranger.warning)  # and how to turn it on
    assert _button(stranger, "Run your kernel").disabled


@pytest.mark.parametrize("page", ["../../etc/passwd", "nope", "lessons"])
def test_a_link_naming_a_page_the_app_lacks_still_opens_its_kernel(page):
    link = {"backend": "sim", "page": page, "yk": encode_link(STATE)}
    at = _app(link)
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["capture"].launch["kernel"] == "k (yours)"
    assert at.session_state["page"] == ("lessons" if page == "lessons" else "your_kernel")


def test_a_link_with_an_upload_says_the_file_does_not_travel_and_runs_nothing():
    at = _app()
    at.switch_page("web/pages/your_kernel.py").run()
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float32))
    at.file_uploader[0].upload("mine.npy", buf.getvalue()).run()
    at.text_input(key="uk_arg_a").set_value("file:mine.npy")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.error, [e.value for e in at.error]
    at.switch_page("web/pages/grid.py").run()
    assert "Uploaded files cannot travel in a link" in sidebar_text(at) and "mine.npy" in sidebar_text(at)
    opened = _app(dict(at.query_params))
    assert "capture" not in opened.session_state  # not run: its argument needs a file
    assert any("upload mine.npy below" in plain(i.value) for i in opened.info)
    assert opened.session_state["uk_arg_a"] == "file:mine.npy"


# -- uploads kept, Memory access -------------------------------------------------------------------


def test_uploads_survive_page_switches():
    at = _app()
    at.switch_page("web/pages/your_kernel.py").run()
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.float32) * 3)
    at.file_uploader[0].upload("kept.npy", buf.getvalue()).run()
    at.switch_page("web/pages/grid.py").run()
    at.switch_page("web/pages/your_kernel.py").run()
    assert any("kept from before in this session: kept.npy" in plain(c.value) for c in at.caption)
    at.text_input(key="uk_arg_a").set_value("file:kept.npy")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.error, [e.value for e in at.error]
    np.testing.assert_array_equal(
        at.session_state["capture"].inputs["a"], np.arange(1000, dtype=np.float32) * 3
    )
    at.button(key="uk_forget_uploads").click().run()
    assert not any("kept from before" in plain(c.value) for c in at.caption)


def test_kept_uploads_stay_within_the_sessions_budget(monkeypatch):
    import streamlit as st

    from visualizer.web import current_kernel, uploads

    class Upload:
        def __init__(self, name, data):
            self.name, self.data = name, data

        def getvalue(self):
            return self.data

    def names(got):
        files, problem = got
        return [u.name for u in files], problem

    monkeypatch.setattr(uploads, "SESSION_UPLOAD_BYTES", 10)
    monkeypatch.setattr(uploads, "SESSION_UPLOAD_FILES", 3)
    st.session_state.pop("uk_kept_uploads", None)  # bare mode: a session state of its own
    kept = current_kernel.kept_uploads
    assert names(kept([Upload("a", b"1234"), Upload("b", b"12345")])) == (["a", "b"], None)
    assert names(kept(None)) == (["a", "b"], None)  # the page was left and back
    assert names(kept([Upload("c", b"123456")])) == (["c"], None)  # the oldest kept make room
    # over the budget in the uploader alone: one line, and none of it used or kept
    files, problem = names(kept([Upload("big", b"x" * 20)]))
    assert files == ["c"] and "not used" in problem and "\n" not in problem, problem
    files, problem = names(kept([Upload(f"f{i}", b"1") for i in range(4)]))
    assert files == ["c"] and "4 uploaded files" in problem
    st.session_state.pop("uk_kept_uploads", None)


def _memory_page_draws_yours(at, array: str):
    assert not at.exception, [e.value for e in at.exception]
    cap = at.session_state["capture"]
    assert cap.launch["user_kernel"] and cap.accesses is not None and len(cap.requests)
    assert not [s for s in at.selectbox if s.label == "kernel"]  # not the built-in kernels' picker
    assert any("your kernel as it ran" in plain(c.value) for c in at.caption)
    assert at.get("plotly_chart")
    shown = " ".join(str(h.proto.body) for h in at.get("html"))
    assert f"{array}[" in shown  # the visitor's own source line, highlighted


def test_memory_access_draws_your_recorded_accesses():
    at = _ran_yours(accesses=True)
    at.switch_page("web/pages/memory_access.py").run()
    _memory_page_draws_yours(at, "c")


def test_memory_access_offers_to_record_your_kernel_and_then_draws_it():
    at = _ran_yours()
    at.switch_page("web/pages/memory_access.py").run()
    assert not at.exception
    assert any("its loads and stores were not recorded" in plain(i.value) for i in at.info)
    assert not at.get("plotly_chart")
    at.button(key="mem_record_yours").click().run()
    assert at.session_state["page"] == "memory_access"
    _memory_page_draws_yours(at, "c")


def test_back_on_your_kernel_the_form_holds_the_current_kernel():
    at = _ran_yours("matmul_tiled")
    at.switch_page("web/pages/grid.py").run()
    at.switch_page("web/pages/your_kernel.py").run()
    assert not at.exception
    assert (
        "TILE = 16" in at.text_area(key="uk_source").value and at.session_state["uk_kernel"] == "matmul_tiled"
    )
    launch = at.session_state["capture"].launch
    assert at.session_state["uk_grid"] == ",".join(str(g) for g in launch["grid"] if g > 1)
    _button(at, "Run your kernel").click().run()  # the same kernel runs again, unchanged
    assert not at.error and at.session_state["capture"].launch["grid"] == launch["grid"]


@pytest.mark.gpu
def test_on_the_gpu_your_kernel_is_current_and_its_link_runs_it_there_again():
    at = _ran_yours("matmul_tiled", backend="gpu")
    cap = at.session_state["capture"]
    assert cap.measured and cap.launch["user_kernel"] and cap.check["correct"]
    for page in ("grid", "scheduling", "occupancy"):
        at.switch_page(f"web/pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert "Kernel: matmul_tiled (yours)" in sidebar_text(at) and "GPU" in sidebar_text(at), page
        assert not [b for b in at.button if b.label.startswith("Run n=")], page
    link = dict(at.query_params)
    assert decode_link(link["yk"]).backend == "gpu"
    opened = _app(link)
    again = opened.session_state["capture"]
    assert again.measured and again.launch["kernel"] == "matmul_tiled (yours)" and again.check["correct"]
    assert opened.session_state["page"] == "occupancy"
    np.testing.assert_array_equal(again.outputs["C"], cap.outputs["C"])


def test_compare_offers_your_kernel_and_an_edited_copy_of_it():
    """With the visitor's kernel current, Compare compares versions of it (it used to show a built-in
    pair silently); an edited copy without its loop barrier is said to race, before any speed."""
    at = _ran_yours("reduction", accesses=True)
    at.switch_page("web/pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="cmp_pair").value == "yours"
    assert at.selectbox(key="cmp_yours_b").value == "edited"
    key = next(t.key for t in at.text_area if t.key.startswith("cmp_yours_src_"))
    source = at.text_area(key=key).value
    assert "def block_sum" in source and not at.get("plotly_chart")  # nothing runs until asked
    loop_barrier = "        cuda.syncthreads()\n        s //= 2"
    assert loop_barrier in source
    at.text_area(key=key).set_value(source.replace(loop_barrier, "        s //= 2"))
    at.button(key="cmp_yours_go").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    said = next(plain(m.value) for m in at.main.markdown if m.value.startswith("- "))  # what changed
    lines = said.splitlines()
    b = at.session_state["_visitor_reruns"]
    (edited,) = [c for k, c in b.items() if k[1] == "B"]
    wrong = sum(o["mismatches"] for o in edited.check["outputs"].values())
    first = 1 if wrong else 0  # a wrong output is said first, then the hazards
    assert (not wrong) or lines[0].startswith("- B's output is wrong"), lines
    assert lines[first].startswith("- B has ") and " hazards" in lines[first], lines
    assert "CPU" not in said
    assert at.get("plotly_chart")
    # ptxas counted the visitor's kernel in its sandbox: the registers row shows the count occupancy used
    table = at.dataframe[0].value
    regs = table[table["what"].str.startswith("registers per thread")].iloc[0]
    assert regs.filter(like="A:").iloc[0] > 0 and regs["a_source"].endswith("in its sandbox)"), regs
    # a built-in pair, chosen by hand, says it is not the visitor's kernel
    at.selectbox(key="cmp_pair").set_value("transpose").run()
    assert any("built-in kernels, not yours" in plain(c.value) for c in at.caption)
