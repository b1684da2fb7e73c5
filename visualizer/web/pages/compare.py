"""Compare: two captures side by side on the same axes, the differences one line each, a link for the pair."""

from urllib.parse import urlencode

import streamlit as st

from visualizer.analysis import compare as cmp
from visualizer.engine.run.runner import KernelError, gpu_present
from visualizer.figures.compare import compare_figure, lines_figure
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.specs.pairs import PAIRS
from visualizer.specs.source import MAX_SOURCE_BYTES
from visualizer.web.asm import sass_pair
from visualizer.web.charts import chart
from visualizer.web.current_kernel import visitor_is_current
from visualizer.web.measured import compare_beside, device_times
from visualizer.web.session import (
    as_text,
    cached_capture,
    from_link,
    kernel_label,
    show_link_notices,
    to_link,
    visible_kernels,
)
from visualizer.web.visitor_runs import edited_copy, may_run, rerun, versions

CUSTOM = "custom"
YOURS = "yours"  # two versions of the visitor's own kernel (web/visitor_runs.py)
EDITED = "edited"  # B: an edited copy of A's source
KEYS = ("cmp_pair", "cmp_backend", "cmp_a", "cmp_b", "cmp_a_params", "cmp_b_params")
PARAMS_MAX_CHARS = 200

st.title("Compare two captures")
backends = ["sim", "gpu"] if gpu_present() else ["sim"]
kernels = visible_kernels()
yours_current = visitor_is_current()
choices = [*PAIRS, CUSTOM, YOURS]
notices = [
    from_link("cmp_pair", YOURS if yours_current else "transpose", choices),
    from_link("cmp_backend", backends[-1], backends),
    from_link("cmp_a", "transpose_naive", kernels),
    from_link("cmp_b", "transpose_tiled", kernels),
    from_link("cmp_a_params", ""),
    from_link("cmp_b_params", ""),
]
show_link_notices(*notices)
c1, c2 = st.columns([4, 1])  # the pair's whole title fits its box; A and B on the row under it
pair_key = c1.selectbox(
    "Pair", choices, key="cmp_pair",
    format_func=lambda k: PAIRS[k].title if k in PAIRS else (
        "Any two kernels…" if k == CUSTOM else "Your kernel: two versions"),
)  # fmt: skip
if pair_key == YOURS:
    c2.markdown("**Backend**")
    c2.caption("where each version ran")
else:
    backend = c2.selectbox(
        "Backend", backends, key="cmp_backend", help="sim records every access; gpu measures device time"
    )
c3, c4 = st.columns(2)
if yours_current and pair_key != YOURS:
    st.caption(
        "These are built-in kernels, not yours: choose *Your kernel: two versions* to compare your own."
    )


def parse(text: str, kernel: str) -> dict:
    """``n=64 block=128`` (spaces or commas) into a kernel's checked parameters; LaunchError if bad."""
    text = str(text)[:PARAMS_MAX_CHARS]
    given = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition("=")
        if not sep:
            raise LaunchError(f"expected NAME=VALUE, got {part[:40]!r}")
        given[name] = value
    return catalog.get(kernel).resolve(given)


def _your_versions():
    """A and B from the visitor's versions (or B an edited copy of A), both with accesses on the
    simulator; None (after saying why) when there is nothing to compare yet."""
    kept = versions()
    if not kept:
        st.info(
            "Run your kernel on the **Your kernel** page first: every run there is a version to compare "
            "(the current source against an edited copy, or two saved versions)."
        )
        return None
    by_number = {v.number: v for v in kept}
    numbers = list(reversed(by_number))  # newest first
    pick_a = c3.selectbox("A", numbers, key="cmp_yours_a", format_func=lambda n: by_number[n].label)
    others = [n for n in numbers if n != pick_a]
    pick_b = c4.selectbox(
        "B", [EDITED, *others], key="cmp_yours_b",
        format_func=lambda n: "an edited copy of A (below)" if n == EDITED else by_number[n].label,
    )  # fmt: skip
    va = by_number[pick_a]
    allowed, why = may_run()
    if pick_b == EDITED:
        if va.launch is None:
            st.info("A's launch is not kept in this session: run it on the Your kernel page again.")
            return None
        key = f"cmp_yours_src_{va.number}"
        if key not in st.session_state:
            st.session_state[key] = va.launch.source
        st.text_area("B's source (an edited copy of A's; same kernel name, launch and arguments)", key=key,
                     height=220, max_chars=MAX_SOURCE_BYTES)  # fmt: skip
        if not allowed:
            st.info(f"Running your own code is {why}.")
            return None
        asked = st.session_state.get("cmp_yours_ran")
        if st.button("Run the edited copy as B", type="primary", key="cmp_yours_go"):
            asked = st.session_state.cmp_yours_ran = (va.number, st.session_state[key])
        if asked != (va.number, st.session_state[key]):
            st.caption("Edit B's source above, then run it: both versions run with every access recorded.")
            return None
    elif not allowed and any(v.cap.requests is None for v in (va, by_number[pick_b])):
        st.info(f"Recording these versions' accesses runs your code again, and running it is {why}.")
        return None
    sides = []
    for label, version, source in (
        ("A", va, None),
        (
            "B",
            None if pick_b == EDITED else by_number[pick_b],
            st.session_state.get(f"cmp_yours_src_{va.number}"),
        ),
    ):
        backend_of = (version or va).cap.launch["backend"]
        sim = backend_of != "gpu"
        if version is not None and (
            not sim or (version.cap.requests is not None and version.cap.branches is not None)
        ):
            sides.append(version.cap)
            continue
        base = (version or va).launch
        if base is None:
            st.info(f"{label}'s launch is not kept in this session: run it on the Your kernel page again.")
            return None
        try:
            launch = base if version is not None else edited_copy(base, backend_of, source)
            with st.spinner(f"Running {label} in a sandbox of its own…"):
                sides.append(rerun(launch, backend_of, ("compare", label, launch.source, hash(str(launch.args))),
                                   accesses=sim, branches=sim))  # fmt: skip
        except (LaunchError, KernelError) as exc:
            st.error(f"{label} did not run: {as_text(str(exc), limit=600)}")
            return None
    return sides


error = None
if pair_key == YOURS:
    caps = _your_versions()
    if caps is None:
        st.stop()
elif pair_key == CUSTOM:
    ka = c3.selectbox("A", kernels, key="cmp_a", format_func=lambda k: kernel_label(k, 40))
    kb = c4.selectbox("B", kernels, key="cmp_b", format_func=lambda k: kernel_label(k, 40))
    pa = c3.text_input("A's parameters", key="cmp_a_params", placeholder="e.g. n=64 block=128")
    pb = c4.text_input("B's parameters", key="cmp_b_params", placeholder="defaults when empty")
    try:
        sides = [(ka, parse(pa, ka)), (kb, parse(pb, kb))]
    except LaunchError as exc:
        error, sides = as_text(str(exc)), []
else:
    pair = PAIRS[pair_key]
    sides = [(s.kernel, catalog.get(s.kernel).resolve({k: str(v) for k, v in s.params_for(backend).items()}))
             for s in (pair.a, pair.b)]  # fmt: skip
    for col, name, (kernel, params) in ((c3, "A", sides[0]), (c4, "B", sides[1])):
        col.markdown(f"**{name}** `{kernel}` " + " ".join(f"`{k}={v}`" for k, v in params.items()))
to_link(*KEYS)
link = "?" + urlencode(
    {"page": "compare", **{k: st.session_state[k] for k in KEYS if st.session_state.get(k)}}
)

if error:
    st.error(f"Cannot run this pair: {error}")
    st.stop()
if pair_key != YOURS:
    caps = []
with st.spinner("Capturing both kernels…"):
    for kernel, params in sides if pair_key != YOURS else ():
        options = (
            {"accesses": True, "branches": True} if backend == "sim" else {}
        )  # what the simulator counts
        try:
            caps.append(cached_capture(kernel, tuple(sorted(params.items())), backend, **options))
        except (LaunchError, KernelError) as exc:
            st.error(f"{kernel} did not run: {as_text(str(exc))}")
            st.stop()
a, b = caps
# beside what the simulator counts: each kernel's SASS (ptxas, nvdisasm) and, on the simulator, the device time
# the shipped recording measured (your versions: counted in their sandbox, never recorded)
compiled, recorded = (None, None), (None, None)
if pair_key != YOURS:
    with st.spinner("Compiling both kernels for an H200 (ptxas) to count their SASS…"):
        compiled = sass_pair(tuple((k, tuple(sorted(p.items()))) for k, p in sides))
    if backend == "sim":
        recorded = device_times(sides)
table = cmp.compare(a, b, compiled, recorded)
if pair_key == YOURS:
    table.attrs["labels"] = ("A", "B")
chart(compare_figure(table, height=330), key="compare_chart")
la, lb = table.attrs["labels"]
diffs = cmp.differences(table)
left, right = st.columns([3, 1])
with left:
    st.markdown("**What changed** (B against A):")
    st.markdown("\n".join(f"- {as_text(d)}" for d in diffs) if diffs else "- nothing recorded differs")
    if pair_key in PAIRS:
        st.caption(f"Look at: {PAIRS[pair_key].look_at}.")
with right:
    if pair_key == YOURS:
        st.caption("Your versions live in this browser session; the address bar's link carries your kernel.")
    else:
        st.markdown(f"[Link to this pair]({link})")
    st.caption(
        "Same table on the command line: `python -m visualizer compare A_DIR B_DIR` on two "
        "`capture --out` bundles, or `compare --pair NAME`."
    )
with st.expander("Every metric, side by side", expanded=False):
    shown = table[["what", "unit", "a", "b", "ratio", "a_source", "b_source", "a_note", "b_note"]].copy()
    shown.loc[table["a_text"] != "", "a"] = float("nan")
    st.dataframe(shown.rename(columns={"a": f"A: {la}", "b": f"B: {lb}", "ratio": "B/A"}), hide_index=True)
    st.caption(
        "Branch efficiency comes from the SIMT lens (its page records it). Occupancy needs the GPU build's "
        "registers; on the simulator see *Under the hood* for ptxas's count. The simulator has no GPU time: "
        f"the modelled time is {cmp.MODEL_NOTE}; the CPU time of the simulation is shown, never ranked. SASS "
        "instructions are counted in the kernel ptxas compiles for an H200 (sm_90): its size, not what a "
        "launch executes."
    )
if pair_key != YOURS and backend == "sim":  # (your versions name no backend) the H200's device time, recorded
    compare_beside(sides)
lines = cmp.lines(a, b)
if len(lines):
    with st.expander("Per source line (recorded accesses)", expanded=False):
        chart(lines_figure(lines), key="compare_lines_chart")
        st.dataframe(lines, hide_index=True)
