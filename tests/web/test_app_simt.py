"""The SIMT lens page through the app's entrypoint, on the simulator: a built-in kernel's lanes per warp
(the page runs the lens when the current capture has none), the link that reproduces the view."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app
from visualizer.figures import branches as bfigs


def _charts(at: AppTest) -> dict[str, dict]:
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[spec["layout"]["title"]["text"]] = spec
    return out


def _numbers(at: AppTest) -> str:
    """The line of numbers above the lane strip."""
    return next(m.value for m in at.markdown if m.value.startswith("Branch efficiency"))


def _strip(spec: dict) -> np.ndarray:
    """The lane strip's states, one row per branch line."""
    z = spec["data"][0]["z"]
    return np.frombuffer(base64.b64decode(z["bdata"]), np.int8).reshape(-1, 32)


def _link(at: AppTest, key: str) -> str:
    value = at.query_params[key]
    return value[0] if isinstance(value, list) else value


@pytest.fixture(scope="module")
def lanes_page() -> AppTest:
    return open_app(
        "simt", kernel="branch_lanes", backend="sim", n="512", reps="4", block="128", simt_warp="2"
    )


def test_lanes_page_shows_the_divergent_warp_and_says_it_is_modelled(lanes_page):
    at = lanes_page
    assert not at.exception
    # 16 warps, each diverges once at the parity test among 2 + 2 x (4 + 1) visits
    assert f"Branch efficiency **{100 * (1 - 1 / 12):.1f}%** (modelled)" in _numbers(at)
    assert "**16 of 16** warps diverged" in _numbers(at)
    ((title, spec),) = _charts(at).items()
    assert title.startswith("Block 0, warp 2, which lanes took each branch (visit 0 of visits 0-4)")
    assert "modelled (structured SIMT reconvergence" in title
    z0 = _strip(spec)  # visit 0: the guard, the parity test, side A's loop, side B's loop
    taken, not_taken, not_reached = bfigs.TAKEN, bfigs.NOT_TAKEN, bfigs.NOT_REACHED
    assert (z0[0] == taken).all()
    assert z0[1].tolist() == [taken, not_taken] * 16
    assert z0[2].tolist() == [taken, not_reached] * 16 and z0[3].tolist() == [not_reached, taken] * 16
    assert at.slider(key="simt_visit").max == 4  # each loop: 4 tests true, the last false
    assert _link(at, "simt_warp") == "2" and _link(at, "simt_visit") == "0"
    # the barrier tab says why there is no timeline here
    assert any("Not offered on the simulator" in i.value for i in at.info)


def test_a_link_reproduces_the_chosen_block_warp_visit_and_tab():
    """A copied link opens the same strip: block, warp, the visit on the slider, the open tab."""
    at = open_app(
        "simt", kernel="branch_lanes", backend="sim", n="512", reps="4", block="128",
        simt_block="2", simt_warp="1", simt_visit="3", simt_view="barriers",
    )  # fmt: skip
    assert not at.exception
    ((title, spec),) = _charts(at).items()
    assert title.startswith("Block 2, warp 1, which lanes took each branch (visit 3 of visits 0-4)")
    z = _strip(spec)  # visit 3: the guard and the parity test have only a visit 0; each loop its 4th test
    taken, not_reached, none = bfigs.TAKEN, bfigs.NOT_REACHED, bfigs.NO_VISIT
    assert (z[0] == none).all() and (z[1] == none).all()
    assert z[2].tolist() == [taken, not_reached] * 16 and z[3].tolist() == [not_reached, taken] * 16
    assert at.slider(key="simt_visit").value == 3
    assert at.session_state["_simt_tab"] == "Barriers: who waited"  # the tab the link named is open
    assert [_link(at, k) for k in ("simt_block", "simt_warp", "simt_visit", "simt_view")] == [
        "2", "1", "3", "barriers"
    ]  # fmt: skip
    at.slider(key="simt_visit").set_value(4).run()  # moving the slider moves the link
    assert _link(at, "simt_visit") == "4" and "(visit 4 of visits 0-4)" in next(iter(_charts(at)))


def test_a_bad_link_value_is_a_notice_not_a_crash():
    at = open_app("simt", kernel="branch_warps", backend="sim", n="256", reps="2", block="64", simt_warp="9")
    assert not at.exception
    assert any(
        "was ignored" in w.value and "simt" in w.value for w in at.warning
    )  # text escaped for markdown
    assert "Branch efficiency **100.0%**" in _numbers(at)
    table = next(d for d in at.dataframe if "jumps" in d.value.columns).value  # the SASS beside it
    assert table.loc[table["branch"] == "if i < n:", "jumps"].tolist() == [0]  # predicated: an EXIT


@pytest.mark.gpu
def test_gpu_page_draws_measured_lanes_and_the_barrier_timeline():
    at = open_app("simt", kernel="reduction", backend="gpu", n="65536", block="256", simt_bar_block="3")
    assert not at.exception
    titles = list(_charts(at))
    assert len(titles) == 2 and all("measured (GPU)" in t for t in titles), titles
    assert any(t.startswith("Block 3: each warp's work and its wait at each syncthreads") for t in titles)
    assert "(measured)" in _numbers(at) and "**256 of 2,048** warps diverged" in _numbers(at)  # warp 0s


def test_a_visitors_kernel_gets_the_lens_from_the_page(monkeypatch):
    """Your kernel runs the example reduction; the SIMT page offers to run it again with the lens (in
    a sandbox of its own) and then draws its warps' visits."""
    from tests.web.test_app_your_kernel import TOKEN, _button, _your_kernel_page

    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)
    at = _your_kernel_page()
    at.selectbox(key="uk_example").set_value("reduction").run()
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and at.session_state["capture"].launch["user_kernel"]
    at.switch_page("web/pages/simt.py").run()
    assert not at.exception, [e.value for e in at.exception]
    _button(at, "Record which lanes take each branch of your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [b for b in at.button if b.label.startswith("Record which lanes")]  # it recorded: no offer
    ((title, spec),) = _charts(at).items()
    assert title.startswith(
        "Block 0, warp 0, which lanes took each branch (visit 0 of visits 0-8)"
    )  # 9 tests
    # the SASS beside the visitor's kernel too (compiled in its sandbox): the tree's test jumps
    table = next(d for d in at.dataframe if "jumps" in d.value.columns).value
    assert table.loc[table["branch"] == "if tid < s:", "jumps"].iloc[0] > 0
    assert any(
        c.value.startswith("As Nsight Compute counts it (SASS branches; from the modelled visits")
        for c in at.caption
    )
    # warp 0 of each block at strides 16..1, and warp 6 of block 7 at `if i < x.shape[0]` (2000 elements)
    assert "**9 of 64** warps diverged" in _numbers(at)
    at.switch_page("web/pages/simt.py").run()  # the lens's capture is kept: no second run, no button
    assert not [b for b in at.button if b.label.startswith("Record which lanes")] and _charts(at)


def test_a_lane_dependent_loop_shows_ncus_count_and_says_why_the_backends_part(monkeypatch):
    """`for k in range(threadIdx.x % 32)` (issue 39): the page's source-level number is the simulator's
    model, 3.1 %; as Nsight Compute counts it, the loop ptxas unrolled by 4 runs 13 jumps per warp, 2
    uniform (15.4 %, ncu's 15.38 % on the H200), and the page says why a GPU's source-level number parts."""
    import sys
    from pathlib import Path

    from tests.web.test_app_your_kernel import TOKEN, _button, _your_kernel_page

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from branch_cases import LANE_LOOP

    from visualizer.engine.capture import ptx

    if not (ptx.tool("ptxas") and ptx.tool("nvdisasm")):
        pytest.skip("ptxas / nvdisasm not installed here")
    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)
    at = _your_kernel_page()
    at.text_area(key="uk_source").set_value(LANE_LOOP).run()
    at.radio(key="uk_mode").set_value(at.radio(key="uk_mode").options[1]).run()
    at.text_input(key="uk_block").set_value("128")
    at.text_input(key="uk_grid").set_value("2")
    at.text_input(key="uk_arg_x").set_value("rand:float32:256")
    at.text_input(key="uk_arg_out").set_value("zeros:float32:256")
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.switch_page("web/pages/simt.py").run()
    _button(at, "Record which lanes take each branch of your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert _numbers(at).startswith("Branch efficiency **3.1%** (modelled)")
    caption = next(c.value for c in at.caption if c.value.startswith("As Nsight Compute counts it"))
    assert "**15.4%**, over the 104 conditional jumps" in caption, caption
    assert "ptxas unrolled line 8's loop by 4 with a remainder loop" in caption
    assert "the two source-level numbers part on that line" in caption


def test_a_session_whose_key_was_withdrawn_starts_no_sandbox_on_the_page(monkeypatch):
    """The operator changed the key after this session ran its kernel: the SIMT page offers no run
    (user_code_allowed answers (allowed, why); a tuple is always true, so the old check let it run)."""
    from tests.web.test_app_your_kernel import TOKEN, _button, _your_kernel_page

    monkeypatch.setenv("VISUALIZER_TOKEN", TOKEN)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)
    at = _your_kernel_page()
    at.selectbox(key="uk_example").set_value("reduction").run()
    at.radio(key="uk_backend").set_value("sim")
    _button(at, "Run your kernel").click().run()
    assert not at.exception and at.session_state["capture"].launch["user_kernel"]
    at.switch_page("web/pages/simt.py").run()
    assert [b for b in at.button if b.label.startswith("Record which lanes")]  # with the key: offered

    started = []
    monkeypatch.setattr("visualizer.web.simt.visitor_lens_capture", lambda *a, **k: started.append(a))
    monkeypatch.setenv("VISUALIZER_TOKEN", "another-key-" + "z" * 32)  # the operator withdrew the key
    at.switch_page("web/pages/simt.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [b for b in at.button if b.label.startswith("Record which lanes")]
    assert any("Running your own code is off for this browser session" in i.value for i in at.info), [
        i.value for i in at.info
    ]
    assert not started
