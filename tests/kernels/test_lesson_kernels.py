"""The lessons' non-AI kernels on the simulator: numpy checks, and what the memory engine records."""

import numpy as np
import pytest

from visualizer.specs import catalog
from visualizer.specs.lessons import heat_step_reference, histogram_values

STENCIL_LAUNCHES = [
    {"ny": 40, "nx": 37, "tile": 16},  # ragged edge blocks both ways
    {"ny": 16, "nx": 16, "tile": 8},
    {"ny": 33, "nx": 70, "tile": 32},
]
HISTOGRAM_LAUNCHES = [
    {"n": 2000, "nbins": 8, "hot": 50, "block": 128},
    {"n": 1000, "nbins": 300, "hot": 0, "block": 64},  # more bins than threads: block-stride loops
    {"n": 777, "nbins": 1, "hot": 0, "block": 256},  # every value in one bin
]


def test_heat_reference_is_one_explicit_step():
    u = np.zeros((5, 5), np.float32)
    u[2, 2] = 100.0
    out = heat_step_reference(u, 0.2)
    assert out[2, 2] == pytest.approx(100.0 - 0.2 * 400.0)
    assert out[1, 2] == out[2, 1] == out[3, 2] == out[2, 3] == pytest.approx(20.0)
    assert out[0].sum() == 0  # the boundary is held


def test_histogram_values_skew():
    rng = np.random.default_rng(0)
    x = histogram_values({"n": 10_000, "nbins": 16, "hot": 100}, rng)
    assert (x == 0).all()
    x = histogram_values({"n": 10_000, "nbins": 16, "hot": 0}, rng)
    assert x.min() == 0 and x.max() == 15 and x.dtype == np.int32


@pytest.mark.parametrize("params", STENCIL_LAUNCHES)
def test_stencil_matches_numpy_and_reads_no_uninitialised_shared(sim_runner, params):
    cap = sim_runner.capture("heat_stencil", params, accesses=True, time_clean=False)
    assert cap.check["correct"], cap.check
    haz = cap.hazards
    assert haz.empty, haz.head()  # no UNINIT reads of the halo, no races
    # the halo loads are recorded: an interior tile loads tile^2 + 4 tile cells of u
    t = params["tile"]
    loads = cap.accesses[
        (cap.accesses["array"].astype(str) == "u") & (cap.accesses["op"].astype(str) == "load")
    ]
    per_block = loads.groupby("block").size()
    if params["ny"] > 2 * t and params["nx"] > 2 * t:
        assert per_block.max() == t * t + 4 * t
    # every cell of u is loaded by the block that owns it, and halo cells by their neighbours too
    assert loads["index"].nunique() == params["ny"] * params["nx"]


@pytest.mark.parametrize("kernel", ["histogram_global", "histogram_shared"])
@pytest.mark.parametrize("params", HISTOGRAM_LAUNCHES)
def test_histograms_match_numpy_without_hazards(sim_runner, kernel, params):
    cap = sim_runner.capture(kernel, params, accesses=True, time_clean=False)
    assert cap.check["correct"], cap.check
    assert cap.hazards.empty, cap.hazards.head()
    acc = cap.accesses
    atomics = acc[(acc["array"].astype(str) == "bins") & (acc["op"].astype(str) == "atomic")]
    blocks = catalog.ceil_div(params["n"], params["block"])
    if kernel == "histogram_global":
        assert len(atomics) == params["n"]  # one global atomic per value
    else:
        # privatised: at most one global atomic per bin per block, and shared atomics for every value
        assert atomics.groupby("index").size().max() <= blocks
        shared = acc[(acc["space"].astype(str) == "shared") & (acc["op"].astype(str) == "atomic")]
        assert len(shared) == params["n"]


def test_lesson_kernels_are_listed():
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "visualizer", "kernels", "--json"], capture_output=True, text=True, check=True
    )
    listed = json.loads(out.stdout)
    assert {"heat_stencil", "histogram_global", "histogram_shared"} <= set(listed)


def test_shared_arrays_do_not_alias_after_an_access_recording(sim_runner):
    """After a recorded launch the recorder's hooks stay installed; a kernel with several shared arrays
    (FlashAttention) must still get one buffer per allocation site (regression: they aliased)."""
    sim_runner.capture("reduction", {"n": 256, "block": 64}, accesses=True, time_clean=False)
    # head_dim 16, tile 16: the build test_attention_break and the FlashAttention page tests launch too,
    # compiled once into the engine's disk cache (a FlashAttention build is minutes of compile)
    cap = sim_runner.capture("flash_attention", {"seq_len": 64, "heads": 1, "head_dim": 16, "tile": 16})
    assert cap.check["correct"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kernel,params",
    [("heat_stencil", p) for p in STENCIL_LAUNCHES]
    + [(k, p) for k in ("histogram_global", "histogram_shared") for p in HISTOGRAM_LAUNCHES]
    + [
        ("heat_stencil", {"ny": 2048, "nx": 2048, "tile": 32}),
        ("histogram_shared", {"n": 1 << 22, "nbins": 256, "hot": 30, "block": 256}),
    ],
)
def test_lesson_kernels_on_gpu(gpu_runner, kernel, params):
    cap = gpu_runner.capture(kernel, params)
    assert cap.check["correct"], cap.check
    assert cap.measured and cap.timing["clean_ms"] > 0
