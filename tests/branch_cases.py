"""Kernels the branch recorder has never seen, run with the SIMT lens's probes, and independent models of
what each warp's visits must be (plain Python over the kernel's own arithmetic, no event logs).

``python tests/branch_cases.py sim|gpu OUT.pkl`` runs every case on the simulator (fastsim) or a GPU and
pickles ``{case: {"rows": DataFrame, "expected": list, "out": array, "want": array}}``;
tests/engine/test_branches.py compares them. One engine per process (fastsim is installed by monkeypatching).
"""

import ast
import os
import pickle
import sys
import types

if __name__ == "__main__":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if sys.argv[1] == "sim" else "0"
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

# --- the kernels (sources as a visitor would paste them) -----------------------------------------

ODD_EVEN = """\
from numba import cuda


@cuda.jit
def odd_even(a, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x % 2 == 0:
        out[i] = a[i] * 2.0
    else:
        out[i] = a[i] + 1.0
"""

# after a public Numba Mandelbrot kernel: a guard return and an escape loop whose trip count is the
# pixel's (so the lane's)
MANDEL = """\
from numba import cuda


@cuda.jit
def mandel(xmin, xmax, ymin, ymax, img, max_iter):
    h, w = img.shape
    row, col = cuda.grid(2)
    if row >= h or col >= w:
        return
    x0 = xmin + (xmax - xmin) * col / w
    y0 = ymin + (ymax - ymin) * row / h
    x = 0.0
    y = 0.0
    it = 0
    while x * x + y * y <= 4.0 and it < max_iter:
        xt = x * x - y * y + x0
        y = 2.0 * x * y + y0
        x = xt
        it += 1
    img[row, col] = it
"""

COLLATZ = """\
from numba import cuda


@cuda.jit
def collatz(start, steps):
    i = cuda.grid(1)
    if i < start.size:
        n = start[i]
        k = 0
        while n != 1:
            if n % 2 == 0:
                n = n // 2
            else:
                n = 3 * n + 1
            k += 1
        steps[i] = k
"""

CLASSIFY = """\
from numba import cuda


@cuda.jit
def classify(x, out):
    i = cuda.grid(1)
    if i >= x.size:
        return
    v = x[i]
    if v > 0:
        if v > 10:
            out[i] = 2
        elif v > 5:
            out[i] = 1
        else:
            return
    else:
        out[i] = -1
"""

PARTIAL_SUMS = """\
from numba import cuda


@cuda.jit
def partial_sums(x, out):
    i = cuda.grid(1)
    acc = 0.0
    for k in range(cuda.threadIdx.x % 5):
        if k == 3:
            break
        if x[i] < 0:
            continue
        acc += x[i] * k
    out[i] = acc
"""

# a loop whose trip count is the lane's (0..31): ptxas unrolls it by 4 with a remainder loop, so its
# SASS runs 13 conditional jumps per warp, 2 of them uniform (Nsight Compute: 15.38 %), where the source
# has 32 tests per warp, 1 uniform
LANE_LOOP = """\
from numba import cuda


@cuda.jit
def lane_loop(x, out):
    i = cuda.grid(1)
    acc = 0.0
    for k in range(cuda.threadIdx.x % 32):
        acc += x[i] * k
    out[i] = acc
"""

# a loop over a constant range (unrolled on a GPU, so not probed there) whose body skips lanes with
# `continue` and branches on the data: the inner tests' visits are told apart by its iterations
CONST_LOOP = """\
from numba import cuda

REPS = 3


@cuda.jit
def const_loop(x, out):
    i = cuda.grid(1)
    acc = 0
    for j in range(REPS):
        if (i + j) % 3 == 0:
            continue
        acc += 1
        if x[i] > j:
            acc += 2
    out[i] = acc
"""

REDUCTION_EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "kernels", "examples", "reduction.py")  # fmt: skip


# --- independent models: per (block, warp, site) the list of (active bits, taken bits) ---------------


def _bits(lanes) -> int:
    b = 0
    for lane in lanes:
        b |= 1 << lane
    return b


def _warps(nblocks, tpb):
    for block in range(nblocks):
        for warp in range((tpb + 31) // 32):
            yield block, warp, list(range(warp * 32, min(tpb, warp * 32 + 32)))


def _loop_visits(trips: dict[int, int], reach) -> list[tuple[int, int]]:
    """A loop test evaluated once per iteration by the lanes still in it, the failing test included:
    lanes ``reach`` arrive, lane l's test holds for its first trips[l] evaluations."""
    out = []
    k = 0
    while True:
        active = [lane for lane in reach if trips[lane] >= k]
        if not active:
            return out
        out.append((_bits(active), _bits([lane for lane in active if trips[lane] > k])))
        k += 1


def model_odd_even(nblocks, tpb):
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = [t - warp * 32 for t in threads]
        exp[(block, warp, 0)] = [
            (_bits(lanes), _bits([lane for lane, t in zip(lanes, threads, strict=True) if t % 2 == 0]))
        ]
    return exp


def _mandel_iters(h, w, max_iter, xmin, xmax, ymin, ymax):
    it = np.zeros((h, w), np.int64)
    for row in range(h):
        for col in range(w):
            x0 = xmin + (xmax - xmin) * col / w
            y0 = ymin + (ymax - ymin) * row / h
            x = y = 0.0
            n = 0
            while x * x + y * y <= 4.0 and n < max_iter:
                x, y = x * x - y * y + x0, 2.0 * x * y + y0
                n += 1
            it[row, col] = n
    return it


def model_mandel(grid, block, h, w, iters):
    bx, by = block
    exp = {}
    for gy in range(grid[1]):
        for gx in range(grid[0]):
            b = gx + grid[0] * gy
            for warp in range((bx * by + 31) // 32):
                guard_active, guard_taken, inside, trips = [], [], [], {}
                for t in range(warp * 32, min(bx * by, warp * 32 + 32)):
                    tx, ty = t % bx, t // bx
                    row, col = gx * bx + tx, gy * by + ty  # cuda.grid(2) is (x, y): row is x here
                    lane = t - warp * 32
                    guard_active.append(lane)
                    if row >= h or col >= w:
                        guard_taken.append(lane)
                    else:
                        inside.append(lane)
                        trips[lane] = int(iters[row, col])
                exp[(b, warp, 0)] = [(_bits(guard_active), _bits(guard_taken))]
                if inside:
                    exp[(b, warp, 1)] = _loop_visits(trips, inside)
    return exp


def _collatz_path(n):
    out = []
    while n != 1:
        out.append(n % 2 == 0)
        n = n // 2 if n % 2 == 0 else 3 * n + 1
    return out


def model_collatz(nblocks, tpb, start):
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = {t - warp * 32: block * tpb + t for t in threads}
        exp[(block, warp, 0)] = [(_bits(lanes), _bits([lane for lane, i in lanes.items() if i < start.size]))]
        inside = [lane for lane, i in lanes.items() if i < start.size]
        if not inside:
            continue
        paths = {lane: _collatz_path(int(start[lanes[lane]])) for lane in inside}
        exp[(block, warp, 1)] = _loop_visits({lane: len(p) for lane, p in paths.items()}, inside)
        ifs = []  # iteration k: the lanes still looping evaluate `n % 2 == 0`
        for k in range(max(len(p) for p in paths.values())):
            act = [lane for lane in inside if len(paths[lane]) > k]
            ifs.append((_bits(act), _bits([lane for lane in act if paths[lane][k]])))
        if ifs:
            exp[(block, warp, 2)] = ifs
    return exp


def model_classify(nblocks, tpb, x):
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = {t - warp * 32: block * tpb + t for t in threads}
        live = [lane for lane, i in lanes.items() if i < x.size]
        v = {lane: x[lanes[lane]] for lane in live}
        exp[(block, warp, 0)] = [(_bits(lanes), _bits([lane for lane in lanes if lanes[lane] >= x.size]))]
        pos = [lane for lane in live if v[lane] > 0]
        big = [lane for lane in pos if v[lane] > 10]
        rest = [lane for lane in pos if v[lane] <= 10]
        for site, active, taken in (
            (1, live, pos),
            (2, pos, big),
            (3, rest, [lane for lane in rest if v[lane] > 5]),
        ):
            if active:
                exp[(block, warp, site)] = [(_bits(active), _bits(taken))]
    return exp


def model_partial_sums(nblocks, tpb, x):
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = {t - warp * 32: t for t in threads}  # trip count t % 5, but `break` at k == 3
        for_rows, brk, neg = [], [], []
        for k in range(5):
            # lanes testing the loop for the k-th time: those that neither ran out nor broke before
            active = [lane for lane, t in lanes.items() if k <= t % 5 and k <= 3]
            if not active:
                break
            taken = [lane for lane in active if k < lanes[lane] % 5]
            for_rows.append((_bits(active), _bits(taken)))
            if taken:
                brk.append((_bits(taken), _bits([lane for lane in taken if k == 3])))
                stay = [lane for lane in taken if k != 3]
                if stay:
                    neg.append(
                        (_bits(stay), _bits([lane for lane in stay if x[block * tpb + lanes[lane]] < 0]))
                    )
        exp[(block, warp, 0)] = for_rows
        if brk:
            exp[(block, warp, 1)] = brk
        if neg:
            exp[(block, warp, 2)] = neg
    return exp


def model_const_loop(nblocks, tpb, x):
    """Sites: 0 the constant loop (no row), 1 `(i + j) % 3 == 0`, 2 `x[i] > j`; iteration j is visit j
    of each inner test, among the lanes that reach it."""
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = {t - warp * 32: block * tpb + t for t in threads}
        skip, data = [], []
        for j in range(3):
            skip.append((_bits(lanes), _bits([lane for lane, i in lanes.items() if (i + j) % 3 == 0])))
            stay = [lane for lane, i in lanes.items() if (i + j) % 3 != 0]
            if stay:
                data.append((_bits(stay), _bits([lane for lane in stay if x[lanes[lane]] > j])))
        exp[(block, warp, 1)] = skip
        if data:
            exp[(block, warp, 2)] = data
    return exp


def model_reduction(nblocks, tpb, n):
    exp = {}
    for block, warp, threads in _warps(nblocks, tpb):
        lanes = {t - warp * 32: t for t in threads}
        exp[(block, warp, 0)] = [
            (_bits(lanes), _bits([lane for lane, t in lanes.items() if block * tpb + t < n]))
        ]
        s, loop, inner = tpb // 2, [], []
        while True:
            loop.append((_bits(lanes), _bits(lanes) if s > 0 else 0))
            if s <= 0:
                break
            inner.append((_bits(lanes), _bits([lane for lane, t in lanes.items() if t < s])))
            s //= 2
        exp[(block, warp, 1)] = loop
        exp[(block, warp, 2)] = inner
        exp[(block, warp, 3)] = [(_bits(lanes), _bits([lane for lane, t in lanes.items() if t == 0]))]
    return exp


# --- running a case ----------------------------------------------------------------------------------


def load(source: str, kernel: str, passes, filename: str = "visitor.py"):
    """The module with ``<kernel>__traced`` built by the passes; (traced dispatcher, vz_info)."""
    from visualizer.engine.instrument.branches import apply_passes

    tree = apply_passes(ast.parse(source, filename=filename), kernel, passes)
    module = types.ModuleType("visitor_" + kernel)
    for p in passes:
        module.__dict__.update(p.globals())
    exec(compile(tree, filename, "exec"), module.__dict__)
    return getattr(module, kernel + "__traced"), tree.vz_info


def run_case(source, kernel, grid, block, args, simulator, barriers=False):
    from numba import cuda

    from visualizer.analysis import branches
    from visualizer.engine.instrument.branches import BarrierPass, BranchPass, branch_buffers

    passes = [BranchPass()] + ([BarrierPass()] if barriers else [])
    traced, info = load(source, kernel, passes)
    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    nblocks, tpb = int(np.prod(grid)), int(np.prod(block))
    bufs = branch_buffers(simulator, nblocks, tpb)
    extra = list(bufs.values())
    if barriers:
        extra += list(branch_buffers(simulator, nblocks, tpb, barriers=True).values())
    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    dextra = [cuda.to_device(a) for a in extra]
    traced[grid, block](*dev, *dextra)
    host = [d.copy_to_host() if hasattr(d, "copy_to_host") else d for d in dev]
    got = [d.copy_to_host() for d in dextra]
    rows = branches.rows(simulator, got[0], got[1], info["branches"]["sites"], tpb)
    out = {"rows": rows, "sites": info["branches"]["sites"], "args": host}
    if barriers:
        out["bars"] = branches.barrier_rows(got[2], got[3], info["barriers"]["sites"], tpb)
    return out


def cases(simulator: bool) -> dict:
    rng = np.random.default_rng(24)
    res = {}

    a = rng.standard_normal(2 * 80).astype(np.float32)
    r = run_case(ODD_EVEN, "odd_even", 2, 80, (a, np.zeros_like(a)), simulator)
    r["expected"] = model_odd_even(2, 80)
    r["want"] = np.where((np.arange(160) % 80) % 2 == 0, a * 2, a + 1).astype(np.float32)
    r["out"] = r["args"][1]
    res["odd_even"] = r

    h, w, mi = 20, 20, 40
    bounds = (-2.0, 0.6, -1.2, 1.2)
    img = np.zeros((h, w), np.int64)
    r = run_case(MANDEL, "mandel", (2, 3), (16, 8), (*bounds, img, mi), simulator)
    # the loop's trip counts are the kernel's own output (a GPU may contract x*x - y*y + x0 into an fma,
    # so a pixel's count may differ from the host's by one); the host's count checks the output
    r["expected"] = model_mandel((2, 3), (16, 8), h, w, r["args"][4])
    r["out"], r["want"] = r["args"][4], _mandel_iters(h, w, mi, *bounds)
    res["mandel"] = r

    start = rng.integers(1, 60, 100).astype(np.int64)
    r = run_case(COLLATZ, "collatz", 2, 64, (start, np.zeros(100, np.int64)), simulator)
    r["expected"] = model_collatz(2, 64, start)
    r["out"], r["want"] = r["args"][1], np.array([len(_collatz_path(int(s))) for s in start])
    res["collatz"] = r

    x = rng.integers(-5, 20, 90).astype(np.int32)
    r = run_case(CLASSIFY, "classify", 3, 32, (x, np.zeros(90, np.int32)), simulator)
    r["expected"] = model_classify(3, 32, x)
    res["classify"] = r

    xs = rng.standard_normal(2 * 40).astype(np.float32)
    r = run_case(PARTIAL_SUMS, "partial_sums", 2, 40, (xs, np.zeros_like(xs)), simulator)
    r["expected"] = model_partial_sums(2, 40, xs)
    res["partial_sums"] = r

    xc = rng.integers(-1, 4, 2 * 48).astype(np.int32)
    r = run_case(CONST_LOOP, "const_loop", 2, 48, (xc, np.zeros(2 * 48, np.int32)), simulator)
    r["expected"] = model_const_loop(2, 48, xc)
    r["out"] = r["args"][1]
    r["want"] = np.array([sum(1 + 2 * (v > j) for j in range(3) if (i + j) % 3) for i, v in enumerate(xc)])
    res["const_loop"] = r

    n = 1000
    xr = rng.standard_normal(n).astype(np.float32)
    with open(REDUCTION_EXAMPLE) as f:
        src = f.read()
    r = run_case(src, "block_sum", 4, 256, (xr, np.zeros(4, np.float32)), simulator, barriers=not simulator)
    r["expected"] = model_reduction(4, 256, n)
    r["out"], r["want"] = r["args"][1], np.array([xr[b * 256 : (b + 1) * 256].sum() for b in range(4)])
    res["reduction_example"] = r
    return res


def fastsim_activemask_after_a_loop() -> list[int]:
    """The simulator's own activemask() after a loop whose trip count is lane % 4: the masks its lanes
    see (why the simulator's visits come from a recorder and a model, not from these)."""
    src = (
        "from numba import cuda\n\n\n@cuda.jit\ndef k(after):\n    lane = cuda.threadIdx.x\n"
        "    for _ in range(lane % 4):\n        cuda.syncwarp(cuda.activemask())\n"
        "    after[lane] = cuda.activemask()\n"
    )
    module = types.ModuleType("fastsim_activemask")
    exec(compile(src, "fastsim_activemask.py", "exec"), module.__dict__)
    after = np.zeros(32, np.int64)
    module.k[1, 32](after)
    return sorted(set(after.tolist()))


def main(argv):
    engine, out_path = argv[:2]
    if engine == "sim":
        from visualizer.engine.sim import fastsim

        fastsim.install()
    res = cases(engine == "sim")
    if engine == "sim":
        res["fastsim_activemask"] = fastsim_activemask_after_a_loop()
    with open(out_path, "wb") as f:
        pickle.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1:])
