"""Kernels run under the stock simulator and under visualizer.engine.sim.fastsim, one engine per process.

``python tests/fastsim_cases.py stock|fast OUT.pkl [CASE ...]`` runs the cases (all by default)
and pickles ``{case: result}``; a result is a dict of numpy arrays / numbers, or
``{"raised": class name, "message": str}``. tests/engine/test_fastsim.py compares the two engines.
Each engine runs in its own fresh process because fastsim is installed by monkeypatching.
"""

import os
import pickle
import sys
import threading
import time

if __name__ == "__main__":  # a case run; imported (test_fastsim reads the names) it must not force
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # the simulator on the test session's in-process GPU tests
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from numba import cuda, float32, int32  # noqa: E402

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# --- kernels ----------------------------------------------------------------------------------


@cuda.jit(device=True)
def square(x):
    return x * x


@cuda.jit(device=True)
def square_plus(x, y):
    return square(x) + y


@cuda.jit
def k_vector_add(a, b, c, n):
    i = cuda.grid(1)
    if i < n:
        c[i] = square_plus(a[i], 0.0) + b[i]


@cuda.jit
def k_vote_count(n_exit, out):
    # in every block but the first, threads >= n_exit exit before the vote: they must not count
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    if b > 0 and t >= n_exit:
        return
    c = cuda.syncthreads_count(1)
    if t == 0:
        out[b] = c


@cuda.jit
def k_vote_and(n_exit, out):
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    if b > 0 and t >= n_exit:
        return
    a = cuda.syncthreads_and(1)
    if t == 0:
        out[b] = a


@cuda.jit
def k_vote_or(n_exit, out):
    b, t = cuda.blockIdx.x, cuda.threadIdx.x
    if b > 0 and t >= n_exit:
        return
    o = cuda.syncthreads_or(1 if b == 0 else 0)  # only block 0 votes true
    if t == 0:
        out[b] = o


@cuda.jit
def k_votes_mixed(vals, count, vote_and, vote_or):
    b = cuda.blockIdx.x
    t = cuda.threadIdx.x
    v = vals[b * cuda.blockDim.x + t]
    c = cuda.syncthreads_count(v)
    a = cuda.syncthreads_and(v)
    o = cuda.syncthreads_or(v)
    if t == 0:
        count[b] = c
        vote_and[b] = a
        vote_or[b] = o


@cuda.jit
def k_block_reduce(x, out):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    s[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    stride = 32
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = s[0]


@cuda.jit
def k_tiled_matmul(A, B, C):
    TILE = 8
    sA = cuda.shared.array((8, 8), float32)
    sB = cuda.shared.array((8, 8), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    n = A.shape[0]
    acc = float32(0.0)
    for step in range((n + TILE - 1) // TILE):
        sA[ty, tx] = A[row, step * TILE + tx] if row < n and step * TILE + tx < n else 0.0
        sB[ty, tx] = B[step * TILE + ty, col] if step * TILE + ty < n and col < n else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()
    if row < n and col < n:
        C[row, col] = acc


@cuda.jit
def k_dynamic_shared(x, out):
    s = cuda.shared.array(0, int32)
    t = cuda.threadIdx.x
    s[t] = x[cuda.grid(1)]
    cuda.syncthreads()
    out[cuda.grid(1)] = s[cuda.blockDim.x - 1 - t]  # reversed within the block


@cuda.jit
def k_indices_3d(out, lanes, grid3):
    x, y, z = cuda.grid(3)
    tid = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    bid = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    g = bid * cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z + tid
    out[g] = x + 100 * y + 10000 * z
    lanes[g] = cuda.laneid
    w, h, d = cuda.gridsize(3)
    grid3[g] = w * h * d


@cuda.jit
def k_histogram(x, bins):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(bins, x[i] % bins.size, 1)


@cuda.jit
def k_atomics(arr, olds):
    i = cuda.grid(1)
    olds[0, i] = cuda.atomic.max(arr, 0, i)
    olds[1, i] = cuda.atomic.min(arr, 1, i)
    olds[2, i] = cuda.atomic.inc(arr, 2, 1000)
    cuda.atomic.exch(arr, 3, 7)
    cuda.atomic.or_(arr, 4, 1 << (i % 8))


@cuda.jit
def k_spin_lock(lock, total):
    # a mutex built on compare-and-swap, taken by thread 0 of every block... and by every thread
    while cuda.atomic.cas(lock, 0, 0, 1) != 0:
        pass
    total[0] += 1  # critical section (a plain read-modify-write, safe under the lock)
    cuda.threadfence()
    cuda.atomic.exch(lock, 0, 0)


@cuda.jit
def k_block_order(counter, order):
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        b = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
        order[b] = cuda.atomic.add(counter, 0, 1)


@cuda.jit
def k_grid_sync_one_block(x, out):
    t = cuda.threadIdx.x
    x[t] = t + 1
    cuda.cg.this_grid().sync()
    out[t] = x[(t + 1) % cuda.blockDim.x]


@cuda.jit
def k_local_array(out):
    loc = cuda.local.array(4, int32)
    t = cuda.grid(1)
    for k in range(4):
        loc[k] = t * k
    out[t] = loc[0] + loc[1] + loc[2] + loc[3]


@cuda.jit
def k_raise_value_error(out):
    i = cuda.grid(1)
    out[i] = 1
    if cuda.blockIdx.x == 1 and cuda.threadIdx.x == 5:
        raise ValueError("boom")


@cuda.jit
def k_out_of_bounds(out):
    i = cuda.grid(1)
    if i == 37:
        out[i + 1000] = 1
    else:
        out[i] = 1


@cuda.jit
def k_raise_after_barrier(out):
    i = cuda.grid(1)
    cuda.syncthreads()
    if i == 3:
        raise KeyError("key")
    cuda.syncthreads()
    out[i] = 1


@cuda.jit
def k_sys_exit(out):
    i = cuda.grid(1)
    if i % 2:
        sys.exit()
    out[i] = 1


@cuda.jit
def k_threading_current(blocks, tids):
    i = cuda.grid(1)
    t = threading.current_thread()  # the notes' way to get the simulator thread
    blocks[i] = t.blockIdx.x
    tids[i] = t.thread_id


@cuda.jit(debug=True, opt=False)
def k_debug_divide(x, out):
    i = cuda.grid(1)
    out[i] = x[i] / x[0]  # x[0] is 0: with debug=True the simulator raises on divide by zero


@cuda.jit
def k_shared_first_read(out):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    out[cuda.blockIdx.x, t] = s[t]  # read before any write: undefined on hardware
    cuda.syncthreads()
    s[t] = cuda.blockIdx.x + 1
    cuda.syncthreads()


@cuda.jit
def k_shared_first_read_int(out):
    s = cuda.shared.array(8, int32)
    t = cuda.threadIdx.x
    out[cuda.blockIdx.x, t] = s[t]
    cuda.syncthreads()
    s[t] = 7
    cuda.syncthreads()


@cuda.jit
def k_dynamic_first_read(out):
    s = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    out[cuda.blockIdx.x, t] = s[t]  # read before any write
    cuda.syncthreads()
    s[t] = 5.0
    cuda.syncthreads()


class Recorder:
    """A kernel argument that is not an ndarray (passed through unchanged) and notes, per write,
    the simulated thread that made it, as the memory-access recorder does."""

    def __init__(self, n):
        self.data = np.zeros(n, np.int64)
        self.log = []

    def __setitem__(self, i, v):
        from visualizer.engine.sim.fastsim import current_thread

        t = current_thread()
        t.__dict__["writes"] = t.__dict__.get("writes", 0) + 1  # per-thread state lives on the thread
        self.log.append((t.blockIdx.x, t.threadIdx.x, t.thread_id, t.__dict__["writes"], i))
        self.data[i] = v


@cuda.jit
def k_recorded(rec):
    i = cuda.grid(1)
    rec[2 * i] = i
    cuda.syncthreads()
    rec[2 * i + 1] = i


class TwoArgError(Exception):
    def __init__(self, code, detail):
        super().__init__(f"code {code}: {detail}")
        self.code = code


@cuda.jit
def k_two_arg_exception(out):
    i = cuda.grid(1)
    out[i] = 1
    if i == 2:
        raise TwoArgError(42, "bad")


# --- cases ------------------------------------------------------------------------------------


def raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - a case reports what the engine raised
        return {"raised": type(e).__name__, "message": str(e)}
    return None


@case
def vector_add():
    n = 1000
    a = np.arange(n, dtype=np.float32)
    b = np.ones(n, np.float32)
    c = np.zeros(n, np.float32)
    k_vector_add[8, 128](a, b, c, n)
    return {"c": c}


@case
def votes_with_exited_threads():
    # the probe: 16 of 32 threads exit before the vote in blocks 1 and 2; each vote in a
    # launch of its own, so block 0's votes are what a carried-over state would leak
    out = {}
    for name, kernel in (("count", k_vote_count), ("and", k_vote_and), ("or", k_vote_or)):
        out[name] = np.zeros(3, np.int64)
        kernel[3, 32](16, out[name])
    return out


@case
def votes_mixed():
    vals = (np.random.default_rng(1).random(4 * 64) < 0.5).astype(np.int32)
    vals[64:128] = 1  # block 1: all true
    vals[128:192] = 0  # block 2: all false
    count, va, vo = np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(4, np.int64)
    k_votes_mixed[4, 64](vals, count, va, vo)
    return {"count": count, "and": va, "or": vo}


@case
def block_reduce():
    x = np.random.default_rng(2).random(300).astype(np.float32)
    out = np.zeros(5, np.float32)
    k_block_reduce[5, 64](x, out)
    return {"out": out}


@case
def tiled_matmul():
    rng = np.random.default_rng(3)
    A = rng.random((20, 20)).astype(np.float32)
    B = rng.random((20, 20)).astype(np.float32)
    C = np.zeros((20, 20), np.float32)
    k_tiled_matmul[(3, 3), (8, 8)](A, B, C)
    return {"C": C}


@case
def dynamic_shared():
    x = np.arange(96, dtype=np.int32)
    out = np.zeros(96, np.int32)
    k_dynamic_shared[3, 32, 0, 32 * 4](x, out)
    return {"out": out}


@case
def indices_3d():
    g, b = (2, 3, 2), (4, 3, 5)
    n = 12 * 60
    out, lanes, grid3 = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    k_indices_3d[g, b](out, lanes, grid3)
    return {"out": out, "lanes": lanes, "grid3": grid3}


@case
def histogram():
    x = np.random.default_rng(4).integers(0, 1000, 500).astype(np.int64)
    bins = np.zeros(16, np.int64)
    k_histogram[4, 128](x, bins)
    return {"bins": bins}


@case
def atomics():
    arr = np.array([-1, 10**6, 0, 0, 0], np.int64)
    olds = np.zeros((3, 64), np.int64)
    k_atomics[2, 32](arr, olds)
    return {"arr": arr, "max_olds_sorted": np.sort(olds[0]), "inc_olds_sorted": np.sort(olds[2])}


@case
def spin_lock():
    lock = np.zeros(1, np.int32)
    total = np.zeros(1, np.int64)
    k_spin_lock[2, 16](lock, total)
    return {"lock": lock, "total": total}


@case
def block_order():
    counter = np.zeros(1, np.int64)
    order = np.full(12, -1, np.int64)
    k_block_order[(4, 3), (2, 2)](counter, order)
    return {"order": order}


@case
def grid_sync_one_block():
    x = np.zeros(16, np.int64)
    out = np.zeros(16, np.int64)
    k_grid_sync_one_block[1, 16](x, out)
    return {"out": out}


@case
def local_array():
    out = np.zeros(64, np.int64)
    k_local_array[2, 32](out)
    return {"out": out}


@case
def exception_one_thread():
    return raised(lambda: k_raise_value_error[3, 8](np.zeros(24, np.int64)))


@case
def out_of_bounds():
    return raised(lambda: k_out_of_bounds[2, 32](np.zeros(64, np.int64)))


@case
def exception_after_barrier():
    return raised(lambda: k_raise_after_barrier[1, 8](np.zeros(8, np.int64)))


@case
def sys_exit_ends_the_thread():
    out = np.zeros(16, np.int64)
    err = raised(lambda: k_sys_exit[2, 8](out))
    return {"out": out, "raised": err}


@case
def threading_current_thread():
    blocks, tids = np.zeros(48, np.int64), np.zeros(48, np.int64)
    k_threading_current[3, 16](blocks, tids)
    return {"blocks": blocks, "tids": tids}


@case
def debug_divide_by_zero():
    x = np.arange(8, dtype=np.float64)
    return raised(lambda: k_debug_divide[1, 8](x, np.zeros(8)))


@case
def launch_after_exception():
    # an aborted launch must leave the engine usable: the next launch is exact
    raised(lambda: k_raise_after_barrier[1, 8](np.zeros(8, np.int64)))
    x = np.random.default_rng(5).random(128).astype(np.float32)
    out = np.zeros(2, np.float32)
    k_block_reduce[2, 64](x, out)
    return {"out": out}


@case
def current_thread_api():
    rec = Recorder(96)
    k_recorded[3, 16](rec)
    return {"data": rec.data, "log": np.array(sorted(rec.log))}


# Cases where fastsim deliberately differs from stock (checked on each engine on its own)


@case
def shared_first_read():
    out = np.zeros((3, 32), np.float32)
    k_shared_first_read[3, 32](out)
    out2 = np.zeros((3, 32), np.float32)
    k_shared_first_read[3, 32](out2)  # a second launch: must not see the first one's data either
    return {"out": out, "out2": out2}


@case
def shared_first_read_int():
    out = np.zeros((2, 8), np.int32)
    k_shared_first_read_int[2, 8](out)
    return {"out": out}


@case
def dynamic_shared_first_read():
    out = np.zeros((2, 4), np.float32)
    k_dynamic_first_read[2, 4, 0, 16](out)
    return {"out": out}


@case
def two_arg_exception():
    out = np.zeros(8, np.int64)
    return {"raised": raised(lambda: k_two_arg_exception[1, 8](out)), "out": out}


# Hangs: fastsim only (stock spins for ever). Run with small FASTSIM_STALL_S / FASTSIM_CPU_LIMIT_S.

HANG_CASES = {}


def hang_case(fn):
    HANG_CASES[fn.__name__] = fn
    return fn


@cuda.jit
def k_deadlock_plain_spin(flag, out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()  # BARRIER LINE
        flag[0] = 1
    else:
        while flag[0] == 0:  # SPIN LINE: the flag is set only after the barrier
            pass
    out[t] = 1


@cuda.jit
def k_deadlock_atomic_spin(flag, out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()  # BARRIER LINE
        cuda.atomic.exch(flag, 0, 1)
    else:
        while cuda.atomic.add(flag, 0, 0) == 0:  # SPIN LINE
            pass
    out[t] = 1


@cuda.jit
def k_runaway(out):
    t = cuda.threadIdx.x
    x = 0
    if t == 1:
        while x >= 0:  # RUNAWAY LINE: never ends
            x += 1
    out[t] = x


@cuda.jit
def k_long_atomic_loop(total, reps):
    for _ in range(reps):  # threads take turns at every atomic: slow, but not a hang
        cuda.atomic.add(total, 0, 1)


# Spins through atomics and warp intrinsics (issue 39): each step repeats the last, nothing changes.
@cuda.jit
def k_blocks_wait_for_each_other(flags, out):
    b = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        cuda.atomic.exch(flags, b, 1)
        while cuda.atomic.add(flags, 1 - b, 0) == 0:  # INTERBLOCK SPIN LINE: block 1 never runs first
            pass
    out[b] = 1


@cuda.jit
def k_syncwarp_spin(out):
    s = cuda.shared.array(1, int32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = 0
    cuda.syncthreads()
    if t == 0:
        while s[0] == 0:
            cuda.syncwarp(1)  # SYNCWARP SPIN LINE: s[0] is written after the barrier below
    cuda.syncthreads()  # SYNCWARP BARRIER LINE
    if t == 32:
        s[0] = 1
    out[t] = 1


@cuda.jit
def k_long_warp_loop(out, reps):
    t = cuda.threadIdx.x
    acc = 0
    for i in range(reps):  # every lane's steps differ (i, acc): slow, but not a spin
        acc += cuda.shfl_xor_sync(0xFFFFFFFF, i, 1)
        cuda.syncwarp()
    out[t] = acc


@cuda.jit
def k_polls_until_another_thread_sets(flag, out):
    t = cuda.threadIdx.x
    if t == 0:
        while cuda.atomic.add(flag, 0, 0) < 90000:  # polls while the others move the flag on
            pass
    else:
        for _ in range(3000):
            cuda.atomic.add(flag, 0, 1)
    out[t] = 1


def timed_raised(fn):
    t = time.monotonic()
    err = raised(fn)
    return {"raised": err, "seconds": time.monotonic() - t}


@hang_case
def deadlock_plain_spin():
    return timed_raised(lambda: k_deadlock_plain_spin[2, 32](np.zeros(1, np.int32), np.zeros(32, np.int32)))


@hang_case
def deadlock_atomic_spin():
    return timed_raised(lambda: k_deadlock_atomic_spin[1, 32](np.zeros(1, np.int32), np.zeros(32, np.int32)))


@hang_case
def runaway():
    return timed_raised(lambda: k_runaway[1, 4](np.zeros(4, np.int64)))


@hang_case
def long_atomic_loop():
    total = np.zeros(1, np.int64)
    err = timed_raised(lambda: k_long_atomic_loop[1, 64](total, 6000))
    return {**err, "total": total}


@hang_case
def blocks_wait_for_each_other():
    return timed_raised(
        lambda: k_blocks_wait_for_each_other[2, 32](np.zeros(2, np.int32), np.zeros(2, np.int32))
    )


@hang_case
def syncwarp_spin():
    return timed_raised(lambda: k_syncwarp_spin[1, 64](np.zeros(64, np.int32)))


@hang_case
def long_warp_loop():
    out = np.zeros(64, np.int64)
    err = timed_raised(lambda: k_long_warp_loop[1, 64](out, 3000))
    return {**err, "out": out}


@hang_case
def polls_until_another_thread_sets():
    flag, out = np.zeros(1, np.int32), np.zeros(32, np.int32)
    err = timed_raised(lambda: k_polls_until_another_thread_sets[1, 32](flag, out))
    return {**err, "flag": flag, "out": out}


@cuda.jit
def k_stuck_in_c(out):
    if cuda.threadIdx.x == 0:
        time.sleep(60)  # STUCK LINE: an interrupt cannot land inside a C call
    out[cuda.threadIdx.x] = 1


@hang_case
def worker_one_line_error():
    from visualizer.engine.run.worker import one_line

    try:
        k_deadlock_plain_spin[1, 32](np.zeros(1, np.int32), np.zeros(32, np.int32))
    except Exception as exc:  # what the worker's serve loop does with it
        return {"line": one_line(exc)}
    return {"line": None}


@hang_case
def worker_exits_when_stuck():
    k_stuck_in_c[1, 2](np.zeros(2, np.int32))
    return {"exited": False}


@hang_case
def usable_after_hangs():
    x = np.random.default_rng(6).random(128).astype(np.float32)
    out = np.zeros(2, np.float32)
    k_block_reduce[2, 64](x, out)
    return {"out": out, "current_thread_restored": threading.current_thread() is threading.main_thread()}


def lines_marked(mark):
    """Line numbers in this file whose comment carries MARK (so tests need no hard-coded lines)."""
    with open(__file__) as f:
        return [i for i, line in enumerate(f, 1) if line.rstrip().endswith(mark) or f"# {mark}" in line]


@cuda.jit
def k_two_shared(out):
    a = cuda.shared.array(4, int32)
    b = cuda.shared.array(4, int32)
    t = cuda.threadIdx.x
    a[t] = 1
    b[t] = 2
    cuda.syncthreads()
    out[cuda.blockIdx.x, t] = a[t] * 10 + b[t]


@hang_case
def recorder_hooks():
    """fastsim only: what a recorder plugs into (block starts, a wrapper around shared arrays)."""
    from numba.cuda.simulator import kernelapi

    from visualizer.engine.sim import fastsim

    blocks, allocations = [], []
    fastsim.BLOCK_START_HOOKS.append(lambda b: blocks.append((b.x, b.y, b.z)))
    inner = kernelapi.FakeCUDAShared.array
    # the wrapper lives in another "file", as a recorder module would
    source = (
        "def wrapped(self, shape, dtype, alignment=None):\n"
        "    arr = inner(self, shape, dtype, alignment)\n"
        "    allocations.append(bool((arr.view('uint32') == 0xDEADBEEF).all()))\n"
        "    return arr\n"
    )
    scope = {"inner": inner, "allocations": allocations}
    exec(compile(source, "<recorder>", "exec"), scope)
    wrapped = scope["wrapped"]
    fastsim.SHARED_CALLER_SKIP.add("<recorder>")

    kernelapi.FakeCUDAShared.array = wrapped
    try:
        out = np.zeros((2, 4), np.int64)
        k_two_shared[2, 4](out)
    finally:
        kernelapi.FakeCUDAShared.array = inner
        fastsim.BLOCK_START_HOOKS.clear()
        fastsim.SHARED_CALLER_SKIP.clear()
    return {"blocks": blocks, "out": out, "calls": len(allocations), "fresh": sum(allocations)}


def main(argv):
    engine, out_path, *names = argv
    if engine == "fast":
        from visualizer.engine.sim import fastsim

        fastsim.install()
    elif engine == "worker":  # fastsim as the simulator worker sets it up
        from visualizer.engine.run import worker

        worker.configure_backend("sim")
        worker.Backend("sim")
    results = {}
    for name in names or CASES:
        results[name] = {**CASES, **HANG_CASES}[name]()
    with open(out_path, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1:])
