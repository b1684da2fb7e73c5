"""Every kernel captured on the simulator through the runner, checked against numpy and its tables."""

import numpy as np
import pytest

from visualizer.engine.run.runner import KernelError
from visualizer.specs.catalog import LaunchError

THREAD_COLUMNS = [
    "block_x", "block_y", "block_z", "thread_x", "thread_y", "thread_z", "block", "thread",
    "warp", "lane", "global_id", "sm", "t_start_ns", "t_end_ns", "active", "source",
]  # fmt: skip


def test_vector_add_threads_table(sim_runner):
    cap = sim_runner.capture("vector_add", {"n": 200, "block": 48})
    assert cap.check["correct"], cap.check
    np.testing.assert_array_equal(cap.outputs["c"], cap.inputs["a"] + cap.inputs["b"])
    t = cap.threads
    assert list(t.columns) == THREAD_COLUMNS
    assert len(t) == 5 * 48  # ceil(200 / 48) blocks
    # threads past n did no work; every thread below n did
    np.testing.assert_array_equal(t["active"].to_numpy(), t["global_id"].to_numpy() < 200)
    # a 48-thread block has 2 warps: the second one has only 16 lanes
    assert t.groupby("warp")["lane"].max().tolist() == [31, 15]
    assert (t["global_id"] == t["block_x"] * 48 + t["thread_x"]).all()
    assert (t["t_end_ns"] >= t["t_start_ns"]).all() and t["t_start_ns"].min() == 0
    assert cap.launch["source"].startswith("simulated") and not cap.measured
    assert t.attrs["source"] == cap.launch["source"]
    # the default engine, compiled: its CPU time of the launch, compile apart (fastsim's: wall time)
    assert cap.launch["sim_engine"] == "compiled"
    assert cap.timing["clock"].startswith("simulator CPU time of the compiled launch")


def test_matmul_tiled_partial_tiles(sim_runner):
    cap = sim_runner.capture("matmul_tiled", {"n": 20, "tile": 8})
    assert cap.check["correct"], cap.check
    A, B = cap.inputs["A"].astype(np.float64), cap.inputs["B"].astype(np.float64)
    np.testing.assert_allclose(cap.outputs["C"], A @ B, rtol=1e-4, atol=1e-4)
    tiles = cap.tiles
    # 3 x 3 blocks, 3 steps, A and B at each step
    assert len(tiles) == 9 * 3 * 2
    assert set(tiles["operand"]) == {"A", "B"}
    last = tiles[(tiles.block_x == 2) & (tiles.block_y == 2) & (tiles.step == 2)]
    # the last tile of a 20-wide matrix with 8-wide tiles is 4 x 4
    assert last[["rows", "cols"]].to_numpy().tolist() == [[4, 4], [4, 4]]
    a_tiles = tiles[(tiles.operand == "A") & (tiles.block_x == 1) & (tiles.block_y == 2)]
    assert a_tiles["row0"].tolist() == [16, 16, 16] and a_tiles["col0"].tolist() == [0, 8, 16]
    assert (tiles.groupby("block")["t_ns"].apply(lambda s: s.is_monotonic_increasing)).all()
    assert cap.launch["static_smem_bytes"] == 2 * 8 * 8 * 4


def test_matmul_naive_2d_grid(sim_runner):
    cap = sim_runner.capture("matmul_naive", {"n": 12, "tile": 8})
    assert cap.check["correct"], cap.check
    t = cap.threads
    assert (t.block_y.max(), t.block_x.max(), t.thread_y.max()) == (1, 1, 7)
    assert int(t.active.sum()) == 12 * 12


def test_reduction_tree_levels(sim_runner):
    cap = sim_runner.capture("reduction", {"n": 100, "block": 32})
    assert cap.check["correct"], cap.check
    x = cap.inputs["x"]
    expected = [x[i : i + 32].sum() for i in range(0, 100, 32)]
    np.testing.assert_array_equal(cap.outputs["partial"], np.float32(expected))
    tree = cap.row_state
    assert set(tree.step) == set(range(6))  # the loaded level plus log2(32) levels
    top = tree[(tree.block == 1) & (tree.step == 5) & (tree.row == 0)]["value"].item()
    assert top == pytest.approx(expected[1])


def test_race_demo_is_reported_not_hidden(sim_runner):
    cap = sim_runner.capture("reduction_race", {"n": 256, "block": 128})
    assert cap.check["expected_wrong"] is True
    # the comparison is reported whatever the interleaving produced
    assert cap.check["outputs"]["partial"]["elements"] == 2


def test_bad_launches_refused_before_running(sim_runner):
    for params, words in [
        ({"block": 0}, "at least 1"),
        ({"block": 2048}, "1024"),
        ({"n": 0}, "out of range"),
        ({"n": 10**6}, "simulator"),
        ({"nope": 1}, "no parameter"),
    ]:
        with pytest.raises(LaunchError, match=words):  # fastsim's limits (the compiled engine's: below)
            sim_runner.capture("vector_add", params, sim_engine="fastsim")
    with pytest.raises(LaunchError, match="unknown kernel"):
        sim_runner.capture("vector_sub")
    with pytest.raises(LaunchError, match="power of two"):
        sim_runner.capture("reduction", {"block": 96})


def test_fault_reported_and_runner_survives(sim_runner):
    with pytest.raises(KernelError, match="out of bounds"):
        sim_runner.capture("out_of_bounds_write", {"n": 64, "block": 32})
    cap = sim_runner.capture("vector_add", {"n": 64, "block": 32})
    assert cap.check["correct"]


def test_timeout_kills_and_restarts_worker():
    from visualizer.engine.run.runner import Runner

    with Runner("sim") as runner:
        with pytest.raises(KernelError, match="timed out"):
            runner.capture("matmul_naive", {"n": 160, "tile": 16}, timeout=0.5)  # ~7 s of CPU
        assert runner.restarts == 1
        cap = runner.capture("vector_add", {"n": 32, "block": 32})
        assert cap.check["correct"]


def test_vector_add_x4_covers_every_element(sim_runner):
    cap = sim_runner.capture("vector_add_x4", {"n": 1000, "block": 64})  # 4 blocks x 64 threads x 4
    assert cap.check["correct"], cap.check
    assert cap.launch["threads"] == 256
    np.testing.assert_array_equal(cap.outputs["c"], cap.inputs["a"] + cap.inputs["b"])
