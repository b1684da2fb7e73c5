"""Fast fp32 FlashAttention-2 forward on tensor cores: O = softmax(Q Kᵀ / sqrt(d)) V.

Same function as ``kernels/attention.py:flash_attention`` (the teaching kernel, kept for the
pictures), organised like FlashAttention-2 for speed:

* A block of W warps owns BQ = 16 W query rows; warp w owns rows 16w .. 16w+15 and walks the keys
  BK at a time. Both products are warp-wide 16 x 8 x 8 matrix multiplies on tensor cores
  (kernels/tensor_core.py): S = Q Kᵀ with Q's fragments in registers and K from shared memory,
  then O += P V with P straight from S's registers (no trip through shared memory) and V from
  shared memory. Each product is 3xTF32, as in torch's memory-efficient kernel: fp32 accuracy.
* A lane holds S and O in the mma layout: rows g and g+8 of its warp's 16 (g = lane // 4), two
  adjacent columns of every 8-column tile. The online softmax stays in those registers: the
  row max crosses only the 4 lanes of a quad (two shuffles); each lane keeps a partial row sum.
* P's registers are the A operand of P V once the key order inside each 8-key tile is read as
  (0, 2, 4, 6, 1, 3, 5, 7): V's rows are fetched in the same order, so nothing moves between lanes.
* Each tile's P V is summed from zero, 8 output columns at a time, and added to O (rescaled by the
  softmax's alpha in the same fp32 FMA): tensor cores round their running sum toward zero, which
  over a whole row of 8192 keys cost 7e-5 of relative accuracy; per tile it is ~1e-7.
* Q is pre-scaled by log2(e)/sqrt(d), so softmax is one exp2 per score.
* Software pipeline through registers: the V tile's global loads fly during S = Q Kᵀ, the next
  K tile's during O += P V; two barriers per K/V tile.
* Causal: K/V tiles right of the diagonal are skipped, and block x computes two Q tiles, the long
  n_q-1-x first and then the short x, so all blocks do the same work. Its tiles and row states are
  recorded one part after the other.

Shared memory per block (float32): sK and sV, BK x (D+4) each (the 4-float padding puts the lanes
of a fragment load in 32 different banks), plus the simulator's scratch (kernels/tensor_core.py).
Shared-memory indices are flat (kernels/flat.py), so the unrolled tile loops compile to loads with
constant offsets instead of a register per address.
"""

import math
from functools import cache

from numba import cuda, float32

from visualizer.kernels import flat
from visualizer.kernels.probes import SIMULATOR, trace_row_state, trace_tile, with_options
from visualizer.kernels.tensor_core import mma_fp32, quad_max, quad_sum, scratch_shape, split_tf32

Q_TILE, K_TILE, V_TILE = 0, 1, 2  # operand slots in the tiles buffer (as kernels/attention.py)
PAD = 4
NEG_BIG = float32(-1.0e30)  # finite "minus infinity" (fastmath assumes no infs)
LOG2E = 1.4426950408889634
SMEM_ALIGN = None if SIMULATOR else 16

# head_dim: (warps, block_k), chosen on an H200 (docs/benchmarks.md, `attention_bench --fast-variants`):
# 8 warps x 64 keys was fastest or within 2% at 4096 and 8192, causal and not; head_dim 128's bigger
# Q and O fragments need the smaller tile to stay in registers. All fit in 48 KiB of static shared memory.
CONFIGS = {32: (8, 64), 64: (8, 64), 128: (4, 16)}


def fast_config(head_dim: int) -> tuple[int, int]:
    """(warps, block_k) of the build launches use; block_q = 16 * warps (attention_specs mirrors it)."""
    if head_dim not in CONFIGS:
        raise ValueError(f"head_dim must be one of {sorted(CONFIGS)}, got {head_dim}")
    return CONFIGS[head_dim]


def fast_smem_floats(head_dim: int, block_k: int) -> int:
    """Floats of static shared memory one block declares on the GPU (sK and sV)."""
    return 2 * block_k * (head_dim + PAD)


def fast_grid(batch: int, heads: int, seq_len: int, block_q: int, causal: bool) -> tuple[int, int, int]:
    """Grid of a launch: causal (pairs of Q tiles, batch x heads); else (Q tiles, heads, batch)."""
    n_q = -(-seq_len // block_q)
    return ((n_q + 1) // 2, batch * heads, 1) if causal else (n_q, heads, batch)


def flash_attention_fast_for(head_dim, causal, seq_len=0, heads=1, batch=1):
    """The kernel for one launch (the same tiles for every size: fast_config)."""
    return flash_attention_fast_kernel(head_dim, bool(causal))


@cache
def flash_attention_fast_kernel(
    head_dim, causal=False, warps=None, block_k=None, fastmath=True, min_blocks=None
):
    """Kernels for HEAD_DIM; launch with block (32, warps) and grid
    fast_grid(...). ``causal`` is compiled in (the kernel's causal argument must match it).
    Defaults: fast_config(head_dim). ``min_blocks``: launch bounds asking the compiler to fit that
    many blocks per SM (caps registers); None: no cap."""
    CAUSAL = bool(causal)
    dw, dk = CONFIGS.get(head_dim, (4, 64))
    NW = warps or dw
    BK = block_k or dk
    D = head_dim
    BQ = 16 * NW
    if BK % 8 or D % 8:
        raise ValueError("block_k and head_dim must be multiples of 8")
    KS = D // 8  # k-steps of S = Q Kᵀ (features), = output tiles of O
    NS = BK // 8  # 8-key tiles of S, = k-steps of P V
    NT = 32 * NW
    CH = D // 4  # 4-float chunks in a row
    if NT % CH or (BK * CH) % NT:
        raise ValueError("threads per block must tile the K/V tiles in 4-float chunks")
    RSTEP = NT // CH  # rows one pass of the block stages
    KPASS = BK // RSTEP  # passes per K or V tile
    PER = KPASS * 4  # floats of a K/V tile each thread stages in registers
    KW = D + PAD
    SCRATCH = scratch_shape(NW)
    qscale = float32(LOG2E / math.sqrt(D))
    ln2 = float32(math.log(2.0))

    @cuda.jit(device=True, inline="always")
    def load_kv(src, row0, seq_len, tid, buf):
        """Start this thread's loads of rows row0.. of a K or V tile (branch-free: rows past
        seq_len read the last row and become 0), so all of them are in flight together."""
        c = (tid % CH) * 4
        for u in range(KPASS):
            row = row0 + tid // CH + RSTEP * u
            first = min(row, seq_len - 1) * D + c
            for e in range(4):
                x = flat.load(src, first + e)
                buf[u * 4 + e] = x if row < seq_len else float32(0.0)

    @cuda.jit(device=True, inline="always")
    def store_kv(buf, dst, fill):
        """buf to this thread's places in a K or V tile (its first one: flat index fill)."""
        for u in range(KPASS):
            for e in range(4):
                flat.store(dst, fill + RSTEP * u * KW + e, buf[u * 4 + e])

    def flash_attention_fast(q, k, v, o, seq_len, causal, tiles, rows):
        sK = cuda.shared.array((BK, KW), float32, alignment=SMEM_ALIGN)
        sV = cuda.shared.array((BK, KW), float32, alignment=SMEM_ALIGN)
        scratch = cuda.shared.array(SCRATCH, float32)  # the simulator's lane exchange
        qa = cuda.local.array((KS, 4), float32)  # my Q fragments, one per 8 features
        s = cuda.local.array((NS, 4), float32)  # my S fragments, one per 8 keys; then P
        acc = cuda.local.array((KS, 4), float32)  # my O fragments, one per 8 columns (not yet / l)
        m = cuda.local.array(2, float32)  # running max of rows g and g+8 (log2 units)
        l = cuda.local.array(2, float32)  # noqa: E741 - my partial running sums of those rows
        scale = cuda.local.array(2, float32)  # this tile's rescale of rows g and g+8
        a_hi = cuda.local.array(4, float32)  # a Q fragment, split
        a_lo = cuda.local.array(4, float32)
        p_hi = cuda.local.array((NS, 4), float32)  # P as A fragments, split
        p_lo = cuda.local.array((NS, 4), float32)
        pv = cuda.local.array((1, 4), float32)  # one 8-column piece of P V
        buf = cuda.local.array(PER, float32)  # a K or V tile's loads in flight

        lane = cuda.threadIdx.x
        warp = cuda.threadIdx.y
        tid = warp * 32 + lane
        g = lane // 4
        t = lane % 4
        # The tiles as this thread sees them (views starting at its first element), so that every
        # index below is a constant offset the compiler folds into the load instruction
        # this thread's first element in each shared-memory access pattern (flat indices: every
        # access below is one of these plus a constant; kernels/flat.py says why)
        k_frag = g * KW + t  # S = Q Kᵀ reads K[8j + g][8kk + t (+4)]
        v_frag = 2 * t * KW + g  # O += P V reads V[8j + 2t (+1)][8c + g]
        fill = (tid // CH) * KW + (tid % CH) * 4  # staging writes rows tid // CH + RSTEP u
        if CAUSAL:
            heads = q.shape[1]
            h = cuda.blockIdx.y % heads
            b = cuda.blockIdx.y // heads
        else:
            h = cuda.blockIdx.y
            b = cuda.blockIdx.z
        qh = q[b, h]
        kh = k[b, h]
        vh = v[b, h]
        n_q = (seq_len + BQ - 1) // BQ
        n_parts = 1
        if CAUSAL and cuda.blockIdx.x != n_q - 1 - cuda.blockIdx.x:
            n_parts = 2
        record = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y < rows.shape[0]  # row-state block
        s0 = 0  # first record slot of this part (parts record one after the other)
        q0 = 0
        for part in range(n_parts):
            qt = n_q - 1 - cuda.blockIdx.x if CAUSAL and part == 0 else cuda.blockIdx.x
            q0 = qt * BQ
            r0 = q0 + 16 * warp  # my warp's first row
            n_kv = (seq_len + BK - 1) // BK
            if CAUSAL:
                n_kv = min(n_kv, (min(q0 + BQ, seq_len) - 1) // BK + 1)
            for i in range(2):
                m[i] = NEG_BIG
                l[i] = 0.0
            for c in range(KS):
                for e in range(4):
                    acc[c, e] = 0.0
            # my Q fragments straight from global memory, pre-scaled; rows past seq_len are zero
            for kk in range(KS):
                for e in range(4):
                    row = r0 + g + 8 * (e % 2)
                    x = flat.load(qh, min(row, seq_len - 1) * D + 8 * kk + t + 4 * (e // 2))
                    qa[kk, e] = x * qscale if row < seq_len else float32(0.0)
            load_kv(kh, 0, seq_len, tid, buf)
            store_kv(buf, sK, fill)
            load_kv(vh, 0, seq_len, tid, buf)  # V tile 0 flies during the first S = Q Kᵀ
            cuda.syncthreads()
            trace_tile(tiles, s0, Q_TILE, q0, 0, min(BQ, seq_len - q0), D)

            for step in range(n_kv):
                k0 = step * BK
                trace_tile(tiles, s0 + step, K_TILE, k0, 0, min(BK, seq_len - k0), D)
                # S = Q Kᵀ (log2 units) for my warp's 16 rows x BK keys
                for j in range(NS):
                    for e in range(4):
                        s[j, e] = 0.0
                for kk in range(KS):
                    for e in range(4):
                        a_hi[e], a_lo[e] = split_tf32(qa[kk, e])
                    for j in range(NS):
                        b0 = flat.load(sK, k_frag + 8 * j * KW + 8 * kk)
                        b1 = flat.load(sK, k_frag + 8 * j * KW + 8 * kk + 4)
                        mma_fp32(s, j, a_hi, a_lo, b0, b1, scratch, warp, lane)
                # mask keys past seq_len and, near the diagonal, keys after the query
                if k0 + BK > seq_len or (CAUSAL and k0 + BK - 1 > q0):
                    for j in range(NS):
                        for e in range(4):
                            key = k0 + 8 * j + 2 * t + e % 2
                            if key >= seq_len or (CAUSAL and key > r0 + g + 8 * (e // 2)):
                                s[j, e] = NEG_BIG
                # online softmax for my rows g (i = 0) and g+8 (i = 1)
                for i in range(2):
                    x = max(s[0, 2 * i], s[0, 2 * i + 1])
                    for j in range(1, NS):
                        x = max(x, max(s[j, 2 * i], s[j, 2 * i + 1]))
                    m_new = max(m[i], quad_max(x, scratch, warp, lane))
                    alpha = math.exp2(m[i] - m_new)  # 0 on a row's first tile
                    m[i] = m_new
                    ps = float32(0.0)
                    for j in range(NS):
                        for e in range(2 * i, 2 * i + 2):
                            p = math.exp2(s[j, e] - m_new)
                            s[j, e] = p
                            ps += p
                    l[i] = l[i] * alpha + ps
                    scale[i] = alpha
                # the V tile has arrived: to shared memory (free since the last barrier)
                store_kv(buf, sV, fill)
                if step + 1 < n_kv:
                    load_kv(kh, k0 + BK, seq_len, tid, buf)  # next K tile flies during P V
                cuda.syncthreads()  # V complete; nobody reads this K tile any more
                trace_tile(tiles, s0 + step, V_TILE, k0, 0, min(BK, seq_len - k0), D)
                # O = alpha O + P V. P in A-fragment order: k-step j is key tile j, its keys taken in
                # the order 0,2,4,6,1,3,5,7 (so V's rows are fetched in that order too)
                for j in range(NS):
                    for e in range(4):
                        p_hi[j, e], p_lo[j, e] = split_tf32(s[j, (e % 2) * 2 + e // 2])
                # each 8-column piece of P V starts from zero and is added to O in plain fp32:
                # tensor cores round their running sum toward zero, and over thousands of keys that
                # bias alone reached 7e-5 of the output
                for c in range(KS):
                    for e in range(4):
                        pv[0, e] = 0.0
                    for j in range(NS):
                        b0 = flat.load(sV, v_frag + 8 * j * KW + 8 * c)
                        b1 = flat.load(sV, v_frag + (8 * j + 1) * KW + 8 * c)
                        mma_fp32(pv, 0, p_hi[j], p_lo[j], b0, b1, scratch, warp, lane)
                    for e in range(4):
                        acc[c, e] = acc[c, e] * scale[e // 2] + pv[0, e]
                # recorded state, m in score units and the full row sum: only blocks that record
                if record:  # (uniform per block, so every lane of a quad takes part)
                    for i in range(2):
                        total = quad_sum(l[i], scratch, warp, lane)
                        if t == 0:
                            trace_row_state(rows, s0 + step, 16 * warp + g + 8 * i, m[i] * ln2, total)
                if step + 1 < n_kv:
                    store_kv(buf, sK, fill)
                    load_kv(vh, k0 + BK, seq_len, tid, buf)  # next V tile flies during the next S
                cuda.syncthreads()  # next K complete; everyone is done with V

            # O = acc / l for my rows that exist
            for i in range(2):
                inv = float32(1.0) / quad_sum(l[i], scratch, warp, lane)
                row = r0 + g + 8 * i
                if row < seq_len:
                    for c in range(KS):
                        o[b, h, row, 8 * c + 2 * t] = acc[c, 2 * i] * inv
                        o[b, h, row, 8 * c + 2 * t + 1] = acc[c, 2 * i + 1] * inv
            s0 += n_kv

    options = {"fastmath": fastmath}
    if min_blocks and not SIMULATOR:  # (the simulator takes no launch bounds)
        options["launch_bounds"] = (NT, min_blocks)
    return with_options(flash_attention_fast, **options)
