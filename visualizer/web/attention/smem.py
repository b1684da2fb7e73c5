"""Shared memory per block: as compiled on a GPU, as modelled, and the what-if of other tile sizes."""

import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.analysis.occupancy import ARCHS, KB
from visualizer.figures.attention import (
    smem_gauge_figure,
)
from visualizer.specs import catalog
from visualizer.specs.attention import fast_config, fast_smem_bytes, flash_smem_bytes
from visualizer.web.attention.common import FAST, _arch_of
from visualizer.web.charts import chart
from visualizer.web.session import (
    from_link,
    show_link_notices,
    to_link,
)


def smem_section(cap: Capture) -> None:
    p = cap.launch["params"]
    spec = catalog.get("flash_attention")
    choices = {prm.name: list(prm.choices) for prm in spec.params if prm.choices}
    st.subheader("Shared memory per block")
    run_key = (cap.launch["backend"], tuple(sorted(p.items())))
    seen = st.session_state.get("fa_smem_run")
    if seen is not None and seen != run_key:  # a new run: start the what-if from it
        st.session_state.fa_arch = _arch_of(cap)
        st.session_state.fa_smem_tile = p["tile"]
        st.session_state.fa_smem_head_dim = p["head_dim"]
    st.session_state.fa_smem_run = run_key
    # otherwise the link's what-if (a first visit, or back from another page), else the run's
    show_link_notices(
        from_link("fa_arch", _arch_of(cap), list(ARCHS)),
        from_link("fa_smem_tile", p["tile"], choices["tile"]),
        from_link("fa_smem_head_dim", p["head_dim"], choices["head_dim"]),
    )
    c1, c2, c3 = st.columns([2, 2, 2])
    arch = c1.selectbox("GPU generation", list(ARCHS), format_func=lambda a: ARCHS[a].label, key="fa_arch")
    tile = c2.select_slider("tile", choices["tile"], key="fa_smem_tile")
    head_dim = c3.select_slider("head_dim", choices["head_dim"], key="fa_smem_head_dim")
    to_link("fa_arch", "fa_smem_tile", "fa_smem_head_dim")
    limits = ARCHS[arch]
    _smem_gauge(
        cap,
        limits,
        (tile, head_dim) == (p["tile"], p["head_dim"]),
        flash_smem_bytes(tile, head_dim),
        "sQ + sKP + sV + sMax + sSum as the kernel declares them (flash_smem_bytes)",
    )
    st.caption(
        f"The kernel declares its shared arrays statically, so {limits.smem_per_block // KB} KB per block is "
        f"its limit on {limits.label}; {limits.smem_per_block_optin // KB} KB is reachable only with dynamic "
        "shared memory and an explicit opt-in. Try tile 64 with head_dim 128."
    )


def _smem_gauge(cap: Capture, limits, as_run: bool, modelled_bytes: int, modelled_how: str) -> None:
    """The shared-memory gauge: the compiled kernel's own figure when a GPU ran this very build
    (``as_run``: the what-if matches the run), else the model of what the kernel declares."""
    if cap.measured and as_run:
        needed = int(cap.launch["static_smem_bytes"])
        where = f"measured (GPU): the compiled kernel's static shared memory on {cap.launch['device_name']}"
    else:
        needed, where = modelled_bytes, f"modelled: {modelled_how}"
    chart(
        smem_gauge_figure(
            needed,
            limits.smem_per_block,
            f"{where}; limits of {limits.label}",
            optin_bytes=limits.smem_per_block_optin,
        ),
        key="fa_smem_chart",
    )


def fast_smem_section(cap: Capture) -> None:
    """What the fast kernel keeps in shared memory (K and V only), against the per-block limit."""
    p = cap.launch["params"]
    choices = [list(prm.choices) for prm in catalog.get(FAST).params if prm.name == "head_dim"][0]
    st.subheader("Shared memory per block")
    run_key = (cap.launch["kernel"], cap.launch["backend"], tuple(sorted(p.items())))
    seen = st.session_state.get("fa_smem_run")
    if seen is not None and seen != run_key:  # a new run: start the what-if from it
        st.session_state.fa_arch = _arch_of(cap)
        st.session_state.fa_fast_head_dim = p["head_dim"]
    st.session_state.fa_smem_run = run_key
    show_link_notices(
        from_link("fa_arch", _arch_of(cap), list(ARCHS)),
        from_link("fa_fast_head_dim", p["head_dim"], choices),
    )
    c1, c2, _ = st.columns([2, 2, 2])
    arch = c1.selectbox("GPU generation", list(ARCHS), format_func=lambda a: ARCHS[a].label, key="fa_arch")
    head_dim = c2.select_slider(
        "head_dim",
        choices,
        key="fa_fast_head_dim",
        help="the fast kernel's tile sizes are fixed per head_dim: (block_q, block_k) = (128, 64) for 32 "
        "and 64, (64, 16) for 128",
    )
    to_link("fa_arch", "fa_fast_head_dim")
    limits = ARCHS[arch]
    bq, bk, warps = fast_config(head_dim)
    _smem_gauge(
        cap,
        limits,
        head_dim == p["head_dim"],
        fast_smem_bytes(head_dim, bk),
        "sK + sV, block_k × (head_dim+4) floats each, as the kernel declares them on a GPU (fast_smem_bytes)",
    )
    st.caption(
        f"Only K and V pass through shared memory: sK and sV hold one tile of {bk} keys × ({head_dim}+4) "
        "floats each (the 4 floats of padding put the 32 lanes of a fragment load in 32 different banks). "
        f"There is no sQ: each of the {warps} warps loads its 16 query rows of the {bq}-row Q tile straight "
        "from global memory into registers, as tensor-core fragments, and S, P and O stay in registers in "
        "the same fragment layout, so shared memory does not grow with block_q. On the GPU both products "
        "run on tensor cores (3xTF32: fp32 accuracy); the simulator, which has none, emulates them and "
        "declares a scratch array for the lanes' fragments, which the gauge leaves out. "
        f"{limits.smem_per_block // KB} KB is the static limit per block on {limits.label}."
    )
