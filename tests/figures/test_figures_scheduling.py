"""Pure builder tests for the scheduling figures (visualizer/figures/scheduling.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from visualizer.analysis import schedule
from visualizer.figures import scheduling as figs

GPU = "measured (GPU)"


def _blocks(start, end, sm, warps=2, source=GPU) -> pd.DataFrame:
    n = len(start)
    df = pd.DataFrame(
        {
            "block": np.arange(n),
            "block_x": np.arange(n),
            "block_y": 0,
            "block_z": 0,
            "sm": np.asarray(sm),
            "t_start_ns": np.asarray(start, np.int64),
            "t_end_ns": np.asarray(end, np.int64),
            "warps": warps,
            "threads": 64,
            "active_threads": 64,
            "source": source,
        }
    )
    df.attrs["source"] = source
    return df


def _modelled(blocks: int, arch: str = "sm_90", tpb: int = 64) -> pd.DataFrame:
    launch = {"blocks": blocks, "threads_per_block": tpb, "grid": [blocks, 1, 1]}
    m = schedule.modelled_schedule(launch, arch, 32)
    return schedule.assign_waves(m, m.attrs["blocks_per_sm"])


def _bars(fig: go.Figure) -> pd.DataFrame:
    """base, x, y of every bar (plotly's typed arrays decoded)."""
    spec = json.loads(fig.to_json())
    rows = []
    for trace in spec["data"]:
        base, x, y = (_decode(trace[k]) for k in ("base", "x", "y"))
        rows.append(pd.DataFrame({"base": base, "x": x, "y": y, "block": _decode(trace["customdata"])[:, 0]}))
    return pd.concat(rows).sort_values("block").reset_index(drop=True)


def _decode(value) -> np.ndarray:
    if isinstance(value, dict) and "bdata" in value:
        import base64

        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return arr.reshape([int(s) for s in str(value["shape"]).split(",")]) if "shape" in value else arr
    return np.asarray(value)


# --- SM timeline ------------------------------------------------------------------------------


def test_sm_timeline_bars_sit_at_the_input_nanoseconds():
    # odd nanosecond values and a 3 ns block: no rounding to ms (px.timeline would make these 0 wide)
    start = [0, 1_234_567, 17, 2_000_001]
    end = [3, 1_234_999, 25_000_123, 2_000_004]
    b = schedule.assign_waves(_blocks(start, end, [0, 0, 1, 1]))
    fig = figs.sm_timeline_figure(b, GPU)
    assert all(isinstance(t, go.Bar) and t.orientation == "h" for t in fig.data)
    bars = _bars(fig)
    assert bars["base"].tolist() == start
    assert bars["x"].tolist() == [e - s for s, e in zip(start, end, strict=True)]
    assert fig.layout.xaxis.type == "linear"
    assert GPU in fig.layout.title.text


def test_sm_timeline_overlapping_blocks_get_their_own_lane():
    # SM 0 holds blocks 0 and 1 at once -> two lanes inside row 0 (y = -0.225 and +0.225); SM 1 one block
    b = schedule.assign_waves(_blocks([0, 5, 0], [10, 15, 4], [0, 0, 1]))
    bars = _bars(figs.sm_timeline_figure(b, GPU))
    assert bars["y"].tolist() == pytest.approx([-0.225, 0.225, 0.775])


def test_sm_timeline_colours_by_wave_with_a_legend():
    fig = figs.sm_timeline_figure(_modelled(600, "sm_75", 1024), "modelled (T4)")  # 1 block/SM, 40 SMs
    # 600 blocks / 40 per wave = 15 waves -> more than MAX_COLOUR_GROUPS: ranges of waves
    names = [t.name for t in fig.data]
    assert len(names) <= figs.MAX_COLOUR_GROUPS and names[0].startswith(
        "waves 1–"
    )  # counted from 1, as the page counts them
    assert sum(len(_decode(json.loads(t.to_json())["base"])) for t in fig.data) == 600
    fig = figs.sm_timeline_figure(_modelled(100, "sm_75", 1024), "modelled (T4)", color_by="block")
    assert fig.layout.legend.title.text == "block"
    with pytest.raises(ValueError):
        figs.sm_timeline_figure(_modelled(10), "x", color_by="colour")


def test_sm_timeline_switches_to_webgl_segments_and_stays_exact():
    blocks = _modelled(20_000)  # > MAX_BARS
    fig = figs.sm_timeline_figure(blocks, schedule.source_of(blocks))
    assert all(isinstance(t, go.Scattergl) for t in fig.data)
    xs = np.concatenate([_decode(json.loads(t.to_json())["x"]) for t in fig.data])
    ends = np.sort(xs[1::3])
    np.testing.assert_array_equal(ends, np.sort(blocks["t_end_ns"].to_numpy()))
    assert "modelled" in fig.layout.title.text
    assert len(fig.to_json()) < 3_000_000


def test_sm_timeline_late_times_keep_float64():
    # past 2^24 ns float32 would round; the segments must switch to float64
    n = figs.MAX_BARS + 10
    start = np.arange(n, dtype=np.int64) * 10_000 + 2**25 + 1
    b = schedule.assign_waves(_blocks(start, start + 3, np.arange(n) % 100))
    fig = figs.sm_timeline_figure(b, GPU)
    xs = np.concatenate([_decode(json.loads(t.to_json())["x"]) for t in fig.data])
    np.testing.assert_array_equal(np.sort(xs[0::3]), start)


def test_sm_timeline_payload_is_bounded_for_4096_blocks_and_beyond():
    fig = figs.sm_timeline_figure(_modelled(4096), "modelled")  # bars
    assert len(fig.to_json()) < 1_000_000
    big = _modelled(figs.MAX_SEGMENTS + 30_000)
    fig = figs.sm_timeline_figure(big, "modelled")
    assert "too many to draw" in fig.layout.title.text
    assert len(fig.to_json()) < 8_000_000


# --- one SM's warps ---------------------------------------------------------------------------


def _warps(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["block", "warp", "sm", "t_start_ns", "t_end_ns"])
    df["active_threads"] = 32
    df.attrs["source"] = GPU
    return df


def test_warp_timeline_rows_are_resident_warp_slots():
    # SM 2: (0,0) [0,10), (0,1) [0,12), (1,0) [10,20): the third reuses the first's slot; SM 5 is not drawn
    w = _warps([(0, 0, 2, 0, 10), (0, 1, 2, 0, 12), (1, 0, 2, 10, 20), (9, 0, 5, 0, 99)])
    fig = figs.warp_timeline_figure(w, 2)
    bars = _bars(fig)
    assert bars["block"].tolist() == [0, 0, 1]
    assert bars["y"].tolist() == [0, 1, 0]
    assert bars["base"].tolist() == [0, 0, 10] and bars["x"].tolist() == [10, 12, 10]
    assert "SM 2" in fig.layout.title.text and GPU in fig.layout.title.text
    assert list(fig.layout.yaxis.range) == [1.5, -0.5]


def test_warp_timeline_of_an_idle_sm_says_so():
    fig = figs.warp_timeline_figure(_warps([(0, 0, 2, 0, 10)]), 7, "modelled (T4)")
    assert not fig.data and "SM 7 ran no warps" in fig.layout.annotations[0].text
    assert "modelled" in fig.layout.title.text


# --- concurrency ------------------------------------------------------------------------------


def test_concurrency_lines_for_few_sms():
    conc = schedule.concurrency(_blocks([0, 5, 0], [10, 15, 20], [0, 0, 1], warps=[2, 1, 3]))
    fig = figs.concurrency_figure(conc, theoretical_warps=8, num_sms=4)
    names = [t.name for t in fig.data]
    assert names == ["SM 0", "SM 1", "device average (over 4 SMs)"]
    avg = fig.data[-1]
    # device total 5, 6, 4, 3, 0 warps over 4 SMs
    assert list(avg.y) == pytest.approx([1.25, 1.5, 1.0, 0.75, 0.0])
    dashed = [s for s in fig.layout.shapes if s.line.dash == "dash"]
    assert len(dashed) == 1 and dashed[0].y0 == 8
    assert fig.layout.xaxis.autorange is False and list(fig.layout.xaxis.range) == [0, 20]
    assert fig.layout.yaxis.range[1] >= 8
    assert GPU in fig.layout.title.text


def test_concurrency_heatmap_for_many_sms_has_exact_bin_means():
    # 40 SMs each holding 4 warps over [0, 300): every bin mean is 4
    blocks = _blocks([0] * 40, [300] * 40, np.arange(40), warps=4, source="modelled (T4)")
    a = schedule.achieved_occupancy(blocks, {"num_sms": 40}, 32, 16)
    fig = figs.concurrency_figure(a.timeline, 16, num_sms=40, device=a.device)
    heat = next(t for t in fig.data if isinstance(t, go.Heatmap))
    z = _decode(json.loads(heat.to_json())["z"])
    assert z.shape == (40, figs.TIME_BINS)
    np.testing.assert_allclose(z, 4.0)
    assert heat.zmin == 0 and heat.zmax >= 16
    assert "modelled" in fig.layout.title.text


def test_binned_mean_by_hand():
    steps = pd.DataFrame({"t_ns": [0, 5, 10, 15], "warps": [2, 3, 1, 0]})
    # bins [0, 10): (2*5 + 3*5) / 10 = 2.5; [10, 20): (1*5 + 0*5) / 10 = 0.5
    assert figs.binned_mean(steps, np.array([0.0, 10.0, 20.0])).tolist() == [2.5, 0.5]


# --- waves animation --------------------------------------------------------------------------


def test_waves_animation_one_frame_per_wave_on_fixed_axes():
    blocks = _modelled(2048, "sm_75", 32)  # T4, 32 threads: 16 blocks/SM, 640 per wave -> 3 full + 128
    fig = figs.waves_animation_figure(blocks, 40)
    assert [f.name for f in fig.frames] == ["0", "1", "2", "3"]
    assert fig.layout.xaxis.autorange is False and list(fig.layout.xaxis.range) == [-0.5, 39.5]
    assert fig.layout.yaxis.autorange is False and list(fig.layout.yaxis.range) == [-0.5, 15.5]
    shapes = {np.asarray(f.data[0].z).shape for f in fig.frames}
    assert shapes == {(16, 40)}
    # wave 3 (the tail) has 128 blocks in dark cells; the other 640 - 128 cells were used before: light
    last = np.asarray(fig.frames[-1].data[0].z)
    assert (last == figs.CURRENT).sum() == 128 and (last == figs.EARLIER).sum() == 640 - 128
    assert "Wave 4 of 4 (the tail): 128 blocks" in fig.frames[-1].layout.title.text  # counted from 1
    assert fig.layout.sliders[0].steps[0].label == "1"
    assert all("modelled" in f.layout.title.text for f in fig.frames)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["▶ Play", "❚❚ Pause"]
    assert buttons[0].args[1]["frame"]["redraw"] is True
    assert len(fig.layout.sliders[0].steps) == 4


def test_waves_animation_shows_never_used_sms():
    # 32 blocks on 132 modelled SMs: 100 SMs stay grey
    fig = figs.waves_animation_figure(_modelled(32), 132)
    z = np.asarray(fig.frames[0].data[0].z)
    assert z.shape[1] == 132 and (z[:, 32:] == figs.EMPTY).all()


def test_waves_animation_caps_frames_and_payload():
    blocks = _modelled(200_000, "sm_75", 1024)  # 1 block per SM on 40 SMs: 5000 waves
    fig = figs.waves_animation_figure(blocks, 40)
    assert len(fig.frames) <= figs.MAX_FRAMES + 1
    assert fig.frames[0].name == "0" and fig.frames[-1].name == "4999"
    assert len(fig.to_json()) < 2_000_000
    fig = figs.waves_animation_figure(_modelled(4224 * 20), 132)  # H200: 20 full waves of 132 x 32
    assert len(fig.frames) == 20 and len(fig.to_json()) < 3_000_000


def test_one_wave_reads_as_one_wave_with_whole_slots():
    launch = {"threads_per_block": 128, "blocks": 8, "grid": [8, 1, 1], "block": [128, 1, 1],
              "dynamic_smem_bytes": 0, "static_smem_bytes": 0}  # fmt: skip
    blocks = schedule.assign_waves(schedule.modelled_schedule(launch, "sm_90", 32))
    fig = figs.waves_animation_figure(blocks, 132, "modelled")
    assert fig.layout.title.text.startswith("One wave: all 8 blocks at once")
    assert not fig.layout.sliders and not fig.layout.updatemenus  # nothing to play
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.tickformat == "d"


def test_a_launch_on_a_gpus_last_sms_draws_only_the_rows_it_used():
    # the H200 put 8 blocks of vector_add on SMs 124-131 (shipped set, 2026-12-04): 8 rows, not 132
    b = schedule.assign_waves(_blocks([0] * 8, [500] * 8, list(range(124, 132))))
    fig = figs.sm_timeline_figure(b, GPU)
    assert list(fig.layout.yaxis.range) == [131.5, 123.5] and fig.layout.height == 320
    assert "SMs 124–131: no block ran on the others" in fig.layout.title.text
