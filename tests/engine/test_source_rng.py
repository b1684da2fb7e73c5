"""Random-number states for a user's kernel: ``rng:SEED:N`` makes the xoroshiro128p states numba.cuda.random's
create_xoroshiro128p_states makes, so NVIDIA's random example runs through the Your-kernel path."""

import numpy as np
import pytest

from visualizer.engine.capture.source import rng_states
from visualizer.engine.run.user_runner import UserRunner, arrays_after
from visualizer.specs.catalog import LaunchError
from visualizer.specs.source import parse_arg, plan_source_launch

# NVIDIA's ex_3d_grid kernel (numba-cuda docs, test_random.py), unedited
SOURCE = """
from numba import cuda
from numba.cuda.random import (
    create_xoroshiro128p_states,
    xoroshiro128p_uniform_float32,
)
import numpy as np


@cuda.jit
def random_3d(arr, rng_states):
    # Per-dimension thread indices and strides
    startx, starty, startz = cuda.grid(3)
    stridex, stridey, stridez = cuda.gridsize(3)

    # Linearized thread index
    tid = (startz * stridey * stridex) + (starty * stridex) + startx

    # Use strided loops over the array to assign a random value to each entry
    for i in range(startz, arr.shape[0], stridez):
        for j in range(starty, arr.shape[1], stridey):
            for k in range(startx, arr.shape[2], stridex):
                arr[i, j, k] = xoroshiro128p_uniform_float32(
                    rng_states, tid
                )
"""


def test_rng_spec_parses_and_refuses_in_one_line():
    spec = parse_arg("s", "rng:7:4096")
    assert (spec.kind, spec.value, spec.shape, spec.nbytes) == ("rng", 7, (4096,), 4096 * 16)
    for bad in ("rng:x:10", "rng:-1:10", "rng:1.5:10", "rng:5", "rng:1:4x4", "rng:1:0"):
        with pytest.raises(LaunchError) as e:
            parse_arg("s", bad)
        assert "\n" not in str(e.value) and ("rng:SEED:N" in str(e.value) or "shape" in str(e.value))


def test_states_are_numba_cudas_own():
    from numba.cuda.random import create_xoroshiro128p_states

    ours = rng_states(12, 1234)
    theirs = create_xoroshiro128p_states(12, seed=1234).copy_to_host()  # object mode here: few states
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours["s0"], theirs["s0"])
    np.testing.assert_array_equal(ours["s1"], theirs["s1"])
    assert len(set(ours["s0"].tolist())) == 12


def first_uniform_float32(states):
    """xoroshiro128p_uniform_float32's first draw from each state, in numpy."""
    x = states["s0"] + states["s1"]
    return ((x >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)).astype(np.float32)


@pytest.mark.parametrize("backend", ["sim", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_nvidias_random_example_runs_with_rng_states(backend):
    plan = plan_source_launch(
        SOURCE,
        "random_3d",
        grid="2,2,2",
        block="4,4,4",
        args=["arr=zeros:float32:8x8x8", "rng_states=rng:1:512"],
        backend=backend,
    )
    with UserRunner(backend) as runner:
        cap = runner.capture_source(plan, seed=0)
    after = arrays_after(cap)
    arr = after["arr"]
    # one draw per thread: element (z, y, x) is thread tid = z*64 + y*8 + x's first number
    want = first_uniform_float32(rng_states(512, 1)).reshape(8, 8, 8)
    np.testing.assert_array_equal(arr, want)
    assert 0.0 <= arr.min() and arr.max() < 1.0 and 0.4 < arr.mean() < 0.6
    assert cap.launch["written"] == ["arr", "rng_states"]  # the states advanced
