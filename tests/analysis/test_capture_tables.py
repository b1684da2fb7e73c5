"""threads_table from recorded buffers: per-thread and per-warp recording answer the same questions."""

import numpy as np

from visualizer.analysis.capture import check_outputs, threads_table
from visualizer.specs.catalog import get


def _launch(grid, block, per):
    tpb = block[0] * block[1] * block[2]
    blocks = grid[0] * grid[1] * grid[2]
    return {
        "grid": grid, "block": block, "threads_per_block": tpb, "threads": blocks * tpb,
        "recorded_per": per, "source": "test",
    }  # fmt: skip


def test_per_warp_records_expand_to_every_thread():
    launch = _launch([2, 1, 1], [64, 1, 1], "warp")
    # 2 blocks x 2 warps: sm, start, end per warp
    trace = np.array([[5, 100, 150], [5, 110, 170], [9, 105, 160], [9, 120, 180]], np.int64)
    active = np.ones(128, np.uint8)
    t = threads_table(launch, trace, active)
    assert len(t) == 128
    assert t.groupby(["block", "warp"])["sm"].first().tolist() == [5, 5, 9, 9]
    assert t.loc[t.global_id == 64 + 33, "t_start_ns"].item() == 120 - 100
    assert t.loc[t.global_id == 127, "lane"].item() == 31


def test_3d_block_coordinates():
    launch = _launch([2, 3, 1], [4, 2, 2], "thread")
    n = launch["threads"]
    trace = np.zeros((n, 3), np.int64)
    t = threads_table(launch, trace, np.ones(n, np.uint8))
    row = t[(t.block_x == 1) & (t.block_y == 2) & (t.thread_x == 3) & (t.thread_y == 1) & (t.thread_z == 1)]
    assert row["block"].item() == 1 + 2 * 2
    assert row["thread"].item() == 3 + 4 * (1 + 2 * 1)


def test_check_outputs_counts_mismatches():
    spec = get("vector_add")
    a = np.ones(4, np.float32)
    res = check_outputs(spec, {"n": 4}, {"a": a, "b": a}, {"c": np.float32([2, 2, 3, 2])})
    assert not res["correct"] and res["outputs"]["c"]["mismatches"] == 1
