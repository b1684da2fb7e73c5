"""The calculator against the CUDA driver on real compiled kernels (GPU only)."""

import os

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="needs NUMBA_ENABLE_CUDASIM=0")
def test_calculator_agrees_with_driver_exactly():
    from visualizer.engine.timing.occupancy_gpu import driver_sweep

    rows = driver_sweep()
    bad = [r for r in rows if r["driver"] != r["calculator"]]
    regs = sorted({r["regs"] for r in rows})
    print(f"occupancy sweep: {len(rows)} cases, {len(bad)} disagreements, register counts seen {regs}")
    assert len(regs) >= 4  # max_registers really produced several register counts
    assert not bad, bad[:10]
