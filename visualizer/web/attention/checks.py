"""The output against the float64 reference, and the "break it" builds that depart from it."""

import numpy as np
import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.figures.attention_break import VARIANTS, break_figure, break_rows, break_summary, break_why
from visualizer.specs import catalog
from visualizer.specs.attention import BROKEN_FLASH
from visualizer.web.attention.common import BROKEN
from visualizer.web.charts import chart
from visualizer.web.session import (
    RunConfig,
    as_text,
    from_link,
    run_capture,
    show_link_notices,
    to_link,
)


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
