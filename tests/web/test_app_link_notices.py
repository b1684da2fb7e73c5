"""One rule for a link's bad page values on every page: a one-line notice naming the value and what was
shown instead (escaped, cut), never a silent replacement."""

from pathlib import Path

import pytest

from tests.conftest import new_app, open_app

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")


@pytest.mark.parametrize(
    ("page", "key", "bad", "instead"),
    [
        ("grid", "grid_color_by", "zzz", "showing active instead"),
        ("grid", "grid_animate", "yes", "(1 for on, 0 for off); showing on (1) instead"),
        ("scheduling", "sched_gpu", "A100x", "showing H200 instead"),
        ("scheduling", "sched_regs", "999", "showing 32 instead"),
        ("scheduling", "sm", "-1", "showing 0 instead"),
        ("shared_memory", "smem_block_x", "77", "showing 0 instead"),
        ("memory_flow", "flow_view", "zzz", "showing timeline instead"),
        ("occupancy", "occ_threads", "-32", "instead"),
        ("flash_attention", "fa_arch", "sm_99", "showing sm_90 instead"),
        ("flash_attention", "fa_timing_mode", "zzz", "instead"),
    ],
)
def test_a_bad_link_value_is_named_in_one_line_on_every_page(page, key, bad, instead):
    query = {"page": page, "backend": "sim", "kernel": "vector_add", key: bad}
    if page == "shared_memory":
        query |= {"kernel": "matmul_tiled", "n": "16", "tile": "8"}
    if page == "flash_attention":  # the page's smallest teaching launch
        query |= {"kernel": "flash_attention", "seq_len": "32", "tile": "16", "head_dim": "16", "heads": "1"}
    at = open_app(**query)
    notices = [w.value for w in at.warning if "was ignored" in w.value]
    assert len(notices) == 1, [w.value for w in at.warning]
    assert f"{key}" in notices[0].replace("\\", "") and bad in notices[0].replace("\\", "")
    assert instead in notices[0].replace("\\", "") and "\n" not in notices[0]


def test_a_long_hostile_link_value_is_cut_and_escaped():
    bad = "[click](http://evil.example/" + "x" * 300 + ")"
    at = new_app(page="grid", backend="sim", grid_color_by=bad).run()
    (notice,) = [w.value for w in at.warning if "was ignored" in w.value]
    assert len(notice) < 200 and "x" * 60 not in notice
    assert "\\[click\\]\\(http" in notice  # shown literally, not as a link


def test_the_link_keeps_only_the_shown_pages_choices_and_the_global_ones():
    """It used to grow with every page visited (~40 parameters); now another page's choices wait in the
    session and come back into the link when their page is shown again."""
    at = open_app("grid", kernel="vector_add", backend="sim", n="200", block="48")
    at.radio(key="grid_color_by").set_value("lane").run()
    assert str(at.query_params.get("grid_color_by")).strip("[]'\"") == "lane"
    for page in ("scheduling", "memory_flow", "occupancy", "compare"):
        at.switch_page(f"web/pages/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
    keys = set(at.query_params)
    assert "grid_color_by" not in keys and not any(k.startswith(("sched_", "flow_", "occ_")) for k in keys)
    assert all(k in {"page", "kernel", "backend", "n", "block"} or k.startswith("cmp_") for k in keys), keys
    at.switch_page("web/pages/grid.py").run()
    assert str(at.query_params.get("grid_color_by")).strip("[]'\"") == "lane"  # back with its page
    assert at.radio(key="grid_color_by").value == "lane"
