"""Warp intrinsics, votes after exits, grid sync: kernels, and numpy models of what each must return.

``python tests/warp_cases.py sim|gpu OUT.pkl`` runs every case on the simulator (with visualizer.engine.sim.fastsim
installed) or on a GPU and pickles ``{case: {name: array}}``; tests/engine/test_warp_sim.py compares them with
``MODELS`` (numpy, written from the PTX ISA's definitions, not from either engine). The refusal cases
(``REFUSALS``, simulator only) return the one-line error each launch raised.

NVIDIA's numba-cuda doc examples (docs/source/user/examples: test_laplace.py, test_cg.py) are here at
module level with their kernels unedited; only their sizes are smaller (the simulator runs Python).
"""

import os
import pickle
import sys

if __name__ == "__main__" and sys.argv[1:2] == ["sim"]:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402
from numba.cuda import int32, libdevice  # noqa: E402

FULL = 0xFFFFFFFF
DELTAS = np.array([0, 1, 3, 16, 31, 32, 33, 40], np.int32)
N_SHFL = 64  # two full warps
N_PART = 40  # a full warp and a partial one of 8 lanes

# --- kernels -----------------------------------------------------------------------------------


@cuda.jit
def k_shfl(deltas, up, down, xor, idx, up64, down_f64):
    t = cuda.threadIdx.x
    v = t * 10 + 7
    v64 = t * 3000000000 + 5  # a 64-bit value: numba shuffles it as two 32-bit halves
    f = t * 0.5 - 3.25
    for k in range(deltas.size):
        d = deltas[k]
        up[k, t] = cuda.shfl_up_sync(FULL, v, d)
        down[k, t] = cuda.shfl_down_sync(FULL, v, d)
        xor[k, t] = cuda.shfl_xor_sync(FULL, v, d)
        idx[k, t] = cuda.shfl_sync(FULL, v, (t * 7 + d) % 40)  # source lanes 0..39: >= 32 wraps
        up64[k, t] = cuda.shfl_up_sync(FULL, v64, d)
        down_f64[k, t] = cuda.shfl_down_sync(FULL, f, d)


@cuda.jit
def k_half_masks(xor, idx, ballot, anyv, allv, eqv):
    # each half-warp calls with its own mask; sources stay inside the half
    t = cuda.threadIdx.x
    lane = t % 32
    m = 0x0000FFFF if lane < 16 else 0xFFFF0000
    v = t * 10 + 7
    for k in range(4):
        xor[k, t] = cuda.shfl_xor_sync(m, v, 1 << k)
        idx[k, t] = cuda.shfl_sync(m, v, (lane & 16) + (lane * 5 + k) % 16)
    ballot[t] = cuda.ballot_sync(m, lane % 3 == 0)
    anyv[t] = cuda.any_sync(m, lane == 20)
    allv[t] = cuda.all_sync(m, lane < 16 or lane % 2 == 0)
    eqv[t] = cuda.eq_sync(m, lane >= 16)


@cuda.jit
def k_votes_full(ballot, anyv, allv, eqv, lt):
    t = cuda.threadIdx.x
    lane = t % 32
    ballot[t] = cuda.ballot_sync(FULL, (lane * 7) % 5 < 2)
    anyv[t] = cuda.any_sync(FULL, t == 40)
    allv[t] = cuda.all_sync(FULL, t < 32)
    eqv[t] = cuda.eq_sync(FULL, t < 32)
    lt[t] = cuda.lanemask_lt()


@cuda.jit
def k_match(any_i, all_i, all_p, any_f, all_f_grp, all_p_grp):
    t = cuda.threadIdx.x
    lane = t % 32
    any_i[t] = cuda.match_any_sync(FULL, lane // 4 + (t // 32) * 100)
    m, p = cuda.match_all_sync(FULL, lane // 16)
    all_i[t] = m
    all_p[t] = p
    any_f[t] = cuda.match_any_sync(FULL, (lane % 3) * 0.25)
    # match_all inside groups of 8 lanes whose values are equal in even groups only
    g = lane // 8
    gm = 0xFF << (g * 8)
    val = 1.5 if g % 2 == 0 else lane * 1.0
    m2, p2 = cuda.match_all_sync(gm, val)
    all_f_grp[t] = m2
    all_p_grp[t] = p2


@cuda.jit
def k_partial_warp(am, ballot, up, syncw, xor):
    # 40 threads: warp 1 has lanes 0..7 only. A full mask names lanes that do not exist: a shuffle
    # may still read the lanes that do, and syncwarp waits for the live ones
    s = cuda.shared.array(64, int32)
    t = cuda.threadIdx.x
    m = cuda.activemask()
    am[t] = m
    ballot[t] = cuda.ballot_sync(m, t % 2 == 1)
    up[t] = cuda.shfl_up_sync(FULL, t * 10 + 7, 1)
    xor[t] = cuda.shfl_xor_sync(m, t * 10 + 7, 4)
    s[t] = t * 3
    cuda.syncwarp(FULL)
    syncw[t] = s[t ^ 1] if (t ^ 1) < 40 else -1


@cuda.jit
def k_divergent(am, ballot, shfl):
    t = cuda.threadIdx.x
    lane = t % 32
    if t >= 56:  # these lanes exit before the others ask
        return
    if lane % 3 == 0:
        m = cuda.activemask()
        am[t] = m
        ballot[t] = cuda.ballot_sync(m, lane % 2 == 0)
        shfl[t] = cuda.shfl_sync(m, t * 10 + 7, (lane // 6) * 6)  # a lane that is in m
    else:
        m = cuda.activemask()
        am[t] = m
        ballot[t] = cuda.ballot_sync(m, lane > 16)
        shfl[t] = cuda.shfl_sync(m, t * 10 + 7, 1)  # lane 1 is in the else-branch's mask


@cuda.jit
def k_syncwarp_exchange(out, out_half):
    s = cuda.shared.array(64, int32)
    h = cuda.shared.array(64, int32)
    t = cuda.threadIdx.x
    lane = t % 32
    s[t] = t * 3 + 1
    cuda.syncwarp()  # without the warp barrier a lane would read its partner before it wrote
    out[t] = s[(t // 32) * 32 + (31 - lane)]
    m = 0x0000FFFF if lane < 16 else 0xFFFF0000
    h[t] = t * 5
    cuda.syncwarp(m)
    out_half[t] = h[t ^ 8]


@cuda.jit
def k_votes_after_exit(out):
    # 64 threads vote; then 16 return; the 48 left vote again: only they may count
    t = cuda.threadIdx.x
    first = cuda.syncthreads_count(1)
    if t >= 48:
        return
    c = cuda.syncthreads_count(1 if t % 6 == 0 else 0)
    a = cuda.syncthreads_and(1 if t < 48 else 0)
    o = cuda.syncthreads_or(1 if t >= 48 else 0)
    if t == 0:
        out[0] = first
        out[1] = c
        out[2] = a
        out[3] = o


@cuda.jit
def k_grid_block_sums(x, partial, out):
    # per-block shared-memory sums, a grid sync, then block 0 adds the partials: blocks are
    # co-resident, each with its own shared memory
    s = cuda.shared.array(32, int32)
    g = cuda.cg.this_grid()
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    s[t] = x[b * 32 + t]
    cuda.syncthreads()
    if t == 0:
        acc = 0
        for i in range(32):
            acc += s[i]
        partial[b] = acc
    g.sync()
    if b == 0 and t == 0:
        total = 0
        for i in range(cuda.gridDim.x):
            total += partial[i]
        out[0] = total


# NVIDIA's laplace example (numba-cuda docs/source/user/examples, test_laplace.py), kernel unedited
@cuda.jit
def solve_heat_equation(buf_0, buf_1, timesteps, k):
    i = cuda.grid(1)

    # Don't continue if our index is outside the domain
    if i >= len(buf_0):
        return

    # Prepare to do a grid-wide synchronization later
    grid = cuda.cg.this_grid()

    for step in range(timesteps):
        # Select the buffer from the previous timestep
        if (step % 2) == 0:
            data = buf_0
            next_data = buf_1
        else:
            data = buf_1
            next_data = buf_0

        # Get the current temperature associated with this point
        curr_temp = data[i]

        # Apply formula from finite difference equation
        if i == 0:
            # Left wall is held at T = 0
            next_temp = curr_temp + k * (data[i + 1] - (2 * curr_temp))
        elif i == len(data) - 1:
            # Right wall is held at T = 0
            next_temp = curr_temp + k * (data[i - 1] - (2 * curr_temp))
        else:
            # Interior points are a weighted average of their neighbors
            next_temp = curr_temp + k * (data[i - 1] - (2 * curr_temp) + data[i + 1])

        # Write new value to the next buffer
        next_data[i] = next_temp

        # Wait for every thread to write before moving on
        grid.sync()


# NVIDIA's cooperative-groups example (test_cg.py, ex_grid_sync_kernel), kernel unedited
sig = (int32[:, ::1],)


@cuda.jit(sig)
def sequential_rows(M):
    col = cuda.grid(1)
    g = cuda.cg.this_grid()

    rows = M.shape[0]
    cols = M.shape[1]

    for row in range(1, rows):
        opposite = cols - col - 1
        # Each row's elements are one greater than the previous row
        M[row, col] = M[row - 1, opposite] + 1
        # Wait until all threads have written their column element,
        # and that the write is visible to all other threads
        g.sync()


# --- cases: run on one engine ------------------------------------------------------------------


def _z(*shape, dtype=np.int32):
    return np.zeros(shape, dtype)


def _run(kernel, grid, block, outs: dict, *inputs):
    dev = {k: cuda.to_device(v) for k, v in outs.items()}
    kernel[grid, block](*inputs, *dev.values())
    cuda.synchronize()
    return {k: d.copy_to_host() for k, d in dev.items()}


def case_shfl():
    nd = len(DELTAS)
    outs = {
        "up": _z(nd, N_SHFL),
        "down": _z(nd, N_SHFL),
        "xor": _z(nd, N_SHFL),
        "idx": _z(nd, N_SHFL),
        "up64": _z(nd, N_SHFL, dtype=np.int64),
        "down_f64": _z(nd, N_SHFL, dtype=np.float64),
    }
    return _run(k_shfl, 1, N_SHFL, outs, cuda.to_device(DELTAS))


def case_half_masks():
    outs = {"xor": _z(4, N_SHFL), "idx": _z(4, N_SHFL)}
    outs.update({k: _z(N_SHFL) for k in ("ballot", "any", "all", "eq")})
    return _run(k_half_masks, 1, N_SHFL, outs)


def case_votes_full():
    outs = {k: _z(N_SHFL) for k in ("ballot", "any", "all", "eq")}
    outs["lt"] = _z(N_SHFL, dtype=np.uint32)
    return _run(k_votes_full, 1, N_SHFL, outs)


def case_match():
    outs = {k: _z(N_SHFL) for k in ("any_i", "all_i", "all_p", "any_f", "all_f_grp", "all_p_grp")}
    return _run(k_match, 1, N_SHFL, outs)


def case_partial_warp():
    outs = {"am": _z(N_PART, dtype=np.uint32)}
    outs.update({k: _z(N_PART) for k in ("ballot", "up", "syncw", "xor")})
    return _run(k_partial_warp, 1, N_PART, outs)


def case_divergent():
    outs = {"am": _z(N_SHFL, dtype=np.uint32), "ballot": _z(N_SHFL), "shfl": _z(N_SHFL)}
    return _run(k_divergent, 1, N_SHFL, outs)


def case_syncwarp():
    return _run(k_syncwarp_exchange, 1, N_SHFL, {"out": _z(N_SHFL), "out_half": _z(N_SHFL)})


def case_votes_after_exit():
    return _run(k_votes_after_exit, 1, 64, {"out": _z(4)})


def case_grid_block_sums():
    x = np.arange(4 * 32, dtype=np.int32) * 3 - 50
    return _run(k_grid_block_sums, 4, 32, {"partial": _z(4), "out": _z(1)}, cuda.to_device(x))


LAPLACE_SIZE, LAPLACE_STEPS = 1001, 100


def case_laplace():
    # as the example launches it (forall): on the simulator forall is one block; 4 blocks of 256
    # is the launch that lost heat before
    size = LAPLACE_SIZE
    data = np.zeros(size)
    data[500] = 10000
    res = {}
    for name, launch in (
        ("forall", solve_heat_equation.forall(len(data))),
        ("4x256", solve_heat_equation[4, 256]),
    ):
        buf_0 = cuda.to_device(data)
        buf_1 = cuda.device_array_like(buf_0)
        launch(buf_0, buf_1, LAPLACE_STEPS, 0.25)
        res[name] = buf_1.copy_to_host()
    return res


def case_sequential_rows():
    A = np.zeros((64, 64), dtype=np.int32)
    blockdim = 32
    griddim = A.shape[1] // blockdim
    mb = sequential_rows.overloads[sig].max_cooperative_grid_blocks(blockdim)
    sequential_rows[griddim, blockdim](A)
    return {"A": A, "max_blocks_ok": np.array(mb >= griddim)}


CASES = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}

# --- numpy models (what the hardware defines) --------------------------------------------------


def _src(mode, lane, b):
    """PTX shfl.sync with numba's clamp values: b's low 5 bits; past the warp's edge: own lane."""
    b = int(b) & 31
    if mode == "idx":
        return b
    if mode == "up":
        return lane - b if lane - b >= 0 else lane
    if mode == "down":
        return lane + b if lane + b <= 31 else lane
    return lane ^ b


def _shuffle(vals, mode, bs):
    n = len(vals)
    return np.array([vals[(t // 32) * 32 + _src(mode, t % 32, bs[t])] for t in range(n)], dtype=vals.dtype)


def _i32(bits):
    return np.uint32(bits).view(np.int32)


def model_shfl():
    t = np.arange(N_SHFL)
    v = (t * 10 + 7).astype(np.int32)
    v64 = t.astype(np.int64) * 3000000000 + 5
    f = t * 0.5 - 3.25
    out = {}
    for key, mode, vals in (("up", "up", v), ("down", "down", v), ("xor", "bfly", v), ("up64", "up", v64)):
        out[key] = np.stack([_shuffle(vals, mode, [d] * N_SHFL) for d in DELTAS])
    out["down_f64"] = np.stack([_shuffle(f, "down", [d] * N_SHFL) for d in DELTAS])
    out["idx"] = np.stack([_shuffle(v, "idx", (t * 7 + d) % 40) for d in DELTAS])
    return out


def _ballot(pred, lanes):
    bits = 0
    for lane in lanes:
        if pred[lane]:
            bits |= 1 << (lane % 32)
    return bits


def model_half_masks():
    t = np.arange(N_SHFL)
    lane = t % 32
    v = (t * 10 + 7).astype(np.int32)
    xor = np.stack([_shuffle(v, "bfly", [1 << k] * N_SHFL) for k in range(4)])
    idx = np.stack([_shuffle(v, "idx", (lane & 16) + (lane * 5 + k) % 16) for k in range(4)])
    half = [t[(t // 16) == h] for h in range(N_SHFL // 16)]
    ballot, anyv, allv, eqv = (np.zeros(N_SHFL, np.int32) for _ in range(4))
    for members in half:
        ballot[members] = _i32(_ballot(lane % 3 == 0, members))
        anyv[members] = (lane[members] == 20).any()
        allv[members] = ((lane[members] < 16) | (lane[members] % 2 == 0)).all()
        p = lane[members] >= 16
        eqv[members] = p.all() or not p.any()
    return {"xor": xor, "idx": idx, "ballot": ballot, "any": anyv, "all": allv, "eq": eqv}


def model_votes_full():
    t = np.arange(N_SHFL)
    lane = t % 32
    warps = [t[t // 32 == w] for w in range(2)]
    out = {k: np.zeros(N_SHFL, np.int32) for k in ("ballot", "any", "all", "eq")}
    for members in warps:
        out["ballot"][members] = _i32(_ballot((lane * 7) % 5 < 2, members))
        out["any"][members] = (members == 40).any()
        out["all"][members] = (members < 32).all()
        p = members < 32
        out["eq"][members] = p.all() or not p.any()
    out["lt"] = ((1 << lane) - 1).astype(np.uint32)
    return out


def model_match():
    t = np.arange(N_SHFL)
    lane = t % 32
    out = {
        k: np.zeros(N_SHFL, np.int32) for k in ("any_i", "all_i", "all_p", "any_f", "all_f_grp", "all_p_grp")
    }
    vi = lane // 4 + (t // 32) * 100
    vf = (lane % 3) * 0.25
    for w in range(2):
        members = t[t // 32 == w]
        for x in members:
            out["any_i"][x] = _i32(_ballot(vi == vi[x], members))
            out["any_f"][x] = _i32(_ballot(vf == vf[x], members))
        same = len(set((lane[members] // 16).tolist())) == 1
        out["all_i"][members] = _i32(FULL) if same else 0
        out["all_p"][members] = same
        for g in range(4):
            grp = members[lane[members] // 8 == g]
            vals = np.where(g % 2 == 0, 1.5, lane[grp] * 1.0)
            same = len(set(vals.tolist())) == 1
            out["all_f_grp"][grp] = _i32(0xFF << (g * 8)) if same else 0
            out["all_p_grp"][grp] = same
    return out


def model_partial_warp():
    t = np.arange(N_PART)
    v = (t * 10 + 7).astype(np.int32)
    am = np.where(t < 32, FULL, 0xFF).astype(np.uint32)
    ballot = np.zeros(N_PART, np.int32)
    ballot[:32] = _i32(_ballot(t % 2 == 1, t[:32]))
    ballot[32:] = _ballot(t % 2 == 1, t[32:])
    up = np.array([v[x - 1] if x % 32 >= 1 else v[x] for x in t], np.int32)
    xor = np.array([v[x ^ 4] for x in t], np.int32)
    syncw = np.array([(x ^ 1) * 3 if (x ^ 1) < N_PART else -1 for x in t], np.int32)
    return {"am": am, "ballot": ballot, "up": up, "syncw": syncw, "xor": xor}


def model_divergent():
    t = np.arange(N_SHFL)
    lane = t % 32
    live = t < 56
    am = np.zeros(N_SHFL, np.uint32)
    ballot = np.zeros(N_SHFL, np.int32)
    shfl = np.zeros(N_SHFL, np.int32)
    v = t * 10 + 7
    for w in range(2):
        for branch in (True, False):
            members = t[(t // 32 == w) & live & ((lane % 3 == 0) == branch)]
            m = _ballot(np.ones(N_SHFL, bool), members)
            am[members] = m
            pred = lane % 2 == 0 if branch else lane > 16
            ballot[members] = _i32(_ballot(pred, members))
            for x in members:
                src = (lane[x] // 6) * 6 if branch else 1
                shfl[x] = v[w * 32 + src]
    return {"am": am, "ballot": ballot, "shfl": shfl}


def model_syncwarp():
    t = np.arange(N_SHFL)
    lane = t % 32
    return {"out": ((t // 32) * 32 + 31 - lane) * 3 + 1, "out_half": (t ^ 8) * 5}


def model_votes_after_exit():
    t = np.arange(48)
    return {"out": np.array([64, np.count_nonzero(t % 6 == 0), 1, 0], np.int32)}


def model_grid_block_sums():
    x = np.arange(4 * 32, dtype=np.int32) * 3 - 50
    partial = x.reshape(4, 32).sum(axis=1).astype(np.int32)
    return {"partial": partial, "out": np.array([partial.sum()], np.int32)}


def heat_reference(size=LAPLACE_SIZE, steps=LAPLACE_STEPS, k=0.25):
    """The finite-difference steps in numpy, buffer for buffer as the kernel swaps them."""
    buf = [np.zeros(size), np.zeros(size)]
    buf[0][500] = 10000
    for step in range(steps):
        data, nxt = (buf[0], buf[1]) if step % 2 == 0 else (buf[1], buf[0])
        left = np.concatenate(([0.0], data[:-1]))
        right = np.concatenate((data[1:], [0.0]))
        nxt[:] = data + k * (left - 2 * data + right)
    return buf[1]


def model_laplace():
    ref = heat_reference()
    return {"forall": ref, "4x256": ref}


def model_sequential_rows():
    # the example's own check, at 64 x 64
    return {"A": np.tile(np.arange(64), (64, 1)).T.astype(np.int32), "max_blocks_ok": np.array(True)}


MODELS = {name[6:]: fn for name, fn in dict(globals()).items() if name.startswith("model_")}

# --- refusals (simulator only): each is one line, never a made-up result -----------------------


@cuda.jit
def k_own_lane_missing(out):
    t = cuda.threadIdx.x
    out[t] = cuda.ballot_sync(0x0000FFFF, True)  # lanes 16..31 leave themselves out


@cuda.jit
def k_vote_names_exited(out):
    t = cuda.threadIdx.x
    if t >= 8:
        return
    out[t] = cuda.ballot_sync(FULL, True)


@cuda.jit
def k_shfl_from_outside(out):
    t = cuda.threadIdx.x
    out[t] = cuda.shfl_down_sync(FULL, t, 16)  # in a 48-thread block lane 0 of warp 1 reads lane 16


@cuda.jit
def k_warp_deadlock(out):
    t = cuda.threadIdx.x
    if t < 16:
        out[t] = cuda.shfl_sync(FULL, t, 0)
    else:
        cuda.syncthreads()


@cuda.jit
def k_sys_exit(out):
    if cuda.threadIdx.x == 3:
        sys.exit()
    out[cuda.threadIdx.x] = 1


@cuda.jit
def k_cache_hint(x, out):
    out[0] = cuda.ldcg(x, 0)


@cuda.jit
def k_hidden_grid_sync(out):
    g = getattr(cuda.cg, "this_" + "grid")()  # out of sight of the launch's scan
    g.sync()
    out[cuda.grid(1)] = 1


@cuda.jit
def k_nanosleep_spin(flag, out):
    # simulator only (a GPU compiler may hoist the plain load out of the loop): a thread that sleeps
    # in a spin loop lets the thread it waits for run
    t = cuda.threadIdx.x
    if t == 0:
        while flag[0] == 0:
            cuda.nanosleep(100)
        out[0] = 1
    elif t == 1:
        flag[0] = 1


def sim_nanosleep_spin():
    out = _z(1)
    k_nanosleep_spin[1, 2](_z(1), out)
    return out


@cuda.jit
def k_libdevice(x, out):
    i = cuda.grid(1)
    out[i] = libdevice.sinf(x[i])


@cuda.jit
def k_grid_deadlock(out):
    g = cuda.cg.this_grid()
    if cuda.blockIdx.x == 1 and cuda.threadIdx.x == 0:
        cuda.syncthreads()  # the rest of its block waits at the grid sync: never met
    else:
        g.sync()
    out[cuda.grid(1)] = 1


def _refusal(fn):
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


REFUSALS = {
    "own_lane_missing": lambda: k_own_lane_missing[1, 32](_z(32)),
    "vote_names_exited": lambda: k_vote_names_exited[1, 32](_z(32)),
    "vote_names_missing": lambda: k_own_lane_missing[1, 4](_z(4)),  # mask 0xffff: lanes 4-15 do not exist
    "shfl_from_outside": lambda: k_shfl_from_outside[1, 48](_z(48)),
    "warp_deadlock": lambda: k_warp_deadlock[1, 32](_z(32)),
    "sys_exit": lambda: k_sys_exit[1, 8](_z(8)),
    "cache_hint": lambda: k_cache_hint[1, 1](_z(4), _z(1)),
    "libdevice": lambda: k_libdevice[1, 4](np.ones(4, np.float32), _z(4, dtype=np.float32)),
    "hidden_grid_sync": lambda: k_hidden_grid_sync[2, 4](_z(8)),
    "grid_deadlock": lambda: k_grid_deadlock[2, 4](_z(8)),
    "coop_too_large": lambda: solve_heat_equation[300, 256](np.zeros(10), np.zeros(10), 1, 0.25),
}


def main(argv):
    engine, out_path, *names = argv
    if engine == "sim":
        from visualizer.engine.sim import fastsim

        fastsim.install()
    results = {}
    for name in names or CASES:
        try:
            results[name] = CASES[name]()
        except Exception as exc:  # one case's failure must not hide the others' results
            results[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"}
    if engine == "sim":
        results["refusals"] = {name: _refusal(fn) for name, fn in REFUSALS.items()}
        results["nanosleep_spin"] = sim_nanosleep_spin()
        results["laplace_sum_4x256"] = float(results["laplace"].get("4x256", np.zeros(1)).sum())
    with open(out_path, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1:])
