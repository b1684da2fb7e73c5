"""The PMPP path's kernels on the simulator, each against numpy (the capture's own check) on ragged and
edge-case launches, and the inputs that make the comparisons fair."""

import numpy as np
import pytest

from visualizer.specs import catalog
from visualizer.specs.pmpp import conv2d_reference, section_scan_reference

LAUNCHES = [
    ("conv2d_naive", {"ny": 19, "nx": 23, "radius": 2, "tile": 8}),
    ("conv2d_tiled", {"ny": 19, "nx": 23, "radius": 2, "tile": 8}),  # 4x4 outputs per 8x8 block, ragged
    ("conv2d_tiled", {"ny": 33, "nx": 40, "radius": 1, "tile": 16}),
    ("reduce_divergent", {"n": 1000, "block": 64}),  # a partial last block
    ("reduce_convergent", {"n": 1000, "block": 256}),
    ("reduce_shuffle", {"n": 1000, "block": 64}),
    ("reduce_shuffle", {"n": 100, "block": 1024}),  # 32 warps: every warp slot used
    ("scan_kogge_stone", {"n": 300, "block": 64}),
    ("scan_brent_kung", {"n": 300, "block": 64}),
    ("scan_brent_kung", {"n": 64, "block": 32}),
    ("merge_corank", {"m": 100, "n": 37, "per_thread": 5, "block": 32}),
    ("merge_corank", {"m": 0, "n": 50, "per_thread": 8, "block": 32}),  # one side empty
    ("merge_corank", {"m": 64, "n": 64, "per_thread": 1, "block": 32}),
    ("spmv_csr", {"rows": 100, "width": 7, "long": 30, "block": 32}),
    ("spmv_ell", {"rows": 100, "width": 7, "long": 30, "block": 32}),
    ("particles_aos", {"n": 333, "block": 128}),
    ("particles_soa", {"n": 333, "block": 128}),
]


@pytest.mark.parametrize(
    ("kernel", "params"), LAUNCHES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(LAUNCHES)]
)
def test_kernel_matches_numpy(sim_runner, kernel, params):
    cap = sim_runner.capture(kernel, params, time_clean=False)
    assert cap.check["correct"], cap.check
    for name, out in cap.check["outputs"].items():
        assert out["mismatches"] == 0 and out["elements"] > 0, (name, out)


def test_a_wrong_kernel_would_be_caught():
    """The references are not the kernels' own maths: a shifted scan or a clipped convolution differs."""
    x = np.arange(1, 9, dtype=np.float32)
    assert section_scan_reference(x, 4).tolist() == [1, 3, 6, 10, 5, 11, 18, 26]
    img = np.ones((3, 3), np.float32)
    y = conv2d_reference(img, np.ones((3, 3), np.float32))
    assert y[1, 1] == 9 and y[0, 0] == 4  # zero ghost cells outside the image


def test_csr_and_ell_hold_the_same_matrix():
    spec_csr, spec_ell = catalog.get("spmv_csr"), catalog.get("spmv_ell")
    p = spec_csr.resolve({"rows": 50, "width": 6, "long": 20})
    csr = spec_csr.make_inputs(p, np.random.default_rng(3))
    ell = spec_ell.make_inputs(p, np.random.default_rng(3))
    dense_csr = np.zeros((50, 50))
    for r in range(50):
        lo, hi = csr["row_ptr"][r], csr["row_ptr"][r + 1]
        dense_csr[r, csr["col_idx"][lo:hi]] = csr["values"][lo:hi]
    dense_ell = np.zeros((50, 50))
    ci, v = ell["col_idx"].reshape(6, 50), ell["values"].reshape(6, 50)
    for k in range(6):
        np.add.at(dense_ell, (np.arange(50), ci[k]), v[k])  # padding adds 0 at column 0
    assert np.array_equal(dense_csr, dense_ell)
    assert np.diff(csr["row_ptr"]).max() == 6  # row 0 is always as long as the width


def test_aos_and_soa_move_the_same_particles():
    aos, soa = catalog.get("particles_aos"), catalog.get("particles_soa")
    p = aos.resolve({"n": 40})
    a = aos.make_inputs(p, np.random.default_rng(1))["p"]
    s = soa.make_inputs(p, np.random.default_rng(1))
    assert np.array_equal(a[:, 2], s["vx"]) and np.array_equal(a[:, 0], s["x"])


@pytest.mark.parametrize(
    ("kernel", "params", "words"),
    [
        ("scan_kogge_stone", {"block": 48}, "power of two"),
        ("spmv_ell", {"rows": 4, "width": 8}, "more than the 4 columns"),
    ],
)
def test_bad_launches_are_one_line_errors(kernel, params, words):
    with pytest.raises(catalog.LaunchError, match=words):
        catalog.plan_launch(kernel, params)


PMPP_PAIRS = ("convolution", "reduction_trees", "reduction_shuffle", "scan", "spmv", "aos_soa", "histogram")


def _gpu_launches():
    from visualizer.specs.pairs import PAIRS

    sides = [(s.kernel, s.params_for("gpu")) for key in PMPP_PAIRS for s in (PAIRS[key].a, PAIRS[key].b)]
    return LAUNCHES + sides  # the simulator's edge cases, and the Compare pairs' GPU sizes


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("kernel", "params"), _gpu_launches(), ids=[f"{k}-{i}" for i, (k, _) in enumerate(_gpu_launches())]
)
def test_kernel_matches_numpy_on_gpu(gpu_runner, kernel, params):
    cap = gpu_runner.capture(kernel, params)
    assert cap.measured and cap.check["correct"], cap.check
