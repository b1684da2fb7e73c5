"""One block's recorded K/V loop and one row's online softmax (the teaching and the fast kernel)."""

import math

import pandas as pd
import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.figures.attention import (
    fast_block,
    flash_loop_figure,
    loop_order_figure,
    loop_order_model,
    recorded_part,
    row_state_figure,
)
from visualizer.web.attention.common import FAST, _index_input, tile_sizes
from visualizer.web.charts import chart
from visualizer.web.session import (
    from_link,
    show_link_notices,
    to_link,
)


def _block_caption(cap: Capture, q_tile: int, head: int, batch: int, block: tuple[int, int, int]) -> str:
    """Which block computed the chosen Q tile, and what it kept where."""
    p = cap.launch["params"]
    seq_len, causal = p["seq_len"], bool(p["causal"])
    bq, bk = tile_sizes(cap)
    n_q, n_k = math.ceil(seq_len / bq), math.ceil(seq_len / bk)
    q0 = q_tile * bq
    q1 = min(q0 + bq, seq_len) - 1
    mine = cap.tiles[
        (cap.tiles["block_x"] == block[0])
        & (cap.tiles["block_y"] == block[1])
        & (cap.tiles["block_z"] == block[2])
    ]
    first, end = recorded_part(cap.tiles, block, q0)
    part = mine[(mine["step"] >= first) & (mine["step"] < end)]
    visited = int((part["operand"].astype(str) == "K").sum())  # K/V steps recorded for this Q tile
    tiles = f"K/V tile{'s' if visited != 1 else ''}"
    if cap.launch["kernel"] != FAST:
        text = (
            f"Block ({q_tile}, {head}, {batch}) keeps queries {q0}–{q1} in shared memory and "
            f"streams {visited} {tiles} past them"
        )
    else:
        text = (
            f"Block {block} holds queries {q0}–{q1} in registers (each of its "
            f"{cap.launch['block'][1]} warps owns 16 rows, as tensor-core fragments) and streams {visited} "
            f"{tiles} of {bk} keys through shared memory"
        )
        if causal:
            x, other = block[0], n_q - 1 - block[0]
            pair = (
                f"block x = {x} also computes Q tile {other if q_tile == x else x}: Q tile {other} first "
                f"(the long one), then Q tile {x}, so every block does about the same work"
                if other != x
                else f"block x = {x} computes the middle Q tile only"
            )
            text = (
                f"Causal launches pair Q tiles: Q tile {q_tile} is computed by block {block} "
                f"(blockIdx.y = batch·heads + head = {block[1]}), and {pair}. " + text
            )
    skipped = n_k - visited
    return (
        text
        + (
            f"; the {skipped} tiles right of the diagonal are skipped (causal)."
            if causal and skipped > 0
            else "."
        )
        + " Press Play, or drag the slider, to step through the recorded K/V steps."
    )


def loop_section(cap: Capture) -> None:
    p = cap.launch["params"]
    seq_len, head_dim, causal = p["seq_len"], p["head_dim"], bool(p["causal"])
    fast = cap.launch["kernel"] == FAST
    bq, bk = tile_sizes(cap)
    n_q, heads, batches = math.ceil(seq_len / bq), p["heads"], p["batch"]
    gx, gy, gz = cap.launch["grid"]
    shape = f"tile {bq}" if not fast else f"S tiles {bq} × {bk} (block_q × block_k)"
    blocks = f" in {gx} × {gy} blocks (pairs of Q tiles)" if fast and causal else ""
    # a one-line heading (the launch's shape goes in the caption under the chart): the loop's chart
    # then starts above the fold of a 720-px projector
    st.subheader("One block's K/V loop")
    launch_shape = (
        f"seq_len {seq_len}, {shape}, head_dim {head_dim}{', causal' if causal else ''}: "
        f"{n_q} Q tiles × {heads} heads × {batches} batch{blocks}."
    )
    paired = fast and causal
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        q_tile = _index_input(
            "Q tile" if paired else "Q tile (blockIdx.x)",
            "q_tile",
            n_q - 1,
            n_q // 2,
            "which block of query rows"
            + ("; causal launches give block x the Q tiles x and n_q−1−x" if paired else ""),
        )
    with c2:
        head = _index_input(
            "head" if paired else "head (blockIdx.y)", "fa_head", heads - 1, 0, "which attention head"
        )
    with c3:
        batch = _index_input(
            "batch" if paired else "batch (blockIdx.z)", "fa_batch", batches - 1, 0, "which batch element"
        )
    q0 = q_tile * bq
    rows_here = min(bq, seq_len - q0)
    with c4:
        row = _index_input(
            "row within the tile",
            "row",
            rows_here - 1,
            0,
            f"query row q0 + row; this tile holds queries {q0}–{q0 + rows_here - 1}",
        )
    block = fast_block(q_tile, n_q, head, batch, heads, causal) if fast else (q_tile, head, batch)
    try:
        loop_fig = flash_loop_figure(
            cap.tiles,
            cap.row_state,
            q_tile,
            seq_len,
            bq,
            causal,
            cap.source,
            head=head,
            batch=batch,
            block_k=bk,
            block=block,
        )
    except ValueError as exc:
        st.error(str(exc))
    else:
        chart(loop_fig, key="fa_loop_chart")
    # under the chart, not above it: three lines above would push the chart below a 720-px fold
    st.caption(launch_shape + " " + _block_caption(cap, q_tile, head, batch, block))

    left, right = st.columns([3, 2])
    try:
        row_fig = row_state_figure(
            cap.row_state,
            q_tile,
            row,
            head=head,
            batch=batch,
            block=block,
            slots=recorded_part(cap.tiles, block, q0),
        )
    except ValueError:
        recorded = int(cap.row_state["block"].max()) + 1 if len(cap.row_state) else 0
        left.info(
            f"The kernel records the running m and l of its first {recorded} blocks only; block "
            f"{block} is not among them. Pick head 0, batch 0 or a lower Q tile."
        )
    else:
        with left:
            chart(row_fig, key="fa_row_chart")
    right.markdown(
        f"**Query {q0 + row}** (row {row} of Q tile {q_tile}). After each K/V step the kernel recorded:\n\n"
        "- **m**, the largest scaled score q·k/√d seen so far;\n"
        "- **l**, the sum of exp(s − m) over the keys seen so far;\n"
        "- the **rescale factor** exp(m_prev − m_new): when a tile raises m it drops below 1, and the O "
        "row and l accumulated so far are multiplied by it (1 means m did not grow).\n\n"
        "At the end O is divided by l: the same result as a softmax over the whole row, without ever "
        "holding the row."
        + (
            "\n\nIn the fast kernel a row's scores sit in the registers of the 4 lanes of a quad: m is their "
            "maximum over two shuffles, and the recorded l is the sum of the 4 lanes' partial sums."
            if fast
            else ""
        )
    )
    if fast:
        st.caption(
            "The FA1 loop-order comparison (modelled) uses the teaching kernel's square tiles: load the "
            "FlashAttention example to see it."
        )
        return

    show_link_notices(from_link("fa_fa1", False))
    fa1 = st.toggle("Compare with the FA1 loop order (modelled)", key="fa_fa1")
    to_link("fa_fa1")
    if fa1:
        chart(loop_order_figure(seq_len, bq, causal, "both"), key="fa_loop_order_chart")
        model = pd.DataFrame(loop_order_model(seq_len, bq, causal)).T
        st.dataframe(model, width="content")
        st.caption(
            "Modelled from the two loop nests (tile loads between global and shared memory for one head), "
            "not measured. FA1 keeps each K/V tile once and revisits every Q/O tile; FA2, which this kernel "
            "runs, gives each Q tile to one block that keeps its O row in registers, so blocks are independent."
        )
