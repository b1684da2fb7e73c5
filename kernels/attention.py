"""Attention forward, O = softmax(Q Kᵀ / sqrt(d)) V, for float32 (batch, heads, seq_len, head_dim) arrays.

Two kernels compute the same thing:

* ``flash_attention`` (FlashAttention-2 loop order): one block per tile of query rows. It keeps its
  Q tile in shared memory, streams the K and V tiles through shared memory one after another, and
  never writes the seq_len x seq_len score matrix S anywhere. The softmax is computed *online*:
  each query row keeps a running max ``m`` and a running sum ``l`` of exp(s - m); when a new K/V
  tile raises ``m``, everything accumulated so far (l and the output row O) is rescaled by
  exp(m_old - m_new). At the end O is divided by l.
* ``naive_attention``: one thread per query row. It writes every score of its row to a global
  buffer S, reads it back to turn it into probabilities, and reads it once more to multiply by V.
  Moving S through global memory is the cost that FlashAttention avoids.

Both are built for one ``head_dim`` at a time (and the flash kernel for one ``tile``), because
shared and local array shapes must be compile-time constants.

Two deliberately broken builds of the flash kernel teach its invariants by breaking them (the
``broken`` compile-time flag; the FlashAttention page's "break it" toggle runs them):

* ``"no_rescale"``: O is not multiplied by exp(m_old - m_new) when a K/V tile raises the running max
  (l still is). O then mixes terms taken against different maxima, so rows whose max grows after
  the first K/V tile come out wrong, by more the more it grew; rows whose max is in their first
  tile never need a rescale and stay right.
* ``"no_max"``: the max is not subtracted: P = exp(S) against a fixed 0 instead of exp(S - m).
  Mathematically the same softmax, but exp overflows float32 once a score passes ~88.7, so rows
  with large scores become inf/NaN while the others stay right.
"""

import math
import warnings
from functools import cache

from numba import cuda, float32

from visualizer.kernels.probes import SIMULATOR, trace_row_state, trace_tile, with_options

Q_TILE, K_TILE, V_TILE = 0, 1, 2  # operand slots in the tiles buffer

MICRO = 4  # a thread owns a MICRO x MICRO piece of every S tile: MICRO query rows x MICRO keys
PAD = 4  # floats added to each row of sQ and sKP: rows of 16-byte chunks that hit different banks
NEG_BIG = float32(-1.0e30)  # "minus infinity" that stays finite (fastmath assumes there are no infs)
# 16-byte aligned shared arrays let the compiler load 4 floats with one instruction; the
# simulator refuses any alignment argument, so it gets None (its default).
SMEM_ALIGN = None if SIMULATOR else 16
# Optional register budget for the flash kernel (launch bounds); None lets the compiler choose.
# On an H200 (tile 32, head_dim 64) no bound was fastest: ~230-254 registers, 4 blocks per SM;
# a 168-register budget (6 blocks per SM) ran ~10% slower (visualizer/tools/attention_bench.py).
REG_BUDGET = None
BROKEN_VARIANTS = ("no_rescale", "no_max")  # see the module docstring
# On the simulator the kernels' float32 arithmetic is numpy's, which warns on every overflow (the
# "no_max" build's point); a GPU overflows to inf silently, and so does the simulator here.
warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning, module=__name__)
warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning, module=__name__)


def flash_smem_floats(tile: int, head_dim: int) -> int:
    """Floats of shared memory one flash_attention block declares (see the arrays in the kernel)."""
    t, d = tile, head_dim
    return t * (d + PAD) + t * (max(d, t) + PAD) + t * d + 2 * (t // MICRO) * t


@cache
def flash_attention_kernel(tile, head_dim, fastmath=True, reg_budget=REG_BUDGET, broken=None):
    """FlashAttention forward for TILE x TILE tiles and HEAD_DIM features.

    ``broken``: None, or one of BROKEN_VARIANTS for a deliberately wrong build (module docstring).

    ``tile`` is the edge of the tiles the attention matrix is cut into: each block owns ``tile``
    query rows (one Q tile) and walks over the keys ``tile`` at a time (one K/V tile per step).
    A block has (tile/4) x (tile/4) threads; thread (tx, ty) owns query rows ty + (tile/4)*i and
    keys tx + (tile/4)*j (i, j < 4) of every S tile, and head_dim/(tile/4) columns of those rows'
    output, all in registers. Global loads are issued one phase before their values are stored
    to shared memory (V during the S phase, the next K during the P V phase), so their latency
    hides behind arithmetic. Shared memory: flash_smem_floats(tile, head_dim) floats.
    """
    T = tile
    D = head_dim
    if broken is not None and broken not in BROKEN_VARIANTS:
        raise ValueError(f"broken must be None or one of {BROKEN_VARIANTS}, got {broken!r}")
    RESCALE_O = broken != "no_rescale"  # compile-time constants: the branches below fold away
    SUBTRACT_MAX = broken != "no_max"
    if T % MICRO or D % 4:
        raise ValueError(f"tile must be a multiple of {MICRO} and head_dim of 4, got {T}, {D}")
    TX = T // MICRO  # threads along keys (S) and along head_dim (O)
    TY = T // MICRO  # threads along query rows
    NT = TX * TY
    DPT = D // TX  # output columns per thread
    G = min(4, DPT)  # ... in groups of G adjacent columns (4 -> one 16-byte load of V)
    NG = DPT // G
    # Staging a T x D tile: thread tid moves columns g + GROUPS*e (e < 4) of rows rb + ROW_STEP*u,
    # for g = cg + GROUP_STEP*w. Consecutive threads take consecutive columns (coalesced global
    # reads, conflict-free shared stores), and the 4 columns of one row share one row address.
    GROUPS = D // 4
    GROUP_STEP = min(NT, GROUPS)
    ROW_STEP = max(1, NT // GROUPS)
    NU = T // ROW_STEP
    NW = GROUPS // GROUP_STEP
    PER_THREAD = NU * NW * 4  # floats of a tile each thread stages (constant: it sizes a local array)
    QW = D + PAD  # row length of sQ
    KPW = max(D, T) + PAD  # row length of sKP: a K row (D floats) or a P row (T floats)
    scale = float32(1.0 / math.sqrt(D))

    @cuda.jit(device=True, inline="always")
    def load_tile(src, row0, seq_len, rb, cg, buf):
        """Start this thread's global loads of rows row0.. of src (seq_len x D) into registers.

        No branches: a row past seq_len reads the last row instead and is zeroed, so all the
        loads can be in flight together (the values are only needed when stored to shared memory).
        """
        for u in range(NU):
            row = row0 + rb + ROW_STEP * u
            safe = min(row, seq_len - 1)
            for w in range(NW):
                c = cg + GROUP_STEP * w
                for e in range(4):
                    x = src[safe, c + GROUPS * e]
                    buf[(u * NW + w) * 4 + e] = x if row < seq_len else float32(0.0)

    @cuda.jit(device=True, inline="always")
    def store_tile(buf, dst, rb, cg, mul):
        """Write this thread's staged floats (times mul) to sQ or sKP (row r at [r // TX, r % TX])."""
        for u in range(NU):
            r = rb + ROW_STEP * u
            for w in range(NW):
                c = cg + GROUP_STEP * w
                for e in range(4):
                    dst[r // TX, r % TX, c + GROUPS * e] = buf[(u * NW + w) * 4 + e] * mul

    def flash_attention(q, k, v, o, seq_len, causal, tiles, rows):
        # Shared memory (a compile-time constant: flash_smem_floats(T, D) floats):
        # Tile rows r live at [r // TX, r % TX] (TX == TY): a thread's rows ty + TY*i (or keys
        # tx + TX*j) are then [i, ty, :] (or [j, tx, :]), so inner loops index with constants
        # and one loop-invariant thread index, and the compiler hoists the row address.
        sQ = cuda.shared.array((MICRO, TY, QW), float32, alignment=SMEM_ALIGN)  # this block's queries
        sKP = cuda.shared.array((MICRO, TX, KPW), float32, alignment=SMEM_ALIGN)  # K tile, then P tile
        # V tile, column c stored at [row, c // (TX*G), (c // G) % TX, c % G]: the G columns a
        # thread multiplies are adjacent, so it reads them with one 16-byte load
        sV = cuda.shared.array((T, NG, TX, G), float32, alignment=SMEM_ALIGN)
        sMax = cuda.shared.array((TX, T), float32)  # per-thread row maxima of the S tile
        sSum = cuda.shared.array((TX, T), float32)  # per-thread row sums of P
        # Registers (local arrays of constant shape, indexed only by unrolled loops):
        s = cuda.local.array((MICRO, MICRO), float32)  # my piece of the S tile, then of P
        qv = cuda.local.array((MICRO, 4), float32)  # 4 features of my 4 query rows
        kv = cuda.local.array((MICRO, 4), float32)  # 4 features of my 4 keys
        pv = cuda.local.array((MICRO, 4), float32)  # P of my rows for 4 keys
        vv = cuda.local.array(DPT, float32)  # my columns of one V row
        acc = cuda.local.array((MICRO, DPT), float32)  # my piece of O (not yet divided by l)
        m = cuda.local.array(MICRO, float32)  # running row max
        l = cuda.local.array(MICRO, float32)  # noqa: E741 - running row sum of exp(s - m)
        alpha = cuda.local.array(MICRO, float32)  # rescale factor exp(m_old - m_new)
        buf = cuda.local.array(PER_THREAD, float32)  # my share of a tile whose loads are in flight

        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        rb = tid // GROUP_STEP  # my first staging row and column group
        cg = tid - rb * GROUP_STEP
        qt = cuda.blockIdx.x  # which Q tile
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        qh = q[b, h]  # this head's (seq_len, D) matrices
        kh = k[b, h]
        vh = v[b, h]
        q0 = qt * T  # first query row of the tile
        n_kv = (seq_len + T - 1) // T
        if causal != 0:
            n_kv = min(n_kv, qt + 1)  # K/V tiles right of the diagonal are fully masked: skip them

        for i in range(MICRO):
            m[i] = NEG_BIG
            l[i] = 0.0
            for c in range(DPT):
                acc[i, c] = 0.0

        # Stage the Q tile once, pre-multiplied by the softmax scale; rows past seq_len are zero.
        load_tile(qh, q0, seq_len, rb, cg, buf)
        store_tile(buf, sQ, rb, cg, scale)
        cuda.syncthreads()
        trace_tile(tiles, 0, Q_TILE, q0, 0, min(T, seq_len - q0), D)

        # Software pipeline: global loads are started one phase before their values are stored to
        # shared memory, so their latency hides behind arithmetic. The V tile's loads fly during
        # the S phase; the next K tile's loads fly during the P V phase.
        load_tile(kh, 0, seq_len, rb, cg, buf)
        store_tile(buf, sKP, rb, cg, float32(1.0))
        for step in range(n_kv):  # FA2 order: K/V tiles are the inner loop of each query block
            k0 = step * T
            cuda.syncthreads()  # the K tile is complete
            trace_tile(tiles, step, K_TILE, k0, 0, min(T, seq_len - k0), D)
            load_tile(vh, k0, seq_len, rb, cg, buf)

            # S = (Q * scale) Kᵀ for my 4 x 4 piece, 4 features at a time (16-byte loads)
            for i in range(MICRO):
                for j in range(MICRO):
                    s[i, j] = 0.0
            for dc in range(D // 4):
                d0 = dc * 4
                for i in range(MICRO):
                    for e in range(4):
                        qv[i, e] = sQ[i, ty, d0 + e]  # query row ty + TY*i
                for j in range(MICRO):
                    for e in range(4):
                        kv[j, e] = sKP[j, tx, d0 + e]  # key tx + TX*j
                for i in range(MICRO):
                    for j in range(MICRO):
                        x = s[i, j]
                        for e in range(4):
                            x += qv[i, e] * kv[j, e]
                        s[i, j] = x

            # Mask keys past seq_len (last tile) and, on the diagonal tile, keys after the query.
            if k0 + T > seq_len or (causal != 0 and step == qt):
                for i in range(MICRO):
                    row = q0 + ty + TY * i
                    for j in range(MICRO):
                        key = k0 + tx + TX * j
                        if key >= seq_len or (causal != 0 and key > row):
                            s[i, j] = NEG_BIG

            # Row max of the tile: each thread has 4 of a row's keys; combine through sMax.
            for i in range(MICRO):
                x = s[i, 0]
                for j in range(1, MICRO):
                    x = max(x, s[i, j])
                sMax[tx, ty + TY * i] = x
            for u in range(NU):  # the V tile has arrived by now (sV is free since the last step)
                for w in range(NW):
                    for e in range(4):
                        c = cg + GROUP_STEP * w + GROUPS * e
                        sV[rb + ROW_STEP * u, c // (TX * G), (c // G) % TX, c % G] = buf[(u * NW + w) * 4 + e]
            cuda.syncthreads()  # sMax complete; also nobody reads sKP as K any more

            # Online softmax: new max, rescale factor, P = exp(S - m_new) into sKP, partial sums.
            for i in range(MICRO):
                r = ty + TY * i
                x = sMax[0, r]
                for t in range(1, TX):
                    x = max(x, sMax[t, r])
                m_new = max(m[i], x)
                if not SUBTRACT_MAX:  # broken: exp(S) against a fixed 0, whatever the scores
                    m_new = float32(0.0)
                alpha[i] = math.exp(m[i] - m_new)  # 0 on the first step (m = -"inf")
                m[i] = m_new
                ps = float32(0.0)
                for j in range(MICRO):
                    p = math.exp(s[i, j] - m_new)
                    sKP[i, ty, tx + TX * j] = p  # P row r = ty + TY*i
                    ps += p
                sSum[tx, r] = ps
            cuda.syncthreads()  # P tile, sSum and the V tile complete
            trace_tile(tiles, step, V_TILE, k0, 0, min(T, seq_len - k0), D)
            if step + 1 < n_kv:
                load_tile(kh, k0 + T, seq_len, rb, cg, buf)  # next K tile: flies during P V

            # l = alpha * l + rowsum(P);  O = alpha * O + P V
            for i in range(MICRO):
                r = ty + TY * i
                x = sSum[0, r]
                for t in range(1, TX):
                    x += sSum[t, r]
                l[i] = alpha[i] * l[i] + x
                if RESCALE_O:  # (the "no_rescale" build leaves O against the old max)
                    for c in range(DPT):
                        acc[i, c] *= alpha[i]
            for jc in range(T // 4):
                j0 = jc * 4
                for i in range(MICRO):
                    for e in range(4):
                        pv[i, e] = sKP[i, ty, j0 + e]
                for e in range(4):
                    for g in range(NG):
                        for f in range(G):
                            vv[g * G + f] = sV[j0 + e, g, tx, f]
                    for i in range(MICRO):
                        for c in range(DPT):
                            acc[i, c] += pv[i, e] * vv[c]
            if tx == 0:
                for i in range(MICRO):
                    trace_row_state(rows, step, ty + TY * i, m[i], l[i])
            cuda.syncthreads()  # everyone is done with P (sKP), sV and sSum
            if step + 1 < n_kv:
                store_tile(buf, sKP, rb, cg, float32(1.0))

        # O = acc / l for my rows that exist; G adjacent columns per thread, TX threads per row
        for i in range(MICRO):
            row = q0 + ty + TY * i
            if row < seq_len:
                inv = float32(1.0) / l[i]
                for g in range(NG):
                    for f in range(G):
                        o[b, h, row, G * tx + G * TX * g + f] = acc[i, g * G + f] * inv

    options = {"fastmath": fastmath}
    if reg_budget and not SIMULATOR:  # (the simulator takes no launch bounds)
        # Launch bounds: ask the compiler to fit this many blocks per SM, i.e. at most
        # ~reg_budget registers a thread; more resident warps hide more latency.
        options["launch_bounds"] = (NT, max(1, 65536 // (NT * reg_budget)))
    return with_options(flash_attention, **options)


def flash_attention_no_rescale_kernel(tile, head_dim):
    """DELIBERATELY WRONG flash kernel: O is not rescaled when m grows."""
    return flash_attention_kernel(tile, head_dim, broken="no_rescale")


def flash_attention_no_max_kernel(tile, head_dim):
    """DELIBERATELY WRONG flash kernel: exp(S) without subtracting the max."""
    return flash_attention_kernel(tile, head_dim, broken="no_max")


@cache
def naive_attention_kernel(head_dim, fastmath=True):
    """Attention that materialises S in global memory; one thread per query row."""
    D = head_dim
    scale = float32(1.0 / math.sqrt(D))

    def naive_attention(q, k, v, s, o, seq_len, causal):
        qrow = cuda.local.array(D, float32)
        acc = cuda.local.array(D, float32)
        row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        if row < seq_len:
            n_keys = row + 1 if causal != 0 else seq_len
            for c in range(D):
                qrow[c] = q[b, h, row, c] * scale
            # pass 1: every score of the row goes to global memory; keep the row max
            mx = NEG_BIG
            for j in range(n_keys):
                x = float32(0.0)
                for c in range(D):
                    x += qrow[c] * k[b, h, j, c]
                s[b, h, row, j] = x
                mx = max(mx, x)
            # pass 2: read the scores back and overwrite them with exp(s - max); sum them
            total = float32(0.0)
            for j in range(n_keys):
                p = math.exp(s[b, h, row, j] - mx)
                s[b, h, row, j] = p
                total += p
            # pass 3: read the probabilities back once more and weight the V rows
            for c in range(D):
                acc[c] = 0.0
            for j in range(n_keys):
                p = s[b, h, row, j]
                for c in range(D):
                    acc[c] += p * v[b, h, j, c]
            inv = float32(1.0) / total
            for c in range(D):
                o[b, h, row, c] = acc[c] * inv

    return with_options(naive_attention, fastmath=fastmath)
