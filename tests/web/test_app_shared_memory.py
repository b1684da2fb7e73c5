"""The Shared memory page, driven through the app's entrypoint on the CUDA simulator."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.conftest import open_app

ROOT = Path(__file__).resolve().parents[2]
PAGE = "web/pages/shared_memory.py"


def open_page(kernel: str, **params) -> AppTest:
    return open_app("shared_memory", kernel=kernel, backend="sim", **params)


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_matmul_tiled_tile_animation_and_block_picker():
    at = open_page("matmul_tiled", n=20, tile=8)
    assert not at.error
    (fig,) = charts(at)
    assert len(fig["frames"]) == 6  # 3 steps x (after 1st syncthreads, after 2nd)
    assert "simulated" in fig["layout"]["title"]["text"]
    assert fig["layout"]["title"]["text"].startswith("block (0, 0)")
    code = at.code[0].value
    assert "for step in range(steps):" in code and code.count("cuda.syncthreads()") == 2

    at.number_input(key="smem_block_x").set_value(2).run()
    assert not at.exception
    (moved,) = charts(at)
    assert moved["layout"]["title"]["text"].startswith("block (2, 0)")
    assert moved["frames"] != fig["frames"]


def test_reduction_tree_and_race_comparison():
    at = open_page("reduction", n=64, block=32)
    assert not at.error
    tree, race, diff, words = charts(at)
    assert words["layout"]["title"]["text"].endswith("recorded addresses, simulator</sup>")  # raced words
    assert len(tree["frames"]) == 6  # log2(32) + 1 levels
    assert tree["layout"]["title"]["text"].startswith("block 0")
    assert "reduction_race" in race["layout"]["title"]["text"]
    assert all("simulated" in f["layout"]["title"]["text"] for f in (tree, race, diff))
    assert any("Why the missing barrier" in m.value for m in at.markdown)
    # what the simulator does, as this run shows it: a fixed order, so no run-to-run spread claimed
    (why,) = [m.value for m in at.markdown if "Why the missing barrier" in m.value]
    assert "2 of 2 blocks are wrong, and a second run in that order gives byte-identical sums" in why
    assert "its answer can change" not in why

    at.number_input(key="smem_tree_block").set_value(1).run()
    assert not at.exception
    moved = charts(at)[0]
    assert moved["layout"]["title"]["text"].startswith("block 1")


def test_reduction_race_session_launches_the_correct_companion():
    at = open_page("reduction_race", n=64, block=32)
    assert not at.error
    tree, race, _, words = charts(at)
    assert "raced shared words in 2 blocks" in words["layout"]["title"]["text"]  # every block raced
    assert "NO syncthreads" in tree["frames"][1]["layout"]["title"]["text"]
    assert "reduction: 0 of 2 blocks wrong" in race["layout"]["title"]["text"]


def test_other_kernel_explains_and_loads_an_example():
    at = open_page("vector_add", n=256, block=64)
    assert not charts(at)
    assert any("not of `" in i.value for i in at.info)

    at.button(key="smem_load_matmul").click().run()
    assert not at.exception, [e.value for e in at.exception]
    cap = at.session_state.capture
    assert cap.launch["kernel"] == "matmul_tiled" and cap.launch["params"] == {"n": 20, "tile": 8}
    intro = next(m.value for m in at.markdown if "**Try:**" in m.value)
    assert "`n=20, tile=8`" in intro  # the example loads what the page's text tells the learner to run
    (fig,) = charts(at)
    assert len(fig["frames"]) == 2 * 3


def test_block_picker_is_clamped_when_a_new_run_shrinks_the_grid():
    at = open_page("matmul_tiled", n=20, tile=8)
    at.number_input(key="smem_block_x").set_value(2).run()
    at.sidebar.number_input(key="param_matmul_tiled_n").set_value(8)
    at.sidebar.button[0].click().run()  # the sidebar form's Run
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state.capture.launch["params"] == {"n": 8, "tile": 8}
    assert at.number_input(key="smem_block_x").value == 0
    (fig,) = charts(at)
    assert len(fig["frames"]) == 2 and fig["layout"]["title"]["text"].startswith("block (0, 0)")
