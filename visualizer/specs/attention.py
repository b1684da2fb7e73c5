"""FlashAttention and naive attention: parameters, launch geometry, inputs, reference and work.

Host side only (numpy, no numba). The device code is ``kernels/attention.py``; the shared-memory
formula below must match the arrays its flash kernel declares (a GPU test compares it with the
compiled kernel's static shared memory).

Its SPECS are registered by catalog.py; the building blocks come from launch.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from visualizer.specs.launch import (  # noqa: E402
    BARRIER_STEPS,
    THREAD_START_STEPS,
    KernelSpec,
    Launch,
    LaunchError,
    Param,
    ceil_div,
)

ROW_STATE_BLOCKS = 64  # blocks whose per-step softmax state (m, l) is recorded
MICRO = 4  # kernels/attention.py: each flash thread owns 4 query rows x 4 keys of an S tile
PAD = 4  # kernels/attention.py: floats of padding per row of sQ and sKP


def flash_smem_bytes(tile: int, head_dim: int) -> int:
    """Static shared memory of one flash_attention block (kernels/attention.py:flash_smem_floats).

    sQ (tile x (head_dim+4)) + sKP (tile x (max(head_dim, tile)+4), the K tile then P) +
    sV (tile x head_dim) + sMax and sSum (tile/4 x tile each), float32.
    """
    t, d = tile, head_dim
    return 4 * (t * (d + PAD) + t * (max(d, t) + PAD) + t * d + 2 * (t // MICRO) * t)


def kv_tiles(q_tile: int, seq_len: int, tile: int, causal: bool) -> int:
    """K/V tiles a Q tile visits: all of them, or (causal) those up to the diagonal."""
    n = ceil_div(seq_len, tile)
    return min(n, q_tile + 1) if causal else n


_PARAMS = (
    Param("batch", 1, 1, 64, "batch size (grid z)"),
    Param("heads", 2, 1, 128, "attention heads (grid y)"),
    Param("seq_len", 80, 1, 32768, "sequence length: rows of Q, K and V"),
    Param("head_dim", 32, 16, 128, "features per head", choices=(16, 32, 64, 128)),
    Param(
        "tile", 16, 8, 64, "tile edge: query rows per block and keys per K/V step", choices=(8, 16, 32, 64)
    ),
    Param("causal", 0, 0, 1, "1: query i attends only to keys <= i", choices=(0, 1)),
)


def _flash_plan(p: dict) -> Launch:
    seq_len, tile, head_dim = p["seq_len"], p["tile"], p["head_dim"]
    q_tiles = ceil_div(seq_len, tile)
    side = tile // MICRO
    grid = (q_tiles, p["heads"], p["batch"])
    blocks = grid[0] * grid[1] * grid[2]
    steps = q_tiles  # K/V tiles of the longest Q tile (Q is recorded in step 0's Q slot)
    return Launch(
        grid=grid,
        block=(side, side, 1),
        scalars={"seq_len": seq_len, "causal": p["causal"]},
        static_smem=flash_smem_bytes(tile, head_dim),
        tile_steps=steps,
        row_state=(min(blocks, ROW_STATE_BLOCKS), steps, tile),
    )


def _naive_plan(p: dict) -> Launch:
    rows = p["tile"]  # one thread per query row, tile rows per block
    return Launch(
        grid=(ceil_div(p["seq_len"], rows), p["heads"], p["batch"]),
        block=(rows, 1, 1),
        scalars={"seq_len": p["seq_len"], "causal": p["causal"]},
    )


def _shape(p: dict) -> tuple[int, int, int, int]:
    return (p["batch"], p["heads"], p["seq_len"], p["head_dim"])


def _flash_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    shape = _shape(p)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    return {"q": q, "k": k, "v": v, "o": np.zeros(shape, np.float32)}


def _naive_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = _flash_inputs(p, rng)
    x["s"] = np.zeros((p["batch"], p["heads"], p["seq_len"], p["seq_len"]), np.float32)
    return x


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """softmax(q kᵀ / sqrt(d)) v in float64, one (batch, head) and a block of rows at a time."""
    batch, heads, seq_len, head_dim = q.shape
    out = np.empty(q.shape, np.float64)
    chunk = max(1, (1 << 24) // max(seq_len, 1))  # rows per step: S chunk of at most 16 Mi doubles
    for b in range(batch):
        for h in range(heads):
            kk = k[b, h].astype(np.float64)
            vv = v[b, h].astype(np.float64)
            for r0 in range(0, seq_len, chunk):
                qq = q[b, h, r0 : r0 + chunk].astype(np.float64)
                s = qq @ kk.T / math.sqrt(head_dim)
                if causal:
                    rows = np.arange(r0, r0 + len(qq))[:, None]
                    s = np.where(np.arange(seq_len)[None, :] <= rows, s, -np.inf)
                s -= s.max(axis=1, keepdims=True)
                w = np.exp(s)
                out[b, h, r0 : r0 + len(qq)] = (w @ vv) / w.sum(axis=1, keepdims=True)
    return out.astype(np.float32)


def _reference(x: dict, p: dict) -> dict[str, np.ndarray]:
    return {"o": attention_reference(x["q"], x["k"], x["v"], bool(p["causal"]))}


def useful_flops(p: dict) -> float:
    """4 * d flops per (query, key) pair that is not masked: 2d for q.k, 2d for p*v."""
    seq_len = p["seq_len"]
    pairs = seq_len * (seq_len + 1) / 2 if p["causal"] else float(seq_len) ** 2
    return 4.0 * p["batch"] * p["heads"] * p["head_dim"] * pairs


def _flash_work(p: dict) -> tuple[float, float]:
    """Bytes the flash kernel requests from global memory: Q read once, O written once, and
    each Q tile reads every K and V tile it visits (the same K/V is re-read once per Q tile)."""
    seq_len, tile, d = p["seq_len"], p["tile"], p["head_dim"]
    q_tiles = ceil_div(seq_len, tile)
    kv_rows = 0
    for qt in range(q_tiles):
        n = kv_tiles(qt, seq_len, tile, bool(p["causal"]))
        kv_rows += min(n * tile, seq_len)
    per_head = 4.0 * d * (2 * seq_len + 2 * kv_rows)
    return p["batch"] * p["heads"] * per_head, useful_flops(p)


def _naive_work(p: dict) -> tuple[float, float]:
    """Q read and O written once; K and V read once per block of rows (the threads of a block
    walk the same keys together); S written twice (scores, then probabilities) and read twice."""
    seq_len, rows, d = p["seq_len"], p["tile"], p["head_dim"]
    pairs = seq_len * (seq_len + 1) / 2 if p["causal"] else float(seq_len) ** 2
    blocks = ceil_div(seq_len, rows)
    per_head = 4.0 * (2 * seq_len * d + 2 * blocks * seq_len * d + 4 * pairs)
    return p["batch"] * p["heads"] * per_head, useful_flops(p)


def _kv_steps(n_q: int, n_k: int, rows: int, cols: int, causal: bool) -> int:
    """K/V tiles all query tiles visit together (a causal query tile stops at the diagonal)."""
    if not causal:
        return n_q * n_k
    return sum(min(n_k, ((qt + 1) * rows - 1) // cols + 1) for qt in range(n_q))


def _flash_accesses(p: dict) -> float:
    """Loads and stores the simulator records of the teaching kernel, every thread's (local arrays
    included): tile² · head_dim · (0.5 per Q tile + 9.3 per K/V tile it visits), fitted a little
    above recorded counts (tile 16/32, head_dim 32/64: 79,104 to 600,704 accesses, within 4 %)."""
    t, d = p["tile"], p["head_dim"]
    n_q = ceil_div(p["seq_len"], t)
    steps = _kv_steps(n_q, n_q, t, t, bool(p["causal"]))
    return p["batch"] * p["heads"] * t * t * d * (0.5 * n_q + 9.3 * steps)


def _naive_accesses(p: dict) -> float:
    """Each query row: 5 · head_dim accesses, and 5 · head_dim + 4 per key it attends to (recorded:
    44,544 / 173,056 / 342,016 for seq_len 16/32 and head_dim 32/64, exact)."""
    n, d = p["seq_len"], p["head_dim"]
    keys = n * (n + 1) / 2 if p["causal"] else float(n) * n
    return p["batch"] * p["heads"] * (n * 5 * d + keys * (5 * d + 4))


def _fast_accesses(p: dict) -> float:
    """The fast kernel's recorded accesses: each block's K/V step takes a whole block_q x block_k tile
    whatever seq_len cuts off: 652,288 accesses at head_dim 64 and 359,424 at 32 (recorded, one block,
    one step), all counted per step here (an upper estimate), scaled by block_q · block_k · head_dim
    for head_dim 128."""
    bq, bk, _ = fast_config(p["head_dim"])
    per_step = 359_424.0 if p["head_dim"] == 32 else 652_288 * (bq * bk * p["head_dim"]) / (128 * 64 * 64)
    steps = sum(fast_steps(p["seq_len"], bq, bk, bool(p["causal"])))
    return p["heads"] * p["batch"] * steps * per_step


def _flash_cost(p: dict, launch: Launch) -> tuple[float, int]:
    """Simulated work: one step per multiply-add of S = Q Kᵀ and O += P V, ~4 barriers per K/V
    tile per thread; arrays: q, k, v and o."""
    macs = useful_flops(p) / 2
    barriers = 4 * launch.tile_steps * launch.threads
    return launch.threads * THREAD_START_STEPS + macs + barriers * BARRIER_STEPS, 4 * 4 * math.prod(_shape(p))


def _naive_cost(p: dict, launch: Launch) -> tuple[float, int]:
    """Like flash, plus each (query, key) score written to S and read back twice; S itself is
    batch·heads·seq_len²·4 bytes, allocated before the launch."""
    pairs = p["seq_len"] * (p["seq_len"] + 1) / 2 if p["causal"] else float(p["seq_len"]) ** 2
    # its multiply-adds read 4-D global arrays: ~1.5x the cost of flash's shared-memory ones (measured)
    steps = (
        launch.threads * THREAD_START_STEPS + 1.5 * useful_flops(p) / 2 + 4 * p["batch"] * p["heads"] * pairs
    )
    s_bytes = 4 * p["batch"] * p["heads"] * p["seq_len"] ** 2
    return steps, 4 * 4 * math.prod(_shape(p)) + s_bytes


def _torch_attention(torch, t, p):
    """Unfused PyTorch fp32 attention: S = q kᵀ/√d materialised, softmax, then P v."""
    q, k, v = t["q"], t["k"], t["v"]
    scale = 1.0 / math.sqrt(p["head_dim"])
    n = p["seq_len"]
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1) if p["causal"] else None

    def run():
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    return "unfused torch fp32: softmax(q kᵀ/√d) v", run


def _check_flash(p: dict) -> Launch:
    if p["tile"] % MICRO:
        raise LaunchError(f"tile={p['tile']} must be a multiple of {MICRO}")
    return _flash_plan(p)


# every attention kernel computes the same o, checked the same way against the same reference
_ATTENTION_CHECK = dict(outputs=("o",), reference=_reference, rtol=1e-4, atol=1e-4, torch_op=_torch_attention)
# the two flash kernels also take the same arguments and record the same tables
_FLASH_COMMON = dict(
    args=("q", "k", "v", "o", "seq_len", "causal", "tiles", "rows"),
    make_inputs=_flash_inputs,
    tile_operands=("Q", "K", "V"),
    row_table=("softmax_state", ("m", "l")),
    **_ATTENTION_CHECK,
)

FLASH_ATTENTION = KernelSpec(
    name="flash_attention",
    title="FlashAttention forward (tiled, online softmax)",
    summary="softmax(Q Kᵀ/√d) V without ever storing S: each block keeps one Q tile in shared memory, "
    "streams K/V tiles through it, and keeps a running row max m and sum l, rescaling O by "
    "exp(m_old − m_new) whenever m grows. Causal launches skip the K/V tiles right of the diagonal.",
    params=_PARAMS,
    plan=_check_flash,
    build=("visualizer.kernels.attention", "flash_attention_kernel"),
    active_when="q0 + ty < seq_len",
    build_args=("tile", "head_dim"),
    work=_flash_work,
    cost=_flash_cost,
    **_FLASH_COMMON,
    extra={"accesses": _flash_accesses},
)

# --- "break it": the teaching kernel with one of its invariants removed (kernels/attention.py) ------

OVERFLOW_SCORE = math.log(np.finfo(np.float32).max)  # ~88.72: exp of a larger score is inf in float32


def _scaled_inputs(p: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The teaching kernel's inputs (the same for the same seed), with Q times logit_scale: every score
    q·k/√d grows by that factor, so the softmax sharpens and exp(score) can overflow."""
    x = _flash_inputs(p, rng)
    x["q"] *= np.float32(p["logit_scale"])
    return x


def _broken_params(default_scale: int) -> tuple:
    return (
        *_PARAMS,
        Param(
            "logit_scale", default_scale, 1, 100, "Q is multiplied by this: every score q·k/√d grows with it"
        ),
    )


def _broken_flash(fault: str, title: str, summary: str, logit_scale: int, wrong_because: str) -> KernelSpec:
    """The teaching kernel with one step left out (kernels/attention.py flash_attention_<fault>_kernel):
    a demo meant to be wrong, on inputs scaled by ``logit_scale``, with no torch op to time it against."""
    return dataclasses.replace(
        FLASH_ATTENTION,
        name=f"flash_attention_{fault}",
        title=title,
        summary=summary,
        params=_broken_params(logit_scale),
        make_inputs=_scaled_inputs,
        build=("visualizer.kernels.attention", f"flash_attention_{fault}_kernel"),
        deliberately_wrong=True,
        wrong_because=wrong_because,
        torch_op=None,
    )


FLASH_NO_RESCALE = _broken_flash(
    "no_rescale",
    "FlashAttention, broken: O not rescaled (demo)",
    "DELIBERATELY WRONG: the teaching kernel without the rescale of O by exp(m_old − m_new) when a "
    "K/V tile raises the running max m (l is still rescaled). Rows whose max is in their first K/V tile "
    "stay right; rows whose max grows later come out wrong, by more the more it grew.",
    logit_scale=1,
    wrong_because="O is not rescaled when the running max grows",
)

FLASH_NO_MAX = _broken_flash(
    "no_max",
    "FlashAttention, broken: no max subtraction (demo)",
    "DELIBERATELY WRONG: the teaching kernel computing exp(S) instead of exp(S − m). The same softmax "
    f"in exact arithmetic, but exp overflows float32 for scores above {OVERFLOW_SCORE:.1f}: with "
    "logit_scale 30 (Q × 30) some rows' scores pass it and those rows become inf/NaN; the others stay right.",
    logit_scale=30,
    wrong_because="exp(S) without subtracting the row max overflows float32",
)
BROKEN_FLASH = {"no_rescale": FLASH_NO_RESCALE, "no_max": FLASH_NO_MAX}

NAIVE_ATTENTION = KernelSpec(
    name="naive_attention",
    title="Attention, naive (S in global memory)",
    summary="One thread per query row writes its whole row of S = Q Kᵀ/√d to global memory, reads it "
    "back to make probabilities, and reads it again to weight V: the seq_len² traffic FlashAttention avoids. "
    "Here tile is the number of query rows (threads) per block.",
    params=_PARAMS,
    args=("q", "k", "v", "s", "o", "seq_len", "causal"),
    plan=_naive_plan,
    make_inputs=_naive_inputs,
    build=("visualizer.kernels.attention", "naive_attention_kernel"),
    active_when="row < seq_len",
    build_args=("head_dim",),
    work=_naive_work,
    cost=_naive_cost,
    **_ATTENTION_CHECK,
    extra={"accesses": _naive_accesses},
)

# --- the fast kernel (kernels/attention_fast.py): block shape fixed per head_dim --------------------

FAST_PAD = 4  # kernels/attention_fast.py: floats of padding per row of sK and sV
# head_dim: (warps, block_k), as kernels/attention_fast.py CONFIGS; block_q = 16 * warps
FAST_CONFIGS = {32: (8, 64), 64: (8, 64), 128: (4, 16)}


def fast_config(head_dim: int) -> tuple[int, int, int]:
    """(block_q, block_k, warps): kernels/attention_fast.py:fast_config (a test keeps them equal)."""
    warps, block_k = FAST_CONFIGS[head_dim]
    return 16 * warps, block_k, warps


def fast_smem_bytes(head_dim: int, block_k: int) -> int:
    """Static shared memory of one fast block on the GPU (kernels/attention_fast.py:fast_smem_floats)."""
    return 4 * 2 * block_k * (head_dim + FAST_PAD)


def fast_steps(seq_len: int, block_q: int, block_k: int, causal: bool) -> list[int]:
    """K/V steps each block of the fast kernel records, by block x (causal: its two Q tiles' steps)."""
    bq, bk = block_q, block_k
    n_q, n_k = ceil_div(seq_len, bq), ceil_div(seq_len, bk)

    def steps(qt: int) -> int:
        return min(n_k, (min(qt * bq + bq, seq_len) - 1) // bk + 1) if causal else n_k

    if not causal:
        return [n_k] * n_q
    return [steps(n_q - 1 - x) + (steps(x) if x != n_q - 1 - x else 0) for x in range((n_q + 1) // 2)]


def _fast_plan(p: dict) -> Launch:
    seq_len, head_dim, causal = p["seq_len"], p["head_dim"], bool(p["causal"])
    bq, bk, warps = fast_config(head_dim)
    n_q = ceil_div(seq_len, bq)
    # attention_fast.fast_grid
    grid = ((n_q + 1) // 2, p["batch"] * p["heads"], 1) if causal else (n_q, p["heads"], p["batch"])
    blocks = grid[0] * grid[1] * grid[2]
    steps = max(fast_steps(seq_len, bq, bk, causal))
    return Launch(
        grid=grid,
        block=(32, warps, 1),
        scalars={"seq_len": seq_len, "causal": p["causal"]},
        static_smem=fast_smem_bytes(head_dim, bk),
        tile_steps=steps,
        row_state=(min(blocks, ROW_STATE_BLOCKS), steps, bq),
    )


def _fast_work(p: dict) -> tuple[float, float]:
    """As _flash_work, with the fast kernel's Q tile (block_q rows) and K/V tile (block_k rows)."""
    seq_len, d = p["seq_len"], p["head_dim"]
    bq, bk, _ = fast_config(d)
    kv_rows = 0
    for qt in range(ceil_div(seq_len, bq)):
        last = min(qt * bq + bq, seq_len) - 1
        n = ceil_div(seq_len, bk) if not p["causal"] else min(ceil_div(seq_len, bk), last // bk + 1)
        kv_rows += min(n * bk, seq_len)
    per_head = 4.0 * d * (2 * seq_len + 2 * kv_rows)
    return p["batch"] * p["heads"] * per_head, useful_flops(p)


def _fast_cost(p: dict, launch: Launch) -> tuple[float, int]:
    """Simulated work: the simulator multiplies each warp's 16x8x8 tiles in plain Python, the lanes
    swapping fragments between two barriers (kernels/tensor_core.py): per thread and K/V step,
    2 (block_k/8)(head_dim/8) such multiplies of 8 multiply-adds each, plus the quad reductions'
    and the step's own barriers (calibrated with fastsim: ~1 µs a step, the default launch ~2 s a build)."""
    bq, bk, _ = fast_config(p["head_dim"])
    multiplies = 2 * (bk // 8) * (p["head_dim"] // 8)
    per_step = multiplies * (2 * BARRIER_STEPS + 8) + 8 * BARRIER_STEPS
    # K/V steps of all blocks: fast_steps lists one row of Q tiles (or pairs); a row per head and batch
    steps = sum(fast_steps(p["seq_len"], bq, bk, bool(p["causal"]))) * p["heads"] * p["batch"]
    total = launch.threads * THREAD_START_STEPS + steps * launch.threads_per_block * per_step
    return total, 4 * 4 * math.prod(_shape(p))


FLASH_ATTENTION_FAST = KernelSpec(
    name="flash_attention_fast",
    title="FlashAttention forward, fast (tensor cores, fp32 accuracy)",
    summary="The same attention as flash_attention, built like FlashAttention-2 for speed: each warp owns 16 "
    "query rows, and both products (S = Q Kᵀ and P V) are warp-wide 16x8x8 matrix multiplies on the tensor "
    "cores, three per product (3xTF32: every fp32 operand split into a TF32 high and low part, as torch's "
    "memory-efficient kernel does), so the result keeps fp32 accuracy. S, P and O live in registers in the "
    "tensor cores' fragment layout; the online softmax combines a row's maximum over the 4 lanes that share "
    "it; the next K/V tile's loads fly while the current one is multiplied; causal launches skip masked "
    "tiles and give each block one long and one short Q tile. On the simulator, which has no tensor cores, "
    "each warp's multiply is done in plain fp32 with the lanes' fragments exchanged through shared memory. "
    "Tile sizes are fixed per head_dim.",
    params=(
        Param("batch", 1, 1, 64, "batch size (grid z)"),
        Param("heads", 2, 1, 128, "attention heads (grid y)"),
        Param("seq_len", 80, 1, 32768, "sequence length: rows of Q, K and V"),
        Param("head_dim", 64, 32, 128, "features per head", choices=tuple(FAST_CONFIGS)),
        Param("causal", 0, 0, 1, "1: query i attends only to keys <= i", choices=(0, 1)),
    ),
    plan=_fast_plan,
    build=("visualizer.kernels.attention_fast", "flash_attention_fast_for"),
    active_when="q0 + 16 * warp + g < seq_len",
    build_args=("head_dim", "causal", "seq_len", "heads", "batch"),
    work=_fast_work,
    cost=_fast_cost,
    **_FLASH_COMMON,
    extra={"accesses": _fast_accesses},
)

SPECS = (FLASH_ATTENTION, NAIVE_ATTENTION, FLASH_ATTENTION_FAST, FLASH_NO_RESCALE, FLASH_NO_MAX)
