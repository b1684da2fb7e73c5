"""Run kernels/access_cases.py (and the textbook tiled matmul) with the access pass; pickle what came back.

``python tests/gpu_access_cases.py sim OUT``: in this process, with fastsim installed, each case is
launched twice from the same inputs: the plain kernel under the simulator's recorder
(engine/access_record.py), and the access pass's build (the GPU recording, run on the simulator).
``... gpu OUT``: the access pass's build on the GPU. Each case: the decoded buffers, the outputs,
the reference, the sampled blocks.
"""

import os
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLE = {"tree_sum": [0, 3], "histogram": [1, 3], "matmul_tiled": [0, 5, 15]}


def cases():
    import numpy as np

    from kernels import access_cases

    out = list(access_cases.CASES)
    n = 64
    out.append(
        (
            "matmul_tiled",
            (n // 16, n // 16, 1),
            (16, 16, 1),
            lambda r: {"A": r.random((n, n), dtype=np.float32), "B": r.random((n, n), dtype=np.float32)},
            {"C": ((n, n), np.float32)},
        )
    )
    return out


def main(engine: str, out_path: str) -> int:
    if engine == "sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from visualizer.engine import fastsim

        fastsim.install()
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    import numpy as np
    from numba import cuda

    from kernels import access_cases
    from visualizer.engine import gpu_record

    results = {}
    for kernel, grid, block, inputs, outputs in cases():
        module = "kernels.examples.matmul_tiled" if kernel == "matmul_tiled" else "kernels.access_cases"
        mod = gpu_record.module_of(module)
        arrays = {**inputs(np.random.default_rng(0)), **gpu_record.zeros_for(outputs)}
        traced, info, ns = gpu_record.recording_build(mod, kernel)
        blocks = SAMPLE.get(kernel)
        rec, after = gpu_record.record_launch(cuda, traced, info, ns, grid, block, dict(arrays), blocks)
        if kernel == "matmul_tiled":
            want = {"C": arrays["A"] @ arrays["B"]}
        else:
            want = access_cases.reference(kernel, arrays)
        res = {
            "recorded": rec,
            "info": info,
            "correct": all(np.allclose(after[k], v, rtol=1e-4, atol=1e-4) for k, v in want.items()),
            "blocks": rec["sample"]["blocks"],
            "grid": grid,
            "block": block,
        }
        if engine == "sim":
            from visualizer.engine import access_record

            plain = getattr(mod, kernel)
            dev = {k: cuda.to_device(v.copy()) for k, v in arrays.items()}
            r = access_record.start(dev, set(), grid, block)
            try:
                plain[grid, block](*dev.values())
            finally:
                access_record.stop()
            res["simulator"] = r.buffers()
        results[kernel] = res
    Path(out_path).write_bytes(pickle.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
