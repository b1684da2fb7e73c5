"""The cross-check's fresh kernels (kernels/access_cases.py, and the textbook tiled matmul) recorded
by the access pass, on either backend, in this process.

``run("sim")`` installs fastsim and launches each case twice from the same inputs: the plain kernel
under the simulator's recorder (engine/sim/access_record.py) and the access pass's build (the GPU
recording, run on the simulator). ``run("gpu")`` launches the pass's build on the GPU. ``clean_launch``
launches the plain kernel once (the launch ncu profiles). Used by devtools/crosscheck.py and
tests/engine/test_gpu_accesses.py.
"""

from __future__ import annotations

# the blocks each case records; None: the default sample (first, middle, last); "all": every block
SAMPLE: dict = {"tree_sum": [0, 3], "histogram": [1, 3], "matmul_tiled": [0, 5, 15]}
MATMUL_N = 64


def cases() -> list[tuple]:
    import numpy as np

    from visualizer.kernels import access_cases

    n = MATMUL_N

    def matmul_inputs(r):
        return {"A": r.random((n, n), dtype=np.float32), "B": r.random((n, n), dtype=np.float32)}

    return [
        *access_cases.CASES,
        ("matmul_tiled", (n // 16, n // 16, 1), (16, 16, 1), matmul_inputs, {"C": ((n, n), np.float32)}),
    ]


def _module(kernel: str) -> str:
    return (
        "visualizer.kernels.examples.matmul_tiled"
        if kernel == "matmul_tiled"
        else "visualizer.kernels.access_cases"
    )


def _reference(kernel: str, arrays: dict) -> dict:
    from visualizer.kernels import access_cases

    if kernel == "matmul_tiled":
        return {"C": arrays["A"] @ arrays["B"]}
    return access_cases.reference(kernel, arrays)


def run(
    engine: str, blocks: str | None = None, names: list[str] | None = None, records: int | None = None
) -> dict:
    """Each case: the decoded GPU-recording buffers, whether the outputs match numpy, the sampled blocks
    (and on the simulator, the simulator recorder's buffers of the same launch). ``blocks="all"``:
    every block records (the cross-check compares whole launches with ncu); ``records``: the lane
    accesses the buffers hold (default gpu_accesses.DEFAULT_RECORDS; small: overflow on purpose)."""
    import numpy as np

    from visualizer.engine.lenses import accesses as gpu_record

    cuda = gpu_record.backend_cuda(engine)

    from visualizer.analysis import gpu_accesses
    from visualizer.analysis.gpu_accesses import linear_blocks

    results = {}
    for kernel, grid, block, inputs, outputs in cases():
        if names is not None and kernel not in names:
            continue
        mod = gpu_record.module_of(_module(kernel))
        arrays = {**inputs(np.random.default_rng(0)), **gpu_record.zeros_for(outputs)}
        traced, info, ns = gpu_record.recording_build(mod, kernel)
        chosen = list(range(linear_blocks(grid))) if blocks == "all" else SAMPLE.get(kernel)
        rec, after = gpu_record.record_launch(
            cuda, traced, info, ns, grid, block, dict(arrays), chosen, records or gpu_accesses.DEFAULT_RECORDS
        )
        want = _reference(kernel, arrays)
        res = {
            "recorded": rec,
            "correct": all(np.allclose(after[k], v, rtol=1e-4, atol=1e-4) for k, v in want.items()),
            "blocks": rec["sample"]["blocks"],
            "grid": list(grid),
            "block": list(block),
        }
        if engine == "sim":
            res["simulator"] = gpu_record.record_with_simulator(mod, kernel, grid, block, arrays)
        results[kernel] = res
    return results


def clean_launch(kernel: str) -> bool:
    """Launch the plain kernel once on the GPU (what ncu profiles); True if it matches numpy."""
    import numpy as np

    from visualizer.engine.lenses import accesses as gpu_record

    _, grid, block, inputs, outputs = next(c for c in cases() if c[0] == kernel)
    mod = gpu_record.module_of(_module(kernel))
    arrays = {**inputs(np.random.default_rng(0)), **gpu_record.zeros_for(outputs)}
    after = gpu_record.launch_plain(mod, kernel, grid, block, arrays)
    return all(np.allclose(after[k], v, rtol=1e-4, atol=1e-4) for k, v in _reference(kernel, arrays).items())


def summaries(results: dict, which: str = "recorded") -> dict:
    """case -> the memory summary (analysis/memory.summary) of its ``which`` buffers, JSON-ready."""
    from visualizer.analysis import memory

    out = {}
    for kernel, res in results.items():
        if which not in res:
            continue
        summ = memory.build(res[which])[3]
        summ.pop("per_line", None)
        out[kernel] = {**summ, "correct": bool(res["correct"]), "blocks": res["blocks"]}
    return out
