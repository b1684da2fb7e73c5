"""The FlashAttention figures on captures of the fast kernel (kernels/attention_fast.py): rectangular
block_q x block_k S tiles and, causal, blocks that compute two Q tiles one after the other.

Built from real simulator runs, kept small: the simulator multiplies the tensor-core tiles in Python
(~1-3 s per small launch). head_dim 32: Q tiles of 128 rows, K/V tiles of 64 keys.
"""

import math

import numpy as np
import pytest

from visualizer.figures.attention import (
    CURRENT,
    DONE,
    OTHER,
    PAIRED,
    SKIPPED,
    STATE_LABELS,
    TODO,
    fast_block,
    flash_loop_figure,
    recorded_part,
    row_state_figure,
)

BQ, BK = 128, 64  # attention_specs.fast_config(32)
# 3 Q tiles: block 0 computes Q tile 2 (5 K/V steps) then Q tile 0 (2 steps); block 1 Q tile 1 (4 steps)
CAUSAL = {"batch": 1, "heads": 1, "seq_len": 260, "head_dim": 32, "causal": 1}
# 2 Q tiles (the second partial: queries 128-149) x 3 K/V tiles (the last partial: keys 128-149)
PLAIN = {"batch": 1, "heads": 1, "seq_len": 150, "head_dim": 32, "causal": 0}


@pytest.fixture(scope="module")
def causal_cap(sim_runner):
    cap = sim_runner.capture("flash_attention_fast", CAUSAL)
    assert cap.check["correct"], cap.check
    return cap


@pytest.fixture(scope="module")
def plain_tables(sim_runner):
    cap = sim_runner.capture("flash_attention_fast", PLAIN)
    assert cap.check["correct"], cap.check
    return cap.tiles, cap.row_state


def z_of(frame) -> np.ndarray:
    return np.asarray(frame.data[0].z, dtype=float)


def test_fast_block_maps_q_tiles_to_blocks():
    assert fast_block(3, 5, head=1, batch=0, heads=2, causal=False) == (3, 1, 0)
    assert fast_block(3, 5, head=0, batch=2, heads=2, causal=False) == (3, 0, 2)
    # causal, 5 Q tiles: blocks 0, 1, 2 compute (4, 0), (3, 1), (2); y = batch * heads + head
    assert [fast_block(q, 5, 0, 0, 1, True)[0] for q in range(5)] == [0, 1, 2, 1, 0]
    assert fast_block(1, 5, head=1, batch=2, heads=3, causal=True) == (1, 7, 0)
    assert [fast_block(q, 4, 0, 0, 1, True)[0] for q in range(4)] == [0, 1, 1, 0]


def test_recorded_parts_of_paired_blocks(causal_cap):
    tiles = causal_cap.tiles
    assert recorded_part(tiles, (0, 0, 0), 2 * BQ) == (0, 5)  # the long Q tile first
    assert recorded_part(tiles, (0, 0, 0), 0) == (5, 7)  # then the short one
    assert recorded_part(tiles, (1, 0, 0), BQ) == (0, 4)  # the middle tile alone


def test_loop_figure_draws_rectangular_tiles_and_the_paired_q_tile(causal_cap):
    cap = causal_cap
    fig = flash_loop_figure(
        cap.tiles, cap.row_state, 0, 260, BQ, True, cap.source, block_k=BK, block=(0, 0, 0)
    )
    assert [f.name for f in fig.frames] == ["step 0", "step 1"]  # K/V tiles 0 and 1 of Q tile 0
    for frame in fig.frames:
        assert z_of(frame).shape == (3, 5)  # 3 Q tiles x 5 K/V tiles
        assert list(frame.data[0].y) == [0, 128, 256, 260] and list(frame.data[0].x) == [
            0,
            64,
            128,
            192,
            256,
            260,
        ]
        assert list(frame.data[0].colorbar.ticktext) == list(STATE_LABELS)
    first, last = z_of(fig.frames[0]), z_of(fig.frames[-1])
    assert list(first[0]) == [CURRENT, TODO, SKIPPED, SKIPPED, SKIPPED]
    assert list(last[0]) == [DONE, CURRENT, SKIPPED, SKIPPED, SKIPPED]
    assert (last[2] == PAIRED).all() and (last[1] == OTHER).all()  # block 0 also computes Q tile 2
    title = fig.layout.title.text
    assert "Q tile 0 (queries 0–127, block (0, 0, 0)" in title and "3 K/V tiles skipped (causal)" in title
    assert "S tiles 128 x 64" in title and "simulated" in title
    notes = [f.layout.annotations[0].text for f in fig.frames]
    # a 128-row Q tile crosses the diagonal in two 64-key tiles: both are masked in part
    assert all("diagonal tile" in n for n in notes)
    assert all(" ns" not in n for n in notes)  # the simulator's host clock: no GPU nanoseconds shown
    # as a GPU would record them: times relative to this part (slot 5 on), not to the block's first tile
    gpu = flash_loop_figure(
        cap.tiles, cap.row_state, 0, 260, BQ, True, "measured (GPU)", block_k=BK, block=(0, 0, 0)
    )
    gpu_note = gpu.frames[0].layout.annotations[0].text
    part = cap.tiles[(cap.tiles["block_x"] == 0) & (cap.tiles["block_y"] == 0) & (cap.tiles["step"] >= 5)]
    k0 = part[(part["operand"].astype(str) == "K") & (part["step"] == 5)]["t_ns"].iloc[0]
    assert "this part's first tile" in gpu_note
    assert f"K staged at +{int(k0 - part['t_ns'].min()):,} ns" in gpu_note

    long = flash_loop_figure(
        cap.tiles, cap.row_state, 2, 260, BQ, True, "measured (GPU)", block_k=BK, block=(0, 0, 0)
    )
    assert len(long.frames) == 5 and (z_of(long.frames[-1])[0] == PAIRED).all()
    assert list(z_of(long.frames[-1])[2]) == [DONE, DONE, DONE, DONE, CURRENT]  # nothing skipped
    long_notes = [f.layout.annotations[0].text for f in long.frames]
    assert ["diagonal tile" in n for n in long_notes] == [False] * 4 + [True]  # queries 256-259, keys 256-259
    assert "the block's first tile" in long_notes[0]


def test_middle_q_tile_has_no_pair(causal_cap):
    cap = causal_cap
    fig = flash_loop_figure(
        cap.tiles, cap.row_state, 1, 260, BQ, True, cap.source, block_k=BK, block=(1, 0, 0)
    )
    assert len(fig.frames) == 4  # keys up to 255: K/V tiles 0..3
    last = z_of(fig.frames[-1])
    assert list(last[1]) == [DONE, DONE, DONE, CURRENT, SKIPPED] and PAIRED not in last
    assert len(fig.frames[0].data[0].colorbar.ticktext) == PAIRED  # no legend entry for a pair


def test_row_state_follows_the_chosen_part_and_matches_numpy(causal_cap):
    cap = causal_cap
    q, k = (cap.inputs[a][0, 0].astype(np.float64) for a in ("q", "k"))
    s = q @ k.T / math.sqrt(32)
    s = np.where(np.tril(np.ones((260, 260), bool)), s, -np.inf)
    for q_tile, slots, row in ((0, (5, 7), 100), (2, (0, 5), 3)):
        fig = row_state_figure(cap.row_state, q_tile, row, block=(0, 0, 0), slots=slots)
        m, l, alpha = (np.asarray(t.y, dtype=float) for t in fig.data)  # noqa: E741
        assert list(fig.data[0].x) == list(range(slots[1] - slots[0]))  # this Q tile's K/V steps
        assert "computed by block (0, 0, 0)" in fig.layout.title.text
        assert (np.diff(m) >= 0).all() and alpha[0] == 0 and ((alpha > 0) & (alpha <= 1))[1:].all()
        query = q_tile * BQ + row
        assert m[-1] == pytest.approx(s[query].max(), rel=1e-5, abs=1e-5)
        assert l[-1] == pytest.approx(np.exp(s[query] - s[query].max()).sum(), rel=1e-5)
    with pytest.raises(ValueError):
        row_state_figure(cap.row_state, 1, 0, block=(0, 0, 0), slots=(7, 9))  # nothing recorded there


def test_non_causal_rectangular_tiles(plain_tables):
    tiles, state = plain_tables
    fig = flash_loop_figure(tiles, state, 1, 150, BQ, False, "simulated", block_k=BK)
    assert len(fig.frames) == 3  # every K/V tile, the last partial
    last = z_of(fig.frames[-1])
    assert last.shape == (2, 3) and list(last[1]) == [DONE, DONE, CURRENT] and (last[0] == OTHER).all()
    assert (
        "partial tile" in fig.frames[-1].layout.annotations[0].text and "skipped" not in fig.layout.title.text
    )
    assert (
        "Q tile 1 (queries 128–149, head 0" in fig.layout.title.text and "block" not in fig.layout.title.text
    )
    row = row_state_figure(state, 1, 21)  # the partial tile's last query
    assert len(row.data[0].y) == 3
