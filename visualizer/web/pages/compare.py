"""Compare: two captures side by side on the same axes, the differences one line each, a link for the pair."""

from urllib.parse import urlencode

import streamlit as st

from visualizer.analysis import compare as cmp
from visualizer.engine.run.runner import KernelError, gpu_present
from visualizer.figures.compare import compare_figure, lines_figure
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.specs.pairs import PAIRS
from visualizer.web.charts import chart
from visualizer.web.session import (
    as_text,
    cached_capture,
    from_link,
    show_link_notices,
    to_link,
    visible_kernels,
)

CUSTOM = "custom"
KEYS = ("cmp_pair", "cmp_backend", "cmp_a", "cmp_b", "cmp_a_params", "cmp_b_params")
PARAMS_MAX_CHARS = 200

st.title("Compare two captures")
backends = ["sim", "gpu"] if gpu_present() else ["sim"]
kernels = visible_kernels()
notices = [
    from_link("cmp_pair", "transpose", [*PAIRS, CUSTOM]),
    from_link("cmp_backend", backends[-1], backends),
    from_link("cmp_a", "transpose_naive", kernels),
    from_link("cmp_b", "transpose_tiled", kernels),
    from_link("cmp_a_params", ""),
    from_link("cmp_b_params", ""),
]
show_link_notices(*notices)
c1, c2, c3, c4 = st.columns([3, 2, 3, 3])
pair_key = c1.selectbox(
    "Pair", [*PAIRS, CUSTOM], key="cmp_pair",
    format_func=lambda k: PAIRS[k].title if k in PAIRS else "Any two kernels…",
)  # fmt: skip
backend = c2.selectbox(
    "Backend", backends, key="cmp_backend", help="sim records every access; gpu measures device time"
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


error = None
if pair_key == CUSTOM:
    ka = c3.selectbox("A", kernels, key="cmp_a")
    kb = c4.selectbox("B", kernels, key="cmp_b")
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

caps = []
if error:
    st.error(f"Cannot run this pair: {error}")
    st.stop()
with st.spinner("Capturing both kernels…"):
    for kernel, params in sides:
        options = {"accesses": True} if backend == "sim" else {}
        try:
            caps.append(cached_capture(kernel, tuple(sorted(params.items())), backend, **options))
        except (LaunchError, KernelError) as exc:
            st.error(f"{kernel} did not run: {as_text(str(exc))}")
            st.stop()
a, b = caps
table = cmp.compare(a, b)
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
        f"Branch efficiency: {cmp.BRANCH_NOTE}. Occupancy needs the GPU build's registers; on the "
        "simulator see *Under the hood* for ptxas's count."
    )
lines = cmp.lines(a, b)
if len(lines):
    with st.expander("Per source line (recorded accesses)", expanded=False):
        chart(lines_figure(lines), key="compare_lines_chart")
        st.dataframe(lines, hide_index=True)
