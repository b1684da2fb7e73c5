"""A kernel whose sampled warps fill their buffers early, recorded by the access pass: after that
every lane of a warp is done, and the warp runs its loops' counted copies (``_vz_room``), one loop
with barriers (the block takes one copy together), a while loop whose trip count depends on the lane
and a range loop stepping down with a ``continue`` (both split in two), in a block whose second warp
has 16 lanes. ENGINE: ``sim`` (fastsim) or ``gpu``. Writes the raw
buffers, the counts each lane should have made and the output, pickled, to OUT."""

import pickle
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N_STEPS, BLOCK, GRID, CAP = 10, 48, 2, 4


@cuda.jit
def k(a, out, n):
    s = cuda.shared.array(48, float32)
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(n):
        s[t] = a[(i * 48 + t) % 256]
        cuda.syncthreads()
        acc += s[47 - t]
        cuda.syncthreads()
    j = 0
    while j < t % 3 + 5:
        acc += a[j]
        j += 1
    for m in range(t % 4 + 6, 0, -2):  # split in two: a step down, a trip count by lane, a continue
        if m == 4:
            continue
        acc += a[m]
    out[cuda.blockIdx.x * 48 + t] = acc


def expected(a: np.ndarray):
    t = np.arange(BLOCK)
    out = np.zeros(GRID * BLOCK, np.float32)
    for b in range(GRID):
        acc = np.zeros(BLOCK, np.float64)
        for i in range(N_STEPS):
            s = a[(i * 48 + t) % 256]
            acc += s[47 - t]
        for lane in t:
            acc[lane] += a[: lane % 3 + 5].sum()
            acc[lane] += sum(a[m] for m in range(lane % 4 + 6, 0, -2) if m != 4)
        out[b * BLOCK :][:BLOCK] = acc
    down = np.array([sum(1 for m in range(lane % 4 + 6, 0, -2) if m != 4) for lane in t])
    made = 3 * N_STEPS + (t % 3 + 5) + down + 1  # per thread: a, s, s per step; a per trip (twice); out
    return out, made


def _tallied(backend, probe, tally: list):
    py = probe.py_func

    def tallied(*args):
        tally.append(1)
        return py(*args)

    return backend.jit(device=True)(tallied)


def main(engine: str, out_path: str) -> int:
    from visualizer.analysis import gpu_accesses
    from visualizer.engine.instrument import accesses as ia
    from visualizer.engine.lenses import accesses as gpu_record

    backend = gpu_record.backend_cuda(engine)
    mod = gpu_record.module_of("access_room_cases")  # (not __main__: a module of its own)
    traced, info, ns = gpu_record.recording_build(mod, "k")
    counted = []
    if engine == "sim":  # the simulator runs device functions as Python: count the counted copies' calls
        for name in [n for n in ns if n.startswith(ia.ATC)]:
            ns[name] = _tallied(backend, ns[name], counted)
    a = np.random.default_rng(0).random(256).astype(np.float32)
    p = gpu_accesses.plan((GRID, 1, 1), (BLOCK, 1, 1), list(range(GRID)), records=32 * 4 * CAP)
    host = gpu_accesses.host_buffers(p)
    bufs = {name: backend.to_device(v) for name, v in host.items()}
    da, dout = backend.to_device(a), backend.to_device(np.zeros(GRID * BLOCK, np.float32))
    traced[GRID, BLOCK](da, dout, N_STEPS, *[bufs[name] for name in ia.AccessPass.params])
    backend.synchronize()
    want, made = expected(a)
    res = {
        "cap": p["cap"],
        "slots": len(p["slots"]),
        "buffers": {name: v.copy_to_host() for name, v in bufs.items()},
        "out": dout.copy_to_host(),
        "want": want,
        "made": made,
        "counted": len(counted) if engine == "sim" else None,
    }
    Path(out_path).write_bytes(pickle.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
