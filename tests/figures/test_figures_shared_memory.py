"""Shared-memory figure builders on real simulator captures (and schema-true synthetic tables for size)."""

import numpy as np
import pytest

from visualizer.analysis.capture import SIM_SOURCE, row_state_table, tiles_table
from visualizer.figures.shared_memory import (
    MAX_BLOCKS_SHOWN,
    MISMATCH,
    matmul_tiles_figure,
    race_comparison_figure,
    race_tree_diff_figure,
    reduction_tree_figure,
)

N, TILE = 20, 8  # 3 steps; the last one's tiles are partial (8x4 and 4x8)
RED_N, RED_BLOCK = 64, 32


@pytest.fixture(scope="module")
def matmul(sim_runner):
    return sim_runner.capture("matmul_tiled", {"n": N, "tile": TILE})


@pytest.fixture(scope="module")
def reduction(sim_runner):
    return sim_runner.capture("reduction", {"n": RED_N, "block": RED_BLOCK})


@pytest.fixture(scope="module")
def reduction_race(sim_runner):
    return sim_runner.capture("reduction_race", {"n": RED_N, "block": RED_BLOCK})


def _span(xs):
    vals = [v for v in xs if v is not None]
    return max(vals) - min(vals)


# --- matmul_tiled ----------------------------------------------------------------------------


def test_matmul_two_frames_per_step_with_syncthreads_labels(matmul):
    fig = matmul_tiles_figure(matmul.tiles, matmul.launch, 0, 0)
    steps = -(-N // TILE)
    assert len(fig.frames) == 2 * steps
    titles = [f.layout.title.text for f in fig.frames]
    assert all("1st syncthreads" in t for t in titles[0::2])
    assert all("2nd syncthreads" in t for t in titles[1::2])
    assert all(matmul.source in t for t in [*titles, fig.layout.title.text])
    assert [s["label"] for s in fig.layout.sliders[0].steps] == [
        f"{k}·{what}" for k in range(1, steps + 1) for what in ("load", "multiply")
    ]
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["▶ Play", "❚❚ Pause"]
    assert buttons[0].args[1]["frame"]["redraw"] is True


def test_matmul_axes_fixed_and_matrix_oriented(matmul):
    fig = matmul_tiles_figure(matmul.tiles, matmul.launch, 1, 1)
    for suffix in ("", "2", "3"):
        x, y = fig.layout[f"xaxis{suffix}"], fig.layout[f"yaxis{suffix}"]
        assert tuple(x.range) == (0, N) and x.autorange is False
        assert tuple(y.range) == (N, 0) and y.autorange is False  # row 0 at the top, like a matrix
    for frame in fig.frames:  # frames change data and title only, never the axes
        assert set(frame.layout.to_plotly_json()) == {"title"}


def test_matmul_partial_edge_tiles_show_their_recorded_size(matmul):
    fig = matmul_tiles_figure(matmul.tiles, matmul.launch, 0, 0)
    mine = matmul.tiles[(matmul.tiles.block_x == 0) & (matmul.tiles.block_y == 0)]
    last = mine["step"].max()
    a = mine[(mine.step == last) & (mine.operand == "A")].iloc[0]
    b = mine[(mine.step == last) & (mine.operand == "B")].iloc[0]
    assert (a.rows, a.cols) == (TILE, N - 2 * TILE) and (b.rows, b.cols) == (N - 2 * TILE, TILE)
    frame = fig.frames[2 * last]  # the last step's "load" frame
    a_cur, b_cur = frame.data[1], frame.data[3]
    assert (_span(a_cur.y), _span(a_cur.x)) == (a.rows, a.cols)
    assert (_span(b_cur.y), _span(b_cur.x)) == (b.rows, b.cols)
    assert min(v for v in a_cur.x if v is not None) == a.col0
    assert "partial edge tile" in a_cur.text and "partial edge tile" in b_cur.text
    full = fig.frames[0].data[1]
    assert (_span(full.y), _span(full.x)) == (TILE, TILE) and "partial" not in full.text


def test_matmul_titles_carry_recorded_load_times(matmul):
    fig = matmul_tiles_figure(matmul.tiles, matmul.launch, 2, 1)
    mine = matmul.tiles[(matmul.tiles.block_x == 2) & (matmul.tiles.block_y == 1)]
    t_first = int(mine.t_ns.min())
    for step, frame in enumerate(fig.frames[0::2]):
        for operand in ("A", "B"):
            t = int(mine[(mine.step == step) & (mine.operand == operand)].t_ns.iloc[0])
            assert f"+{t - t_first:,} ns ({operand})" in frame.layout.title.text
        assert "simulator's order, not GPU time" in frame.layout.title.text


def test_matmul_c_tile_accumulates(matmul):
    fig = matmul_tiles_figure(matmul.tiles, matmul.launch, 2, 2)
    alphas = [float(f.data[4].fillcolor.rsplit(",", 1)[1].rstrip(")")) for f in fig.frames]
    assert alphas == sorted(alphas) and alphas[0] < alphas[-1]
    assert fig.frames[-1].data[5].text == ("3/3",)
    c = fig.frames[0].data[4]  # block (2, 2)'s C tile is the 4x4 corner
    assert (_span(c.y), _span(c.x)) == (N - 2 * TILE, N - 2 * TILE)


def test_matmul_unknown_block_is_refused(matmul):
    with pytest.raises(ValueError, match="no recorded tiles"):
        matmul_tiles_figure(matmul.tiles, matmul.launch, 7, 0)


def test_matmul_payload_stays_small_for_many_steps():
    n, tile = 2048, 16
    steps = n // tile
    rec = np.zeros((1, steps, 2, 5), np.int64)
    for s in range(steps):
        rec[0, s, 0] = (0, s * tile, tile, tile, 1000 + 10 * s)
        rec[0, s, 1] = (s * tile, 0, tile, tile, 1005 + 10 * s)
    launch = {
        "grid": (n // tile, n // tile, 1),
        "tile_operands": ("A", "B"),
        "source": "measured (GPU)",
        "params": {"n": n, "tile": tile},
        "backend": "gpu",
    }
    tiles = tiles_table(launch, rec, 1000)
    fig = matmul_tiles_figure(tiles, launch, 0, 0)
    assert len(fig.frames) == 2 * steps
    assert "measured with %globaltimer" in fig.frames[2].layout.title.text
    assert len(fig.to_json()) < 3_000_000


# --- reduction tree --------------------------------------------------------------------------


def test_tree_one_frame_per_level_with_recorded_values(reduction):
    tree = reduction.row_state
    fig = reduction_tree_figure(tree, 1, RED_BLOCK)
    levels = int(np.log2(RED_BLOCK)) + 1
    assert len(fig.frames) == levels
    mine = tree[tree.block == 1]
    for level, frame in enumerate(fig.frames):
        want = mine[mine.step == level].sort_values("row").value.to_numpy()
        np.testing.assert_array_equal(np.asarray(frame.data[2].y, np.float64), want)
        stride = RED_BLOCK >> level if level else 0
        assert len([v for v in frame.data[1].x if v is not None]) == stride  # one arrowhead per adder
        if level:
            colours = list(frame.data[2].marker.color)
            assert colours[:stride] == ["#ff8c00"] * stride
            assert f"stride {stride}" in frame.layout.title.text
    assert all(SIM_SOURCE in f.layout.title.text for f in fig.frames)


def test_tree_axes_fixed_and_final_frame_checks_the_sum(reduction):
    fig = reduction_tree_figure(reduction.row_state, 0, RED_BLOCK)
    assert fig.layout.xaxis2.autorange is False and fig.layout.yaxis2.autorange is False
    assert tuple(fig.layout.xaxis2.range) == (-0.5, RED_BLOCK - 0.5)
    assert all(set(f.layout.to_plotly_json()) <= {"title", "yaxis2", "annotations"} for f in fig.frames)
    assert "no adds yet" in fig.layout.annotations[0].text  # the first frame says what it shows
    assert [f.layout.annotations[0].visible for f in fig.frames] == [True] + [False] * (len(fig.frames) - 1)
    expected = float(reduction.inputs["x"][:RED_BLOCK].sum())
    top = max(fig.frames[-1].data[2].y)
    assert fig.frames[-1].layout.yaxis2.range[1] >= max(expected, top)
    # each level fills its axis: level 0's loads are not slivers on the final sum's scale
    for frame in fig.frames:
        values = [v for v in frame.data[2].y if v is not None]
        lo, hi = frame.layout.yaxis2.range
        assert lo <= min(min(values), 0) and max(values) <= hi <= 1.2 * max(
            max(values), expected * (frame is fig.frames[-1])
        )
    assert tuple(fig.layout.yaxis2.range) == tuple(fig.frames[0].layout.yaxis2.range)  # opens on level 0
    last = fig.frames[-1].layout.title.text
    assert f"s[0] = {expected:g} ✓ equals the expected block sum {expected:g}" in last
    assert list(fig.frames[-1].data[3].y) == [expected, expected]  # expected-sum line on the final frame
    assert fig.frames[0].data[3].y == (None,)


def test_tree_of_the_race_kernel_says_no_barrier(reduction_race):
    fig = reduction_tree_figure(reduction_race.row_state, 0, RED_BLOCK, "reduction_race")
    assert "NO syncthreads" in fig.frames[1].layout.title.text
    with pytest.raises(ValueError, match="no recorded reduction tree"):
        reduction_tree_figure(reduction_race.row_state, 5, RED_BLOCK)


def test_tree_payload_for_a_1024_thread_block():
    block = 1024
    levels = 11
    rows = np.full((1, levels, block, 2), np.nan, np.float32)
    vals = np.arange(block, dtype=np.float32)
    for level in range(levels):
        rows[0, level, :, 0] = vals
        stride = block >> (level + 1)
        if stride:
            vals = vals.copy()
            vals[:stride] += vals[stride : 2 * stride]
    launch = {"grid": (1, 1, 1), "row_table": ("reduction_tree", ("value",)), "source": "measured (GPU)"}
    fig = reduction_tree_figure(row_state_table(launch, rows), 0, block)
    assert len(fig.frames) == levels
    assert "measured (GPU)" in fig.layout.title.text
    assert len(fig.to_json()) < 3_000_000


# --- race comparison -------------------------------------------------------------------------


def test_race_comparison_marks_mismatching_blocks(reduction, reduction_race):
    expected = reduction.inputs["x"].reshape(-1, RED_BLOCK).sum(axis=1)
    race = reduction_race.outputs["partial"]
    fig = race_comparison_figure(reduction.outputs["partial"], race, expected, reduction.source)
    names = [t.name for t in fig.data]
    assert names[:3] == [
        "expected (numpy)",
        "reduction (with syncthreads)",
        "reduction_race (no syncthreads)",
    ]
    wrong = race != expected
    outline = list(fig.data[2].marker.line.color)
    assert [c == MISMATCH for c in outline] == wrong.tolist()
    assert f"reduction_race: {int(wrong.sum())} of {len(expected)} blocks wrong" in fig.layout.title.text
    assert "reduction: 0 of" in fig.layout.title.text
    assert reduction.source in fig.layout.title.text


def test_race_comparison_caps_the_blocks_drawn():
    nblocks = 100_000
    expected = np.full(nblocks, 10.0, np.float32)
    race = expected.copy()
    race[::7] = 3.0
    fig = race_comparison_figure(expected, race, expected, "measured (GPU)")
    assert all(len(t.x) <= MAX_BLOCKS_SHOWN for t in fig.data)
    assert f"{len(race[::7])} of {nblocks} blocks wrong" in fig.layout.title.text
    assert f"first {MAX_BLOCKS_SHOWN} blocks shown" in fig.layout.title.text
    assert len(fig.to_json()) < 1_000_000


def test_race_tree_diff_finds_the_first_diverging_level(reduction, reduction_race):
    fig = race_tree_diff_figure(reduction.row_state, reduction_race.row_state, 0)
    z = np.asarray(fig.data[0].z, np.float64)
    assert z.shape == (int(np.log2(RED_BLOCK)) + 1, RED_BLOCK)
    assert not np.any(z[0])  # both kernels loaded the same inputs
    bad = np.flatnonzero(np.abs(np.nan_to_num(z)).sum(axis=1) > 0)
    title = fig.layout.title.text
    assert SIM_SOURCE in title
    if bad.size:
        assert f"first diverges at level {bad[0]}" in title
    else:
        assert "no divergence" in title
    assert fig.layout.yaxis.autorange is False and tuple(fig.layout.yaxis.range) == (z.shape[0] - 0.5, -0.5)


def test_race_tree_diff_of_identical_trees_says_so(reduction):
    fig = race_tree_diff_figure(reduction.row_state, reduction.row_state, 1)
    assert "no divergence" in fig.layout.title.text
