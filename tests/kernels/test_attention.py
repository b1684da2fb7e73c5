"""FlashAttention and naive attention: kernels on the simulator, catalog specs, figures; one GPU check.

The simulator tests call the dispatchers directly with numpy arrays and record buffers shaped the
way the worker shapes them (launch geometry from the catalog's plan), so they stay small and fast.
"""

import numpy as np
import pytest

from visualizer.analysis import capture as trace
from visualizer.engine.capture.builds import pair
from visualizer.engine.capture.builtin import launch_args, record_buffers
from visualizer.kernels.attention import (
    Q_TILE,
    flash_attention_kernel,
    flash_smem_floats,
    naive_attention_kernel,
)
from visualizer.specs.attention import attention_reference, flash_smem_bytes, kv_tiles
from visualizer.specs.catalog import LaunchError, plan_launch

SOURCE = "simulated (CUDA simulator; SM ids and times modelled)"


def run_sim(name: str, params: dict, seed: int = 0):
    """Launch the instrumented build on the simulator; returns (inputs+outputs, buffers, launch, values)."""
    spec, values, launch = plan_launch(name, params, backend="sim")
    x = spec.make_inputs(values, np.random.default_rng(seed))
    bufs = record_buffers(spec, launch)
    if name == "flash_attention":
        fn = flash_attention_kernel(values["tile"], values["head_dim"])
    else:
        fn = naive_attention_kernel(values["head_dim"])
    traced, _ = pair(fn, spec.active_when)
    args = launch_args(spec, launch, {**x, **bufs})[0]
    traced[launch.grid, launch.block](*args)
    return x, bufs, launch, values


def launch_info(launch, spec_name="flash_attention") -> dict:
    return {
        "grid": list(launch.grid),
        "tile_operands": ["Q", "K", "V"],
        "row_table": ["softmax_state", ["m", "l"]],
        "source": SOURCE,
        "kernel": spec_name,
    }


FLASH_CASES = [
    # seq_len not a multiple of tile, causal and not, head_dim 16 and 64, tiles 8 and 16
    {"seq_len": 40, "head_dim": 16, "tile": 16, "causal": 0},
    {"seq_len": 37, "head_dim": 64, "tile": 16, "causal": 1},
    {"seq_len": 21, "head_dim": 32, "tile": 8, "causal": 1},
]


@pytest.fixture(
    scope="module", params=FLASH_CASES, ids=lambda p: "L{seq_len}-d{head_dim}-t{tile}-c{causal}".format(**p)
)
def flash_run(request):
    params = {"batch": 1, "heads": 1, **request.param}
    return run_sim("flash_attention", params)


def test_flash_matches_numpy(flash_run):
    x, _, _, values = flash_run
    want = attention_reference(x["q"], x["k"], x["v"], bool(values["causal"]))
    np.testing.assert_allclose(x["o"], want, rtol=1e-4, atol=1e-4)


def test_flash_records_every_tile_it_staged(flash_run):
    _, bufs, launch, values = flash_run
    seq_len, tile, causal = values["seq_len"], values["tile"], bool(values["causal"])
    tiles = bufs["tiles"]  # (blocks, steps, operands, 5): row0, col0, rows, cols, t
    assert tiles.shape == (launch.blocks, launch.tile_steps, 3, 5)
    for block in range(launch.blocks):
        qt = block % launch.grid[0]
        q = tiles[block, 0, Q_TILE]
        assert (
            q[4] >= 0
            and q[0] == qt * tile
            and q[2] == min(tile, seq_len - qt * tile)
            and q[3] == values["head_dim"]
        )
        assert (tiles[block, 1:, Q_TILE, 4] == -1).all()  # Q is staged once
        n = kv_tiles(qt, seq_len, tile, causal)
        for step in range(launch.tile_steps):
            for op in (1, 2):
                rec = tiles[block, step, op]
                if step < n:
                    assert rec[4] >= 0 and rec[0] == step * tile and rec[1] == 0
                    assert rec[2] == min(tile, seq_len - step * tile) and rec[3] == values["head_dim"]
                else:  # causally skipped: never reached, so never recorded
                    assert (rec == -1).all()
        k_times = tiles[block, :n, 1, 4]
        assert (np.diff(k_times) >= 0).all()


def test_flash_row_state(flash_run):
    _, bufs, launch, values = flash_run
    rows = bufs["rows"]  # (blocks recorded, steps, tile, 2)
    assert rows.shape == (*launch.row_state, 2)
    seq_len, tile, causal = values["seq_len"], values["tile"], bool(values["causal"])
    for block in range(launch.row_state[0]):
        qt = block % launch.grid[0]
        n = kv_tiles(qt, seq_len, tile, causal)
        m, l = rows[block, :n, :, 0], rows[block, :n, :, 1]  # noqa: E741
        assert np.isfinite(m).all() and np.isfinite(l).all()
        assert (np.diff(m, axis=0) >= 0).all()  # the running max never decreases
        assert (l[-1] > 0).all()
        assert np.isnan(rows[block, n:]).all()  # steps the block skipped stay unrecorded


def test_flash_row_state_final_l_matches_reference(flash_run):
    """After the last step, m is the row max of q·k/sqrt(d) and l = sum exp(s - m) over valid keys."""
    x, bufs, launch, values = flash_run
    seq_len, tile, causal, d = values["seq_len"], values["tile"], bool(values["causal"]), values["head_dim"]
    s = x["q"][0, 0].astype(np.float64) @ x["k"][0, 0].astype(np.float64).T / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones_like(s, bool)), s, -np.inf)
    for qt in range(launch.grid[0]):
        n = kv_tiles(qt, seq_len, tile, causal)
        rows = np.arange(qt * tile, min(seq_len, (qt + 1) * tile))
        m_want = s[rows].max(axis=1)
        l_want = np.exp(s[rows] - m_want[:, None]).sum(axis=1)
        got = bufs["rows"][qt, n - 1, : len(rows)]
        np.testing.assert_allclose(got[:, 0], m_want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got[:, 1], l_want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [0, 1])
def test_naive_matches_numpy_and_goes_through_s(causal):
    params = {"batch": 1, "heads": 2, "seq_len": 23, "head_dim": 16, "tile": 8, "causal": causal}
    x, bufs, launch, values = run_sim("naive_attention", params)
    want = attention_reference(x["q"], x["k"], x["v"], bool(causal))
    np.testing.assert_allclose(x["o"], want, rtol=1e-4, atol=1e-4)
    # S in global memory now holds exp(s - rowmax): each row's largest entry is exactly 1
    s = x["s"]
    valid = np.tril(np.ones((23, 23), bool)) if causal else np.ones((23, 23), bool)
    np.testing.assert_allclose(np.where(valid, s, 0).max(axis=-1), 1.0, rtol=1e-6)
    assert (s[..., ~valid] == 0).all()  # causal: keys after the query are never written
    assert bufs["active"].sum() == 2 * 23


def test_catalog_specs_and_refusal():
    spec, values, launch = plan_launch("flash_attention", {})
    assert (values["batch"], values["heads"], values["seq_len"], values["head_dim"], values["tile"]) == (
        1,
        2,
        80,
        32,
        16,
    )
    assert launch.grid == (5, 2, 1) and launch.block == (4, 4, 1)
    assert launch.scalars == {"seq_len": 80, "causal": 0}
    assert launch.tile_steps == 5 and launch.row_state == (10, 5, 16)
    assert spec.args[-2:] == ("tiles", "rows") and spec.tile_operands == ("Q", "K", "V")
    assert spec.row_table == ("softmax_state", ("m", "l"))
    assert spec.build == ("visualizer.kernels.attention", "flash_attention_kernel")
    nspec, _, nlaunch = plan_launch("naive_attention", {"seq_len": 100})
    assert nspec.args == ("q", "k", "v", "s", "o", "seq_len", "causal")
    assert nlaunch.grid == (7, 2, 1) and nlaunch.static_smem == 0

    with pytest.raises(LaunchError) as err:
        plan_launch("flash_attention", {"tile": 64, "head_dim": 64})
    msg = str(err.value)
    assert "\n" not in msg and str(flash_smem_bytes(64, 64)) in msg and "49152" in msg
    with pytest.raises(LaunchError):
        plan_launch("flash_attention", {"tile": 12})  # not one of the tile choices


def test_smem_formula_matches_kernel_module():
    for tile in (8, 16, 32, 64):
        for d in (16, 32, 64, 128):
            assert flash_smem_bytes(tile, d) == 4 * flash_smem_floats(tile, d)
    assert flash_smem_bytes(16, 32) <= 48 * 1024  # the defaults fit
    assert flash_smem_bytes(32, 64) <= 48 * 1024  # the benchmark shape fits


def test_work_counts():
    from visualizer.specs.catalog import get

    p = {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 16, "tile": 16, "causal": 0}
    fbytes, fflops = get("flash_attention").work(p)
    nbytes, nflops = get("naive_attention").work(p)
    assert fflops == nflops == 4 * 2 * 16 * 64 * 64
    assert nbytes > fbytes  # S round trips dominate the naive kernel
    # flash: q, o once; K and V once per Q tile (4 tiles)
    assert fbytes == 2 * 4 * 16 * (2 * 64 + 2 * 4 * 64)
    cbytes, cflops = get("flash_attention").work({**p, "causal": 1})
    assert cflops == 4 * 2 * 16 * 64 * 65 / 2 and cbytes < fbytes


# --- figures ------------------------------------------------------------------------------


def figures():
    """The figure module (imported here so the GPU tests also run where plotly is not installed)."""
    pytest.importorskip("plotly")
    from visualizer.figures import attention

    return attention


@pytest.fixture(scope="module")
def causal_tables():
    params = {"batch": 1, "heads": 1, "seq_len": 37, "head_dim": 16, "tile": 16, "causal": 1}
    _, bufs, launch, values = run_sim("flash_attention", params, seed=3)
    info = launch_info(launch)
    t0 = int(bufs["trace"][1].min())
    return trace.tiles_table(info, bufs["tiles"], t0), trace.row_state_table(info, bufs["rows"]), values


def test_flash_loop_figure_frames_are_recorded_steps(causal_tables):
    tiles, state, values = causal_tables
    for q_tile in range(3):
        fig = figures().flash_loop_figure(tiles, state, q_tile, 37, 16, True, SOURCE)
        assert len(fig.frames) == q_tile + 1  # causal: K/V tiles 0..q_tile, the rest skipped
        assert [f.name for f in fig.frames] == [f"step {s}" for s in range(q_tile + 1)]
        assert tuple(fig.layout.xaxis.range) == (0, 37) and tuple(fig.layout.yaxis.range) == (37, 0)
        for frame in fig.frames:  # frames never touch the axes: ranges stay fixed while playing
            assert frame.layout.xaxis.range is None and frame.layout.yaxis.range is None
            z = np.asarray(frame.data[0].z)
            assert z.shape == (3, 3) and list(frame.data[0].x) == [0, 16, 32, 37]  # partial last tile
        assert SOURCE in fig.layout.title.text
        assert fig.layout.sliders[0].steps[0].args[1]["frame"]["redraw"] is True
        assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["▶ Play", "❚❚ Pause"]
        last = np.asarray(fig.frames[-1].data[0].z)
        assert (last[q_tile, q_tile + 1 :] == 4).all()  # skipped (causal)
        assert last[q_tile, q_tile] == 3 and (last[q_tile, :q_tile] == 2).all()
    with pytest.raises(ValueError):
        figures().flash_loop_figure(tiles, state, 0, 37, 16, True, SOURCE, loop_order="fa1")


def test_flash_loop_stage_times_are_relative_to_the_block(causal_tables):
    tiles, state, _ = causal_tables
    shifted = tiles.assign(t_ns=tiles["t_ns"] + 42_925_232)  # a raw host clock, as the simulator reads
    measured = "measured (GPU): NVIDIA H200"  # the same tables as a GPU would record them
    fig = figures().flash_loop_figure(shifted, state, 1, 37, 16, True, measured)
    mine = tiles[(tiles["block_x"] == 1) & (tiles["block_y"] == 0) & (tiles["block_z"] == 0)]
    k0 = mine[(mine["operand"].astype(str) == "K") & (mine["step"] == 0)]["t_ns"].iloc[0]
    note = fig.frames[0].layout.annotations[0].text
    assert f"K staged at +{int(k0 - mine['t_ns'].min()):,} ns" in note
    assert "42,925" not in note and "42925" not in note
    # on the simulator the host clock's nanoseconds are no GPU time: none are shown, and it says why
    sim = figures().flash_loop_figure(shifted, state, 1, 37, 16, True, SOURCE)
    notes = [f.layout.annotations[0].text for f in sim.frames]
    assert all(" ns" not in n and "only on a GPU" in n for n in notes), notes[0]


def test_row_state_figure(causal_tables):
    _, state, _ = causal_tables
    fig = figures().row_state_figure(state, 2, 3)
    assert len(fig.data) == 3
    m, l, alpha = (np.asarray(t.y, dtype=float) for t in fig.data)  # noqa: E741
    assert len(m) == 3 and (np.diff(m) >= 0).all() and l[-1] > 0
    assert alpha[0] == 0 and ((alpha > 0) & (alpha <= 1))[1:].all()
    assert SOURCE in fig.layout.title.text


def test_loop_order_figure_is_labelled_modelled():
    f = figures()
    fig = f.loop_order_figure(100, 16, True, "both")
    assert "modelled" in fig.layout.title.text.lower()
    assert len(fig.data) == 2
    fa1, fa2 = (np.asarray(t.z, dtype=float) for t in fig.data)
    assert np.isnan(fa1[0, 1]) and np.isnan(fa2[0, 1])  # above the diagonal: skipped
    assert fa2[0, 0] == 0 and fa2[1, 0] == 1  # FA2 finishes a Q tile's row of tiles first
    assert fa1[0, 0] == 0 and fa1[1, 0] == 1 and fa1[1, 1] == 7  # FA1 sweeps a K/V column first
    model = f.loop_order_model(100, 16, False)
    assert model["FA1"]["O reads+writes"] > model["FA2"]["O reads+writes"]
    assert len(f.loop_order_figure(100, 16, False, "fa2").data) == 1


def test_smem_gauge_figure():
    ok = figures().smem_gauge_figure(flash_smem_bytes(32, 64), 49152, "NVIDIA H200 (modelled)")
    bad = figures().smem_gauge_figure(flash_smem_bytes(64, 64), 49152, "NVIDIA H200 (modelled)")
    assert "fits" in ok.layout.title.text and "NOT" not in ok.layout.title.text
    assert "does NOT fit" in bad.layout.title.text and "H200" in bad.layout.title.text


def test_capture_through_runner(sim_runner):
    cap = sim_runner.capture(
        "flash_attention", {"seq_len": 24, "heads": 1, "head_dim": 16, "tile": 8, "causal": 1}
    )
    assert cap.check["correct"], cap.check
    assert set(cap.tiles["operand"].astype(str)) == {"Q", "K", "V"}
    assert set(cap.row_state.columns) >= {"block", "block_x", "step", "row", "m", "l"}
    fig = figures().flash_loop_figure(cap.tiles, cap.row_state, 2, 24, 8, True, cap.launch["source"])
    assert len(fig.frames) == 3


# --- GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_flash_on_gpu_realistic(gpu_runner):
    params = {"batch": 1, "heads": 8, "seq_len": 4096, "head_dim": 64, "tile": 32}
    cap = gpu_runner.capture("flash_attention", params)
    assert cap.check["correct"], cap.check  # float64 numpy reference, rtol = atol = 1e-4
    assert cap.launch["instrumented"]["static_smem_bytes"] == flash_smem_bytes(32, 64)
    assert cap.timing["clean_ms"] > 0
    tiles = cap.tiles
    assert len(tiles) == 128 * 8 * (1 + 2 * 128)  # every block: Q once, K and V each step
    causal = gpu_runner.capture("flash_attention", {**params, "causal": 1})
    assert causal.check["correct"], causal.check
    assert len(causal.tiles) == 8 * sum(1 + 2 * (qt + 1) for qt in range(128))


@pytest.mark.gpu
def test_naive_on_gpu(gpu_runner):
    cap = gpu_runner.capture("naive_attention", {"heads": 4, "seq_len": 1000, "head_dim": 64, "tile": 64})
    assert cap.check["correct"], cap.check
