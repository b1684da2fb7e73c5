"""One rule for a link's bad page values on every page: a one-line notice naming the value and what was
shown instead (escaped, cut), never a silent replacement."""

from pathlib import Path

import pytest

from tests.conftest import new_app, open_app

ENTRY = str(Path(__file__).resolve().parents[1] / "visualizer" / "app.py")


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
