"""Warp intrinsics, votes after threads exit, grid sync across blocks and NVIDIA's cooperative
examples: the simulator (visualizer.engine.sim.fastsim) against numpy models of what the hardware defines, and
(marked gpu) a GPU against the same models. The kernels and models are in tests/warp_cases.py; each
engine runs them in its own process (fastsim is installed by monkeypatching)."""

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
CASES_PY = HERE / "warp_cases.py"
sys.path.insert(0, str(HERE))
import warp_cases  # noqa: E402  (models and names; the kernels run in subprocesses)
from case_scripts import run_case_script  # noqa: E402


def run_cases(tmp_path, engine: str) -> dict:
    return run_case_script(CASES_PY, tmp_path, engine)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("warp_sim"), "sim")


def assert_matches_model(results, name):
    got, want = results[name], warp_cases.MODELS[name]()
    assert "error" not in got, f"{name}: {got.get('error')}"
    assert got.keys() == want.keys(), name
    for key in want:
        w = np.asarray(want[key])
        g = np.asarray(got[key])
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-9, err_msg=f"{name}.{key}")
        else:
            np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64), err_msg=f"{name}.{key}")


@pytest.mark.parametrize("name", sorted(warp_cases.CASES))
def test_simulator_matches_the_model(sim, name):
    assert_matches_model(sim, name)


def test_the_models_test_something():
    # the cases are not trivial: out-of-range deltas return the caller's own value, >= 32 wraps
    m = warp_cases.model_shfl()
    k32 = list(warp_cases.DELTAS).index(32)
    k33 = list(warp_cases.DELTAS).index(33)
    v = np.arange(64) * 10 + 7
    np.testing.assert_array_equal(m["down"][k32], v)  # delta 32 = 0 in 5 bits
    assert m["down"][k33][0] == v[1]  # delta 33 = 1 in 5 bits
    # the heat equation keeps its heat; the laplace launch of 4 blocks lost 570 of it before
    np.testing.assert_allclose(warp_cases.heat_reference().sum(), 10000)
    d = warp_cases.model_divergent()
    assert d["am"][0] == 0x49249249 and d["am"][1] == 0xB6DB6DB6  # lanes 0, 3, 6, ... and the rest
    assert d["am"][32] == 0x00249249  # warp 1: lanes 24..31 exited first


def test_laplace_keeps_its_heat(sim):
    # NVIDIA's test: the integral over the domain stays 10,000
    np.testing.assert_allclose(sim["laplace_sum_4x256"], 10000)


def test_nanosleep_lets_other_threads_run(sim):
    np.testing.assert_array_equal(sim["nanosleep_spin"], [1])


def test_refusals_are_one_line(sim):
    r = sim["refusals"]
    for name, msg in r.items():
        assert msg is not None and "\n" not in msg, (name, msg)
    assert r["own_lane_missing"].startswith("WarpError: tid=[16, 0, 0]")
    assert "mask 0x0000ffff, which leaves out the calling lane" in r["own_lane_missing"]
    assert "mask 0xffffffff names lanes that have exited: 8-31 (undefined on a GPU;" in r["vote_names_exited"]
    assert "names lanes that have exited: 4-15 (no such thread: the block ends)" in r["vote_names_missing"]
    assert r["shfl_from_outside"] == (
        "WarpError: tid=[32, 0, 0] ctaid=[0, 0, 0]: cuda.shfl_down_sync with mask 0xffffffff: lane 0 reads "
        "lane 16, which does not exist (the block ends before it) (its value is undefined on a GPU)"
    )
    assert r["warp_deadlock"].startswith("KernelHangError: deadlock: no thread can go on in block [0, 0, 0]")
    assert (
        "16 threads (0,0,0)..(15,0,0) wait at shfl_sync(mask 0xffffffff) at warp_cases.py:"
        in r["warp_deadlock"]
    )
    assert "16 threads (16,0,0)..(31,0,0) wait at a barrier" in r["warp_deadlock"]
    assert r["sys_exit"].startswith(
        "NotSimulatedError: tid=[3, 0, 0] ctaid=[0, 0, 0]: sys.exit() in a kernel"
    )
    assert "numba cannot compile it for a GPU" in r["sys_exit"]
    assert r["cache_hint"].endswith("]: cuda.ldcg is not simulated: run this kernel on a GPU")
    assert r["libdevice"].endswith(
        "]: libdevice.sinf is not simulated: use math.sin or run this kernel on a GPU"
    )
    assert "grid sync in a launch the simulator did not run as cooperative" in r["hidden_grid_sync"]
    g = r["grid_deadlock"]
    assert g.startswith(
        "KernelHangError: deadlock: no thread can go on in a cooperative launch of 2 blocks: "
    )
    assert (
        "4 threads (0,0,0)..(3,0,0) wait at a grid sync at warp_cases.py:" in g and "in block [0, 0, 0]" in g
    )
    assert "thread (0,0,0) waits at a barrier at warp_cases.py:" in g
    assert (
        "300 blocks = 76,800 threads cannot be co-resident on the simulator (limit 65,536"
        in r["coop_too_large"]
    )


@pytest.mark.gpu
def test_gpu_matches_the_model(tmp_path):
    gpu = run_cases(tmp_path, "gpu")
    failed = []
    for name in sorted(warp_cases.CASES):
        try:
            assert_matches_model(gpu, name)
        except AssertionError as e:
            failed.append(f"{name}: {str(e)[:600]}")
    assert not failed, "\n".join(failed)
