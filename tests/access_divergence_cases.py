"""``python tests/access_divergence_cases.py ENGINE OUT``: divergent kernels recorded by the access pass.

Kernels whose warps split and come back together in ways a warp-wide counter never had to untangle
from per-lane streams: two branches taking turns at the same sites (interleaved paths), a branch
with no else that lanes reach on different iterations, uneven branches, data-dependent trip counts,
early returns and a partial last warp. ENGINE: ``sim`` (fastsim: the pass's build and the simulator
recorder on the same inputs), ``sim-small`` (buffers too small on purpose: lanes run out at different
points) or ``gpu`` (the pass's build on the GPU). The results are pickled to OUT.
"""

import pickle
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N = 64


@cuda.jit
def interleaved(x, out):
    """Even and odd lanes take turns at the two branches' sites, four times."""
    s = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    s[t] = x[t]
    cuda.syncthreads()
    acc = 0.0
    for i in range(4):
        if (t + i) % 2 == 0:
            acc += s[(t + 8 * i) % N]
        else:
            acc -= s[N - 1 - t]
    out[t] = acc


@cuda.jit
def no_else(x, out):
    """A branch with no else, reached by each lane on an iteration of its own, then uneven work."""
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(3):
        if (t + i) % 3 == 0:
            acc += x[(t + i) % N]
    if t % 4 == 0:
        acc += x[t] * x[(t + 1) % N]
    else:
        acc += 1.0
    k = 0
    while k < t % 5:  # a data-dependent trip count: lanes leave the loop one group at a time
        acc += x[(k * 7 + t) % N]
        k += 1
    out[t] = acc


@cuda.jit
def early_exit(x, out):
    """Lanes past 40 of a 48-thread block return first; the rest read on (a partial last warp)."""
    t = cuda.threadIdx.x
    if t >= 40:
        out[t] = x[t]
        return
    v = x[t]
    if t % 2 == 1:
        v += x[(t + 3) % N]
    out[t] = v


def _reference(kernel: str, x: np.ndarray) -> np.ndarray:
    t = np.arange(N if kernel != "early_exit" else 48)
    out = np.zeros(len(t), np.float32)
    for j in t:
        if kernel == "interleaved":
            acc = 0.0
            for i in range(4):
                acc += x[(j + 8 * i) % N] if (j + i) % 2 == 0 else -x[N - 1 - j]
        elif kernel == "no_else":
            acc = sum(x[(j + i) % N] for i in range(3) if (j + i) % 3 == 0)
            acc += x[j] * x[(j + 1) % N] if j % 4 == 0 else 1.0
            acc += sum(x[(k * 7 + j) % N] for k in range(j % 5))
        else:
            acc = x[j] if j >= 40 else x[j] + (x[(j + 3) % N] if j % 2 == 1 else 0.0)
        out[j] = acc
    return out


CASES = [("interleaved", (2, 1, 1), (N, 1, 1), N), ("no_else", (1, 1, 1), (N, 1, 1), N),
         ("early_exit", (1, 1, 1), (48, 1, 1), 48)]  # fmt: skip


def run(engine: str) -> dict:
    from visualizer.engine.lenses import accesses as gpu_record

    backend = gpu_record.backend_cuda("gpu" if engine == "gpu" else "sim")
    mod = gpu_record.module_of("access_divergence_cases")  # (not __main__: a module of its own)
    results = {}
    for kernel, grid, block, n_out in CASES:
        x = np.random.default_rng(1).random(N).astype(np.float32)
        arrays = {"x": x, "out": np.zeros(n_out, np.float32)}
        traced, info, ns = gpu_record.recording_build(mod, kernel)
        blocks = list(range(grid[0]))
        slots = len(blocks) * -(-block[0] // 32)
        records = 32 * slots * 3 if engine == "sim-small" else 1 << 16  # small: 3 accesses per lane
        rec, after = gpu_record.record_launch(
            backend, traced, info, ns, grid, block, dict(arrays), blocks, records
        )
        res = {"recorded": rec, "blocks": blocks,
               "correct": bool(np.allclose(after["out"], _reference(kernel, x), rtol=1e-5, atol=1e-5))}  # fmt: skip
        if engine != "gpu":
            res["simulator"] = gpu_record.record_with_simulator(mod, kernel, grid, block, arrays)
        results[kernel] = res
    return results


def main(engine: str, out_path: str) -> int:
    Path(out_path).write_bytes(pickle.dumps(run(engine)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
