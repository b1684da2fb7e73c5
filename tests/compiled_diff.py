"""Differential runs for the compiled engine (visualizer/engine/compiled): one kernel launched on fastsim
and on the compiled engine with the same inputs, the arrays compared after. Imported by
tests/engine/test_compiled_engine.py (a simulator process: NUMBA_ENABLE_CUDASIM=1, fastsim installed)."""

from __future__ import annotations

import numpy as np

from visualizer.engine.compiled import NotCompiled, launch


def fastsim_launch(kernel, grid, block, args, dynamic_smem: int = 0, seed=None):
    """``kernel`` (a plain function or a dispatcher) launched on fastsim, arrays in place."""
    from numba import cuda

    from visualizer.engine.sim import fastsim

    fastsim.install()
    k = kernel if hasattr(kernel, "py_func") or hasattr(kernel, "fn") else cuda.jit(kernel)
    with fastsim.seeded(seed[0], seed[1]) if seed else fastsim.seeded(None):
        k[grid, block, 0, dynamic_smem](*args)


def both(kernel, grid, block, args, *, dynamic_smem: int = 0):
    """(fastsim's arrays, the compiled engine's arrays, its LaunchReport or the NotCompiled reason)."""
    fast = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    comp = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    fastsim_launch(kernel, grid, block, fast, dynamic_smem)
    try:
        report = launch(kernel, grid, block, comp)
    except NotCompiled as e:
        # never a wrong answer: the arrays are as they were (what fastsim then starts from)
        for before, after in zip(args, comp, strict=True):
            if isinstance(before, np.ndarray):
                assert np.array_equal(before, after, equal_nan=True), "NotCompiled left arrays changed"
        return fast, None, e.reason
    return fast, comp, report


def spec_launch(name: str, params: dict | None = None, seed: int = 0):
    """A built-in kernel's clean build with its spec's inputs: (function, grid, block, args, spec,
    values, dynamic shared bytes, {arg role: index})."""
    from visualizer.engine.capture.builtin import kernel_function, probe_buffers
    from visualizer.kernels.probes import without_probes
    from visualizer.specs.catalog import plan_launch

    spec, values, plan = plan_launch(name, params or {}, "sim")
    fn = without_probes(kernel_function(spec, values))
    inputs = spec.make_inputs(values, np.random.default_rng(seed))
    buffers = probe_buffers(spec, plan)
    args = []
    for role in spec.args:
        if role in inputs:
            args.append(inputs[role])
        elif role in buffers:
            args.append(buffers[role])
        else:
            args.append(plan.scalars[role])
    return fn, plan.grid, plan.block, args, spec, values, plan.dynamic_smem


def same(a, b, rtol=1e-5, atol=1e-6) -> bool:
    if not isinstance(a, np.ndarray):
        return a == b
    if a.dtype.kind in "fc":
        return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return np.array_equal(a, b)
