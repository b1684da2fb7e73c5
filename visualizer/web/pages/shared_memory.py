"""Shared memory: matmul_tiled's tile loop, the reduction tree, and what a missing barrier does."""

import textwrap

import numpy as np
import streamlit as st

from visualizer import KERNELS_DIR
from visualizer.analysis.capture import Capture
from visualizer.engine.run.runner import KernelError
from visualizer.figures.shared_memory import (
    matmul_tiles_figure,
    race_comparison_figure,
    race_tree_diff_figure,
    reduction_tree_figure,
)
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.web.charts import chart
from visualizer.web.current_kernel import YOURS_REPLACED
from visualizer.web.memory import race_words_panel
from visualizer.web.races import runs_panel
from visualizer.web.session import (
    RunConfig,
    as_text,
    cached_capture,
    from_link,
    require_capture,
    show_link_notices,
    to_link,
)
from visualizer.web.sidebar import load_config

SIDEBAR_SEED = 0  # the sidebar captures with seed 0; the companion run must load the same inputs
REDUCTIONS = ("reduction", "reduction_race")
EXAMPLES = {
    "matmul_tiled": (("n", 20), ("tile", 8)),  # the sizes the page's "Try:" names
    "reduction": (("block", 32), ("n", 256)),
}


def _load_example(kernel: str) -> None:
    """Button callback: the example becomes the whole run configuration (sidebar included) and runs."""
    load_config(RunConfig(kernel, st.session_state.config.backend, EXAMPLES[kernel]))


def _block_input(label: str, key: str, hi: int, help_text: str) -> int:
    """A number input over 0..hi (kept in the link) whose value is reset when a new launch shrinks the grid."""
    show_link_notices(from_link(key, 0, (0, hi)))
    if st.session_state.get(key, 0) > hi:
        st.session_state[key] = 0
    value = int(st.number_input(label, min_value=0, max_value=hi, step=1, key=key, help=help_text))
    to_link(key)
    return value


def _tile_loop_excerpt() -> str:
    """The tile loop of matmul_tiled as it is in kernels/matmul.py (from the loop to the 2nd barrier)."""
    lines = (KERNELS_DIR / "matmul.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "for step in range(steps):" in line)
    barriers = [i for i in range(start, len(lines)) if "cuda.syncthreads()" in lines[i]]
    return textwrap.dedent("\n".join(lines[start : barriers[1] + 1]))


def matmul_section(cap: Capture) -> None:
    gx, gy = cap.launch["grid"][0], cap.launch["grid"][1]
    n, tile = cap.launch["params"]["n"], cap.launch["params"]["tile"]
    st.subheader(f"Tile loop of one block — n = {n}, tile = {tile}, grid {gx} × {gy}")
    c1, c2, c3 = st.columns([1, 1, 3])
    with c1:
        bx = _block_input("block x", "smem_block_x", gx - 1, "blockIdx.x: which column of C tiles")
    with c2:
        by = _block_input("block y", "smem_block_y", gy - 1, "blockIdx.y: which row of C tiles")
    with c3:
        st.caption(
            "Each frame is one barrier of the loop below: **load** is right after the first "
            "`syncthreads` (both tiles staged), **multiply** right after the second. "
            + (
                f"`n` = {n} is not a multiple of `tile` = {tile}, so the last step's tiles are partial: "
                "pick the last block to see them on both edges."
                if n % tile
                else f"Try `n` = {n + tile // 2} in the sidebar to get partial edge tiles."
                if tile > 1
                else ""
            )
        )
    try:
        fig = matmul_tiles_figure(cap.tiles, cap.launch, bx, by)
    except ValueError as exc:
        st.error(str(exc))
        return
    chart(fig, key="smem_tiles_chart")
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**The kernel's tile loop** (`kernels/matmul.py`)")
        st.code(_tile_loop_excerpt(), language="python")
    with right:
        st.markdown(
            "Without the **first** barrier a fast thread would multiply tile entries its neighbours have "
            "not written yet; without the **second**, a fast thread would start overwriting `sA`/`sB` with "
            "the next step's tile while slower threads still read this one."
        )
        mine = cap.tiles[(cap.tiles["block_x"] == bx) & (cap.tiles["block_y"] == by)]
        with st.expander(f"Recorded tiles of block ({bx}, {by})"):
            st.dataframe(mine.drop(columns=["source"]), hide_index=True)
            st.caption(f"t_ns: ns since the kernel's first timestamp — {cap.source}")


def reduction_section(cap: Capture) -> None:
    kernel = cap.launch["kernel"]
    block_size = cap.launch["block"][0]
    tree = cap.row_state
    recorded = int(tree["block"].max()) + 1
    st.subheader(f"The tree of one block — {kernel}, block = {block_size} threads")
    c1, c2 = st.columns([1, 4])
    with c1:
        block = _block_input("block", "smem_tree_block", recorded - 1, "blockIdx.x of the block to show")
    with c2:
        more = cap.launch["blocks"] > recorded
        st.caption(
            f"{int(np.log2(block_size)) + 1} levels: level 0 is what each thread loaded, level k is every "
            "slot after the k-th halving. "
            + (
                f"The kernel records the tree of the first {recorded} of {cap.launch['blocks']} blocks."
                if more
                else ""
            )
        )
    chart(reduction_tree_figure(tree, block, block_size, kernel), key="smem_tree_chart")

    other = "reduction_race" if kernel == "reduction" else "reduction"
    st.subheader("With and without the barrier")
    st.caption(
        f"This page launched **{other}** with the same parameters and the same random inputs "
        f"on the same backend ({cap.launch['device_name']}), so the two can be compared block by block."
    )
    try:
        with st.spinner(f"Running {other} with the same inputs…"):
            companion = cached_capture(
                other, tuple(sorted(cap.launch["params"].items())), cap.launch["backend"], SIDEBAR_SEED
            )
    except (LaunchError, KernelError) as exc:
        st.error(f"Could not run {other}: {exc}")
        return
    if not np.array_equal(companion.inputs["x"], cap.inputs["x"]):
        st.error(f"{other} did not get the same inputs as this run, so the two cannot be compared.")
        return
    correct, race = (cap, companion) if kernel == "reduction" else (companion, cap)
    expected = catalog.get("reduction").reference(cap.inputs, cap.launch["params"])["partial"]
    chart(
        race_comparison_figure(correct.outputs["partial"], race.outputs["partial"], expected, cap.source),
        key="smem_race_chart",
    )
    chart(race_tree_diff_figure(correct.row_state, race.row_state, block), key="smem_race_diff_chart")
    race_words_panel(
        race.launch["params"], SIDEBAR_SEED
    )  # the exact raced words (visualizer/engine/sim/access_record.py)
    runs_panel(
        "reduction_race", race.launch["params"], race.launch["backend"], SIDEBAR_SEED, "partial", "smem_runs"
    )
    st.markdown(
        "**Why the missing barrier breaks it.** At level k + 1, thread `tid` reads `s[tid + stride]`, "
        "which thread `tid + stride` wrote at level k. The `cuda.syncthreads()` after each level is the "
        "only thing that orders that write before that read. Without it a thread can run ahead and read "
        "its partner's slot *before* the partner has added into it (read-before-write), and that "
        "partner's partial sum is lost from the total.\n\n"
        "**On a GPU** the warps of a block run independently, and since Volta even the lanes of one warp "
        "need not stay in step without a barrier, so a warp that runs ahead reads stale partner slots "
        "and many blocks' sums come out wrong; which ones, and by how much, depends on the warps' timing "
        "and can change from run to run. "
        + (
            "**On this app's CUDA simulator** every CUDA thread of a block is a greenlet on one CPU thread, "
            "run in thread order until it ends or reaches a barrier, and with no barrier in the loop thread 0 "
            "runs its whole tree before thread 1 starts: it adds its partners' slots before they have added "
            f"theirs. Here {int((race.outputs['partial'] != expected).sum()):,} of {len(expected):,} blocks "
            "are wrong, and a second run in that order gives byte-identical sums: it shows one outcome of the "
            "race. Run it many times below to see the spread: seeded schedules interleave the warps."
            if not race.measured
            else f"**This run** (measured on {race.launch['device_name']}): "
            f"{int((race.outputs['partial'] != expected).sum()):,} of {len(expected):,} blocks wrong."
        )
    )


def visitor_section(cap: Capture) -> None:
    """A visitor's kernel: its shared-memory requests (bank ways per warp and line), the hazards in
    shared memory, and its launch run N times, all from its own recording (no built-in kernel runs)."""
    from visualizer.figures.memory import raced_words_figure, requests_heatmap
    from visualizer.web.current_kernel import record_accesses
    from visualizer.web.visitor_runs import may_run, runs_of

    launch = cap.launch
    smem = int(launch.get("static_smem_bytes") or 0)
    if cap.requests is None:
        c1, c2 = st.columns([2, 1], vertical_alignment="center")
        c1.info(
            f"Your kernel declares {smem:,} B of static shared memory per block; its loads and stores were "
            "not recorded when it ran. **Record them:** it runs again with every access recorded (on the "
            "Your kernel page), then this page draws its shared memory.",
            icon=":material/memory:",
        )
        c2.button("Record my kernel's accesses", key="smem_record_yours", on_click=record_accesses,
                  args=("shared_memory",), type="primary", use_container_width=True)  # fmt: skip
        allowed, why = may_run()
        if not allowed:
            st.caption(f"The Your kernel page is filled in for it, but running your own code is {why}.")
    else:
        shared = cap.requests[cap.requests["space"].astype(str) == "shared"]
        if shared.empty:
            st.info(
                f"Your kernel made no shared-memory request ({smem:,} B declared per block): nothing to draw "
                "here. Memory access draws its global loads and stores."
            )
        else:
            chart(requests_heatmap(cap.requests, "shared"), key="smem_yours_banks_chart")
            summ = launch.get("accesses") or {}
            conflicts = int(summ.get("shared_ld_bank_conflicts", 0)) + int(
                summ.get("shared_st_bank_conflicts", 0)
            )
            st.caption(
                f"{len(shared):,} shared requests recorded; {conflicts:,} extra wavefronts (bank conflicts). "
                "A cell is one warp's request at one source line: the bank ways it needed (1 = no conflict)."
            )
        haz = cap.hazards if cap.hazards is not None else None
        if haz is not None and len(haz):
            races = haz[haz["kind"] != "UNINIT"]
            if len(races):
                chart(raced_words_figure(haz), key="smem_yours_race_chart")
            with st.expander(f"Hazards: {len(haz):,} rows", expanded=False):
                st.dataframe(haz, hide_index=True)
        else:
            st.caption("No hazards: no two threads touched one word without a barrier between them.")
    run_many = runs_of(cap)
    written = [str(w) for w in launch.get("written") or []] or list(cap.outputs)
    if run_many is None or not written:
        st.caption(
            "To run your kernel many times here, run it on the Your kernel page in this session first."
        )
        return
    output = (
        st.selectbox("output compared across runs", written, key="smem_yours_output")
        if len(written) > 1
        else written[0]
    )
    runs_panel(
        as_text(launch["kernel"], 60), launch["params"], launch["backend"], 0, output, "smem_yours_runs",
        run_many=run_many, identity=id(cap),
    )  # fmt: skip


def other_kernel(cap: Capture) -> None:
    kernel = cap.launch["kernel"]
    st.info(
        "This page draws the shared memory of **matmul_tiled** (tiles staged in shared memory) and "
        f"**reduction** / **reduction_race** (a tree in shared memory), not of `{kernel}`"
        + ("; the FlashAttention page draws the attention tiles" if "attention" in kernel else "")
        + ": pick one in the sidebar, or load an example here."
    )
    if cap.launch.get("user_kernel"):  # an example is a built-in kernel: it replaces theirs as current
        st.caption(YOURS_REPLACED)
    c1, c2, _ = st.columns([3, 3, 2])  # room for the whole button labels at 1280 px
    c1.button(
        "Load matmul_tiled example", key="smem_load_matmul", on_click=_load_example, args=("matmul_tiled",)
    )
    c2.button(
        "Load reduction example", key="smem_load_reduction", on_click=_load_example, args=("reduction",)
    )


st.title("Shared memory")
st.markdown(  # three lines at 1280 px: the tile chart must start above a 720-px projector's fold
    "Shared memory is a scratchpad the threads of one block share: a block stages data there once and every "
    "thread reuses it, and `cuda.syncthreads()` barriers decide when everyone may read what others wrote. "
    "**Try:** *Matrix multiply (shared-memory tiles)* with `"
    + ", ".join(f"{k}={v}" for k, v in EXAMPLES["matmul_tiled"])
    + "`, then *Reduction* against *reduction_race*, the same tree without its barrier."
)
capture = require_capture(source=lambda cap: cap.source)
if capture.launch.get("user_kernel"):
    visitor_section(capture)
elif capture.launch["kernel"] == "matmul_tiled":
    matmul_section(capture)
elif capture.launch["kernel"] in REDUCTIONS:
    reduction_section(capture)
else:
    other_kernel(capture)
