"""The compiled engine's helpers inside generated code: atomics (sequential within a block, so
plain read-modify-write), the seeded schedule's random numbers, and the poison shared memory is
filled with. Every function here is ``@njit`` and called from generated code only."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

SHARED_POISON_BYTES = bytes.fromhex("efbeadde")  # fastsim's: little-endian 0xDEADBEEF


def poison_value(dtype: np.dtype):
    """What a fresh shared array of ``dtype`` holds, as fastsim fills it: NaN for floats (and
    complex), the bytes DEADBEEF repeated for everything else."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return dtype.type(np.nan)
    if dtype.kind == "b":
        return np.bool_(True)
    raw = (SHARED_POISON_BYTES * (dtype.itemsize // 4 + 1))[: dtype.itemsize]
    return np.frombuffer(raw, dtype=dtype)[0]


class DivergentBarrier(Exception):
    """A barrier under a condition the block's threads did not agree on (raised from compiled code
    with the source line; the launcher turns it into NotCompiled after restoring the arrays)."""


class WarpRefused(Exception):
    """A warp-level operation the lanes cannot run in lockstep as a GPU defines it: (line, code, kind),
    the reason ``WARP_REASONS[code]``; the launcher restores the arrays and fastsim runs the kernel
    (it raises its one-line error where a GPU's result is undefined)."""


WARP_REASONS = {
    1: "a lane's mask leaves out the lane itself",
    2: "the mask names lanes that have exited or that the block lacks",
    3: "a lane reads a lane that is not taking part",
    4: "lanes of one warp pass different masks",
    5: "a warp-level operation under a condition that differs between a warp's lanes",
}


# --- atomics: each returns the old value, as numba.cuda's do. Blocks that share global memory run
# one after another (engine.py never runs those in prange), so a read-modify-write is atomic here.

_JIT = {
    "cache": False,
    "boundscheck": True,
    "error_model": "numpy",
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}


@njit(**_JIT)
def atomic_add(ary, idx, val):
    old = ary[idx]
    ary[idx] = old + val
    return old


@njit(**_JIT)
def atomic_sub(ary, idx, val):
    old = ary[idx]
    ary[idx] = old - val
    return old


@njit(**_JIT)
def atomic_max(ary, idx, val):
    old = ary[idx]
    if val > old:  # the simulator's max(old, val): a NaN in memory stays
        ary[idx] = val
    return old


@njit(**_JIT)
def atomic_min(ary, idx, val):
    old = ary[idx]
    if val < old:
        ary[idx] = val
    return old


@njit(**_JIT)
def atomic_nanmax(ary, idx, val):
    old = ary[idx]
    if math.isnan(float(old)) or (not math.isnan(float(val)) and val > old):
        ary[idx] = val
    return old


@njit(**_JIT)
def atomic_nanmin(ary, idx, val):
    old = ary[idx]
    if math.isnan(float(old)) or (not math.isnan(float(val)) and val < old):
        ary[idx] = val
    return old


@njit(**_JIT)
def atomic_and(ary, idx, val):
    old = ary[idx]
    ary[idx] = old & val
    return old


@njit(**_JIT)
def atomic_or(ary, idx, val):
    old = ary[idx]
    ary[idx] = old | val
    return old


@njit(**_JIT)
def atomic_xor(ary, idx, val):
    old = ary[idx]
    ary[idx] = old ^ val
    return old


@njit(**_JIT)
def atomic_exch(ary, idx, val):
    old = ary[idx]
    ary[idx] = val
    return old


@njit(**_JIT)
def atomic_inc(ary, idx, val):
    old = ary[idx]
    ary[idx] = 0 if old >= val else old + 1
    return old


@njit(**_JIT)
def atomic_dec(ary, idx, val):
    old = ary[idx]
    ary[idx] = val if (old == 0 or old > val) else old - 1
    return old


@njit(**_JIT)
def atomic_cas(ary, idx, expected, val):
    old = ary[idx]
    if old == expected:
        ary[idx] = val
    return old


@njit(**_JIT)
def atomic_compare_and_swap(ary, expected, val):
    """The old form without an index: the array's first element, as the simulator does it."""
    old = ary.flat[0]
    if old == expected:
        ary.flat[0] = val
    return old


ATOMICS = {
    "add": atomic_add,
    "sub": atomic_sub,
    "max": atomic_max,
    "min": atomic_min,
    "nanmax": atomic_nanmax,
    "nanmin": atomic_nanmin,
    "and_": atomic_and,
    "or_": atomic_or,
    "xor": atomic_xor,
    "exch": atomic_exch,
    "inc": atomic_inc,
    "dec": atomic_dec,
    "cas": atomic_cas,
    "compare_and_swap": atomic_compare_and_swap,
}


# --- the seeded schedule's random numbers: splitmix64 on a one-word state, so (seed, run) replays
# bit for bit on any machine and numba version (numpy's generator inside njit is not promised to).


@njit(**_JIT)
def rng_next(state):
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(**_JIT)
def rng_below(state, n):
    """A draw in [0, n)."""
    return np.int64(rng_next(state) % np.uint64(n))


@njit(**_JIT)
def shuffled_lanes(state, lanes, count):
    """lanes[:count] = 0..count-1 in a seeded order (Fisher-Yates)."""
    for i in range(count):
        lanes[i] = i
    for i in range(count - 1, 0, -1):
        j = rng_below(state, i + 1)
        lanes[i], lanes[j] = lanes[j], lanes[i]


def rng_state(seed: int, run: int) -> np.ndarray:
    """The schedule's state for (seed, run): a stable hash, not Python's salted one."""
    import hashlib

    digest = hashlib.sha256(f"compiled-schedule:{int(seed)}:{int(run)}".encode()).digest()
    return np.frombuffer(digest[:8], dtype=np.uint64).copy()


def _check_index_intrinsic():
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def as_intp(builder, value, ty):
        if isinstance(ty, types.Boolean) or value.type.width < 64:
            signed = isinstance(ty, types.Integer) and ty.signed
            return builder.sext(value, ir.IntType(64)) if signed else builder.zext(value, ir.IntType(64))
        return value

    @intrinsic
    def check_index(typingctx, i, n, err):
        """One index of a kernel's array access: wrapped if negative (numpy's rule, fastsim's); one outside
        the dimension is noted in ``err[0]`` and reads as 0 (codegen.CheckedIndex). An intrinsic: each
        call is a few LLVM instructions, where an ``inline="always"`` function was copied into numba's
        IR at every index of the kernel (flash_attention: 4 of its 19 CPU s of compile)."""
        ints = (types.Integer, types.Boolean)
        if not (isinstance(i, ints) and isinstance(n, types.Integer) and isinstance(err, types.Array)):
            return None  # a float index: numba's typing error, and the launch goes to fastsim
        if not isinstance(err.dtype, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            ity, nty, ety = sig.args
            idx, size = as_intp(builder, args[0], ity), as_intp(builder, args[1], nty)
            zero = ir.Constant(ir.IntType(64), 0)
            if isinstance(ity, types.Integer) and ity.signed:
                wrapped = builder.select(builder.icmp_signed("<", idx, zero), builder.add(idx, size), idx)
                bad = builder.or_(
                    builder.icmp_signed("<", wrapped, zero), builder.icmp_signed(">=", wrapped, size)
                )
            else:  # unsigned: never negative (a uint64 past 2**63 is out of range, not wrapped)
                wrapped = idx
                bad = builder.or_(
                    builder.icmp_signed("<", size, zero), builder.icmp_unsigned(">=", idx, size)
                )
            with builder.if_then(bad, likely=False):
                arr = context.make_array(ety)(context, builder, args[2])
                builder.store(context.get_constant(ety.dtype, 1), arr.data)
            return builder.select(bad, zero, wrapped)

        return types.intp(i, n, err), codegen

    return check_index


check_index = _check_index_intrinsic()


@njit(**_JIT)
def check_index_tuple2(i, shape, err):
    """``a[t]`` with ``t`` a tuple of a 2-d array's two indices: each checked as ``check_index``."""
    return (check_index(i[0], shape[0], err), check_index(i[1], shape[1], err))


@njit(**_JIT)
def check_index_tuple3(i, shape, err):
    return (check_index(i[0], shape[0], err), check_index(i[1], shape[1], err),
            check_index(i[2], shape[2], err))  # fmt: skip


@njit(**_JIT)
def check_index_tuple4(i, shape, err):
    return (check_index(i[0], shape[0], err), check_index(i[1], shape[1], err),
            check_index(i[2], shape[2], err), check_index(i[3], shape[3], err))  # fmt: skip


# --- the ids lens's probes on this engine (kernels/probes.py's simulator versions are Python) ------
# ctx is (t, tx, ty, tz, bx, by, bz, bdx, bdy, bdz, gdx, gdy, gdz): what a device function is given.

MODEL_SMS = 132  # kernels/probes.py's: blocks round-robin over an H200's SMs (modelled)


@njit(**_JIT)
def model_smid(ctx):
    """Modelled, as fastsim's: the block's linear index round-robin over MODEL_SMS."""
    return (ctx[4] + ctx[10] * (ctx[5] + ctx[11] * ctx[6])) % MODEL_SMS


def _cycle_counter():
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def read_cycles(typingctx):
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
            return builder.call(fn, [])

        return types.uint64(), codegen

    return read_cycles


_read_cycles = _cycle_counter()


@njit(**_JIT)
def model_globaltimer(ctx):
    """The host's cycle counter: the simulator's order of events, not GPU time (like fastsim's host
    clock; its unit is CPU cycles, not nanoseconds)."""
    return _read_cycles()


# --- warp-level operations (codegen.warp_step): a warp is 32 consecutive linear thread ids of a block;
# every live thread has stored its arguments, and each returns 0 or a WARP_REASONS code.


@njit(**_JIT)
def warp_check(masks, alive, w, nthr, vote):
    """The lanes of warp ``w`` pass masks a rendezvous can take in lockstep: each names its own lane, every
    live lane a mask names passes the same mask, and (``vote``) names no lane that exited or is missing."""
    base = w * 32
    live, m0, same = 0, np.int64(-1), True
    for lane in range(min(32, nthr - base)):
        if alive[base + lane]:
            live |= 1 << lane
            m = np.int64(masks[base + lane]) & 0xFFFFFFFF
            if m0 < 0:
                m0 = m
            elif m != m0:
                same = False
    if live == 0:
        return 0
    if same:  # the common case: one mask for the warp
        if live & ~m0:
            return 1
        return 2 if vote and (m0 & ~live) else 0
    for lane in range(min(32, nthr - base)):
        if not alive[base + lane]:
            continue
        m = np.int64(masks[base + lane]) & 0xFFFFFFFF
        if not (m >> lane) & 1:
            return 1
        if vote and (m & ~live):
            return 2
        for k in range(32):
            if (m >> k) & 1 and (live >> k) & 1 and (np.int64(masks[base + k]) & 0xFFFFFFFF) != m:
                return 4
    return 0


@njit(**_JIT)
def warp_check_all(masks, alive, nthr, vote):
    """warp_check for every warp; also syncwarp(mask)'s whole step (the split is the warp barrier)."""
    for w in range((nthr + 31) // 32):
        c = warp_check(masks, alive, w, nthr, vote)
        if c:
            return c
    return 0


@njit(**_JIT)
def _as_i32(bits):
    return np.int32(bits - (1 << 32) if bits >= (1 << 31) else bits)


@njit(**_JIT)
def _shfl_source(mode, lane, b):
    if mode == 1:
        return lane - b if lane >= b else lane
    if mode == 2:
        return lane + b if lane + b <= 31 else lane
    if mode == 3:
        return lane ^ b
    return b


@njit(**_JIT)
def warp_shfl(mode, masks, vals, lanes, alive, nthr, out):
    """shfl_sync (0), shfl_up_sync (1), shfl_down_sync (2), shfl_xor_sync (3), width 32: only the lane
    argument's low 5 bits count, and a source past the warp's edge is the lane itself (PTX shfl.sync with
    numba's clamp values)."""
    c = warp_check_all(masks, alive, nthr, False)
    if c:
        return c
    for u in range(nthr):
        if alive[u]:
            lane = u % 32
            src = _shfl_source(mode, lane, np.int64(lanes[u]) & 31)
            y = u - lane + src
            if not (np.int64(masks[u]) >> src) & 1 or y >= nthr or not alive[y]:
                return 3
            out[u] = vals[y]
    return 0


@njit(**_JIT)
def _lanes_where(m, base, values, want, equal):
    """The bits of the mask's lanes whose value is true (``equal`` False) or equals ``want``."""
    bits = 0
    for k in range(32):
        if (m >> k) & 1 and ((values[base + k] == want) if equal else values[base + k]):
            bits |= 1 << k
    return bits


@njit(**_JIT)
def warp_vote(mode, masks, values, alive, nthr, out, pred):
    """ballot_sync (0: the int32 of the voting lanes' bits), all_sync (1), any_sync (2), eq_sync (3);
    match_any_sync (4: the mask's lanes whose value has this lane's bits), match_all_sync (5: the mask and
    True in ``pred`` where every lane of the mask has the same bits, else 0 and False)."""
    c = warp_check_all(masks, alive, nthr, True)
    if c:
        return c
    for u in range(nthr):
        if alive[u]:
            m = np.int64(masks[u]) & 0xFFFFFFFF
            bits = _lanes_where(m, u - u % 32, values, values[u], mode >= 4)
            if mode == 0 or mode == 4:
                out[u] = _as_i32(bits)
            elif mode == 1:
                out[u] = bits == m
            elif mode == 2:
                out[u] = bits != 0
            elif mode == 3:
                out[u] = bits == 0 or bits == m
            elif pred is not None:
                out[u] = _as_i32(m if bits == m else 0)
                pred[u] = bits == m
    return 0


@njit(**_JIT)
def warp_active(alive, nthr, out):
    """activemask(): the warp's live lanes (every one reaches the call: the code around it is uniform per
    warp, or the launch was refused)."""
    for w in range((nthr + 31) // 32):
        base = w * 32
        bits = 0
        for lane in range(min(32, nthr - base)):
            if alive[base + lane]:
                bits |= 1 << lane
        for lane in range(min(32, nthr - base)):
            if alive[base + lane]:
                out[base + lane] = bits
    return 0


@njit(**_JIT)
def warp_uniform(cd, alive, nthr):
    """1 where a warp's live lanes' conditions differ."""
    for w in range((nthr + 31) // 32):
        first = -1
        for u in range(w * 32, min(nthr, w * 32 + 32)):
            if alive[u]:
                v = 1 if cd[u] else 0
                if first < 0:
                    first = v
                elif v != first:
                    return 1
    return 0
