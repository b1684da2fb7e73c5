"""Pure builder tests: the grid-layout heatmap/animation and the memory-flow step chart."""

import re

import numpy as np
import plotly.io
import pytest

from visualizer.analysis.capture import GPU_SOURCE, SIM_SOURCE, threads_table
from visualizer.figures import grid as G
from visualizer.figures.memory_flow import GPU_CLOCK_LABEL, SIM_CLOCK_LABEL, memory_flow_figure

MB = 1_000_000


def make_threads(grid, block, n_active=None, backend="sim", seed=0):
    """A schema-true threads table from made-up trace arrays (the probes' layout: sm, t_start, t_end)."""
    tpb = block[0] * block[1] * block[2]
    blocks = grid[0] * grid[1] * grid[2]
    threads = tpb * blocks
    per = "warp" if threads > 1 << 16 else "thread"
    launch = {
        "backend": backend, "kernel": "synthetic", "grid": list(grid), "block": list(block),
        "threads": threads, "blocks": blocks, "threads_per_block": tpb, "recorded_per": per,
        "source": GPU_SOURCE if backend == "gpu" else SIM_SOURCE,
    }  # fmt: skip
    wpb = -(-tpb // 32)
    records = blocks * wpb if per == "warp" else threads
    rec_block = np.arange(records) // (wpb if per == "warp" else tpb)
    rng = np.random.default_rng(seed)
    start = 5 * 10**9 + rec_block * 40 + rng.integers(0, 400, records)  # absolute ns, like %globaltimer
    sm = (rec_block * 5) % 132  # not the simulator's round-robin, so SM and block colourings differ
    trace = np.stack([sm, start, start + 700], axis=1).astype(np.int64)
    active = np.ones(threads, bool) if n_active is None else np.arange(threads) < n_active
    return threads_table(launch, trace, active), launch


def matmul_like(n=20, tile=8, backend="sim"):
    """A 2-D launch whose threads past n in x or y are idle (as matmul's bounds check makes them)."""
    g = -(-n // tile)
    df, launch = make_threads((g, g, 1), (tile, tile, 1), backend=backend)
    gx = df.block_x * tile + df.thread_x
    gy = df.block_y * tile + df.thread_y
    df["active"] = ((gx < n) & (gy < n)).to_numpy()
    return df, launch


def z_of(trace_or_frame):
    return np.asarray(trace_or_frame.z)


# ----------------------------------------------------------------------------------------- grid


def test_frames_fixed_ranges_and_controls():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    fig = G.grid_figure(df, launch, "block", animate=True, max_frames=12)
    assert len(fig.frames) == 12
    assert len(fig.layout.sliders[0].steps) == 12 and fig.layout.sliders[0].active == 11  # opens complete
    assert fig.layout.updatemenus[0].buttons[0].args[1]["fromcurrent"] is False  # Play replays from the start
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["▶ Play", "❚❚ Pause"]
    assert fig.layout.xaxis.autorange is False and fig.layout.yaxis.autorange is False
    # 48 threads = 2 warps: the axis runs over all 64 lanes, the last 16 drawn as 'no thread'
    assert list(fig.layout.xaxis.range) == [-0.5, 63.5] and list(fig.layout.yaxis.range) == [4.5, -0.5]
    base = z_of(fig.data[0])
    started = []
    for frame in fig.frames:
        assert frame.layout.xaxis.range is None and frame.layout.yaxis.range is None  # ranges never move
        assert frame.traces == (0,)
        z = z_of(frame.data[0])
        assert z.shape == base.shape
        started.append(int((z != G.NOT_STARTED).sum()))
    assert started == sorted(started) and started[0] > 0
    np.testing.assert_array_equal(z_of(fig.frames[-1].data[0]), base)  # the figure opens on the last frame
    still = G.grid_figure(df, launch, "block", animate=False)
    assert still.frames == () and not still.layout.sliders
    np.testing.assert_array_equal(z_of(fig.frames[-1].data[0]), z_of(still.data[0]))  # ends on the full grid
    assert len(G.grid_figure(df, launch, "block", animate=True, max_frames=500).frames) == G.MAX_FRAMES


def test_simulator_and_gpu_order_labels():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200, backend="sim")
    fig = G.grid_figure(df, launch, "active", animate=True)
    assert fig.layout.sliders[0].currentvalue.prefix.startswith(G.SIM_ORDER_LABEL)
    assert re.fullmatch(r"\d+/240 threads", fig.layout.sliders[0].steps[0].label)
    assert "simulated" in fig.layout.title.text and "simulator's order" in fig.data[0].hovertemplate
    gdf, glaunch = make_threads((5, 1, 1), (48, 1, 1), n_active=200, backend="gpu")
    gfig = G.grid_figure(gdf, glaunch, "active", animate=True)
    assert gfig.layout.sliders[0].currentvalue.prefix.startswith(G.GPU_ORDER_LABEL)
    assert re.fullmatch(r"[\d,.]+ (ns|µs): 240/240 threads", gfig.layout.sliders[0].steps[-1].label)
    assert "measured (GPU)" in gfig.layout.title.text and "(measured)" in gfig.data[0].hovertemplate


def test_gpu_frames_bucket_measured_start_time():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), backend="gpu")
    fig = G.grid_figure(df, launch, "block", animate=True, max_frames=4)
    start = df["t_start_ns"].to_numpy().reshape(5, 48)
    edges = start.min() + (start.max() - start.min()) * np.arange(1, 5) / 4
    for frame, edge in zip(fig.frames, edges, strict=True):
        shown = z_of(frame.data[0]) != G.NOT_STARTED
        np.testing.assert_array_equal(shown, start <= np.ceil(edge))


def test_threads_that_all_started_on_one_tick_give_one_frame():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), backend="gpu")
    df["t_start_ns"] = 0  # a small launch on a real GPU: every start on the same %globaltimer tick
    fig = G.grid_figure(df, launch, "block", animate=True)
    assert len(fig.frames) == 1 and fig.layout.sliders[0].steps[0].label == "0 ns: 240/240 threads"


def test_idle_threads_past_n_are_drawn_grey_in_every_colouring():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)  # 240 threads, 40 idle
    for color_by in G.COLOR_BY:
        fig = G.grid_figure(df, launch, color_by, animate=True)
        z = z_of(fig.frames[-1].data[0])
        np.testing.assert_array_equal(z, z_of(G.grid_figure(df, launch, color_by, animate=False).data[0]))
        assert z.shape == (5, 48)
        assert (z == G.IDLE).sum() == 40
        assert (z[4, 8:] == G.IDLE).all() and (z[:4] != G.IDLE).all() and (z[4, :8] != G.IDLE).all()
        keys = " ".join(t.name or "" for t in fig.data[1:]) + " ".join(fig.data[0].colorbar.ticktext or ())
        assert "idle" in keys  # the legend or the colour bar says what grey means
    custom = np.asarray(G.grid_figure(df, launch, "block", animate=False).data[0].customdata)
    assert custom[4, 8:, 8].tolist() == [0] * 40 and custom[3, :, 8].tolist() == [1] * 48  # "active"


def test_hover_fields_of_a_thread():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    fig = G.grid_figure(df, launch, "lane", animate=False)
    hover = fig.data[0].hovertemplate
    for word in ("blockIdx", "threadIdx", "warp", "lane", "global index", "SM", "(modelled)"):
        assert word in hover
    custom = np.asarray(fig.data[0].customdata)
    # block 4, thread 40: warp 1, lane 8, global index 232, SM 20, idle (232 >= 200)
    assert custom[4, 40, :9].tolist() == [4, 0, 40, 0, 1, 8, 232, 20, 0]
    assert np.asarray(fig.data[0].z)[0, 33] == 2 + 1  # lane 1's colour


def test_colourings_differ():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    zs = {c: z_of(G.grid_figure(df, launch, c, animate=False).data[0]) for c in G.COLOR_BY}
    assert len({z.tobytes() for z in zs.values()}) == len(zs)
    with pytest.raises(ValueError, match="color_by"):
        G.grid_figure(df, launch, "rainbow", animate=False)


def test_two_d_launch_uses_global_positions_and_block_borders():
    df, launch = matmul_like(n=20, tile=8)
    fig = G.grid_figure(df, launch, "block", animate=True)
    z = z_of(fig.frames[-1].data[0])
    assert z.shape == (24, 24)
    assert (z[20:, :] == G.IDLE).all() and (z[:, 20:] == G.IDLE).all() and (z[:20, :20] != G.IDLE).all()
    custom = np.asarray(fig.data[0].customdata)
    # global (x=10, y=17) is block (1, 2), thread (2, 1)
    assert custom[17, 10, :4].tolist() == [1, 2, 2, 1]
    assert "global x" in fig.layout.xaxis.title.text and fig.layout.yaxis.scaleanchor == "x"
    borders = next(t for t in fig.data if t.name == "block border")
    assert {x for x in borders.x if x is not None} >= {7.5, 15.5}
    assert {y for y in borders.y if y is not None} >= {7.5, 15.5}


def test_three_d_grid_stacks_z_slices():
    df, launch = make_threads((4, 2, 3), (16, 1, 1))
    fig = G.grid_figure(df, launch, "block", animate=False)
    assert z_of(fig.data[0]).shape == (6, 64)
    custom = np.asarray(fig.data[0].customdata)
    assert custom[5, 63, :3].tolist() == [3, 1, 2]  # blockIdx (3, 1, 2) in the last row
    assert "blockIdx (%{customdata[0]}, %{customdata[1]}, %{customdata[2]})" in fig.data[0].hovertemplate


def test_million_thread_1d_grid_is_per_warp_and_small():
    df, launch = make_threads((8192, 1, 1), (128, 1, 1), n_active=999_984, backend="gpu")
    assert G.cell_level(launch) == "warp" and "lane" not in G.available_colorings(launch)
    fig = G.grid_figure(df, launch, "active", animate=True, max_frames=30)
    assert len(plotly.io.to_json(fig, validate=False)) <= 5 * MB  # what st.plotly_chart sends
    assert 2 <= len(fig.frames) <= 30
    z = z_of(fig.frames[-1].data[0])
    assert z.shape == (8192, 4)
    # 999,984 = 7812 blocks + 48 threads: block 7812's warp 0 is active, warp 1 half idle, the rest idle
    assert (
        z[7812, 0] == 2 and z[7812, 1] == 3 and (z[7812, 2:] == G.IDLE).all() and (z[7813:] == G.IDLE).all()
    )
    custom = np.asarray(fig.data[0].customdata)
    # block range, warp, threadIdx.x range, global index range, SM range, active of threads
    assert custom[7812, 1, :11].tolist() == [7812, 7812, 1, 32, 63, 999_968, 999_999, 120, 120, 16, 32]
    assert "warp %{customdata[2]}" in fig.data[0].hovertemplate
    assert "active %{customdata[9]} of %{customdata[10]} threads" in fig.data[0].hovertemplate
    with pytest.raises(ValueError, match="one cell per thread"):
        G.grid_figure(df, launch, "lane", animate=False)


def test_million_thread_2d_grid_is_per_block_and_small():
    df, launch = make_threads((32, 32, 1), (32, 32, 1), backend="gpu")
    fig = G.grid_figure(df, launch, "sm", animate=True)
    assert len(fig.to_json()) <= 5 * MB and len(fig.frames) == 24
    assert z_of(fig.data[0]).shape == (32, 32)
    assert "blockIdx (%{customdata[0]}, %{customdata[2]}, %{customdata[4]})" in fig.data[0].hovertemplate
    # a million 1-thread blocks: square groups of blocks, the hover gives the ranges
    df, launch = make_threads((1024, 1024, 1), (1, 1, 1), backend="gpu")
    fig = G.grid_figure(df, launch, "block", animate=True, max_frames=30)
    assert len(fig.to_json()) <= 5 * MB
    rows, cols = z_of(fig.data[0]).shape
    assert rows * cols <= G.MAX_CELLS and rows == cols
    assert "blockIdx.x %{customdata[0]}–%{customdata[1]}" in fig.data[0].hovertemplate
    assert fig.layout.xaxis.range[1] >= 1023


def test_fifty_thousand_threads_stay_per_thread_under_budget():
    df, launch = make_threads((390, 1, 1), (128, 1, 1), n_active=49_000)  # 49,920 threads
    assert G.cell_level(launch) == "thread"
    fig = G.grid_figure(df, launch, "lane", animate=True, max_frames=30)
    assert len(fig.to_json()) <= 5 * MB


# ---------------------------------------------------------------------------------- memory flow

STEPS_NS = {"allocate": 40_000, "copy_in": 170_000, "kernel": 5_000_000, "copy_out": 50_000, "free": 3_000}
LAUNCH_1D = {"backend": "sim", "kernel": "vector_add", "grid": [5, 1, 1], "block": [48, 1, 1]}


def test_memory_flow_timeline_is_sequential_in_microseconds():
    timing = {"host_steps_ns": STEPS_NS, "compile_ns": 3_700_000}
    fig = memory_flow_figure(timing, LAUNCH_1D, bytes_in=1600, bytes_out=800)
    bar = fig.data[0]
    assert bar.orientation == "h" and len(bar.y) == 5
    assert list(bar.x) == [40.0, 170.0, 5000.0, 50.0, 3.0]
    assert list(bar.base) == [0.0, 40.0, 210.0, 5210.0, 5260.0]
    ticks = " | ".join(bar.y)
    for word in ("cudaMalloc", "cudaMemcpyHostToDevice", "vector_add<<<5, 48>>>", "cudaMemcpyDeviceToHost",
                 "cudaFree", "1.6 kB", "800 B"):  # fmt: skip
        assert word in ticks
    assert SIM_CLOCK_LABEL in fig.layout.title.text
    assert fig.layout.xaxis.type == "linear" and fig.layout.xaxis.autorange is False
    assert "µs" in fig.layout.xaxis.title.text
    assert any("3.7 ms" in a.text and "not in the flow" in a.text for a in fig.layout.annotations)


def test_memory_flow_views_labels_and_animation():
    timing = {"host_steps_ns": STEPS_NS, "compile_ns": 1}
    launch = {"backend": "gpu", "kernel": "matmul_tiled", "grid": [3, 3, 1], "block": [8, 8, 1]}
    log = memory_flow_figure(timing, launch, 3200, 1600, view="log")
    assert log.layout.xaxis.type == "log" and log.data[0].base is None
    assert GPU_CLOCK_LABEL in log.layout.title.text
    assert "matmul_tiled<<<(3, 3), (8, 8)>>>" in log.data[0].y[2]
    pct = memory_flow_figure(timing, launch, 3200, 1600, view="percent")
    assert sum(pct.data[0].x) == pytest.approx(100.0)
    anim = memory_flow_figure(timing, launch, 3200, 1600, animate=True)
    assert len(anim.frames) == 5 and len(anim.layout.sliders[0].steps) == 5
    shown = [sum(1 for v in f.data[0].x if v > 0) for f in anim.frames]
    assert shown == [1, 2, 3, 4, 5]
    assert all(f.layout.xaxis.range is None for f in anim.frames)


def test_memory_flow_missing_step_is_a_value_error():
    with pytest.raises(ValueError, match="copy_out"):
        memory_flow_figure({"host_steps_ns": {k: 1 for k in STEPS_NS if k != "copy_out"}}, LAUNCH_1D, 0, 0)
    with pytest.raises(ValueError, match="view"):
        memory_flow_figure({"host_steps_ns": STEPS_NS}, LAUNCH_1D, 0, 0, view="pie")


def test_every_colouring_has_a_key():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    for color_by in ("block", "warp", "lane", "sm"):
        heat = G.grid_figure(df, launch, color_by, animate=True).data[0]
        assert heat.showscale is True, color_by
        ticks = dict(zip(heat.colorbar.tickvals, heat.colorbar.ticktext, strict=True))
        if color_by == "lane":  # 34 codes: idle and not started are legend swatches, off the crowded bar
            assert G.IDLE not in ticks and G.NOT_STARTED not in ticks
            swatches = {t.name for t in G.grid_figure(df, launch, color_by, animate=True).data[1:]}
            assert {"idle (did no work, e.g. past n)", "not started yet"} <= swatches
        else:
            assert ticks[G.IDLE] == "idle" and ticks[G.NOT_STARTED] == "not started"
        first = min(v for v in ticks if v > G.IDLE)
        assert G.COLOR_BY[color_by] in ticks[first]  # the first colour tick names what it colours
        assert max(heat.colorbar.tickvals) < heat.zmax  # every tick is a colour the heatmap uses
    active = G.grid_figure(df, launch, "active", animate=False)
    assert active.data[0].showscale is False
    assert {"active (did work)", "idle (did no work, e.g. past n)"} <= {t.name for t in active.data[1:]}


def test_lanes_without_a_thread_are_drawn_as_their_own_cells():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    fig = G.grid_figure(df, launch, "active", animate=False)
    (empty,) = [t for t in fig.data if t.type == "heatmap" and t.name == "no thread"]
    assert np.asarray(empty.z).shape == (5, 16) and empty.x0 == 48  # lanes 48..63 of every block
    assert "no thread" in empty.hovertemplate and "16 of the warp's 32 lanes" in empty.hovertemplate
    assert any(t.name and t.name.startswith("no thread") for t in fig.data if t.type == "scatter")
    full, launch = make_threads((2, 1, 1), (64, 1, 1), n_active=100)
    assert not [t for t in G.grid_figure(full, launch, "active", False).data if t.name == "no thread"]


def test_a_one_thread_grid_has_whole_ticks_only():
    df, launch = make_threads((1, 1, 1), (1, 1, 1), n_active=1)
    fig = G.grid_figure(df, launch, "active", animate=False)
    # one thread still takes a whole warp: its 31 empty lanes are drawn, on whole-number ticks
    assert list(fig.layout.xaxis.range) == [-0.5, 31.5] and fig.layout.xaxis.tickformat == "d"
    assert fig.layout.yaxis.tickmode == "linear" and fig.layout.yaxis.dtick == 1
    df, launch = make_threads((1, 1, 1), (32, 1, 1), n_active=1)
    small = G.grid_figure(df, launch, "active", animate=False).layout
    assert small.yaxis.tickmode == "linear" and (small.yaxis.tick0, small.yaxis.dtick) == (0, 1)


def test_legend_of_two_rows_gets_room_under_the_title():
    df, launch = make_threads((5, 1, 1), (48, 1, 1), n_active=200)
    crowded = G.grid_figure(df, launch, "active", animate=True).layout  # 5 legend items: two rows
    assert crowded.margin.t > G.grid_figure(df, launch, "block", animate=True).layout.margin.t
