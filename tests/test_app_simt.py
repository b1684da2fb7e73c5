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
    assert title.startswith("Block 0, warp 2, which lanes took each branch (5 visits)")
    assert "modelled (structured SIMT reconvergence" in title
    z = spec["data"][0]["z"]  # visit 0: the guard, the parity test, side A's loop, side B's loop
    z0 = np.frombuffer(base64.b64decode(z["bdata"]), np.int8).reshape(4, 32)
    taken, not_taken, not_reached = bfigs.TAKEN, bfigs.NOT_TAKEN, bfigs.NOT_REACHED
    assert (z0[0] == taken).all()
    assert z0[1].tolist() == [taken, not_taken] * 16
    assert z0[2].tolist() == [taken, not_reached] * 16 and z0[3].tolist() == [not_reached, taken] * 16
    assert len(spec["frames"]) == 5  # each loop: 4 tests true, the last false
    assert at.query_params["simt_warp"] == ["2"] or at.query_params["simt_warp"] == "2"
    # the barrier tab says why there is no timeline here
    assert any("Not offered on the simulator" in i.value for i in at.info)


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
    from tests.test_app_your_kernel import TOKEN, _button, _your_kernel_page

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
    ((title, spec),) = _charts(at).items()
    assert title.startswith("Block 0, warp 0, which lanes took each branch (9 visits)")  # the tree's 9 tests
    # warp 0 of each block at strides 16..1, and warp 6 of block 7 at `if i < x.shape[0]` (2000 elements)
    assert "**9 of 64** warps diverged" in _numbers(at)
    at.switch_page("web/pages/simt.py").run()  # the lens's capture is kept: no second run, no button
    assert not [b for b in at.button if b.label.startswith("Record which lanes")] and _charts(at)
