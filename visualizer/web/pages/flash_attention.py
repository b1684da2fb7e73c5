"""FlashAttention: one block's recorded K/V loop, one row's online softmax, shared memory, H200 timings."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.analysis.occupancy import ARCHS, KB
from visualizer.figures.attention import (
    SDPA_DEFAULT,
    TIMING_ALIASES,
    attention_timing_figure,
    fast_block,
    flash_loop_figure,
    loop_order_figure,
    loop_order_model,
    recorded_part,
    row_state_figure,
    smem_gauge_figure,
    timing_modes,
    timing_ms_table,
    timing_rows,
    timing_source,
)
from visualizer.figures.attention_break import VARIANTS, break_figure, break_rows, break_summary, break_why
from visualizer.specs import catalog
from visualizer.specs.attention import BROKEN_FLASH, fast_config, fast_smem_bytes, flash_smem_bytes
from visualizer.web.charts import chart
from visualizer.web.current_kernel import YOURS_REPLACED
from visualizer.web.session import (
    RunConfig,
    as_text,
    current_capture,
    from_link,
    require_capture,
    run_capture,
    show_link_notices,
    to_link,
)
from visualizer.web.sidebar import load_config
from visualizer.web.timing import kernel_time_metrics

ROOT = Path(__file__).resolve().parents[3]
# python -m visualizer.tools.attention_bench ... --json docs/attention_timings_h200.json (and --causal); an
# operator (or a test) may point the page at another recording
TIMINGS_FILE = Path(
    os.environ.get("VISUALIZER_ATTENTION_TIMINGS", ROOT / "docs" / "attention_timings_h200.json")
)
EXAMPLE = (("batch", 1), ("causal", 1), ("head_dim", 32), ("heads", 1), ("seq_len", 80), ("tile", 16))
# the fast kernel's smallest causal launch with two Q tiles (one block computes both): ~11 s on the
# simulator of a 2-core machine, which multiplies its tensor-core tiles in Python
FAST_EXAMPLE = (("batch", 1), ("causal", 1), ("head_dim", 64), ("heads", 1), ("seq_len", 200))
FAST = "flash_attention_fast"
FLASH_KERNELS = ("flash_attention", FAST)  # kernels that record their tiles and softmax state
BROKEN = {spec.name: variant for variant, spec in BROKEN_FLASH.items()}  # "break it" builds by kernel
ATTENTION_KERNELS = ("flash_attention", "naive_attention", FAST)
DEFAULT_ARCH = "sm_90"


def _load_example() -> None:
    """Button callback: the example becomes the whole run configuration (sidebar included) and runs."""
    load_config(RunConfig("flash_attention", st.session_state.config.backend, EXAMPLE))


def _load_fast_example() -> None:
    """Button callback: the fast kernel's example becomes the run configuration and runs."""
    load_config(RunConfig(FAST, st.session_state.config.backend, FAST_EXAMPLE))


def example_buttons() -> None:
    """Both examples side by side."""
    c1, c2, _ = st.columns([2, 2, 3])
    c1.button("Load FlashAttention example", key="fa_load_example", on_click=_load_example)
    c2.button(
        "Load fast kernel example",
        key="fa_load_fast_example",
        on_click=_load_fast_example,
        help="flash_attention_fast, seq_len 200, head_dim 64, causal: two Q tiles of 128 rows computed by "
        "one block. The simulator multiplies its tensor-core tiles in Python: about 10 s on a small machine.",
    )


def tile_sizes(cap: Capture) -> tuple[int, int]:
    """(query rows, keys) of one S tile: the teaching kernel's tile x tile, the fast one's block_q x block_k."""
    p = cap.launch["params"]
    if cap.launch["kernel"] == FAST:
        block_q, block_k, _ = fast_config(p["head_dim"])
        return block_q, block_k
    return p["tile"], p["tile"]


def _index_input(label: str, key: str, hi: int, default: int, help_text: str) -> int:
    """A number input over 0..hi, kept in the link, that falls back to its default when a new launch
    shrinks the grid."""
    from_link(key, min(default, hi), (0, hi))
    if st.session_state.get(key, 0) > hi:
        st.session_state[key] = min(default, hi)
    value = int(st.number_input(label, min_value=0, max_value=hi, step=1, key=key, help=help_text))
    to_link(key)
    return value


def _arch_of(cap: Capture) -> str:
    """The captured GPU's generation when the calculator knows it; the H200's otherwise."""
    if not cap.measured:
        return DEFAULT_ARCH
    name = "sm_" + str(cap.launch["compute_capability"]).replace(".", "")
    return name if name in ARCHS else DEFAULT_ARCH


def numerical_check(cap: Capture) -> None:
    res = cap.check["outputs"]["o"]
    tol = f"rtol {cap.check['rtol']:g}, atol {cap.check['atol']:g}"
    if res["mismatches"] == 0:
        st.success(
            f"Output O matches the float64 numpy reference: max |error| {res['max_abs_error']:.2e} over "
            f"{res['elements']:,} elements ({tol}). S was never stored, yet the answer is the same."
        )
    elif cap.check["expected_wrong"]:
        nonfinite = f", {res['nonfinite']:,} of them inf/NaN" if res.get("nonfinite") else ""
        st.warning(
            f"Output O: {res['mismatches']:,} of {res['elements']:,} elements differ from the numpy reference "
            f"({tol}{nonfinite}), as this deliberately broken build is meant to show: "
            f"{catalog.get(cap.launch['kernel']).wrong_because}."
        )
    else:
        st.error(
            f"Output O: {res['mismatches']:,} of {res['elements']:,} elements differ from the numpy reference "
            f"(max |error| {res['max_abs_error']:.2e}, {tol})."
        )


def broken_view(cap: Capture, teaching: Capture | None = None) -> None:
    """A broken build's run: its per-row error against the reference, the cause, and why."""
    variant = BROKEN[cap.launch["kernel"]]
    p = cap.launch["params"]
    rows = break_rows(
        cap.inputs["q"],
        cap.inputs["k"],
        cap.inputs["v"],
        cap.outputs["o"],
        bool(p["causal"]),
        p["tile"],
        cap.check["rtol"],
        cap.check["atol"],
    )
    title = (
        f"Broken: {VARIANTS[variant]} — {int(rows['wrong'].sum()):,} of {len(rows):,} rows wrong"
        f" (logit_scale {p['logit_scale']})"
    )
    source = f"error: {cap.source}, vs the float64 numpy reference; lower panel: numpy on the same Q and K"
    chart(break_figure(rows, variant, source, title), key="fa_break_chart")
    text = break_summary(rows, variant)
    if teaching is not None and all(
        np.array_equal(teaching.inputs[a], cap.inputs[a]) for a in ("q", "k", "v")
    ):
        res = teaching.check["outputs"]["o"]
        text += (
            f" The teaching kernel on these same inputs (the run above): {res['mismatches']:,} of "
            f"{res['elements']:,} elements wrong, max |error| {res['max_abs_error']:.2e}."
        )
    st.markdown(text)
    st.markdown(break_why(variant))


def break_section(cap: Capture) -> None:
    """The "break it" toggle: the same launch through a build with one invariant removed."""
    notice = from_link("fa_break", False)
    on = st.toggle(
        "Break it: run this launch through the kernel with one of its invariants removed",
        key="fa_break",
        help="kernels flash_attention_no_rescale and flash_attention_no_max: the teaching kernel's source "
        "with one compile-time flag (kernels/attention.py), run on this run's backend",
    )
    to_link("fa_break")
    if not on:
        show_link_notices(notice)
        return
    notices = [notice, from_link("fa_break_variant", "no_rescale", list(VARIANTS))]
    c1, c2 = st.columns([3, 1])
    variant = c1.radio(
        "what to break", list(VARIANTS), format_func=VARIANTS.get, key="fa_break_variant", horizontal=True
    )
    spec = BROKEN_FLASH[variant]
    scale_prm = next(prm for prm in spec.params if prm.name == "logit_scale")
    key = f"fa_break_scale_{variant}"  # each build starts from the scale where its failure shows
    notices.append(from_link(key, scale_prm.default, (scale_prm.lo, scale_prm.hi)))
    with c2:
        scale = int(
            st.number_input(
                "logit_scale (Q ×)",
                min_value=scale_prm.lo,
                max_value=scale_prm.hi,
                step=1,
                key=key,
                help=scale_prm.help + f" ({scale_prm.lo}..{scale_prm.hi}; 1: the inputs of the run above)",
            )
        )
    to_link("fa_break_variant", key)
    show_link_notices(*notices)
    params = {**cap.launch["params"], "logit_scale": scale}
    broken, error = run_capture(RunConfig(spec.name, cap.launch["backend"], tuple(sorted(params.items()))))
    if error:
        st.error(f"The broken build did not run: {as_text(error)}")
        return
    broken_view(broken, teaching=cap)


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
    st.subheader(
        f"One block's K/V loop — seq_len {seq_len}, {shape}, head_dim {head_dim}"
        f"{', causal' if causal else ''}: {n_q} Q tiles × {heads} heads × {batches} batch{blocks}"
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
    st.caption(_block_caption(cap, q_tile, head, batch, block))
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

    from_link("fa_fa1", False)
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
    from_link("fa_arch", _arch_of(cap), list(ARCHS))
    from_link("fa_smem_tile", p["tile"], choices["tile"])
    from_link("fa_smem_head_dim", p["head_dim"], choices["head_dim"])
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
    from_link("fa_arch", _arch_of(cap), list(ARCHS))
    from_link("fa_fast_head_dim", p["head_dim"], choices)
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


def other_kernel(cap: Capture) -> None:
    kernel = cap.launch["kernel"]
    why = (
        "is the baseline this page compares against: it writes the whole score matrix S to global memory and "
        "records no tiles or softmax state"
        if kernel == "naive_attention"
        else "is not FlashAttention"
    )
    st.info(
        f"`{kernel}` {why}. The tile loop and the online softmax need a **flash_attention** or "
        "**flash_attention_fast** run: pick one in the sidebar, or load an example here (the teaching kernel: "
        "seq_len 80, tile 16, causal; the fast kernel: seq_len 200, head_dim 64, causal). The recorded H200 "
        "timings are below."
    )
    if cap.launch.get("user_kernel"):  # an example is a built-in kernel: it replaces theirs as current
        st.caption(YOURS_REPLACED)
    example_buttons()


def _read_timings() -> dict | None:
    """The recorded timings document, or None after a one-line error (the rest of the page still works)."""
    try:
        doc = json.loads(TIMINGS_FILE.read_text())
        if not timing_modes(doc):
            raise ValueError("no recorded run in it")
        return doc
    except FileNotFoundError:
        why = "not recorded yet (on a GPU: python -m visualizer.tools.attention_bench --json FILE)"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__  # without this machine's path
    except ValueError as exc:
        why = str(exc).splitlines()[0]
    st.error(f"Cannot read the recorded timings {TIMINGS_FILE.name}: {why}")
    return None


def session_timing(cap: Capture) -> None:
    """This session's own GPU run of an attention kernel, next to the recorded table."""
    t = cap.timing
    st.markdown(
        f"**This session's run** — measured (GPU) on {cap.launch['device_name']}: `{cap.launch['kernel']}` "
        f"{cap.launch['params']} (device time, launches queued behind a spin kernel; median after warm-up)."
    )
    c1, c2, c3 = st.columns(3)
    kernel_time_metrics(c1, c2, t, "instrumented kernel")
    c3.metric("clean TFLOP/s", f"{t['clean_gflops'] / 1e3:.2f}" if t.get("clean_gflops") else "–")


def _pick_mode(cap: Capture, modes: list[str]) -> str:
    """Causal or not, kept in the link; at first the mode of this session's attention run."""
    p = cap.launch["params"]
    ran = "causal" if cap.launch["kernel"] in ATTENTION_KERNELS and p.get("causal") else "non-causal"
    from_link("fa_timing_mode", ran if ran in modes else modes[0], modes)
    if st.session_state.fa_timing_mode not in modes:  # a file recorded since holds other modes
        st.session_state.fa_timing_mode = modes[0]
    mode = st.radio(
        "attention mask",
        modes,
        key="fa_timing_mode",
        horizontal=True,
        help="causal: each query attends only to keys at or before it, so half the score matrix is skipped",
    )
    to_link("fa_timing_mode")
    return mode


def _headline(df: pd.DataFrame) -> str | None:
    """Ours (fast) against SDPA's default and our teaching kernel at the longest recorded length."""
    longest = df[df["seq_len"] == df["seq_len"].max()]
    ms = dict(zip(longest["impl"].map(lambda i: TIMING_ALIASES.get(i, i)), longest["ms"], strict=True))
    names = dict(
        zip(longest["impl"].map(lambda i: TIMING_ALIASES.get(i, i)), longest["implementation"], strict=True)
    )
    fast, sdpa, teaching = "ours fast (clean)", SDPA_DEFAULT, "ours flash (clean)"
    if fast not in ms or sdpa not in ms:
        return None
    ratio = ms[sdpa] / ms[fast]
    line = (
        f"At seq_len {int(longest['seq_len'].iloc[0])} our fast kernel takes {ms[fast]:.3g} ms and "
        f"{names[sdpa]} {ms[sdpa]:.3g} ms: "
        + (f"ours is {ratio:.2f}× faster" if ratio >= 1 else f"SDPA's default is {1 / ratio:.2f}× faster")
    )
    if teaching in ms:
        line += (
            f"; the teaching kernel takes {ms[teaching]:.3g} ms ({ms[teaching] / ms[fast]:.2f}× the fast one)"
        )
    return line + "."


def timing_section(cap: Capture) -> None:
    st.subheader("H200 timings: ours vs PyTorch (unfused, SDPA)")
    if cap.measured:
        if cap.launch["kernel"] in ATTENTION_KERNELS:
            session_timing(cap)
        st.caption("The chart and tables below are a recorded H200 run, not this session's run.")
    else:
        st.warning(
            "This session runs on the CUDA simulator: **nothing on this page is GPU time.** The simulator's "
            "times are CPU wall time of the worker process, which runs every CUDA thread as Python code on "
            "one OS thread. The chart and tables below are recorded results of a "
            "real NVIDIA H200 run, not this session's run."
        )
    doc = _read_timings()
    if doc is None:
        return
    mode = _pick_mode(cap, timing_modes(doc))
    run = doc["runs"][mode]
    try:
        df = timing_rows(doc, mode)
        cfg = run["config"]
        note = (
            f"batch {cfg['batch']}, {cfg['heads']} heads, head_dim {cfg['head_dim']}, {cfg['dtype']}, {mode}"
        )
        source = timing_source(run)
        fig = attention_timing_figure(df, source, note)
    except (ValueError, KeyError, TypeError) as exc:
        st.error(f"Cannot draw the recorded timings {TIMINGS_FILE.name}: {exc}")
        return
    chart(fig, key="fa_timing_chart")
    headline = _headline(df)
    if headline:
        st.markdown(headline)
    table = timing_ms_table(df)
    st.markdown(
        f"**Milliseconds per forward pass, {mode}** (median device time; None: not timed at that length)"
    )
    st.dataframe(table, column_config={c: st.column_config.NumberColumn(format="%.4g") for c in table})
    with st.expander("All recorded columns: launch overhead, TFLOP/s, memory, registers, occupancy, error"):
        shown = df.drop(columns=["causal"]).rename(columns=RECORDED_COLUMNS)
        first = [c for c in RECORDED_COLUMNS.values() if c in shown.columns]
        st.dataframe(
            shown[first + [c for c in shown.columns if c not in first]],
            hide_index=True,
            column_config={
                c: st.column_config.NumberColumn(format="%.2e")
                for c in ("max |error| vs torch unfused", "rel. error vs float64")
            },
        )
        st.caption(" ".join(f"**{k}**: {cfg[k]}." for k in DEFINED if cfg.get(k)))
    versions = ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items() if v)
    recorded = (
        f"Recorded with `{run['command']}`"
        if run.get("command")
        else f"Converted from {run.get('converted_from', 'an unnamed source')}"
    )
    st.caption(
        f"{source}; {note}. SDPA is torch.nn.functional.scaled_dot_product_attention: *default* as a user "
        "calls it (torch picks a backend), *math* forced to its reference backend; all fp32 with TF32 off. "
        f"Versions: {versions}. {recorded} ({TIMINGS_FILE.name})."
    )


# attention_bench's columns as the expander shows them, in this order (others follow as recorded)
RECORDED_COLUMNS = {
    "implementation": "implementation",
    "seq_len": "seq_len",
    "ms": "ms (median)",
    "launch_us": "launch µs",
    "tflops": "TFLOP/s",
    "peak_mb": "peak MB",
    "registers": "registers",
    "smem_bytes": "smem B",
    "local_bytes": "local B/thread",
    "warps_per_sm": "warps per SM",
    "occupancy": "occupancy",
    "rel_err_f64": "rel. error vs float64",
    "max_abs_err": "max |error| vs torch unfused",
    "backend": "SDPA backend",
    "queue_covered": "queue covered",
    "impl": "recorded as",
}
DEFINED = ("timing", "launch_us", "flops", "peak_mb", "rel_err_f64", "max_abs_err", "registers", "backend")


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
