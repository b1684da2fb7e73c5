"""SIMT lens: which lanes of each warp took each branch of the source, and who waited at each barrier.

The current kernel (built-in or the visitor's) run again with the lens's probes
(engine/instrument/branches.py): on a GPU activemask()/ballot per warp and %globaltimer around every
syncthreads; on the simulator each lane's own decisions, formed into warp visits by a model of SIMT
reconvergence (analysis/branches.py says which), and no barrier timeline (the simulator has no clock).
"""

import streamlit as st

from visualizer.analysis import branches
from visualizer.engine.run.user_runner import user_code_allowed
from visualizer.figures import branches as bfigs
from visualizer.web.charts import chart
from visualizer.web.guard import visitor_has_key
from visualizer.web.measured import simt_beside
from visualizer.web.session import (
    as_text,
    from_link,
    link_value,
    require_capture,
    set_link,
    show_link_notices,
    to_link,
)
from visualizer.web.simt import lens_backend, lens_capture, sass_jumps, visitor_lens_capture

st.title("SIMT lens: branches and barriers")
INTRO = (
    "At a branch, lanes of a warp that disagree wait while the others run (**divergence**); at "
    "`syncthreads()` every warp waits for the last."
)

cap = require_capture()
launch = cap.launch

lensed, error = (cap, None) if cap.branches is not None else (None, None)
if lensed is None and launch.get("user_kernel"):
    run_launch = st.session_state.get("uk_launch")
    allowed, why = user_code_allowed(visitor_has_key())  # (bool, reason): the bool decides
    if run_launch is None or not allowed:
        st.info(
            "The lens runs your kernel again with its probes. "
            + ("Run it on the **Your kernel** page first." if allowed else f"Running your own code is {why}.")
        )
        st.stop()
    key = ("simt_visitor", id(cap))
    record = st.empty()  # the button goes once it has recorded: it would offer to record what is shown
    if st.session_state.get("_simt_visitor_key") == key:
        lensed, bar_cap = st.session_state["_simt_visitor_caps"]
    elif record.button("Record which lanes take each branch of your kernel", type="primary"):
        record.empty()
        lensed, error = visitor_lens_capture(run_launch, launch["backend"])
        bar_cap = None
        if lensed is not None and lensed.measured:  # the barriers in a run of their own (a GPU's clock)
            bar_cap, error = visitor_lens_capture(run_launch, launch["backend"], barriers=True)
        if error is None:
            st.session_state["_simt_visitor_key"] = key
            st.session_state["_simt_visitor_caps"] = (lensed, bar_cap)
    else:
        st.stop()
elif lensed is None:
    lensed, error = lens_capture(launch["kernel"], dict(launch["params"]), lens_backend(launch["backend"]))
    bar_cap = None
    if lensed is not None and lensed.measured:
        bar_cap, error = lens_capture(launch["kernel"], dict(launch["params"]), "gpu", barriers=True)
else:
    bar_cap = cap if cap.barriers is not None else None
if error:
    st.error(error, icon=":material/error:")
    st.stop()

rows = lensed.branches
bars = bar_cap.barriers if bar_cap is not None else None
summary = lensed.launch["branches"]
sites = branches.sites_table(lensed.launch["lens"]["branches"]["sites"])
tpb = int(lensed.launch["threads_per_block"])
n_blocks = int(lensed.launch["blocks"]) if "blocks" in lensed.launch else int(rows["block"].max() + 1)
warps_per_block = (tpb + 31) // 32

if summary["efficiency"] is None:
    st.info("This kernel has no branch the lens records (no if, while or for in its body).")
    st.stop()

st.caption(INTRO)
if summary.get("truncated"):
    st.warning(as_text(branches.cut_words(summary).capitalize() + "."))

TABS = {"branches": "Branches: lanes per warp", "barriers": "Barriers: who waited"}  # link value: tab
notices = [
    from_link("simt_block", 0, (0, max(0, n_blocks - 1))),
    from_link("simt_warp", 0, (0, warps_per_block - 1)),
    from_link("simt_bar_block", 0, (0, max(0, n_blocks - 1))),
]
if "_simt_tab" not in st.session_state:  # the open tab, from the link's simt_view
    view, notice = link_value("simt_view", "branches", list(TABS))
    st.session_state["_simt_tab"] = TABS[view]
    notices.append(notice)
show_link_notices(*notices)
tab_b, tab_w = st.tabs(list(TABS.values()), key="_simt_tab", on_change="rerun")
set_link("simt_view", next(k for k, v in TABS.items() if v == st.session_state["_simt_tab"]))
with tab_b:
    numbers, c1, c2 = st.columns([3, 1, 1], vertical_alignment="bottom")
    ms = lensed.timing
    if lensed.measured and ms.get(
        "clean_ms"
    ):  # the cost of recording: the probed build over the kernel's own
        third = f"probed build **{ms['instrumented_ms'] / ms['clean_ms']:.1f}×** the clean one's time"
    else:  # the mean number of lanes evaluating a branch together (32: a full warp)
        third = f"**{branches.counted(rows)['active'].mean():.1f}** of 32 lanes on per visit"
    kind = "measured" if lensed.measured else "modelled"
    cut = " over the visits kept (the log was cut)" if summary.get("truncated") else ""
    numbers.markdown(
        f"Branch efficiency **{summary['efficiency']:.1f}%** ({kind}{cut}) · **{summary['divergent_warps']:,} "
        f"of {summary['warps']:,}** warps diverged · {third}"
    )
    block = int(c1.number_input("block", 0, max(0, n_blocks - 1), key="simt_block"))
    warp = int(c2.number_input("warp of the block", 0, warps_per_block - 1, key="simt_warp"))
    to_link("simt_block", "simt_warp")
    n_visits = bfigs.warp_visits(rows, block, warp)
    show_link_notices(from_link("simt_visit", 0, (0, max(0, n_visits - 1))))
    if st.session_state["simt_visit"] > max(0, n_visits - 1):  # another warp, fewer visits: its last
        st.session_state["simt_visit"] = max(0, n_visits - 1)
    if n_visits > 1:
        st.slider(
            "visit (the warp's n-th evaluation of each branch, from 0)", 0, n_visits - 1, key="simt_visit"
        )
    to_link("simt_visit")
    visit = int(st.session_state["simt_visit"])
    frames = bfigs.lane_strip_frames(rows, sites, block, warp, visit=visit)
    chart(bfigs.lane_strip_figure(frames), key="simt_lanes")
    jumps, cond, unrolled, no_sass = sass_jumps(lensed)
    lens_sites = lensed.launch["lens"]["branches"]["sites"]
    ncu_like = branches.as_ncu_counts(rows, cond, unrolled, lens_sites) if cond is not None else None
    if ncu_like is not None:
        modelled_lines = ncu_like["modelled"]
        st.caption(
            f"As Nsight Compute counts it (SASS branches; from the {kind} visits and the clean build's "
            "sm_90 SASS): **"
            + (
                f"{ncu_like['efficiency']:.1f}%**, over the {ncu_like['visits']:,} conditional jumps the warps "
                f"ran on the lines that compiled to one (line {', '.join(map(str, ncu_like['lines']))})"
                if ncu_like["efficiency"] is not None
                else "no branch**: no branch line compiled to a conditional jump"
            )
            + (
                f"; line {', '.join(map(str, ncu_like['left_out']))} compiled to no conditional jump "
                "(predicated, or decided by the compiler), and ncu counts no branch there"
                if ncu_like["left_out"] and ncu_like["efficiency"] is not None
                else ""
            )
            + "".join(
                f"; ptxas unrolled line {line}'s loop by {u} with a remainder loop, so its jumps are counted "
                "as that code runs them, from each lane's trip count (the same on a GPU and the simulator)"
                for line, u in modelled_lines.items()
            )
            + ". Elsewhere it is one jump per visit, which is ncu's count where the compiler keeps one jump "
            "per test; ncu also counts unconditional jumps (such as one over an else), which are left out here. "
            + (
                "ptxas unrolls the probed build's loop too, so on a GPU the lanes reach its tests in the "
                "groups that code runs them in, where the simulator models the lanes testing it together "
                "once per iteration: the two source-level numbers part on that line (this one does not). "
                if modelled_lines
                else ""
            )
            + "The number the lesson teaches is the source's: every test on which a warp's lanes could disagree."
        )
    # one above the other, each the page's width: side by side their numbers were cut off at 1280 px
    left, right = st.container(), st.container()
    with left:
        pl = branches.per_line(rows, jumps).merge(sites[["site", "text"]], on="site")
        st.markdown("**Each branch line, all warps**")
        st.caption(
            "Branch efficiency as Nsight Compute defines it, over the source's branches: the share of "
            f"visits (a warp evaluating a branch) in which every lane went the same way. {summary['source']}."
            + (
                " Jumps: jump instructions of the clean build's SASS (sm_90) on that line; 0: none there (a "
                "predicated branch, an unrolled loop, or its jump placed on another line), and Nsight "
                "Compute counts no branch for that line."
                if jumps is not None
                else f" No jumps column: no SASS for this kernel ({as_text(no_sass or '', limit=160)})."
            )
        )
        columns = ["line", "text", "visits", "divergent", "efficiency"] + (
            ["sass_jumps"] if jumps is not None else []
        )
        small = {
            c: st.column_config.NumberColumn(width="small") for c in ("line", "visits", "divergent", "jumps")
        }
        st.dataframe(  # narrow number columns: the table fits its half of a 1280-px projector
            pl[columns].rename(columns={"text": "branch", "sass_jumps": "jumps"}),
            hide_index=True,
            column_config={
                **small,
                "efficiency": st.column_config.NumberColumn("efficiency %", format="%.1f", width="small"),
            },
        )
    with right:
        pw = branches.per_warp(rows)
        mine = pw[pw["block"] == block]
        st.markdown(f"**Warps of block {block}**")
        st.dataframe(
            mine[["warp", "visits", "divergent", "efficiency", "mean_active"]],
            hide_index=True,
            column_config={
                **{c: st.column_config.NumberColumn(width="small") for c in ("warp", "visits", "divergent")},
                "efficiency": st.column_config.NumberColumn("efficiency %", format="%.1f", width="small"),
                "mean_active": st.column_config.NumberColumn("lanes on", format="%.1f", width="small"),
            },
        )
    skipped = summary.get("not_recorded") or []
    other = ", ".join(str(x["line"]) for x in skipped if "constant" not in x.get("why", ""))
    const = ", ".join(str(x["line"]) for x in skipped if "constant" in x.get("why", ""))
    if other:
        st.caption(
            f"Loops at line(s) {other} are not over range(): their iterations are shown, not their exit test."
        )
    if const:
        st.caption(
            f"Loops at line(s) {const} run a constant number of times, every lane alike: they cannot "
            "diverge, so they are not among the branches."
        )
with tab_w:
    if bars is None:
        st.info(
            "Not offered on the simulator: it has no clock, and it runs each thread on its own until the "
            "barrier, so who waited how long is not its to know. Run on a GPU to measure it."
            if not lensed.measured
            else "No barrier times for this capture (run it with barriers on a GPU)."
        )
    elif not len(bars):
        st.info("No `cuda.syncthreads()` was reached in this launch.")
    else:
        bar_block = int(st.number_input("block", 0, max(0, n_blocks - 1), key="simt_bar_block"))
        to_link("simt_bar_block")
        threads = bar_cap.threads
        mine = threads[threads["block"] == bar_block]
        starts = mine.groupby("warp", observed=True)["t_start_ns"].min().astype("int64").to_dict()
        seg = branches.barrier_segments(bars, bar_block, starts)
        chart(bfigs.barrier_timeline_figure(seg, bar_block), key="simt_barriers")
        waits = seg[seg["what"] == "wait"]
        last = waits[waits["last"]].groupby("warp").size()
        st.caption(
            as_text(
                f"{len(waits):,} waits in block {bar_block}; median {waits['end_ns'].sub(waits['start_ns']).median():,.0f} ns, "
                f"longest {waits['end_ns'].sub(waits['start_ns']).max():,.0f} ns (%globaltimer ticks in 32 ns "
                f"steps on an H200). Arrived last most often: warp {int(last.idxmax()) if len(last) else '-'}."
            )
        )

if not lensed.measured and not launch.get("user_kernel"):  # your run, simulated; the H200's beside it
    simt_beside(lensed)
