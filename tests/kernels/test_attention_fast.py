"""The fast FlashAttention kernel (kernels/attention_fast.py) on the simulator: float64 accuracy,
recorded tiles and softmax state, the catalog spec, the bench's error norm; and one GPU check.

The main cases run through the simulator worker (fastsim, as the app runs them); a launch in this
process runs on numba's stock simulator, an OS thread per CUDA thread, so those stay tiny and
poison the output with NaN first, so an element the kernel never writes fails the check.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from visualizer.engine.capture.builds import pair
from visualizer.engine.capture.builtin import launch_args, record_buffers
from visualizer.kernels import attention_fast as af
from visualizer.specs import attention as specs
from visualizer.specs.catalog import LaunchError, plan_launch
from visualizer.tools.attention_bench import rel_err_f64

ROOT = Path(__file__).resolve().parents[2]
REL_TOL = 1e-5  # max |out - ref| / max |ref| against float64


def reference64(q, k, v, causal: bool) -> np.ndarray:
    """softmax(q kᵀ / sqrt(d)) v in float64 (not rounded back to float32)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    return np.einsum("bhqk,bhkd->bhqd", w, v) / w.sum(axis=-1)[..., None]


def run_fast(params: dict, seed: int, kernels=None):
    """Instrumented build through the catalog's plan on the simulator, launched in this process (the
    stock simulator: slow, keep launches tiny): (inputs+output, buffers, launch)."""
    spec, values, launch = plan_launch("flash_attention_fast", params, backend="sim")
    x = spec.make_inputs(values, np.random.default_rng(seed))
    x["o"][:] = np.nan
    bufs = record_buffers(spec, launch)
    if kernels is None:
        kernels = af.flash_attention_fast_for(
            values["head_dim"], values["causal"], values["seq_len"], values["heads"], values["batch"]
        )
    traced, _ = pair(kernels, spec.active_when)
    args = launch_args(spec, launch, {**x, **bufs})[0]
    traced[launch.grid, launch.block](*args)
    return x, bufs, launch


def captured_fast(sim_runner, params: dict):
    """The same through the simulator worker (fastsim, as the app runs it), its tables turned back
    into the kernel's record buffers: (inputs+output, {"tiles", "rows"}, launch)."""
    _, _, launch = plan_launch("flash_attention_fast", params, backend="sim")
    cap = sim_runner.capture("flash_attention_fast", params, time_clean=False)
    x = {**cap.inputs, **cap.outputs}
    slot = {"Q": af.Q_TILE, "K": af.K_TILE, "V": af.V_TILE}
    tiles = np.full((launch.blocks, launch.tile_steps, 3, 5), -1, np.int64)
    for r in cap.tiles.itertuples():
        tiles[r.block, r.step, slot[str(r.operand)]] = (r.row0, r.col0, r.rows, r.cols, r.t_ns)
    blocks, steps, rows = launch.row_state
    state = np.full((blocks, steps, rows, 2), np.nan, np.float32)
    for r in cap.row_state.itertuples():
        state[r.block, r.step, r.row] = (r.m, r.l)
    return x, {"tiles": tiles, "rows": state}, launch


CASES = [
    # head_dim 64 (8 warps x 64 keys), 128 (4 warps x 16 keys) and 32; seq_len not a multiple of
    # any tile; causal (one long and one short Q tile per block) and not; batch and heads > 1
    {"batch": 2, "heads": 1, "seq_len": 70, "head_dim": 64, "causal": 0},
    {"batch": 1, "heads": 1, "seq_len": 130, "head_dim": 64, "causal": 1},
    {"batch": 1, "heads": 2, "seq_len": 33, "head_dim": 128, "causal": 1},
    {"batch": 1, "heads": 1, "seq_len": 50, "head_dim": 128, "causal": 0},
    {"batch": 1, "heads": 1, "seq_len": 20, "head_dim": 32, "causal": 1},
]


@pytest.fixture(scope="module", params=CASES, ids=lambda p: "L{seq_len}-d{head_dim}-c{causal}".format(**p))
def fast_run(request, sim_runner):
    return request.param, *captured_fast(sim_runner, request.param)


def test_matches_float64_within_1e_5_relative(fast_run):
    params, x, _, _ = fast_run
    assert np.isfinite(x["o"]).all()
    want = reference64(x["q"], x["k"], x["v"], bool(params["causal"]))
    assert rel_err_f64(x["o"], want) < REL_TOL


def test_other_tile_sizes_match_float64():
    """A build with 4 warps x 32 keys (not a launch default): the tile loops hold for other sizes."""
    params = {"batch": 1, "heads": 1, "seq_len": 70, "head_dim": 32, "causal": 1}
    spec, values, launch = plan_launch("flash_attention_fast", params, backend="sim")
    traced, _ = pair(af.flash_attention_fast_kernel(32, True, warps=4, block_k=32), spec.active_when)
    x = spec.make_inputs(values, np.random.default_rng(7))
    x["o"][:] = np.nan
    n_k = -(-70 // 32)
    bufs = {
        "trace": np.zeros((3, 2 * 128), np.int64),
        "active": np.zeros(2 * 128, np.uint8),
        "tiles": np.full((1, 2 * n_k, 3, 5), -1, np.int64),
        "rows": np.zeros((1, 2 * n_k, 64, 2), np.float32),
    }
    args = launch_args(spec, launch, {**x, **bufs})[0]
    traced[af.fast_grid(1, 1, 70, 64, True), (32, 4, 1)](*args)
    assert rel_err_f64(x["o"], reference64(x["q"], x["k"], x["v"], True)) < REL_TOL


def test_tensor_core_split_is_exact_and_keeps_tf32_bits():
    """x = hi + lo exactly, hi has TF32's 10 mantissa bits, lo is at most 2^-10 of x."""
    from visualizer.kernels.tensor_core import split_tf32

    for x in np.random.default_rng(0).standard_normal(200).astype(np.float32):
        hi, lo = split_tf32(x)
        assert np.float32(hi) + np.float32(lo) == x
        assert np.array([hi], np.float32).view(np.uint32)[0] & 0x1FFF == 0
        assert abs(lo) <= abs(x) * 2.0**-10


def test_records_each_tile_it_staged(fast_run):
    params, _, bufs, launch = fast_run
    seq_len, causal = params["seq_len"], bool(params["causal"])
    bq, bk, _ = specs.fast_config(params["head_dim"])
    n_q, n_k = -(-seq_len // bq), -(-seq_len // bk)
    tiles = bufs["tiles"]  # (blocks, steps, operands, 5): row0, col0, rows, cols, t
    for block in range(launch.blocks):
        x = block % launch.grid[0]
        parts = [n_q - 1 - x, x] if causal else [x]
        parts = list(dict.fromkeys(parts))  # the middle tile of an odd count once
        slot = 0
        for qt in parts:
            q0 = qt * bq
            q = tiles[block, slot, af.Q_TILE]
            assert q[0] == q0 and q[2] == min(bq, seq_len - q0) and q[4] >= 0
            n = min(n_k, (min(q0 + bq, seq_len) - 1) // bk + 1) if causal else n_k
            for step in range(n):
                for op in (af.K_TILE, af.V_TILE):
                    rec = tiles[block, slot + step, op]
                    assert rec[0] == step * bk and rec[2] == min(bk, seq_len - step * bk) and rec[4] >= 0
            slot += n
        assert (tiles[block, slot:, :, 4] == -1).all()  # nothing past the steps it took


def test_recorded_softmax_state_is_each_rows_max_and_sum(fast_run):
    """After a Q tile's last step, m is the row's largest score and l = sum exp(s - m)."""
    params, x, bufs, launch = fast_run
    seq_len, causal, d, heads = params["seq_len"], bool(params["causal"]), params["head_dim"], params["heads"]
    bq, bk, _ = specs.fast_config(d)
    n_q, n_k = -(-seq_len // bq), -(-seq_len // bk)
    state = bufs["rows"]  # (blocks, steps, block_q rows, 2)
    gx = launch.grid[0]
    for block in range(min(launch.blocks, state.shape[0])):
        bx, by = block % gx, block // gx  # causal: y = batch * heads + head; else y + heads * z
        b, h = divmod(by, heads)
        q, k = x["q"][b, h].astype(np.float64), x["k"][b, h].astype(np.float64)
        s = q @ k.T / math.sqrt(d)
        if causal:
            s = np.where(np.tril(np.ones((seq_len, seq_len), bool)), s, -np.inf)
        slot = 0
        for qt in dict.fromkeys([n_q - 1 - bx, bx] if causal else [bx]):
            q0 = qt * bq
            n = min(n_k, (min(q0 + bq, seq_len) - 1) // bk + 1) if causal else n_k
            rows = np.arange(q0, min(q0 + bq, seq_len))
            got = state[block, slot + n - 1, : len(rows)]
            want_m = s[rows].max(axis=1)
            np.testing.assert_allclose(got[:, 0], want_m, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[:, 1], np.exp(s[rows] - want_m[:, None]).sum(axis=1), rtol=1e-5)
            slot += n


def test_spec_mirrors_the_kernels_configuration():
    """attention_specs (host only, no numba) repeats the kernel's tile choices: keep them equal."""
    assert specs.FAST_CONFIGS == af.CONFIGS and specs.FAST_PAD == af.PAD
    for d in (32, 64, 128):
        warps, bk = af.fast_config(d)
        assert specs.fast_config(d) == (16 * warps, bk, warps)
        assert specs.fast_smem_bytes(d, bk) == 4 * af.fast_smem_floats(d, bk) <= 48 * 1024
    with pytest.raises(ValueError, match="head_dim"):
        af.fast_config(16)


def test_plan_geometry_and_refusals():
    # geometry is the same on both backends; on the simulator this launch is over the cost limit
    with pytest.raises(LaunchError, match="simulated thread-steps"):
        plan_launch(
            "flash_attention_fast", {"batch": 2, "heads": 3, "seq_len": 200, "head_dim": 64, "causal": 1}
        )
    _, _, launch = plan_launch(
        "flash_attention_fast", {"batch": 2, "heads": 3, "seq_len": 200, "head_dim": 64, "causal": 1}, "gpu"
    )
    assert launch.grid == af.fast_grid(2, 3, 200, 128, True) == (1, 6, 1)
    assert launch.block == (32, 8, 1)
    # the one block per (batch, head) does Q tiles 1 (4 K/V steps) and 0 (2)
    assert specs.fast_steps(200, 128, 64, True) == [6] and launch.tile_steps == 6
    _, _, launch = plan_launch(
        "flash_attention_fast", {"batch": 1, "heads": 2, "seq_len": 200, "head_dim": 64, "causal": 0}, "gpu"
    )
    assert launch.grid == (2, 2, 1) and launch.tile_steps == 4
    _, _, launch = plan_launch(
        "flash_attention_fast", {"batch": 1, "heads": 1, "seq_len": 200, "head_dim": 128, "causal": 0}, "gpu"
    )
    assert launch.block == (32, 4, 1) and launch.grid == (4, 1, 1) and launch.tile_steps == 13
    for bad in ({"head_dim": 16}, {"tile": 32}, {"causal": 2}):
        with pytest.raises(LaunchError):
            plan_launch("flash_attention_fast", bad)


def test_rel_err_f64_norm():
    ref = np.array([[1.0, -2.0], [0.5, 4.0]])
    assert rel_err_f64(ref.astype(np.float32), ref) == 0.0
    got = ref.copy()
    got[0, 1] += 4e-5  # 4e-5 / max|ref| (4) = 1e-5
    assert rel_err_f64(got, ref) == pytest.approx(1e-5)
    got[1, 0] = np.nan
    assert rel_err_f64(got, ref) == float("inf")


def test_cli_lists_the_fast_kernel():
    out = subprocess.run(
        [sys.executable, "-m", "visualizer", "kernels", "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert listed["flash_attention_fast"]["params"]["head_dim"] == 64


def test_recorded_h200_rows_say_which_run_and_hold_the_error_bound():
    doc = json.loads((ROOT / "docs" / "attention_fast_h200.json").read_text())
    rows = doc["rows"]
    impls = {r["impl"] for r in rows}
    assert {
        "ours teaching (clean)",
        "ours fast (clean)",
        "torch unfused",
        "SDPA math",
        "SDPA default",
    } <= impls
    assert {(r["seq_len"], r["causal"]) for r in rows} == {
        (4096, False),
        (8192, False),
        (4096, True),
        (8192, True),
    }
    for r in rows:
        assert r["run"] in doc["runs"] or r["run"].split(" (")[0] in doc["runs"]
        assert r["rel_err_f64"] < REL_TOL


@pytest.mark.gpu
def test_full_size_on_the_gpu_matches_float64():
    """H200: b=1, h=8 at 4096, head_dim 64 and 128, causal and not, against float64 on 16 query rows."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        pytest.skip("in-process GPU checks need NUMBA_ENABLE_CUDASIM=0 (see README)")
    from numba import cuda

    from visualizer.tools.attention_bench import _check_rows, _reference_rows

    L = 4096
    rng = np.random.default_rng(3)
    for d in (64, 128):
        q, k, v = (rng.standard_normal((1, 8, L, d), dtype=np.float32) for _ in range(3))
        dq, dk, dv = (cuda.to_device(a) for a in (q, k, v))
        for causal in (0, 1):
            do = cuda.to_device(np.full(q.shape, np.nan, np.float32))
            _, clean = pair(af.flash_attention_fast_for(d, causal, L, 8, 1))
            warps, _ = af.fast_config(d)
            rec = (cuda.device_array((1, 1, 1, 5), np.int64), cuda.device_array((1, 1, 1, 2), np.float32))
            clean[af.fast_grid(1, 8, L, 16 * warps, bool(causal)), (32, warps, 1)](
                dq, dk, dv, do, L, causal, *rec
            )
            out = do.copy_to_host()
            assert np.isfinite(out).all()
            rs = _check_rows(L)
            err = rel_err_f64(out[:, :, rs], _reference_rows(q, k, v, bool(causal), rs))
            assert err < REL_TOL, (d, causal, err)


def test_flash_page_shows_the_fast_kernel_against_sdpa(monkeypatch):
    """The page's timing table has a row for the fast kernel and one for SDPA's default, holding the
    recorded times (the sample document of tests/data, real H200 rows)."""
    from tests.web.test_app_flash_attention import SAMPLE, SAMPLE_FILE, SMALL, TIMINGS_ENV, open_page

    monkeypatch.setenv(TIMINGS_ENV, str(SAMPLE_FILE))
    at = open_page("flash_attention", **{**SMALL, "causal": 0})
    (table,) = [t.value for t in at.dataframe if t.value.index.name == "implementation"]
    from visualizer.figures.attention import TIMING_STYLES

    fast = TIMING_STYLES["ours fast (clean)"][0]
    sdpa = [name for name in table.index if name.startswith("torch SDPA default")]
    assert len(sdpa) == 1 and fast in table.index
    for row in SAMPLE["rows"]:
        name = {"ours fast (clean)": fast, "torch sdpa default fp32": sdpa[0]}.get(row["impl"])
        if name and not row["causal"]:
            assert table.loc[name, f"seq_len {row['seq_len']}"] == pytest.approx(row["ms"])
    assert any("our fast kernel takes" in m.value for m in at.markdown)
