"""The simulator benchmark's workloads (devtools/sim_bench.py runs them, one engine per process): each is a
built-in kernel's clean build at a fixed size, its inputs, and a numpy check. CPU time per launch
(``time.process_time``), the compiled engine's compile time apart."""

from __future__ import annotations

import time

import numpy as np

WORKLOADS = ("vector_add_2^18", "matmul_tiled_128", "reduction_2^15", "histogram_2^18", "sgemm_naive_256",
             "matmul_tiled_1024")  # fmt: skip


def workload(name: str):
    """(kernel function, grid, block, args, check(args) -> max error) for ``name``."""
    from visualizer.kernels.histogram import histogram_global
    from visualizer.kernels.matmul import matmul_naive, matmul_tiled_kernel
    from visualizer.kernels.probes import without_probes
    from visualizer.kernels.reduction import reduction_kernel
    from visualizer.kernels.vector_add import vector_add

    rng = np.random.default_rng(0)
    if name == "vector_add_2^18":
        n = 1 << 18
        a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        return (
            vector_add,
            n // 256,
            256,
            [a, b, np.zeros(n, np.float32), n],
            lambda x: np.abs(x[2] - (a + b)).max(),
        )
    if name.startswith("matmul_tiled_"):
        n, tile = int(name.rsplit("_", 1)[1]), 16
        A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        g = (n + tile - 1) // tile
        tiles = np.zeros((g * g, g, 2, 5), np.int64)
        args = [A, B, np.zeros((n, n), np.float32), n, tiles]
        ref = A.astype(np.float64) @ B.astype(np.float64)
        return (without_probes(matmul_tiled_kernel(tile)), (g, g), (tile, tile), args,
                lambda x: np.abs(x[2] - ref).max() / n)  # fmt: skip
    if name == "reduction_2^15":
        n, block = 1 << 15, 256
        x = rng.random(n, dtype=np.float32)
        blocks = n // block
        tree = np.zeros((1, 9, block, 2), np.float32)
        args = [x, np.zeros(blocks, np.float32), n, tree]
        return (without_probes(reduction_kernel(block)), blocks, block, args,
                lambda a: abs(float(a[1].sum()) - float(x.sum())) / n)  # fmt: skip
    if name == "histogram_2^18":
        n, nbins = 1 << 18, 64
        x = rng.integers(0, nbins, n).astype(np.int32)
        args = [x, np.zeros(nbins, np.int32), n]
        return (
            histogram_global,
            n // 256,
            256,
            args,
            lambda a: np.abs(a[1] - np.bincount(x, minlength=nbins)).max(),
        )
    if name == "sgemm_naive_256":
        n = 256
        A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        args = [A, B, np.zeros((n, n), np.float32), n]
        return matmul_naive, (n // 16, n // 16), (16, 16), args, lambda a: np.abs(a[2] - ref).max() / n
    raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")


def _traced(fn, grid, block, args):
    """The instrumented build (engine/instrument/instrumenter.py: the ids lens's trace_begin/trace_end), its
    FunctionDef and namespace, and its arguments: the kernel's, then one trace record per thread."""
    import ast

    from visualizer.engine.instrument.instrumenter import instrument_function

    traced, tree = instrument_function(fn)
    fd = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("__traced"))
    g = [grid] if np.isscalar(grid) else list(grid)
    b = [block] if np.isscalar(block) else list(block)
    threads = int(np.prod(g)) * int(np.prod(b))
    return traced, fd, [*args, np.zeros((3, threads), np.int64), np.zeros(threads, np.uint8)]


def run(name: str, engine: str, repeats: int = 3, ids: bool = False) -> dict:
    """One workload on one engine in this process: CPU seconds per launch (the best of ``repeats``;
    fastsim once), compile CPU seconds apart, and the error against numpy. ``ids``: the instrumented
    build, recording every thread's block, SM (modelled) and times."""
    fn, grid, block, args, check = workload(name)
    traced = fd = None
    if ids:
        traced, fd, args = _traced(fn, grid, block, args)
    fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    out: dict = {"workload": name, "engine": engine, "ids": ids}
    if engine == "compiled":
        from visualizer.engine.compiled import launch

        def one(arrays):
            if ids:
                return launch(None, grid, block, arrays, tree=fd, namespace=traced.__globals__)
            return launch(fn, grid, block, arrays)

        first = one(fresh)
        out["compile_s"] = first.compile_s
        out["compiled_from"] = first.compiled_from
        out["first_run_s"] = first.run_s
        runs = []
        for _ in range(repeats):
            fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            runs.append(one(fresh).run_s)
        out["run_s"] = min(runs)
        out["blocks"] = first.blocks
    elif engine == "fastsim":
        from numba import cuda

        from visualizer.engine.sim import fastsim

        fastsim.install()
        k = cuda.jit(traced if ids else fn)
        t0 = time.process_time()
        k[grid, block](*fresh)
        out["run_s"] = time.process_time() - t0
    else:
        raise ValueError(f"unknown engine {engine!r}")
    out["error"] = float(check(fresh))
    if ids:
        out["threads_recorded"] = int(fresh[-1].size)
    return out
