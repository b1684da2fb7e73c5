"""The memory-access kernels on a real GPU: same answers as numpy; recording refuses the GPU."""

import numpy as np
import pytest

from visualizer.specs.catalog import LaunchError

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


def test_access_recording_refused_on_gpu(gpu_runner):
    with pytest.raises(LaunchError, match="simulator"):
        gpu_runner.capture("strided_copy", {"n": 64}, accesses=True)
