"""Pure tests of the occupancy figure builders and their data helpers (no Streamlit, no launches)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis.capture import GPU_SOURCE, threads_table
from visualizer.analysis.occupancy import ARCHS, occupancy
from visualizer.analysis.occupancy_timeline import impact_sweeps
from visualizer.figures.occupancy import (
    CURRENT_COLOUR,
    CURRENT_NAME,
    IMPACT_TITLES,
    LIMITER_COLOUR,
    SIM_ACHIEVED_SOURCE,
    achieved_figure,
    achieved_warps_per_sm,
    active_warps_over_time,
    impact_figure,
    limits_figure,
    measured_points_figure,
    modelled_active_warps,
    occupancy_opted_in,
)

KB = 1024


def _panel_traces(fig, axis: str) -> list:
    return [t for t in fig.data if (t.xaxis or "x") == axis]


def _step_value(xs, ys, x):
    """Value of an "hv" step line at x: the last point at or before x."""
    index = np.searchsorted(np.asarray(xs, dtype=float), x, side="right") - 1
    return ys[index]


@pytest.mark.parametrize(
    ("arch", "threads", "regs", "dynamic", "static"),
    [("sm_90", 128, 32, 0, 0), ("sm_80", 256, 64, 20 * KB, 2048), ("sm_75", 96, 40, 8 * KB, 0)],
)
def test_impact_current_point_and_steps_match_calculator(arch, threads, regs, dynamic, static):
    fig = impact_figure(impact_sweeps(arch, threads, regs, dynamic, static))
    current = occupancy(
        arch, threads, regs, dynamic, static, max_dynamic_smem=ARCHS[arch].smem_per_block_optin - static
    )
    assert [a.text for a in fig.layout.annotations][:3] == list(IMPACT_TITLES)
    assert f"modelled (CUDA occupancy formula, {ARCHS[arch].label})" in fig.layout.title.text
    panels = {"x": threads, "x2": regs, "x3": dynamic / KB}
    for axis, x_now in panels.items():
        sweep, marker = _panel_traces(fig, axis)
        assert sweep.line.shape == "hv"
        assert marker.name == CURRENT_NAME and marker.marker.color == CURRENT_COLOUR
        assert marker.x == (x_now,) and marker.y == (current.warps_per_sm,)
        # the marker sits on the step line
        assert _step_value(sweep.x, sweep.y, x_now) == current.warps_per_sm
    # sampled points of each step line agree with the calculator
    sweep = _panel_traces(fig, "x")[0]
    for size in (32, 160, 512, 1024):
        want = occupancy_opted_in(arch, size, regs, dynamic, static).warps_per_sm
        assert _step_value(sweep.x, sweep.y, size) == want
    sweep = _panel_traces(fig, "x2")[0]
    for r in (0, 33, 64, 96, 128, 200, 255):
        assert (
            _step_value(sweep.x, sweep.y, r)
            == occupancy_opted_in(arch, threads, r, dynamic, static).warps_per_sm
        )
    sweep = _panel_traces(fig, "x3")[0]
    for size in (0, 1000, 12 * KB + 7, 30 * KB, 47 * KB, ARCHS[arch].smem_per_block_optin - static):
        assert _step_value(sweep.x, np.asarray(sweep.y), size / KB) == (
            occupancy_opted_in(arch, threads, regs, size, static).warps_per_sm
        )
    # fixed axes: the chart does not rescale as sliders move
    assert fig.layout.yaxis.range[1] > ARCHS[arch].max_warps_per_sm and fig.layout.yaxis.autorange is False


def test_impact_marks_kernel_register_counts():
    fig = impact_figure(impact_sweeps("sm_90", 256, 40), kernel_regs={"instrumented": 40, "clean": 22})
    lines = {t.name: t for t in _panel_traces(fig, "x2") if t.name and "build" in t.name}
    assert set(lines) == {"instrumented build: 40 regs/thread", "clean build: 22 regs/thread"}
    assert lines["clean build: 22 regs/thread"].x == (22, 22)
    assert not [t for t in fig.data if t.name and "build" in t.name and t.xaxis != "x2"]
    plain = impact_figure(impact_sweeps("sm_90", 256, 40))
    assert not [t for t in plain.data if t.name and "build" in t.name]


def test_impact_unlaunchable_configuration_still_draws():
    # 1024 threads x 128 regs needs 131072 registers: no block fits; the point sits at zero.
    fig = impact_figure(impact_sweeps("sm_90", 1024, 128))
    marker = _panel_traces(fig, "x2")[1]
    assert marker.y == (0,)


def test_limits_figure_highlights_limiters():
    result = occupancy("sm_90", 128, 128)  # registers: 16 warps = 4 blocks; warps allow 16
    assert result.limiters == ["registers"]
    fig = limits_figure(result)
    bar = fig.data[0]
    assert list(bar.x) == ["warps", "registers", "shared memory", "block slots", "barriers"]
    # shared memory: even with none, sm_90 reserves 1 KB per block: 228 blocks, cut at 2 x 32
    assert list(bar.y) == [16, 4, 64, 32, 64]
    assert list(bar.text) == ["16", "4", "228 (bar cut)", "32", "64"]
    colours = dict(zip(bar.x, bar.marker.color, strict=True))
    assert colours["registers"] == LIMITER_COLOUR
    assert all(c != LIMITER_COLOUR for name, c in colours.items() if name != "registers")
    assert fig.layout.yaxis.range == (0, 64 * 1.2)
    assert (
        limits_figure(occupancy("sm_75", 128, 128)).data[0].text[2] == "no limit"
    )  # no reserve before sm_80
    assert "limiter: registers" in fig.layout.title.text and "modelled" in fig.layout.title.text
    assert fig.data[1].y == (4, 4)

    tie = limits_figure(occupancy("sm_90", 128, 32))  # warps and registers both allow 16
    colours = dict(zip(tie.data[0].x, tie.data[0].marker.color, strict=True))
    assert colours["warps"] == colours["registers"] == LIMITER_COLOUR
    # barriers only enter the formula from sm_90
    assert limits_figure(occupancy("sm_80", 128, 32)).data[0].text[4].startswith("not in the formula")


def _synthetic_threads(sm_of_block, start_of_block, duration, threads_per_block=64):
    """A schema-true threads table: each block on one SM, all its threads over [start, start + duration)."""
    blocks = len(sm_of_block)
    launch = {
        "grid": [blocks, 1, 1],
        "block": [threads_per_block, 1, 1],
        "threads_per_block": threads_per_block,
        "threads": blocks * threads_per_block,
        "blocks": blocks,
        "recorded_per": "thread",
        "source": GPU_SOURCE,
        "num_sms": 4,
    }
    block = np.repeat(np.arange(blocks), threads_per_block)
    start = np.asarray(start_of_block, dtype=np.int64)[block]
    trace = np.stack([np.asarray(sm_of_block)[block], start, start + duration], axis=1).astype(np.int64)
    return threads_table(launch, trace, np.ones(len(block), bool)), launch


def test_active_warps_event_sweep():
    # 3 blocks of 2 warps: blocks 0 and 1 overlap on SM 0, block 2 runs alone on SM 1.
    threads, launch = _synthetic_threads([0, 0, 1], [0, 50, 0], 100)
    active = active_warps_over_time(threads, launch)
    sm0 = active[active.sm == 0]
    assert sm0[["t", "active_warps"]].to_numpy().tolist() == [[0, 2], [50, 4], [100, 2], [150, 0]]
    assert active[active.sm == 1]["active_warps"].tolist() == [2, 0]
    # SM 0: 2*50 + 4*50 + 2*50 = 400 warp-ns over 150 ns busy; SM 1: 200 over 100
    assert achieved_warps_per_sm(active) == pytest.approx(600 / 250)
    # 3 blocks fit one wave (4 SMs x 2 blocks at once): no partial last wave, so no tail
    assert active.attrs["tail_start"] is None and active.attrs["source"] == GPU_SOURCE


def test_active_warps_share_achieved_occupancy_and_its_tail():
    """One definition for every page: the timeline's average and tail are schedule.achieved_occupancy's."""
    from visualizer.analysis import schedule

    # 2 SMs holding one block at a time: waves of 2 blocks, the 5th block (t=200) is a partial last wave
    threads, launch = _synthetic_threads([0, 1, 0, 1, 0], [0, 0, 100, 100, 200], 100)
    launch["num_sms"] = 2
    active = active_warps_over_time(threads, launch)
    a = schedule.achieved_occupancy(threads, launch, 64)
    assert a.full_waves == 2 and a.tail_blocks == 1 and active.attrs["tail_start"] == 200 == a.tail_start_ns
    assert achieved_warps_per_sm(active) == pytest.approx(a.avg_warps_busy)


def test_modelled_schedule_waves_and_tail():
    launch = {"num_sms": 4, "blocks": 10, "threads_per_block": 128, "source": "x"}
    active = modelled_active_warps(launch, blocks_per_sm=2)  # waves of 8 blocks: 8 then 2
    assert active.attrs["tail_start"] == 1.0 and active.attrs["time_unit"] == "block-times"
    first = active[active.t == 0].set_index("sm")["active_warps"].to_dict()
    assert first == {0: 8, 1: 8, 2: 8, 3: 8}  # 2 blocks x 4 warps on each SM
    assert active[(active.t == 1)].set_index("sm")["active_warps"].to_dict() == {0: 4, 1: 4, 2: 0, 3: 0}
    # busy SM-time: 4 SMs x 1 + 2 SMs x 1 = 6; warp-time 32 + 8 = 40
    assert achieved_warps_per_sm(active) == pytest.approx(40 / 6)
    assert modelled_active_warps(launch, blocks_per_sm=0).empty
    whole = modelled_active_warps({**launch, "blocks": 16}, blocks_per_sm=2)
    assert whole.attrs["tail_start"] is None


def test_achieved_figure_lines_and_labels():
    launch = {"num_sms": 132, "blocks": 5000, "threads_per_block": 256, "source": "x"}
    active = modelled_active_warps(launch, blocks_per_sm=8)
    fig = achieved_figure(active, 64, SIM_ACHIEVED_SOURCE)
    names = [t.name for t in fig.data]
    assert any(n and n.startswith("min–max over the 132 SMs") for n in names)  # many SMs: a band
    theory = next(t for t in fig.data if t.name and t.name.startswith("theoretical"))
    assert theory.y == (64, 64) and theory.line.dash == "dash"
    achieved = next(t for t in fig.data if t.name and t.name.startswith("achieved"))
    assert achieved.y[0] == pytest.approx(achieved_warps_per_sm(active))
    assert "not meaningful" in fig.layout.title.text and "modelled" in fig.layout.title.text
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "first wave: 132 SMs × 8 blocks/SM = 1,056 blocks" in texts and "4.73 waves" in texts
    assert "tail" in texts and fig.layout.shapes[0].x0 == 4.0
    assert fig.layout.xaxis.autorange is False


def test_achieved_figure_measured_per_sm_lines_and_payload():
    threads, launch = _synthetic_threads([0, 0, 1], [0, 50, 0], 100)
    fig = achieved_figure(active_warps_over_time(threads, launch), 64, GPU_SOURCE)
    assert {"SM 0", "SM 1"} <= {t.name for t in fig.data}
    assert GPU_SOURCE in fig.layout.title.text and "(ns)" in fig.layout.xaxis.title.text
    # a big launch: 1M threads in 4096 blocks over 132 SMs stays a small figure
    rng = np.random.default_rng(0)
    blocks = 4096
    big, big_launch = _synthetic_threads(
        rng.integers(0, 132, blocks), np.sort(rng.integers(0, 10**6, blocks)), 20_000, threads_per_block=256
    )
    big_launch["num_sms"] = 132
    active = active_warps_over_time(big, big_launch)
    assert len(big) == 2**20
    fig = achieved_figure(active, 64, GPU_SOURCE)
    assert len(fig.to_json()) < 200_000


def test_achieved_figure_empty():
    fig = achieved_figure(
        modelled_active_warps({"num_sms": 4, "blocks": 3, "threads_per_block": 32}, 0), 0, "x"
    )
    assert "nothing to show" in fig.layout.annotations[0].text


def test_measured_points_figure():
    history = [
        {
            "threads": 128,
            "achieved": 0.0625,
            "theoretical": 1.0,
            "kernel": "vector_add",
            "source": GPU_SOURCE,
        },
        {"threads": 256, "achieved": 0.125, "theoretical": 1.0, "kernel": "vector_add", "source": GPU_SOURCE},
    ]
    fig = measured_points_figure(history, "sm_90", 128)
    curve, theory, achieved = fig.data
    assert curve.line.shape == "hv"
    for size in (128, 256, 512, 1024):
        want = 100 * occupancy("sm_90", size, 128).occupancy
        assert _step_value(curve.x, curve.y, size) == pytest.approx(want)
    assert achieved.x == (128, 256) and achieved.y == pytest.approx((6.25, 12.5))
    assert theory.y == (100.0, 100.0)
    assert GPU_SOURCE in fig.layout.title.text and "modelled (CUDA occupancy formula" in fig.layout.title.text
    empty = measured_points_figure([], "sm_80", 32)
    assert len(empty.data) == 1 and "no runs yet" in empty.layout.title.text


def test_sweep_table_is_a_dataframe_in_time_order():
    threads, launch = _synthetic_threads([2, 1, 2, 0], [30, 0, 10, 5], 40)
    active = active_warps_over_time(threads, launch)
    assert isinstance(active, pd.DataFrame) and list(active.columns) == ["sm", "t", "active_warps"]
    for _, group in active.groupby("sm"):
        assert group["t"].is_monotonic_increasing and group["active_warps"].iloc[-1] == 0
    assert (active["active_warps"] >= 0).all()
