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


st.markdown(
    "FlashAttention computes softmax(QKᵀ/√d)·V one tile at a time: each block keeps its Q tile in shared "
    "memory and streams K and V tiles past it, so the seq_len × seq_len score matrix S never goes to global "
    "memory. An *online* softmax keeps a running row max m and sum l, and rescales the output O whenever m "
    "grows. "
    + TRY.get(
        BROKEN.get(shown.launch["kernel"] if shown else ""),
        "**Try:** set `causal=1` and watch the skipped tiles right of the diagonal; pick a row and watch "
        "m and l change from step to step; then turn on *Break it* below the loop.",
    )
)


capture = require_capture()


st.caption(f"Data source: {capture.source}")


if capture.launch["kernel"] == "flash_attention":
    loop_section(capture)
    numerical_check(capture)
    break_section(capture)
    smem_section(capture)
elif capture.launch["kernel"] in BROKEN:
    broken_view(capture)
    numerical_check(capture)
elif capture.launch["kernel"] == FAST:
    st.markdown(
        "**The fast kernel** (`flash_attention_fast`) runs the same loop with S tiles of block_q query rows × "
        "block_k keys: Q stays in registers as tensor-core fragments, only K and V go through shared memory, "
        "and both products run on tensor cores (3xTF32) on the GPU — emulated, and slow, on the simulator."
    )
    loop_section(capture)
    numerical_check(capture)
    fast_smem_section(capture)
else:
    other_kernel(capture)


timing_section(capture)
