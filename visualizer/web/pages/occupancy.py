"""Occupancy: how many warps an SM holds for a launch, what limits it, and what a run achieved."""

import math

import pandas as pd
import streamlit as st

from visualizer.analysis.occupancy import ARCHS, KB, WARP_SIZE, occupancy
from visualizer.analysis.occupancy_timeline import (
    SIM_ACHIEVED_SOURCE,
    achieved_warps_per_sm,
    active_warps_over_time,
    impact_sweeps,
    modelled_active_warps,
    occupancy_opted_in,
)
from visualizer.figures.occupancy import achieved_figure, impact_figure, limits_figure, measured_points_figure
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.specs.launch import ceil_div
from visualizer.web.asm import count_words, ptxas_count
from visualizer.web.charts import chart
from visualizer.web.session import (
    RunConfig,
    as_text,
    current_capture,
    from_link,
    kernel_named,
    show_link_notices,
    show_run_problems,
    show_unrun_notice,
    to_link,
)
from visualizer.web.sidebar import load_config

SIM_REGS = 32  # the simulator compiles nothing, so the register count is an assumption
SLIDER_KEYS = ("occ_arch", "occ_threads", "occ_regs", "occ_smem_kb", "occ_static")
SLIDER_RANGES = {  # what a link may set each slider to
    "occ_arch": list(ARCHS),
    "occ_threads": list(range(WARP_SIZE, 1025, WARP_SIZE)),
    "occ_regs": (0, 255),
    "occ_smem_kb": (0, 227),
    "occ_static": list(range(0, 48 * KB + 1, 128)),
}


def _arch_of(cap) -> tuple[str, str | None]:
    """The captured GPU's architecture (sm_90 on the simulator), and a note when the calculator lacks it."""
    if cap is None or not cap.measured:
        return "sm_90", None
    name = "sm_" + str(cap.launch["compute_capability"]).replace(".", "")
    if name in ARCHS:
        return name, None
    return "sm_90", f"The calculator has no constants for {name}; the what-if charts show sm_90."


def _kernel_regs(cap) -> dict[str, int] | None:
    """Registers per thread of the compiled builds: the driver's (GPU), or ptxas's count of the clean
    build for sm_90 once it has counted (simulator: web/asm.ptxas_count); None before that."""
    if cap is None:
        return None
    if not cap.measured:
        counted = ptxas_count(cap)
        return {"clean": counted["registers"]} if counted else None
    regs = {
        build: cap.launch[build]["registers_per_thread"]
        for build in ("instrumented", "clean")
        if (cap.launch.get(build) or {}).get("registers_per_thread") is not None
    }
    return regs or None


def _launch_regs(cap) -> tuple[int, str]:
    """(registers per thread the captured launch is modelled with, where that number came from)."""
    regs = _kernel_regs(cap) or {}
    if "instrumented" in regs:
        return regs["instrumented"], "the instrumented build, CUDA driver"
    if "clean" in regs:
        return regs["clean"], count_words()
    return SIM_REGS, "assumed: nothing is compiled yet"


def _run_key(cap) -> tuple:
    launch = cap.launch
    return (launch["kernel"], launch["backend"], tuple(sorted(launch["params"].items())))


def _slider_defaults(cap) -> dict:
    if cap is None:
        return {
            "occ_arch": "sm_90",
            "occ_threads": 128,
            "occ_regs": SIM_REGS,
            "occ_smem_kb": 0,
            "occ_static": 0,
        }
    launch = cap.launch
    threads = launch["threads_per_block"]
    return {
        "occ_arch": _arch_of(cap)[0],
        # Whole warps: 48 threads occupy as much as 64.
        "occ_threads": min(1024, max(WARP_SIZE, ceil_div(threads, WARP_SIZE) * WARP_SIZE)),
        "occ_regs": _launch_regs(cap)[0],
        "occ_smem_kb": min(227, ceil_div(int(launch.get("dynamic_smem_bytes") or 0), KB)),
        "occ_static": min(48 * KB, int(launch.get("static_smem_bytes") or 0)),
    }


def _relaunch_params(cap, threads: int) -> tuple[dict | None, str]:
    """Parameters that launch the captured kernel with ``threads`` per block, or None and why not."""
    kernel, params = cap.launch["kernel"], dict(cap.launch["params"])
    if cap.launch.get("user_kernel"):  # not in the catalog: its launch is set on its own page
        return None, "Your kernel: change its block on the *Your kernel* page and run it again."
    note = ""
    if "block" in params:
        params["block"] = threads
    elif "tile" in params:
        tile = math.isqrt(threads)
        params["tile"] = tile
        if tile * tile != threads:
            note = (
                f"{kernel} blocks are tile × tile threads: this launches tile={tile} ({tile * tile} threads)."
            )
    else:
        return None, f"{kernel}'s block size follows from its other parameters; change them in the sidebar."
    try:
        catalog.plan_launch(kernel, params, cap.launch["backend"])
    except LaunchError as exc:
        return None, f"Cannot re-launch: {exc}"
    return params, note


def _relaunch(kernel: str, params: dict) -> None:
    # A button callback runs before the script, so it may still set the sidebar's widgets.
    backend = st.session_state.config.backend if "config" in st.session_state else "auto"
    load_config(RunConfig(kernel, backend, tuple(sorted(params.items()))))


def _captured_theoretical(cap) -> tuple[int, int, str]:
    """Blocks per SM for the captured launch, max warps per SM, and where the number came from."""
    launch = cap.launch
    max_warps = launch["max_threads_per_sm"] // WARP_SIZE
    driver = (launch.get("instrumented") or {}).get("driver_blocks_per_sm")
    if driver is not None:
        return int(driver), max_warps, "the CUDA driver (cudaOccupancyMaxActiveBlocksPerMultiprocessor)"
    counted = ptxas_count(cap)
    regs = counted["registers"] if counted else SIM_REGS
    result = occupancy_opted_in(
        "sm_90",
        launch["threads_per_block"],
        regs,
        launch["dynamic_smem_bytes"],
        launch["static_smem_bytes"],
    )
    if counted:
        return (
            result.blocks_per_sm,
            max_warps,
            f"the calculator for sm_90 at {regs} regs/thread ({count_words()})",
        )
    return result.blocks_per_sm, max_warps, f"the calculator for sm_90 with an assumed {SIM_REGS} regs/thread"


def _driver_rows(cap, arch: str) -> list[dict]:
    """Calculator vs driver for each compiled build of the captured launch (GPU only)."""
    launch = cap.launch
    rows = []
    for build in ("instrumented", "clean"):
        res = launch.get(build) or {}
        if "driver_blocks_per_sm" not in res:
            continue
        static, dynamic = res["static_smem_bytes"], launch["dynamic_smem_bytes"]
        default_max = max(0, ARCHS[arch].smem_per_block - static)
        try:
            calc = occupancy(
                arch,
                launch["threads_per_block"],
                res["registers_per_thread"],
                dynamic,
                static,
                max_dynamic_smem=None if dynamic <= default_max else dynamic,
            ).blocks_per_sm
        except ValueError:
            calc = None
        rows.append(
            {
                "build": build,
                "registers/thread": res["registers_per_thread"],
                "static shared memory (B)": static,
                "calculator blocks/SM": calc,
                "driver blocks/SM": res["driver_blocks_per_sm"],
            }
        )
    return rows


st.title("Occupancy")
st.markdown(
    "**Occupancy** is how many warps an SM keeps resident at once, out of the most it can hold; more "
    "resident warps give the scheduler more work to switch to while others wait for memory. It is capped "
    "by whichever runs out first: warp slots, registers, shared memory, block slots or barriers. "
    "**Try:** raise *registers per thread* to 128 and watch the register limit take over; then push "
    "*dynamic shared memory* up and see it become the limiter."
)

show_run_problems()
cap = None if st.session_state.get("run_error") else current_capture()
if cap is not None:
    st.caption(kernel_named(cap))
seen = st.session_state.get("occ_defaults_for")
if cap is not None and seen is not None and seen != _run_key(cap):
    # A new run: start the sliders from its launch (before the widgets exist, as Streamlit requires).
    st.session_state.update(_slider_defaults(cap))
counted_for = (_run_key(cap), _launch_regs(cap)[0]) if cap is not None else None
if (
    cap is not None
    and seen == _run_key(cap)
    and st.session_state.get("occ_regs_for") not in (None, counted_for)
):
    # ptxas has counted this launch's registers since the sliders were set: they start from its count
    st.session_state.occ_regs = counted_for[1]
if cap is not None:
    st.session_state.occ_defaults_for = _run_key(cap)
    st.session_state.occ_regs_for = counted_for
# otherwise the link's values (a first visit, or back from another page), else the run's
for key, value in _slider_defaults(cap).items():
    show_link_notices(from_link(key, value, SLIDER_RANGES[key]))

arch_note = _arch_of(cap)[1]
if arch_note:
    st.info(arch_note)

st.subheader("Calculator")
# the sliders beside the limits they move, so a projected page shows both at once
controls, picture = st.columns([1, 1.45], gap="medium")
with controls:
    arch = st.selectbox("GPU generation", list(ARCHS), format_func=lambda a: ARCHS[a].label, key="occ_arch")
    spec = ARCHS[arch]
    threads = st.slider("threads per block", WARP_SIZE, 1024, step=WARP_SIZE, key="occ_threads")
    regs = st.slider("registers per thread", 0, 255, key="occ_regs")
    smem_kb = st.slider("dynamic shared memory per block (KB)", 0, 227, key="occ_smem_kb")
    static = st.slider("static shared memory per block (B)", 0, 48 * KB, step=128, key="occ_static")
smem_dynamic = smem_kb * KB
to_link(*SLIDER_KEYS)

result = occupancy_opted_in(arch, threads, regs, smem_dynamic, static)
limiters = " + ".join(name.replace("_", " ") for name in result.limiters)
with picture:
    chart(limits_figure(result), key="occ_limits")
c1, c2, c3, c4 = st.columns([2, 2, 2, 3])
c1.metric("blocks / SM", result.blocks_per_sm)
c2.metric("warps / SM", f"{result.warps_per_sm} / {spec.max_warps_per_sm}")
c3.metric("occupancy", f"{100 * result.occupancy:.1f}%")
# several limiters at once are too long for a metric column at 1280 px: then the whole row
(c4 if len(limiters) <= 16 else st).metric("limiter", limiters)
if static + smem_dynamic > spec.smem_per_block_optin:
    st.error(
        f"Cannot launch: {static + smem_dynamic:,} B of shared memory per block is over the "
        f"{spec.smem_per_block_optin:,} B per-block opt-in limit of {spec.label}."
    )
elif not result.launchable:
    st.error(result.reason)
else:
    st.caption(result.reason)
st.caption(
    "Modelled with the CUDA occupancy formula (cuda_occupancy.h): pure Python, nothing is launched. "
    "Dynamic shared memory above 48 KB assumes the kernel opted in (cudaFuncSetAttribute)."
)
sweeps = impact_sweeps(arch, threads, regs, smem_dynamic, static)
chart(impact_figure(sweeps, _kernel_regs(cap)), key="occ_impact")

if cap is None:
    st.info("Run a kernel from the sidebar to compare with a real launch and see its achieved occupancy.")
    st.stop()

show_unrun_notice(cap)
launch = cap.launch
st.subheader(f"The launch you ran: {launch['kernel']} with {launch['threads_per_block']} threads per block")
blocks_per_sm, max_warps, theory_from = _captured_theoretical(cap)
warps_per_block = ceil_div(launch["threads_per_block"], WARP_SIZE)
theoretical_warps = blocks_per_sm * warps_per_block
if cap.measured:
    rows = _driver_rows(cap, _arch_of(cap)[0])
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True)
        bad = [r["build"] for r in rows if r["calculator blocks/SM"] != r["driver blocks/SM"]]
        if bad:
            st.warning(f"The calculator disagrees with the driver for the {' and '.join(bad)} build.")
        else:
            st.caption("Measured (GPU): the calculator agrees with the CUDA driver for every build.")
    else:
        errors = [str((launch.get(b) or {}).get("error")) for b in ("instrumented", "clean")]
        st.caption(f"The driver's occupancy answer is not available ({'; '.join(errors)}).")
elif (res := ptxas_count(cap)) is not None:
    st.caption(
        f"Simulator: registers {count_words()}: {res['registers']} registers/thread, "
        f"{res['spill_stores_bytes'] + res['spill_loads_bytes']} B spilled, {res['smem_bytes']:,} B static shared "
        "memory. The theoretical value and the sliders use this count (an H200, sm_90); *Under the hood* shows "
        "it line by line. The instrumented build's count, and the driver's answer, need a GPU."
    )
else:
    st.caption(
        f"Simulator: nothing is compiled yet, so registers are unknown; the theoretical value assumes {SIM_REGS} "
        "registers per thread on an H200 (sm_90). Count them with ptxas below (or on *Under the hood*), or run "
        "on a GPU to see the driver's answer."
    )
    if st.button("Count this kernel's registers with ptxas (sm_90, no GPU needed)", key="occ_ptxas"):
        from visualizer.web.asm import ptxas_registers

        res, why = ptxas_registers(cap)
        if res is None:
            st.caption(f"No register count: {as_text(why)}")
        else:
            st.rerun()  # every number on the page (and the other pages) from the count now

st.subheader("Achieved occupancy")
run_key = _run_key(cap)
cached = st.session_state.get("occ_active")
if cached is None or cached[0] != run_key:
    if cap.measured:
        active = active_warps_over_time(cap.threads, launch)
    else:
        active = modelled_active_warps(launch, blocks_per_sm)
    st.session_state.occ_active = cached = (run_key, active)
active = cached[1]
source = cap.source if cap.measured else SIM_ACHIEVED_SOURCE
achieved_warps = achieved_warps_per_sm(active)
a1, a2, a3 = st.columns(3)
a1.metric("theoretical", f"{100 * theoretical_warps / max_warps:.1f}%", help=f"from {theory_from}")
if cap.measured:
    a2.metric(
        "achieved",
        f"{100 * achieved_warps / max_warps:.1f}%",
        help="time-average of active warps per SM while the SM had work",
    )
    a3.metric("SMs used", f"{active['sm'].nunique()} of {launch['num_sms']}")
else:
    # No headline number: the simulator runs one block at a time, so there is nothing to measure.
    a2.metric("achieved", "needs a GPU", help="the simulator runs blocks one at a time, on no SMs")
    st.caption(
        f"The chart below is a model, not a measurement: blocks of this launch laid out on an H200 in "
        f"waves of SMs × blocks/SM, each lasting one nominal block-time (time-averaged, "
        f"{100 * achieved_warps / max_warps:.1f}% of the warp slots). Run on a GPU for the achieved value."
    )
chart(achieved_figure(active, theoretical_warps, source), key="occ_achieved")

history = st.session_state.setdefault("occupancy_history", [])
if run_key not in [h["key"] for h in history]:
    history.append(
        {
            "key": run_key,
            "kernel": launch["kernel"],
            "params": launch["params"],
            "threads": launch["threads_per_block"],
            "achieved": achieved_warps / max_warps,
            "theoretical": theoretical_warps / max_warps,
            "source": cap.source if cap.measured else "modelled (simulator)",
        }
    )

st.subheader("Try another block size")
params, note = _relaunch_params(cap, threads)
st.button(
    f"Re-launch with this block size ({threads} threads)",
    key="occ_relaunch",
    disabled=params is None,
    on_click=_relaunch,
    args=(launch["kernel"], params or {}),
    help="Runs the kernel again with the slider's threads per block and adds the result to the chart below",
)
if note:
    st.caption(note)
runs = [h for h in history if h["kernel"] == launch["kernel"]]
chart(
    measured_points_figure(
        runs,
        _arch_of(cap)[0],
        _launch_regs(cap)[0],
        launch["static_smem_bytes"],
        launch["dynamic_smem_bytes"],
    ),
    key="occ_history",
)
