"""The memory-access kernels on a real GPU: same answers as numpy; their accesses recorded by sampled warps."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "kernel,params",
    [
        ("transpose_naive", {"rows": 70, "cols": 45, "tile": 32}),
        ("transpose_tiled", {"rows": 70, "cols": 45, "tile": 32}),
        ("transpose_padded", {"rows": 70, "cols": 45, "tile": 16}),
        ("strided_copy", {"n": 1000, "stride": 32, "block": 128}),
    ],
)
def test_memory_kernels_on_gpu(gpu_runner, kernel, params):
    cap = gpu_runner.capture(kernel, params, repeats=3)
    assert cap.check["correct"], cap.check
    assert cap.measured and cap.accesses is None
    if kernel.startswith("transpose"):
        np.testing.assert_array_equal(cap.outputs["out"], cap.inputs["inp"].T)


def test_access_recording_on_gpu_is_the_kernels_own_in_sampled_warps(gpu_runner):
    cap = gpu_runner.capture("strided_copy", {"n": 4096, "stride": 8, "block": 128}, accesses=True, repeats=3)
    assert cap.check["correct"]
    summ = cap.launch["accesses"]
    assert summ["source"] == "measured (GPU, sampled warps)" and summ["sample"]["unrecorded_accesses"] == 0
    req = cap.requests
    loads = req[(req["op"].astype(str) == "load")]
    stores = req[(req["op"].astype(str) == "store")]
    # one float32 per lane, 32 bytes apart: every lane its own sector; the stores are contiguous
    assert (
        len(loads) == len(stores) == 3 * 4
        and (loads["sectors"] == 32).all()
        and (stores["sectors"] == 4).all()
    )
