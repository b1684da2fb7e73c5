"""FlashAttention: one block's recorded K/V loop, one row's online softmax, shared memory, H200 timings."""

import streamlit as st

from visualizer.web.attention.checks import break_section, broken_view, numerical_check
from visualizer.web.attention.common import BROKEN, FAST, other_kernel
from visualizer.web.attention.loop import loop_section
from visualizer.web.attention.smem import fast_smem_section, smem_section
from visualizer.web.attention.timing import timing_section
from visualizer.web.session import (
    current_capture,
    require_capture,
)

# what to try, by the kernel the page shows (the broken builds draw no tile loop)
TRY = {
    "no_rescale": "**Try:** set `causal=1` in the sidebar: the first Q tile's rows, which see only K/V tile 0 "
    "and so never need a rescale, stay right.",
    "no_max": "**Try:** set `logit_scale` to 1 in the sidebar: no score comes near the overflow, and every "
    "row is right.",
}


shown = current_capture()


st.title("FlashAttention")


ATTENTION = {"flash_attention", FAST, *BROKEN}
if shown is None or shown.launch["kernel"] in ATTENTION:
    st.markdown(
        "FlashAttention computes softmax(QKᵀ/√d)·V a tile at a time: a block keeps its Q tile in shared memory "
        "and streams K/V tiles past it, so the seq_len² score matrix never reaches global memory; an *online* "
        "softmax keeps a running row max m and sum l and rescales O when m grows. "
        + TRY.get(
            BROKEN.get(shown.launch["kernel"] if shown else ""),
            "**Try:** `causal=1` (tiles right of the diagonal are skipped), another row, then *Break it*.",
        )
    )
else:  # another kernel: the recorded timings are this page's chart; one line of what it is about
    st.markdown(
        "FlashAttention computes softmax(QKᵀ/√d)·V a tile at a time, so the seq_len² score matrix never "
        "reaches global memory."
    )


capture = require_capture(source=lambda cap: cap.source)


if capture.launch["kernel"] == "flash_attention":
    loop_section(capture)
    numerical_check(capture)
    break_section(capture)
    smem_section(capture)
elif capture.launch["kernel"] in BROKEN:
    broken_view(capture)
    numerical_check(capture)
elif capture.launch["kernel"] == FAST:
    loop_section(capture)
    st.markdown(
        "**The fast kernel** (`flash_attention_fast`) runs the same loop with S tiles of block_q query rows × "
        "block_k keys: Q stays in registers as tensor-core fragments, only K and V go through shared memory, "
        "and both products run on tensor cores (3xTF32) on the GPU — emulated, and slow, on the simulator."
    )  # under the loop's chart, so that the chart starts above a 720-px fold as the teaching kernel's does
    numerical_check(capture)
    fast_smem_section(capture)
if capture.launch["kernel"] in ATTENTION:
    timing_section(capture)
else:  # the recorded timings first (this page's only chart for another kernel), then what to load
    timing_section(capture)
    other_kernel(capture)
