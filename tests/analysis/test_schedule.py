"""Scheduling tables (visualizer/analysis/schedule.py) on hand-made interval tables and a real simulator capture.

Expected values are worked out by hand in the comments, never taken from the code under test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis import schedule
from visualizer.analysis.occupancy import ARCHS

SRC = "measured (GPU)"


def _threads(rows: list[tuple]) -> pd.DataFrame:
    """A threads table from (block, warp, lane, sm, t_start, t_end, active) rows; 1-D grid of 4 blocks."""
    df = pd.DataFrame(rows, columns=["block", "warp", "lane", "sm", "t_start_ns", "t_end_ns", "active"])
    df["block_x"], df["block_y"], df["block_z"] = df["block"], 0, 0
    df["thread"] = df["warp"] * 32 + df["lane"]
    df["source"] = SRC
    df.attrs["source"] = SRC
    return df


def _blocks(rows: list[tuple]) -> pd.DataFrame:
    """A block table from (block, sm, t_start, t_end, warps) rows."""
    df = pd.DataFrame(rows, columns=["block", "sm", "t_start_ns", "t_end_ns", "warps"])
    df["block_x"], df["block_y"], df["block_z"] = df["block"], 0, 0
    df["source"] = SRC
    df.attrs["source"] = SRC
    return df


# block 0 on SM 3: warp 0 lanes run 10..20 and 12..25, warp 1 lane 0 runs 30..31 (inactive)
# block 1 on SM 7: one warp, lanes 5..9 and 4..8
THREADS = [
    (0, 0, 0, 3, 10, 20, 1),
    (0, 0, 1, 3, 12, 25, 1),
    (0, 1, 0, 3, 30, 31, 0),
    (1, 0, 0, 7, 5, 9, 1),
    (1, 0, 1, 7, 4, 8, 0),
]


def test_block_intervals_by_hand():
    b = schedule.block_intervals(_threads(THREADS))
    assert list(b.columns) == schedule.BLOCK_COLUMNS
    assert b["block"].tolist() == [0, 1]
    assert b["sm"].tolist() == [3, 7]
    assert b["t_start_ns"].tolist() == [10, 4]  # min over the block's threads
    assert b["t_end_ns"].tolist() == [31, 9]  # max over the block's threads
    assert b["warps"].tolist() == [2, 1]
    assert b["threads"].tolist() == [3, 2]
    assert b["active_threads"].tolist() == [2, 1]
    assert b.attrs["source"] == SRC and set(b["source"]) == {SRC}


def test_block_intervals_do_not_need_sorted_rows():
    shuffled = _threads([THREADS[i] for i in (4, 2, 0, 3, 1)])
    b = schedule.block_intervals(shuffled)
    assert b["t_start_ns"].tolist() == [10, 4] and b["t_end_ns"].tolist() == [31, 9]


def test_warp_intervals_by_hand():
    w = schedule.warp_intervals(_threads(THREADS))
    assert list(w.columns) == schedule.WARP_COLUMNS
    assert list(zip(w["block"], w["warp"], strict=True)) == [(0, 0), (0, 1), (1, 0)]
    assert w["t_start_ns"].tolist() == [10, 30, 4]
    assert w["t_end_ns"].tolist() == [25, 31, 9]
    assert w["threads"].tolist() == [2, 1, 2]
    assert w["active_threads"].tolist() == [2, 0, 1]


# SM 0 holds block 0 [0, 10) with 2 warps and block 1 [5, 15) with 1 warp; SM 1 holds block 2 [0, 20), 3 warps
HAND = [(0, 0, 0, 10, 2), (1, 0, 5, 15, 1), (2, 1, 0, 20, 3)]


def test_concurrency_per_sm_and_device_by_hand():
    c = schedule.concurrency(_blocks(HAND), by="sm")
    # SM 0: 2 warps from 0, 3 from 5 (both blocks), 1 from 10, 0 from 15. SM 1: 3 from 0, 0 from 20.
    assert c[["sm", "t_ns", "warps", "blocks"]].values.tolist() == [
        [0, 0, 2, 1],
        [0, 5, 3, 2],
        [0, 10, 1, 1],
        [0, 15, 0, 0],
        [1, 0, 3, 1],
        [1, 20, 0, 0],
    ]
    d = schedule.concurrency(_blocks(HAND), by="device")
    # sum of both: 5 from 0, 6 from 5, 4 from 10, 3 from 15, 0 from 20
    assert d[["t_ns", "warps", "blocks"]].values.tolist() == [
        [0, 5, 2],
        [5, 6, 3],
        [10, 4, 2],
        [15, 3, 1],
        [20, 0, 0],
    ]
    assert c.attrs["source"] == SRC
    with pytest.raises(ValueError):
        schedule.concurrency(_blocks(HAND), by="warp")


def test_concurrency_back_to_back_and_zero_length_intervals():
    # [0, 10) then [10, 20) on one SM: one block all along (half-open); [7, 7) counts for nothing
    c = schedule.concurrency(_blocks([(0, 0, 0, 10, 1), (1, 0, 10, 20, 1), (2, 0, 7, 7, 4)]))
    assert c[["t_ns", "warps"]].values.tolist() == [[0, 1], [7, 1], [10, 1], [20, 0]]


def test_concurrency_from_warps_counts_blocks_over_their_extent():
    # block 0 on SM 0: warp 0 [0, 4), warp 1 [2, 10) -> warps 1, 2, 1, 0 at 0, 2, 4, 10; the block spans [0, 10)
    w = pd.DataFrame(
        {"block": [0, 0], "warp": [0, 1], "sm": [0, 0], "t_start_ns": [0, 2], "t_end_ns": [4, 10]}
    )
    c = schedule.concurrency(w)
    assert c[["t_ns", "warps", "blocks"]].values.tolist() == [[0, 1, 1], [2, 2, 1], [4, 1, 1], [10, 0, 0]]


def test_step_integral_by_hand():
    t, v = np.array([0, 5, 10, 15]), np.array([2, 3, 1, 0])
    assert schedule.step_integral(t, v, 0, 15) == 2 * 5 + 3 * 5 + 1 * 5
    assert schedule.step_integral(t, v, 7, 12) == 3 * 3 + 1 * 2
    assert schedule.step_integral(t, v, -5, 3) == 2 * 3  # nothing before t[0]
    assert schedule.step_integral(t, v, 14, 30) == 1  # 0 after the last row


def test_assign_waves_with_a_capacity():
    # five blocks on SM 0 started at 0, 1, 2, 3, 4 (given out of order), capacity 2:
    # k = 0..4 -> wave 0, 0, 1, 1, 2 and position 0, 1, 0, 1, 0; one block on SM 1 -> wave 0
    rows = [
        (4, 0, 4, 9, 1),
        (0, 0, 0, 2, 1),
        (2, 0, 2, 5, 1),
        (1, 0, 1, 3, 1),
        (3, 0, 3, 6, 1),
        (5, 1, 0, 9, 1),
    ]
    w = schedule.assign_waves(_blocks(rows), blocks_per_sm=2).set_index("block").sort_index()
    assert w["order"].tolist() == [0, 1, 2, 3, 4, 0]
    assert w["wave"].tolist() == [0, 0, 1, 1, 2, 0]
    assert w["wave_position"].tolist() == [0, 1, 0, 1, 0, 0]
    # greedy slots: b0 [0,2) s0; b1 [1,3) s1; b2 [2,5) s0 (b0 ended); b3 [3,6) s1; b4 [4,9) s2 (s0, s1 busy)
    assert w["slot"].tolist() == [0, 1, 0, 1, 2, 0]
    assert w.attrs["capacity"] == 2


def test_assign_waves_infers_capacity_from_the_peak():
    # SM 0 never holds more than 2 blocks at once (b0 [0,4), b1 [0,4), b2 [4,8), b3 [4,8), b4 [8,9)):
    # capacity 2 -> waves 0, 0, 1, 1, 2
    rows = [(0, 0, 0, 4, 1), (1, 0, 0, 4, 1), (2, 0, 4, 8, 1), (3, 0, 4, 8, 1), (4, 0, 8, 9, 1)]
    w = schedule.assign_waves(_blocks(rows))
    assert w["wave"].tolist() == [0, 0, 1, 1, 2]
    assert w["slot"].tolist() == [0, 1, 0, 1, 0]


def test_achieved_occupancy_by_hand():
    blocks = _blocks(HAND)
    # warp-ns: SM 0 = 2*5 + 3*5 + 1*5 = 30 over 15 busy ns; SM 1 = 3*20 = 60 over 20 busy ns
    a = schedule.achieved_occupancy(blocks, {"num_sms": 3}, max_warps_per_sm=4, theoretical_warps_per_sm=4)
    assert a.kernel_ns == 20
    assert a.per_sm["warp_ns"].tolist() == [30, 60]
    assert a.per_sm["busy_ns"].tolist() == [15, 20]
    assert a.per_sm["avg_warps_busy"].tolist() == pytest.approx([2.0, 3.0])
    assert a.avg_warps_busy == pytest.approx(90 / 35)
    assert a.avg_warps_kernel == pytest.approx(90 / (3 * 20))  # the idle third SM counts as 0
    assert a.achieved == pytest.approx(90 / 35 / 4)
    assert a.theoretical == 1.0
    # observed peak: 2 blocks on SM 0 -> first wave 3 SMs x 2 = 6 > 3 blocks: no full wave, all tail
    assert (a.blocks_per_sm, a.first_wave_blocks, a.full_waves, a.tail_blocks) == (2, 6, 0, 3)
    assert a.tail_start_ns == 0 and a.tail_ns == 20 and a.sms_used == 2


def test_tail_by_hand():
    # 2 SMs x 1 block = a first wave of 2; the 3rd block (start order 0, 0, 5) is the tail, from 5 to 20.
    a = schedule.achieved_occupancy(_blocks(HAND), {"num_sms": 2}, 4, blocks_per_sm=1)
    assert (a.first_wave_blocks, a.full_waves, a.tail_blocks, a.waves) == (2, 1, 1, 2)
    assert a.tail_start_ns == 5 and a.tail_ns == 15
    # busy in [5, 20]: SM 0 until 15 (10 ns), SM 1 until 20 (15 ns) -> 25 of 30 SM-ns
    assert a.tail_idle_fraction == pytest.approx(5 / 30)
    # warps in [5, 20]: SM 0 3*5 + 1*5 = 20, SM 1 3*15 = 45 -> 65 / 30
    assert a.tail_avg_warps == pytest.approx(65 / 30)


def test_whole_waves_have_no_tail():
    a = schedule.achieved_occupancy(_blocks(HAND), {"num_sms": 3}, 4, blocks_per_sm=1)
    assert (a.full_waves, a.tail_blocks, a.tail_ns, a.tail_idle_fraction) == (1, 0, 0, 0.0)


def _launch(blocks: int, tpb: int) -> dict:
    return {
        "blocks": blocks,
        "threads_per_block": tpb,
        "grid": [blocks, 1, 1],
        "static_smem_bytes": 0,
        "dynamic_smem_bytes": 0,
    }


def test_modelled_schedule_one_block_per_sm_by_hand():
    # T4: 1024 threads = 32 warps = the SM's 32 warp slots -> 1 block per SM, 40 SMs -> 40 per wave.
    # Full blocks take 8 ns x 1024 = 8192 ns; the last block has 512 active threads -> 4096 ns.
    active = np.full(100, 1024)
    active[-1] = 512
    m = schedule.modelled_schedule(_launch(100, 1024), "sm_75", 32, active_threads=active)
    assert list(m.columns) == schedule.BLOCK_COLUMNS
    assert m["sm"].tolist() == [b % 40 for b in range(100)]
    assert m["t_start_ns"].tolist() == [(b // 40) * 8192 for b in range(100)]
    assert m["t_end_ns"].iloc[-1] == 2 * 8192 + 4096
    assert m["warps"].unique().tolist() == [32]
    assert m.attrs["blocks_per_sm"] == 1 and m.attrs["num_sms"] == 40
    assert m.attrs["source"] == "modelled (T4 / RTX 2080 (sm_75), occupancy-limited round robin)"
    assert set(m["source"]) == {m.attrs["source"]}


def test_modelled_schedule_goes_to_the_earliest_free_slot():
    # T4, 1 block per SM: blocks 0..39 start at 0 on SMs 0..39. Block 0 (256 of 1024 active) ends at
    # 2048 ns, block 1 (128 active) at 1024 ns, the rest at 8192: block 40 takes SM 1 at 1024, block 41 SM 0 at 2048
    active = np.full(42, 1024)
    active[0], active[1] = 256, 128
    m = schedule.modelled_schedule(_launch(42, 1024), "sm_75", 32, active_threads=active)
    assert (m["sm"].iloc[40], m["t_start_ns"].iloc[40]) == (1, 1024)
    assert (m["sm"].iloc[41], m["t_start_ns"].iloc[41]) == (0, 2048)


def test_modelled_schedule_fills_breadth_first():
    # H200, 64 threads, 32 regs: 32 blocks per SM (the block limit). Blocks 0..131 take slot 0 of SMs
    # 0..131; block 132 takes SM 0's second slot, also at t = 0.
    m = schedule.modelled_schedule(_launch(300, 64), "sm_90", 32)
    assert m["sm"].iloc[:132].tolist() == list(range(132))
    assert m["sm"].iloc[132] == 0 and (m["t_start_ns"] == 0).all()
    assert m.attrs["blocks_per_sm"] == 32
    waves = schedule.assign_waves(m, m.attrs["blocks_per_sm"])
    assert waves["wave"].max() == 0  # 300 blocks < 132 x 32


def test_modelled_schedule_uses_the_register_limit():
    # T4, 256 threads (8 warps): 32 regs -> warps limit 32 // 8 = 4 blocks; 128 regs: Rw = 4096,
    # 16384 // 4096 = 4 warps per sub-partition, 16 per SM -> 2 blocks
    assert schedule.modelled_schedule(_launch(10, 256), "sm_75", 32).attrs["blocks_per_sm"] == 4
    assert schedule.modelled_schedule(_launch(10, 256), "sm_75", 128).attrs["blocks_per_sm"] == 2


def test_modelled_schedule_refuses_an_unlaunchable_block():
    with pytest.raises(ValueError, match="Cannot launch"):
        schedule.modelled_schedule(_launch(4, 1024), "sm_90", 255)
    with pytest.raises(ValueError, match="active_threads"):
        schedule.modelled_schedule(_launch(4, 64), "sm_90", 32, active_threads=[1, 2])


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_modelled_schedule_every_arch(arch):
    m = schedule.modelled_schedule(_launch(ARCHS[arch].num_sms + 1, 128), arch, 32)
    assert m["sm"].max() == ARCHS[arch].num_sms - 1 and ARCHS[arch].label in m.attrs["source"]


# --- a real simulator capture ------------------------------------------------------------------


@pytest.fixture(scope="module")
def vector_add(sim_runner):
    return sim_runner.capture("vector_add", {"n": 2000, "block": 64})


def test_simulator_capture_blocks(vector_add):
    b = schedule.block_intervals(vector_add.threads)
    assert len(b) == 32  # ceil(2000 / 64)
    assert b["warps"].unique().tolist() == [2]
    assert b["active_threads"].sum() == 2000
    assert b["active_threads"].iloc[-1] == 2000 - 31 * 64  # 16 active threads in the last block
    assert (b["sm"] == b["block"] % 132).all()  # the simulator's modelled round-robin SM ids
    assert b.attrs["source"].startswith("simulated")
    # the simulator runs one block at a time: never two blocks resident at once
    assert schedule.concurrency(b, by="device")["blocks"].max() == 1
    w = schedule.warp_intervals(vector_add.threads)
    assert len(w) == 64 and w.groupby("block")["threads"].sum().eq(64).all()


def test_simulator_capture_modelled(vector_add):
    blocks = schedule.block_intervals(vector_add.threads)
    m = schedule.modelled_schedule(vector_add.launch, "sm_75", 32, active_threads=blocks["active_threads"])
    # 64 threads = 2 warps: T4 allows 16 blocks per SM, 40 SMs: all 32 blocks start at once on SMs 0..31
    assert m["sm"].tolist() == list(range(32)) and (m["t_start_ns"] == 0).all()
    # 8 ns x 64 threads for a full block; the last block has 16 active threads -> 128 ns
    assert m["t_end_ns"].iloc[0] == 512 and m["t_end_ns"].iloc[-1] == 128
    warps = schedule.modelled_warps(m, schedule.warp_intervals(vector_add.threads))
    assert len(warps) == 64 and (warps.groupby("block")["sm"].first() == m["sm"]).all()
    assert warps.attrs["source"] == m.attrs["source"]
    a = schedule.achieved_occupancy(m, {"num_sms": 40}, 32, 32, 16)
    assert (a.sms_used, a.full_waves, a.tail_blocks) == (32, 0, 32)
