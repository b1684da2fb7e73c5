"""Fast fp32 FlashAttention-2 forward: O = softmax(Q Kᵀ / sqrt(d)) V, plain fp32 FFMA (no tensor cores).

Same function as ``kernels/attention.py:flash_attention`` (the teaching kernel, kept for the
pictures), organised for speed:

* A block owns BQ query rows and walks the keys BK at a time. Thread (tx, ty) of a TX x TY block
  owns a register tile of every S tile: RM = BQ/TY query rows (ty + TY*i) x RN = BK/TX keys
  (tx + TX*j), and the same RM rows x DC = D/TX output columns (4 adjacent columns, repeated
  every 4*TX) of O. The TX threads that share a row are 8 neighbouring lanes of one warp.
* The online softmax stays in registers: each thread keeps the running max m of its rows and
  its own partial row sum l (all TX threads of a row use the same m, so the partial sums add up
  at the end). Only the tile's row max crosses threads: a butterfly of warp shuffles on the GPU
  (through shared memory on the simulator, which has no warp shuffles).
* Q is pre-scaled by log2(e)/sqrt(d) once, so softmax uses exp2 (one MUFU.EX2 per score).
* Software pipeline through registers: the V tile's global loads fly during S = Q Kᵀ, the next
  K tile's during O += P V; two barriers per K/V tile.
* Causal: K/V tiles right of the diagonal are skipped, and block x computes two Q tiles, the
  long n_q-1-x first and then the short x, so all blocks do the same work (no long tail of a
  few long tiles on some SMs). Its tiles and row states are recorded one part after the other.

Shared memory per block (float32): sQ BQ x (D+4), sK BK x (D+4), sV BK x D, sP BQ x (BK+4), and
BQ x TX for the simulator's reductions: fast_smem_floats(). The 4-float row padding keeps the
16-byte loads of different rows in different banks.
"""

import math
from functools import cache

from numba import cuda, float32

from kernels.probes import SIMULATOR, jit_pair, trace_begin, trace_end, trace_row_state, trace_tile

Q_TILE, K_TILE, V_TILE = 0, 1, 2  # operand slots in the tiles buffer (as kernels/attention.py)
PAD = 4
TX = 8  # threads sharing a query row (neighbouring lanes of one warp)
NEG_BIG = float32(-1.0e30)  # finite "minus infinity" (fastmath assumes no infs)
LOG2E = 1.4426950408889634
SMEM_ALIGN = None if SIMULATOR else 16

# (block_q, block_k, threads_y) per head_dim, chosen on an H200 (docs/benchmarks.md); all fit in
# 48 KiB of static shared memory
CONFIGS = {
    32: (64, 32, 8),
    64: (64, 32, 8),
    128: (32, 16, 8),
}
SMS = 132  # an H200's SMs: the causal head_dim-64 build picks its block size from blocks per SM


def fast_config(head_dim: int, causal: bool = False, seq_len: int = 0, heads: int = 1, batch: int = 1):
    """(block_q, block_k, threads_y, unroll) of the build a launch uses (attention_specs mirrors it).

    Causal, head_dim 64: with at least 3 blocks (Q tile pairs) per SM, 64 threads of 8 rows x 4 keys
    and the loops unrolled by 2; with fewer, 128 threads of 4 rows x 4 keys, so the few blocks
    still give each SM 8 warps (H200, b=1 h=8: 4096 takes the second, 8192 the first)."""
    if head_dim not in CONFIGS:
        raise ValueError(f"head_dim must be one of {sorted(CONFIGS)}, got {head_dim}")
    if causal and head_dim == 64:
        pairs = (-(-seq_len // 64) + 1) // 2
        return (64, 32, 8, 2) if pairs * heads * batch >= 3 * SMS else (64, 32, 16, 1)
    return (*CONFIGS[head_dim], 1)


def fast_smem_floats(head_dim: int, block_q: int, block_k: int) -> int:
    """Floats of static shared memory one block declares (the arrays at the top of the kernel)."""
    d, bq, bk = head_dim, block_q, block_k
    return bq * (d + PAD) + bk * (d + PAD) + bk * d + bq * (bk + PAD) + bq * TX


def fast_grid(batch: int, heads: int, seq_len: int, block_q: int, causal: bool) -> tuple[int, int, int]:
    """Grid of a launch: causal (pairs of Q tiles, batch x heads); else (Q tiles, heads, batch)."""
    n_q = -(-seq_len // block_q)
    return ((n_q + 1) // 2, batch * heads, 1) if causal else (n_q, heads, batch)


def flash_attention_fast_for(head_dim, causal, seq_len, heads, batch):
    """(instrumented, clean) build for one launch: the configuration fast_config picks for it."""
    bq, bk, ty, unroll = fast_config(head_dim, bool(causal), seq_len, heads, batch)
    return flash_attention_fast_kernels(head_dim, bool(causal), bq, bk, ty, unroll=unroll)


@cache
def flash_attention_fast_kernels(
    head_dim,
    causal=False,
    block_q=None,
    block_k=None,
    threads_y=None,
    fastmath=True,
    min_blocks=None,
    unroll=None,
    skip_rescale=False,
):
    """(instrumented, clean) fast FlashAttention forward for HEAD_DIM features; launch with
    block (TX, threads_y) and grid fast_grid(...). ``causal`` is compiled in (the kernel's causal
    argument must match it): the non-causal build has no masks on full tiles and no tile pairs.
    ``unroll``: the causal build's feature and key loops unrolled by 1 or 2 (more independent
    loads in flight). Defaults: fast_config(head_dim, causal); launches use flash_attention_fast_for.
    ``skip_rescale``: skip O *= alpha for rows whose max did not grow (alpha == 1). ``min_blocks``: launch
    bounds asking the compiler to fit that many blocks per SM (caps registers); None: no cap."""
    CAUSAL = bool(causal)
    dq, dk, dt, du = fast_config(head_dim, CAUSAL) if head_dim in CONFIGS else (64, 32, 8, 1)
    U = int(unroll or du)
    SKIP = bool(skip_rescale)
    BQ = block_q or dq
    BK = block_k or dk
    TY = threads_y or dt
    D = head_dim
    if BQ % TY or BK % TX or D % (4 * TX):
        raise ValueError(f"need block_q % threads_y == 0, block_k % {TX} == 0, head_dim % {4 * TX} == 0")
    RM = BQ // TY  # query rows per thread
    RN = BK // TX  # keys per thread in an S tile
    DC = D // TX  # output columns per thread
    NG = DC // 4  # ... as groups of 4 adjacent columns
    NT = TX * TY
    CH = D // 4  # 4-float chunks in a row
    if NT % CH or (BK * CH) % NT or (BQ * CH) % NT:
        raise ValueError("threads per block must tile the K/V and Q tiles in 4-float chunks")
    RSTEP = NT // CH  # rows one pass of the block stages
    KPASS = BK // RSTEP  # passes per K or V tile
    QPASS = BQ // RSTEP
    PER = KPASS * 4  # floats of a K/V tile each thread stages in registers
    QW = D + PAD
    PW = BK + PAD
    qscale = float32(LOG2E / math.sqrt(D))
    ln2 = float32(math.log(2.0))

    if SIMULATOR:

        @cuda.jit(device=True, inline="always")
        def reduce_rows(vals, red, ty, tx, take_max):
            """vals[i] <- max (or sum) of vals[i] over the TX threads of row ty + TY*i (all threads call)."""
            for i in range(RM):
                red[i, ty, tx] = vals[i]
            cuda.syncthreads()
            for i in range(RM):
                x = red[i, ty, 0]
                for t in range(1, TX):
                    y = red[i, ty, t]
                    x = max(x, y) if take_max else x + y
                vals[i] = x
            cuda.syncthreads()

    else:

        @cuda.jit(device=True, inline="always")
        def reduce_rows(vals, red, ty, tx, take_max):
            """Butterfly over the TX neighbouring lanes that share each row (no shared memory)."""
            for i in range(RM):
                x = vals[i]
                for b in range(3):  # TX = 8 lanes: xor 4, 2, 1
                    y = cuda.shfl_xor_sync(0xFFFFFFFF, x, 4 >> b)
                    x = max(x, y) if take_max else x + y
                vals[i] = x

    @cuda.jit(device=True, inline="always")
    def load_kv(src, row0, seq_len, tid, buf):
        """Start this thread's loads of rows row0.. of a K or V tile (branch-free: rows past
        seq_len read the last row and become 0), so all of them are in flight together."""
        c = (tid % CH) * 4
        for u in range(KPASS):
            row = row0 + tid // CH + RSTEP * u
            safe = min(row, seq_len - 1)
            for e in range(4):
                x = src[safe, c + e]
                buf[u * 4 + e] = x if row < seq_len else float32(0.0)

    def flash_attention_fast(q, k, v, o, seq_len, causal, trace, active, tiles, rows):
        """Causal build: block x does Q tiles n_q-1-x then x; grid (pairs, batch * heads)."""
        t0 = trace_begin(trace)
        sQ = cuda.shared.array((RM, TY, QW), float32, alignment=SMEM_ALIGN)  # row ty + TY*i at [i, ty]
        sK = cuda.shared.array((RN, TX, QW), float32, alignment=SMEM_ALIGN)  # key tx + TX*j at [j, tx]
        sV = cuda.shared.array((BK, NG, TX, 4), float32, alignment=SMEM_ALIGN)  # col 4(tx + TX g) + f
        sP = cuda.shared.array((RM, TY, PW), float32, alignment=SMEM_ALIGN)  # P row ty + TY*i
        sRed = cuda.shared.array((RM, TY, TX), float32)  # simulator's cross-thread reductions
        s = cuda.local.array((RM, RN), float32)  # my piece of S, then of P
        acc = cuda.local.array((RM, DC), float32)  # my piece of O (not yet divided by l)
        m = cuda.local.array(RM, float32)  # running row max (log2 units)
        l = cuda.local.array(RM, float32)  # noqa: E741 - my partial running row sum
        red = cuda.local.array(RM, float32)
        qf = cuda.local.array((RM, 4), float32)
        kf = cuda.local.array((RN, 4), float32)
        pf = cuda.local.array((RM, 4), float32)
        vf = cuda.local.array(DC, float32)
        buf = cuda.local.array(PER, float32)  # a K or V tile's loads in flight

        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        heads = q.shape[1]
        h = cuda.blockIdx.y % heads
        b = cuda.blockIdx.y // heads
        qh = q[b, h]
        kh = k[b, h]
        vh = v[b, h]
        n_q = (seq_len + BQ - 1) // BQ
        # causal: block x does Q tiles n_q-1-x (long) and x (short), so every block has the same work
        n_parts = 1
        if CAUSAL and cuda.blockIdx.x != n_q - 1 - cuda.blockIdx.x:
            n_parts = 2
        record = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y < rows.shape[0]  # row-state block
        s0 = 0  # first record slot of this part (parts record one after the other)
        q0 = 0
        cq = (tid % CH) * 4
        for part in range(n_parts):
            qt = n_q - 1 - cuda.blockIdx.x if CAUSAL and part == 0 else cuda.blockIdx.x
            q0 = qt * BQ
            n_kv = (seq_len + BK - 1) // BK
            if CAUSAL:
                n_kv = min(n_kv, (min(q0 + BQ, seq_len) - 1) // BK + 1)
            for i in range(RM):
                m[i] = NEG_BIG
                l[i] = 0.0
                for c in range(DC):
                    acc[i, c] = 0.0

            # Q tile, pre-scaled by log2(e)/sqrt(d); rows past seq_len are zero
            for u in range(QPASS):
                r = tid // CH + RSTEP * u
                row = q0 + r
                safe = min(row, seq_len - 1)
                for e in range(4):
                    x = qh[safe, cq + e]
                    sQ[r // TY, r % TY, cq + e] = x * qscale if row < seq_len else float32(0.0)
            load_kv(kh, 0, seq_len, tid, buf)
            for u in range(KPASS):
                r = tid // CH + RSTEP * u
                for e in range(4):
                    sK[r // TX, r % TX, cq + e] = buf[u * 4 + e]
            load_kv(vh, 0, seq_len, tid, buf)  # V tile 0 flies during the first S = Q Kᵀ
            cuda.syncthreads()
            trace_tile(tiles, s0, Q_TILE, q0, 0, min(BQ, seq_len - q0), D)

            for step in range(n_kv):
                k0 = step * BK
                trace_tile(tiles, s0 + step, K_TILE, k0, 0, min(BK, seq_len - k0), D)
                # S = Q Kᵀ (log2 units) for my RM x RN piece, 4 features at a time (16-byte loads)
                for i in range(RM):
                    for j in range(RN):
                        s[i, j] = 0.0
                for dcu in range(D // (4 * U)):
                    for du in range(U):
                        d0 = (dcu * U + du) * 4
                        for i in range(RM):
                            for e in range(4):
                                qf[i, e] = sQ[i, ty, d0 + e]
                        for j in range(RN):
                            for e in range(4):
                                kf[j, e] = sK[j, tx, d0 + e]
                        for i in range(RM):
                            for j in range(RN):
                                x = s[i, j]
                                for e in range(4):
                                    x += qf[i, e] * kf[j, e]
                                s[i, j] = x
                # mask keys past seq_len and, near the diagonal, keys after the query
                if k0 + BK > seq_len or (CAUSAL and k0 + BK - 1 > q0):
                    for i in range(RM):
                        row = q0 + ty + TY * i
                        for j in range(RN):
                            key = k0 + tx + TX * j
                            if key >= seq_len or (CAUSAL and key > row):
                                s[i, j] = NEG_BIG
                # the tile's row max: my RN keys, then across the TX threads of the row
                for i in range(RM):
                    x = s[i, 0]
                    for j in range(1, RN):
                        x = max(x, s[i, j])
                    red[i] = x
                reduce_rows(red, sRed, ty, tx, True)
                # online softmax: rescale what I have, P = exp2(S - m_new) to shared memory
                for i in range(RM):
                    m_new = max(m[i], red[i])
                    alpha = math.exp2(m[i] - m_new)  # 0 on a row's first tile
                    m[i] = m_new
                    ps = float32(0.0)
                    for j in range(RN):
                        p = math.exp2(s[i, j] - m_new)
                        sP[i, ty, tx + TX * j] = p
                        ps += p
                    l[i] = l[i] * alpha + ps
                    if not SKIP or alpha != float32(1.0):
                        for c in range(DC):
                            acc[i, c] *= alpha
                # the V tile has arrived: to shared memory (free since the last barrier)
                for u in range(KPASS):
                    r = tid // CH + RSTEP * u
                    for e in range(4):
                        sV[r, (cq // 4) // TX, (cq // 4) % TX, e] = buf[u * 4 + e]
                if step + 1 < n_kv:
                    load_kv(kh, k0 + BK, seq_len, tid, buf)  # next K tile flies during P V
                cuda.syncthreads()  # P and V complete; nobody reads this K tile any more
                trace_tile(tiles, s0 + step, V_TILE, k0, 0, min(BK, seq_len - k0), D)
                # O += P V
                for kcu in range(BK // (4 * U)):
                    for ku in range(U):
                        j0 = (kcu * U + ku) * 4
                        for i in range(RM):
                            for e in range(4):
                                pf[i, e] = sP[i, ty, j0 + e]
                        for e in range(4):
                            for g in range(NG):
                                for f in range(4):
                                    vf[g * 4 + f] = sV[j0 + e, g, tx, f]
                            for i in range(RM):
                                for c in range(DC):
                                    acc[i, c] += pf[i, e] * vf[c]
                # recorded state, m in score units and the full row sum: only blocks that record
                if record:  # (uniform per block, so the shuffles see every lane)
                    for i in range(RM):
                        red[i] = l[i]
                    reduce_rows(red, sRed, ty, tx, False)
                    if tx == 0:
                        for i in range(RM):
                            trace_row_state(rows, s0 + step, ty + TY * i, m[i] * ln2, red[i])
                if step + 1 < n_kv:
                    for u in range(KPASS):
                        r = tid // CH + RSTEP * u
                        for e in range(4):
                            sK[r // TX, r % TX, cq + e] = buf[u * 4 + e]
                    load_kv(vh, k0 + BK, seq_len, tid, buf)  # next V tile flies during the next S
                cuda.syncthreads()  # next K complete; everyone is done with P and V

            # l = sum of the partial sums; O = acc / l for my rows that exist
            for i in range(RM):
                red[i] = l[i]
            reduce_rows(red, sRed, ty, tx, False)
            for i in range(RM):
                row = q0 + ty + TY * i
                if row < seq_len:
                    inv = float32(1.0) / red[i]
                    for g in range(NG):
                        for f in range(4):
                            o[b, h, row, 4 * (tx + TX * g) + f] = acc[i, g * 4 + f] * inv
            s0 += n_kv
        trace_end(trace, active, t0, q0 + ty < seq_len)

    def flash_attention_fast_full(q, k, v, o, seq_len, causal, trace, active, tiles, rows):
        """Non-causal build: one Q tile per block, grid (n_q, heads, batch); the same steps as the
        causal kernel above without its tile pairs and masks (kept separate: on an H200 a non-causal
        build with the causal kernel's structure spilled registers and ran 18% slower)."""
        t0 = trace_begin(trace)
        sQ = cuda.shared.array((RM, TY, QW), float32, alignment=SMEM_ALIGN)
        sK = cuda.shared.array((RN, TX, QW), float32, alignment=SMEM_ALIGN)
        sV = cuda.shared.array((BK, NG, TX, 4), float32, alignment=SMEM_ALIGN)
        sP = cuda.shared.array((RM, TY, PW), float32, alignment=SMEM_ALIGN)
        sRed = cuda.shared.array((RM, TY, TX), float32)
        s = cuda.local.array((RM, RN), float32)
        acc = cuda.local.array((RM, DC), float32)
        m = cuda.local.array(RM, float32)
        l = cuda.local.array(RM, float32)  # noqa: E741
        red = cuda.local.array(RM, float32)
        qf = cuda.local.array((RM, 4), float32)
        kf = cuda.local.array((RN, 4), float32)
        pf = cuda.local.array((RM, 4), float32)
        vf = cuda.local.array(DC, float32)
        buf = cuda.local.array(PER, float32)

        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TX + tx
        qt = cuda.blockIdx.x
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        q0 = qt * BQ
        qh = q[b, h]
        kh = k[b, h]
        vh = v[b, h]
        n_kv = (seq_len + BK - 1) // BK

        for i in range(RM):
            m[i] = NEG_BIG
            l[i] = 0.0
            for c in range(DC):
                acc[i, c] = 0.0

        cq = (tid % CH) * 4
        for u in range(QPASS):
            r = tid // CH + RSTEP * u
            row = q0 + r
            safe = min(row, seq_len - 1)
            for e in range(4):
                x = qh[safe, cq + e]
                sQ[r // TY, r % TY, cq + e] = x * qscale if row < seq_len else float32(0.0)
        load_kv(kh, 0, seq_len, tid, buf)
        for u in range(KPASS):
            r = tid // CH + RSTEP * u
            for e in range(4):
                sK[r // TX, r % TX, cq + e] = buf[u * 4 + e]
        load_kv(vh, 0, seq_len, tid, buf)
        cuda.syncthreads()
        trace_tile(tiles, 0, Q_TILE, q0, 0, min(BQ, seq_len - q0), D)

        for step in range(n_kv):
            k0 = step * BK
            trace_tile(tiles, step, K_TILE, k0, 0, min(BK, seq_len - k0), D)
            for i in range(RM):
                for j in range(RN):
                    s[i, j] = 0.0
            for dc in range(D // 4):
                d0 = dc * 4
                for i in range(RM):
                    for e in range(4):
                        qf[i, e] = sQ[i, ty, d0 + e]
                for j in range(RN):
                    for e in range(4):
                        kf[j, e] = sK[j, tx, d0 + e]
                for i in range(RM):
                    for j in range(RN):
                        x = s[i, j]
                        for e in range(4):
                            x += qf[i, e] * kf[j, e]
                        s[i, j] = x
            if k0 + BK > seq_len:  # keys past seq_len (last tile)
                for i in range(RM):
                    for j in range(RN):
                        if k0 + tx + TX * j >= seq_len:
                            s[i, j] = NEG_BIG
            for i in range(RM):
                x = s[i, 0]
                for j in range(1, RN):
                    x = max(x, s[i, j])
                red[i] = x
            reduce_rows(red, sRed, ty, tx, True)
            for i in range(RM):
                m_new = max(m[i], red[i])
                alpha = math.exp2(m[i] - m_new)
                m[i] = m_new
                ps = float32(0.0)
                for j in range(RN):
                    p = math.exp2(s[i, j] - m_new)
                    sP[i, ty, tx + TX * j] = p
                    ps += p
                l[i] = l[i] * alpha + ps
                for c in range(DC):
                    acc[i, c] *= alpha
            for u in range(KPASS):
                r = tid // CH + RSTEP * u
                for e in range(4):
                    sV[r, (cq // 4) // TX, (cq // 4) % TX, e] = buf[u * 4 + e]
            if step + 1 < n_kv:
                load_kv(kh, k0 + BK, seq_len, tid, buf)
            cuda.syncthreads()
            trace_tile(tiles, step, V_TILE, k0, 0, min(BK, seq_len - k0), D)
            for kc in range(BK // 4):
                j0 = kc * 4
                for i in range(RM):
                    for e in range(4):
                        pf[i, e] = sP[i, ty, j0 + e]
                for e in range(4):
                    for g in range(NG):
                        for f in range(4):
                            vf[g * 4 + f] = sV[j0 + e, g, tx, f]
                    for i in range(RM):
                        for c in range(DC):
                            acc[i, c] += pf[i, e] * vf[c]
            for i in range(RM):  # recorded state (the clean build discards it)
                red[i] = l[i]
            reduce_rows(red, sRed, ty, tx, False)
            if tx == 0:
                for i in range(RM):
                    trace_row_state(rows, step, ty + TY * i, m[i] * ln2, red[i])
            if step + 1 < n_kv:
                for u in range(KPASS):
                    r = tid // CH + RSTEP * u
                    for e in range(4):
                        sK[r // TX, r % TX, cq + e] = buf[u * 4 + e]
                load_kv(vh, k0 + BK, seq_len, tid, buf)
            cuda.syncthreads()

        for i in range(RM):
            red[i] = l[i]
        reduce_rows(red, sRed, ty, tx, False)
        for i in range(RM):
            row = q0 + ty + TY * i
            if row < seq_len:
                inv = float32(1.0) / red[i]
                for g in range(NG):
                    for f in range(4):
                        o[b, h, row, 4 * (tx + TX * g) + f] = acc[i, g * 4 + f] * inv
        trace_end(trace, active, t0, q0 + ty < seq_len)

    options = {"fastmath": fastmath}
    if min_blocks and not SIMULATOR:  # (the simulator takes no launch bounds)
        options["launch_bounds"] = (NT, min_blocks)
    return jit_pair(flash_attention_fast if CAUSAL else flash_attention_fast_full, **options)
