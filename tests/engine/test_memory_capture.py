"""Memory behaviour recorded from real kernels on the simulator: coalescing, conflicts, races."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis import memory as tables
from visualizer.tools.bundle import save


def capture(sim_runner, kernel, params=None):
    cap = sim_runner.capture(kernel, params or {}, accesses=True, time_clean=False)
    assert cap.accesses is not None and cap.requests is not None and cap.hazards is not None
    return cap


def per_line(cap, space, op):
    s = tables.line_summary(cap.requests)
    return s[(s.space == space) & (s.op == op)]


@pytest.fixture(scope="module")
def transposes(sim_runner):
    p = {"rows": 64, "cols": 64, "tile": 32}
    return {k: capture(sim_runner, k, p) for k in ("transpose_naive", "transpose_tiled", "transpose_padded")}


def test_transpose_naive_stores_touch_32_sectors_tiled_4(transposes):
    naive, tiled = transposes["transpose_naive"], transposes["transpose_tiled"]
    assert naive.check["correct"] and tiled.check["correct"]
    for cap, store_sectors in ((naive, 32), (tiled, 4)):
        st = per_line(cap, "global", "store")
        assert st.requests.sum() == 64 * 64 // 32
        assert (st.sectors_per_request == store_sectors).all()
        assert (per_line(cap, "global", "load").sectors_per_request == 4).all()
    # the naive store is where the waste is: 8x the ideal sectors
    assert (
        naive.launch["accesses"]["global_st_sectors"]
        == 8 * naive.launch["accesses"]["global_st_ideal_sectors"]
    )
    # array names come from the kernel's parameters and the shared array's variable
    assert set(tiled.accesses["array"].astype(str)) == {"inp", "out", "tile"}
    assert not {"trace", "active"} & set(naive.accesses["array"].astype(str))


def test_tiled_column_reads_conflict_32_way_padded_none(transposes):
    tiled, padded = transposes["transpose_tiled"], transposes["transpose_padded"]
    tl, pl = per_line(tiled, "shared", "load"), per_line(padded, "shared", "load")
    assert tl.max_bank_ways.tolist() == [32] and pl.max_bank_ways.tolist() == [1]
    # 4 blocks of 32 warps, each request 31 extra wavefronts (Nsight Compute's count)
    assert tiled.launch["accesses"]["shared_ld_bank_conflicts"] == 4 * 32 * 31
    assert padded.launch["accesses"]["shared_ld_bank_conflicts"] == 0
    assert tiled.launch["accesses"]["shared_st_bank_conflicts"] == 0  # rows are stored along banks
    for cap in (tiled, padded):
        assert cap.hazards.empty, cap.hazards.head()  # the barrier orders the tile's store and load


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (32, 32)])
def test_strided_copy_sectors_per_request(sim_runner, stride, sectors):
    cap = capture(sim_runner, "strided_copy", {"n": 256, "stride": stride, "block": 64})
    assert cap.check["correct"]
    ld = per_line(cap, "global", "load")
    assert ld.sectors_per_request.tolist() == [sectors] and ld.ideal_per_request.tolist() == [4]
    assert per_line(cap, "global", "store").sectors_per_request.tolist() == [4]


def test_reduction_race_hazards_in_every_block_every_run(sim_runner):
    params = {"n": 256, "block": 64}
    runs = [capture(sim_runner, "reduction_race", params) for _ in range(2)]
    for cap in runs:
        h = cap.hazards
        races = h[h.kind != "UNINIT"]
        assert set(races.block) == {0, 1, 2, 3}
        assert set(races.kind) == {"RAW"} and (races.space == "shared").all() and (races.array == "s").all()
        assert (races.thread_a != races.thread_b).all()
        assert cap.launch["accesses"]["raced_blocks"] == 4
    # identical tables run to run, whatever the answer came out as
    for name in ("accesses", "requests", "hazards"):
        pd.testing.assert_frame_equal(getattr(runs[0], name), getattr(runs[1], name))


@pytest.mark.parametrize(
    "kernel,params",
    [
        ("reduction", {"n": 256, "block": 64}),
        ("matmul_tiled", {"n": 20, "tile": 8}),
        ("matmul_naive", {"n": 12, "tile": 8}),
        ("vector_add", {"n": 100, "block": 32}),
        ("strided_copy", {"n": 64, "stride": 3, "block": 32}),
        # 4-D arrays (q, k, v, o); the fast kernel's simulated tensor-core exchange goes through shared memory
        pytest.param(
            "flash_attention",
            {"seq_len": 40, "tile": 16, "head_dim": 16, "heads": 1, "batch": 1, "causal": 1},
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "flash_attention_fast",
            {"seq_len": 20, "head_dim": 32, "heads": 1, "batch": 1, "causal": 1},
            marks=pytest.mark.slow,
        ),
    ],
)
def test_correct_kernels_have_no_hazards(sim_runner, kernel, params):
    cap = capture(sim_runner, kernel, params)
    assert cap.check["correct"]
    assert cap.hazards.empty, cap.hazards.head()
    assert cap.launch["accesses"]["hazards"] == {"RAW": 0, "WAR": 0, "WAW": 0, "UNINIT": 0}


def test_matmul_tiled_requests_follow_the_tile_loop(sim_runner):
    cap = capture(sim_runner, "matmul_tiled", {"n": 16, "tile": 8})
    req = cap.requests
    # 4 blocks x 2 warps x 2 steps: one A load request per (block, warp, step); epochs advance per step
    a = req[(req.array == "A") & (req.op == "load")]
    assert len(a) == 4 * 2 * 2 and sorted(a.occurrence.unique()) == [0, 1]
    assert sorted(a.epoch.unique()) == [0, 2]
    # sA[ty, k]: the 32 lanes of a warp read 4 rows' word k: broadcasts within a row, 4 banks apart
    sa = req[(req.array == "sA") & (req.op == "load")]
    assert (sa.bank_ways == 1).all() and len(sa) == 4 * 2 * 2 * 8


def test_bundle_has_memory_tables(sim_runner, tmp_path):
    cap = capture(sim_runner, "strided_copy", {"n": 64, "stride": 2, "block": 32})
    written = {p.name for p in save(cap, tmp_path)}
    assert {"accesses.parquet", "requests.parquet", "hazards.parquet"} <= written
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert launch["accesses"]["global_ld_sectors"] == 2 * 8 and launch["accesses"]["source"] == tables.SOURCE
    assert pd.read_parquet(tmp_path / "hazards.parquet").empty  # present even when empty
    (load,) = [r for r in launch["accesses"]["per_line"] if r["op"] == "load"]
    assert (load["array"], load["sectors_per_request"], load["ideal_per_request"]) == ("src", 8.0, 4.0)
    back = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(back) == len(cap.requests)


def test_plain_capture_records_nothing(sim_runner, tmp_path):
    cap = sim_runner.capture("strided_copy", {"n": 64}, time_clean=False)
    assert cap.accesses is None and "accesses" not in cap.launch
    assert not (set(p.name for p in save(cap, tmp_path)) & {"accesses.parquet", "hazards.parquet"})


def test_cli_capture_accesses(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    args = [
        sys.executable,
        "-m",
        "visualizer",
        "capture",
        "transpose_tiled",
        "--param",
        "rows=32",
        "--param",
        "cols=32",
    ]
    bad = subprocess.run(
        [*args, "--sample-blocks", "0", "--out", str(tmp_path)], capture_output=True, text=True, env=env
    )  # (--accesses itself now works on a GPU too: sampled warps record, tests/engine/test_gpu_accesses.py)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "add --accesses" in bad.stderr
    ok = subprocess.run(
        [*args, "--backend", "sim", "--accesses", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert "992 bank conflicts" in ok.stdout  # one 32x32 block: 32 column reads x 31
    assert (tmp_path / "requests.parquet").exists()


def test_kernels_json_lists_memory_kernels():
    out = subprocess.run(
        [sys.executable, "-m", "visualizer", "kernels", "--json"], capture_output=True, text=True, check=True
    )
    listed = json.loads(out.stdout)
    for k in ("transpose_naive", "transpose_tiled", "transpose_padded", "strided_copy"):
        assert k in listed
    assert listed["strided_copy"]["params"]["stride"] == 1


def test_numpy_references():
    from visualizer.specs import catalog

    rng = np.random.default_rng(0)
    spec = catalog.get("strided_copy")
    x = spec.make_inputs({"n": 5, "stride": 3, "block": 32}, rng)
    np.testing.assert_array_equal(spec.reference(x, {"n": 5, "stride": 3})["dst"], x["src"][[0, 3, 6, 9, 12]])
    spec = catalog.get("transpose_padded")
    x = spec.make_inputs({"rows": 3, "cols": 5, "tile": 8}, rng)
    assert spec.reference(x, {})["out"].shape == (5, 3)
