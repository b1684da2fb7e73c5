"""Memory access: coalescing (sectors per warp request), shared-memory bank conflicts and races,
all drawn from recorded addresses: every thread's on the CUDA simulator, or, when the sidebar runs on
a GPU, the kernel's own in sampled warps (engine/lenses/accesses.py), with the simulator's recording of
the same launch beside it where the simulator can run it."""

import streamlit as st

from visualizer import KERNELS_DIR, kernel_source_file
from visualizer.analysis.gpu_accesses import describe_sample
from visualizer.analysis.memory import line_summary, request_accesses, worst_request
from visualizer.engine.run.runner import resolve_backend
from visualizer.engine.run.user_runner import user_code_allowed
from visualizer.figures.memory import bank_figure, requests_heatmap, sector_figure, source_html
from visualizer.specs import catalog
from visualizer.web.charts import chart
from visualizer.web.current_kernel import record_accesses, recorded_on, visitor_capture, visitor_is_current
from visualizer.web.guard import visitor_has_key
from visualizer.web.measured import accesses_beside, recorded_warps
from visualizer.web.memory import access_capture
from visualizer.web.races import runs_panel
from visualizer.web.session import (
    HIDDEN_KERNELS,
    as_text,
    drop_link,
    from_link,
    kernel_label,
    kernel_named,
    link_value,
    set_link,
    show_link_notices,
    to_link,
)


def resolved_backend(backend: str) -> str:
    try:
        return resolve_backend(backend)
    except Exception:  # a link's backend this machine lacks: the simulator, as the sidebar falls back
        return "sim"


TRANSPOSES = {"transpose_naive": "naive", "transpose_tiled": "tiled", "transpose_padded": "tiled + padding"}
LESSON_KERNELS = ("transpose_naive", "transpose_tiled", "transpose_padded", "strided_copy")


def visitor_launch(cap):
    """The visitor's kernel on this page: (capture, name, arguments) when its accesses were recorded;
    otherwise the page says so, offers to record them, and stops."""
    name = cap.launch["kernel"]
    st.caption(kernel_named(cap))
    if cap.accesses is not None:  # the launch goes in the data source's caption (one line, not two)
        return cap, name, dict(cap.launch["params"])
    allowed, why = user_code_allowed(visitor_has_key())
    c1, c2 = st.columns([2, 1], vertical_alignment="center")
    how = (
        "again on the GPU, where the warps of a few blocks (the first, middle and last) record their own "
        "loads and stores (measured)"
        if recorded_on(cap) == "gpu"
        else "again on the CUDA simulator with every access recorded"
    )
    c1.info(
        "The current kernel is yours ("
        + as_text(name)
        + f"), and its loads and stores were not recorded when it ran. **Record them:** your kernel runs "
        f"{how} (*record memory accesses* on the Your kernel page), then this page draws them.",
        icon=":material/grid_view:",
    )
    c2.button(
        "Record my kernel's accesses",
        key="mem_record_yours",
        on_click=record_accesses,
        type="primary",
        use_container_width=True,
    )
    if not allowed:
        st.caption(f"The Your kernel page is filled in for it, but running your own code is {why}.")
    st.caption("For the built-in kernels' accesses: **Use a built-in kernel instead** in the sidebar.")
    st.stop()


def side_by_side(kernel: str, params: dict, gpu_cap) -> None:
    """Beside a GPU recording: the same launch recorded on the simulator (its blocks restricted to the
    sampled ones), where the simulator can run it; and the kernel at its default (small) size recorded
    on the GPU, per source line."""
    from visualizer.analysis.gpu_accesses import side_by_side as both
    from visualizer.analysis.gpu_accesses import sizes_side_by_side
    from visualizer.figures.memory import SMALL_VS_BIG, side_by_side_figure

    with st.expander("Simulator vs GPU: the same launch, per source line"):
        try:
            catalog.admit_capture(kernel, params, "sim")
            sim_cap, error = access_capture(kernel, params, backend="sim")
        except catalog.LaunchError as exc:
            sim_cap, error = None, as_text(f"the simulator cannot record this launch ({exc})")
        if error:
            st.caption(f"No simulator recording beside this one: {error}.")
        else:
            table = both(sim_cap.requests, gpu_cap.requests, gpu_cap.launch["accesses"]["sample"]["blocks"])
            chart(side_by_side_figure(table), key="mem_side_by_side_chart")
            st.dataframe(table, hide_index=True)
    small = catalog.get(kernel).defaults()
    if small == params:
        return
    with st.expander(f"Small vs this size on the GPU: {kernel} at its defaults, per source line"):
        small_cap, error = access_capture(kernel, small, backend="gpu")
        if error:
            st.caption(f"The small launch did not run: {error}")
            return
        table = sizes_side_by_side(small_cap.requests, gpu_cap.requests)
        st.caption(
            "Launch A: " + ", ".join(f"{k}={v}" for k, v in sorted(small.items())) + " (the defaults), "
            "recorded on the GPU by its own sampled warps, beside this launch's."
        )
        chart(side_by_side_figure(table, sides=SMALL_VS_BIG), key="mem_sizes_chart")
        st.dataframe(table, hide_index=True)


def visitor_source(cap) -> list[str]:
    """The lines of the visitor's source as it ran (line numbers match the recorded ones)."""
    return str(cap.launch["kernel_source"]).splitlines()


def kernel_source(kernel: str) -> list[str]:
    """The lines of the kernel's module in kernels/ (line numbers match the recorded ones)."""
    return kernel_source_file(catalog.get(kernel).build[0]).read_text().splitlines()


REQUEST_LINK_KEYS = ("mem_line", "mem_block", "mem_warp", "mem_exec")  # the warp request shown


def _forget_request() -> None:
    """The kernel, layout or access changed: the link's request (line, block, warp) no longer applies."""
    drop_link(*REQUEST_LINK_KEYS)


def _forget_block() -> None:
    drop_link(*REQUEST_LINK_KEYS[1:])


def line_link(line: int, op: str, array: str) -> str:
    """An access (source line, op, array) as the link writes it: ``57-load-tile``."""
    return f"{int(line)}-{op}-{array}"


def readable(value, sign: bool = False) -> str:
    """A counter as people read it: thousands separated, a few decimals at most, never 3.97e+03."""
    plus = "+" if sign else ""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):{plus},}"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:{plus},.{digits}f}"


def line_from_link(raw: str, lines) -> int | None:
    """The row of ``lines`` a link's ``mem_line`` names (``57-load-tile``, or just ``57``), or None."""
    number, _, rest = raw.partition("-")
    try:
        line = int(number)
    except ValueError:
        return None
    for i, row in enumerate(lines.itertuples()):
        if row.line == line and (not rest or line_link(row.line, row.op, row.array) == raw):
            return i
    return None


def seed_number(key: str, link_key: str, default: int, hi: int, notices: list) -> None:
    """Seed number box ``key`` (0..hi) from the link's ``link_key`` once; keep a stale value in range."""
    if key in st.session_state:
        if not 0 <= st.session_state[key] <= hi:  # a new launch or block has fewer: the default
            st.session_state[key] = default
        return
    value, notice = link_value(link_key, default, (0, hi))
    st.session_state[key] = value
    notices.append(notice)


def counters(summ: dict) -> dict[str, float]:
    out = {}
    for short, word in (("ld", "load"), ("st", "store")):
        req = summ[f"global_{short}_requests"]
        if req:
            out[f"global {word} sectors / request"] = summ[f"global_{short}_sectors"] / req
    for short, word in (("ld", "load"), ("st", "store")):
        sreq = summ[f"shared_{short}_requests"]
        if sreq:
            if f"shared_{short}_wavefronts" in summ:
                out[f"shared {word} wavefronts / req."] = summ[f"shared_{short}_wavefronts"] / sreq
            out[f"shared {word} bank conflicts"] = summ[f"shared_{short}_bank_conflicts"]
    out["raced shared words"] = summ["raced_words"]
    out["uninitialised shared reads"] = summ["uninit_reads"]
    return out


def show_counters(summ: dict, kernel: str, params: dict, visitor) -> None:
    """The launch's counters, and how they moved since the last what-if of the same kernel on this page (a
    delta between unrelated kernels, e.g. a transpose against a reduction, would mean nothing)."""
    now = counters(summ)
    before = st.session_state.get("mem_last_counters", {})
    family = (
        kernel if visitor is not None else st.session_state.get("mem_kernel", kernel)
    )  # the kernel box: its what-ifs are comparable
    comparable = before.get("family") == family and before.get("kernel") != (
        kernel,
        tuple(sorted(params.items())),
    )
    PER_ROW = 4  # eight counters in one row of a 1280-px screen cut their values short ("3,9...")
    items = list(now.items())
    cols = [c for i in range(0, max(len(items), 1), PER_ROW) for c in st.columns(PER_ROW)]
    for col, (name, value) in zip(cols, items, strict=False):
        prev = before.get("values", {}).get(name) if comparable else None
        delta = (
            None
            if prev is None or prev == value
            else f"{readable(value - prev, sign=True)} vs {before['label']}"
        )
        col.metric(name, readable(value), delta, delta_color="inverse")
    st.session_state.mem_last_counters = {
        "family": family,
        "kernel": (kernel, tuple(sorted(params.items()))),
        "values": now,
        "label": f"{TRANSPOSES.get(kernel, kernel)}"
        + (f" stride {params['stride']}" if "stride" in params else ""),
    }


def how_made() -> None:
    with st.expander("How these charts are made, and what to try"):
        st.markdown(
            "Every chart here is drawn from recorded addresses grouped into warp requests: on the CUDA "
            "simulator every thread's; on a GPU (the sidebar's backend) the kernel records its own loads and "
            "stores, in every warp of a few blocks (the first, middle and last), at the real size. Shared "
            "requests count **wavefronts** as the hardware does: 128 bytes each, so 8-byte accesses are served "
            "by half-warps. A 16-byte global access (complex128) is two requests, as ptxas splits it into two "
            "8-byte loads or stores; its picture draws the lanes' whole elements. "
            "**Try:** *Transpose (naive)*, then switch the layout to tiled and tiled + padding."
        )


st.title("Memory access")
st.markdown(
    "A warp's 32 loads or stores are served together: global memory moves **32-byte sectors** (32 "
    "neighbouring floats: 4; 32 scattered: 32); two words in one of shared memory's **32 banks** take turns."
)
visitor = visitor_capture() if visitor_is_current() else None
if visitor is not None:  # the visitor's kernel is current: its own recorded accesses, if any
    cap, kernel, params = visitor_launch(visitor)
    module, src_path = "your_kernel", visitor.launch.get("filename") or "your_kernel.py"
    launch_line = "Launch: your kernel as it ran on the Your kernel page, its accesses recorded · "
    notices: list = []
else:
    config = st.session_state.get("config")
    kernels = [k for k in catalog.KERNELS if k not in HIDDEN_KERNELS]
    sidebar_kernel = config.kernel if config is not None else "transpose_naive"
    default = sidebar_kernel if sidebar_kernel in kernels else "transpose_naive"
    notices = [from_link("mem_kernel", default, kernels)]
    c1, c2 = st.columns([2, 3])
    with c1:
        kernel = st.selectbox(
            "kernel", kernels, format_func=lambda k: kernel_label(k, 36), key="mem_kernel",
            on_change=_forget_request,
        )  # fmt: skip
    spec = catalog.get(kernel)
    params = dict(config.param_dict) if config is not None and config.kernel == kernel else spec.defaults()
    with c2:
        # what-if controls, where the kernel has them: each choice re-records and the counters change
        if kernel in TRANSPOSES:
            layout_key = f"mem_variant_{kernel}"
            if layout_key not in st.session_state:  # the link's layout, else the kernel's own
                st.session_state[layout_key], notice = link_value("mem_layout", kernel, list(TRANSPOSES))
                notices.append(notice)
            variant = st.radio(
                "tile layout (what if?)", list(TRANSPOSES), format_func=TRANSPOSES.get, horizontal=True,
                key=layout_key, on_change=_forget_request,
            )  # fmt: skip
            if st.query_params.get("mem_layout") != variant:
                st.query_params["mem_layout"] = variant
            if variant != kernel:
                kernel, spec = variant, catalog.get(variant)
        elif kernel == "strided_copy":
            strides = [1, 2, 4, 8, 16, 32]
            notices.append(
                from_link("mem_stride", min(strides, key=lambda s: abs(s - params["stride"])), strides)
            )
            params["stride"] = st.select_slider("stride (what if?)", strides, key="mem_stride")
            to_link("mem_stride")
        else:
            st.caption(
                "What-if controls (stride, tile padding) appear for the lesson kernels: "
                + ", ".join(catalog.KERNELS[k].title for k in LESSON_KERNELS)
                + "."
            )
    to_link("mem_kernel")
    show_link_notices(*notices)
    notices = []
    launch_line = (
        f"Launch: `{kernel}` with "
        + ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
        + (" (the sidebar's parameters)" if config is not None and config.kernel == kernel else " (defaults)")
        + " · "
    )  # one caption with the data source below

    on_gpu = config is not None and resolved_backend(config.backend) == "gpu"
    cap, error = access_capture(kernel, params, backend="gpu" if on_gpu else "sim")
    if error:
        st.error(f"**This launch did not run:** {error}", icon=":material/error:")
        st.stop()
    module = spec.build[0]
    src_path = "kernels/" + kernel_source_file(module).relative_to(KERNELS_DIR).as_posix()
summ = cap.launch["accesses"]
if summ.get("sample"):  # recorded on the GPU by sampled warps: say which, and what did not fit
    st.caption(
        launch_line
        + f"Data source: {summ['source']} — {summ['accesses']:,} accesses, "
        + as_text(describe_sample(summ["sample"]))
    )
else:
    st.caption(
        launch_line + f"Data source: recorded addresses, simulator — {summ['accesses']:,} accesses of "
        f"{cap.launch['threads']:,} threads"
    )

req = cap.requests
if req.empty:
    show_counters(summ, kernel, params, visitor)
    st.info("This launch made no loads or stores outside its probes.")
    how_made()
    st.stop()

lines = line_summary(
    req
)  # one warp request: its picker names it (a heading here pushed the chart below a 720-px fold)
choices = [f"line {r.line}: {r.op} {r.array} ({r.space})" for r in lines.itertuples()]
worst_line = max(
    range(len(lines)),
    key=lambda i: (
        (lines["sectors_per_request"].iloc[i] - lines["ideal_per_request"].iloc[i])
        if lines["space"].iloc[i] != "shared"
        else lines["max_bank_ways"].iloc[i] * 10 + (lines["op"].iloc[i] == "load")  # ties: the shared read
    ),
)
p1, p2, p3, p4 = st.columns([3, 1, 1, 1])
with p1:
    # keyed by the kernel's module: the tiled and padded transposes share their lines, so a what-if
    # switch keeps the access in view
    line_key = f"mem_line_{module}"
    if st.session_state.get(line_key) not in choices:  # first visit, or another layout's line
        linked, raw = None, st.query_params.get("mem_line")
        if raw is not None:
            linked = line_from_link(raw, lines)
            if linked is None:
                notices.append(
                    as_text(
                        f"The link's mem_line={raw if len(raw) <= 40 else raw[:40] + '…'} was ignored "
                        f"(no such access in {kernel}); "
                        f"showing the worst access, line {lines['line'].iloc[worst_line]}, instead."
                    )
                )
        st.session_state[line_key] = choices[worst_line if linked is None else linked]
    choice = st.selectbox(
        "one warp request: access (source line, op, array)", choices, key=line_key, on_change=_forget_block
    )
pick = choices.index(choice) if choice in choices else worst_line
row = lines.iloc[pick]
mine = req[
    (req["line"] == row["line"])
    & (req["array"].astype(str) == row["array"])
    & (req["op"].astype(str) == row["op"])
]
worst = worst_request(mine)
with p2:
    block_key = f"mem_block_{kernel}_{pick}"
    seed_number(block_key, "mem_block", int(worst["block"]), int(mine["block"].max()), notices)
    block = int(st.number_input("block", 0, int(mine["block"].max()), key=block_key))
with p3:
    warps = mine[mine["block"] == block]
    wmax = int(warps["warp"].max()) if len(warps) else 0
    warp_key = f"mem_warp_{kernel}_{pick}"
    seed_number(warp_key, "mem_warp", min(int(worst["warp"]), wmax), wmax, notices)
    warp = int(st.number_input("warp", 0, wmax, key=warp_key))
with p4:
    execs = warps[warps["warp"] == warp]
    omax = int(execs["occurrence"].max()) if len(execs) else 0
    occ_key = f"mem_occ_{kernel}_{pick}"
    # first visit: the worst request's own execution (the n-th run of a line counts every access on
    # it, so a line with two arrays, as flash_attention's store_tile, has no execution 0 of the second)
    if (block, warp) == (int(worst["block"]), int(worst["warp"])):
        first = int(worst["occurrence"])
    else:
        first = int(execs["occurrence"].min()) if len(execs) else 0
    seed_number(occ_key, "mem_exec", first, omax, notices)
    occ = int(
        st.number_input("execution", 0, omax, key=occ_key, help="the n-th time these lanes ran this line")
    )
show_link_notices(*notices)
set_link("mem_line", line_link(row["line"], row["op"], row["array"]))
set_link("mem_block", block)
set_link("mem_warp", warp)
set_link("mem_exec", occ)
sel = execs[execs["occurrence"] == occ]
if sel.empty:
    st.info("That warp did not execute this access that many times; showing the worst request instead.")
    request = worst
else:
    request = sel.iloc[0]
lanes = request_accesses(cap.accesses, request)

shared = str(request["space"]) == "shared"
if shared:  # 32 bank columns need the page's width; the source goes underneath
    chart(bank_figure(lanes, request), key="mem_bank_chart")
    right = st.container()
else:
    left, right = st.columns([1, 1])
    with left:
        chart(sector_figure(lanes, request), key="mem_sector_chart")
with right:
    src, first = (visitor_source(visitor) if visitor is not None else kernel_source(kernel)), 1
    line = int(request["line"])
    lo, hi = max(line - 10, 0), min(line + 4, len(src))
    st.markdown(
        f"**Source** (`{src_path}`, line {line} highlighted)"  # a path this server chose
    )
    st.html(source_html(src[lo:hi], lo + first, line))
    if str(request["space"]) == "shared":
        st.caption(
            f"Bank = 4-byte word address mod 32; each cell is one distinct word, its text the lane that "
            f"touched it (first lane +k more when lanes share a word: a broadcast, not a conflict). This "
            f"request: {int(request['bank_ways'])} distinct word(s) in its busiest bank, "
            f"{int(request['wavefronts'])} wavefront(s) where {int(request['ideal_wavefronts'])} would do"
            + (
                f" ({int(request['bytes']) // max(int(request['lanes']), 1)}-byte accesses: a wavefront "
                f"serves 128 bytes, so the lanes are served in groups of "
                f"{128 // (int(request['bytes']) // max(int(request['lanes']), 1))})."
                if int(request["ideal_wavefronts"]) > 1
                else "."
            )
        )
    else:
        st.caption(
            f"{int(request['lanes'])} lanes, {int(request['bytes'])} bytes: {int(request['sectors'])} sectors moved, "
            f"{int(request['ideal_sectors'])} would do if the same bytes were contiguous."
        )

# the launch's counters under the one-request chart, not above it: two rows of them above pushed the
# page's first chart below a 720-px projector's fold
show_counters(summ, kernel, params, visitor)
how_made()
beside = None
if visitor is None and not cap.measured:  # your run, simulated; beside it the launch recorded on the H200
    beside = accesses_beside(cap)

st.subheader("Every warp, every access")
heat, whose_line = req, None
c_space, c_whose = st.columns([1, 2])
space = c_space.radio("memory", ["global", "shared"], horizontal=True, key="mem_heat_space",
                      index=0 if (req["space"].astype(str) == "global").any() else 1)  # fmt: skip
if beside is not None:  # the recording's sampled warps on the same axes, said so; yours by default
    rec_req, whose_line = recorded_warps(*beside, req)
    where = beside[0].set.device.get("name") or "the GPU"
    whose = {"yours": "your run: every warp (simulated)", "recorded": f"recorded on {where}: sampled warps"}
    if (
        c_whose.radio("warps", list(whose), horizontal=True, key="mem_heat_whose", format_func=whose.get)
        == "recorded"
    ):
        heat = rec_req
try:
    chart(requests_heatmap(heat, space), key="mem_heatmap_chart")
except ValueError as exc:
    st.info(str(exc))
if whose_line:
    st.caption(whose_line)
with st.expander("Per source line (what Nsight Compute would count)"):
    st.dataframe(lines, hide_index=True)
if summ.get("sample") and visitor is None and cap.measured:  # a GPU's sampled warps beside the simulator's
    side_by_side(kernel, params, cap)
haz = cap.hazards
if len(haz):
    with st.expander(
        f"Hazards: {len(haz)} rows (races between unordered threads, uninitialised shared reads)",
        expanded=True,
    ):
        st.dataframe(haz, hide_index=True)
else:
    st.caption(
        "No hazards: no two threads touched one word without a barrier between them, and every shared read was written first."
    )
if cap.launch.get("user_kernel"):  # the visitor's launch again, in a sandbox of its own (web/visitor_runs.py)
    from visualizer.web.visitor_runs import runs_of

    run_many = runs_of(cap)
    written = [str(w) for w in cap.launch.get("written") or []] or list(cap.outputs)
    if run_many is None or not written:
        st.caption(
            "To run your kernel many times here, run it on the Your kernel page in this session first."
        )
    else:
        runs_panel(
            as_text(cap.launch["kernel"], 60), cap.launch["params"], cap.launch["backend"], 0, written[0],
            "mem_yours_runs", run_many=run_many, identity=id(cap),
        )  # fmt: skip
else:
    runs_panel(
        kernel, params, "sim", 0, spec.outputs[0], "mem_runs"
    )  # the same launch N times (analysis/races.py)
