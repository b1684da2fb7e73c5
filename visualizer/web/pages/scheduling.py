"""Warp & SM scheduling: which SM ran each block and when, waves, the tail, achieved occupancy."""

import streamlit as st

from visualizer.analysis import schedule
from visualizer.analysis.occupancy import ARCHS, WARP_SIZE, occupancy
from visualizer.figures import scheduling as figs
from visualizer.specs.catalog import SIM_MAX_THREADS
from visualizer.specs.launch import ceil_div
from visualizer.web.asm import count_words, ptxas_count
from visualizer.web.charts import chart
from visualizer.web.measured import schedule_beside
from visualizer.web.session import RunConfig, from_link, require_capture, show_link_notices, to_link
from visualizer.web.sidebar import load_config

MODEL_GPUS = {"H200": "sm_90", "A100": "sm_80", "RTX 4090": "sm_89", "RTX 3090": "sm_86", "T4": "sm_75"}

st.title("Warp & SM scheduling")
st.markdown(
    "The block scheduler gives each **SM** as many blocks as its registers, shared memory and warp slots "
    "allow, so a big grid runs in **waves**. A partly full last wave leaves **slots** empty; with fewer "
    "blocks than SMs, whole **SMs** sit idle: the **tail effect**."
)
TRY = (
    "Try: run *Vector add* with `n=1048576` on a GPU and look at the tail; on the simulator, use the "
    "suggested launch below, then switch the modelled GPU between T4 (40 SMs) and H200 (132 SMs)."
)


def _run_suggestion(suggestion: dict, backend: str) -> None:
    """Button callback: run the suggested launch and model it at the suggested register count."""
    st.session_state.sched_regs = suggestion["regs"]
    load_config(RunConfig("vector_add", backend, (("block", suggestion["block"]), ("n", suggestion["n"]))))


cap = require_capture()
launch = cap.launch
tpb = int(launch["threads_per_block"])
warps_per_block = ceil_div(tpb, WARP_SIZE)


def captured_tables() -> tuple:
    """Block and warp tables of this session's capture, computed once per capture."""
    cached = st.session_state.get("_scheduling_tables")
    if cached is None or cached[0] is not cap:
        cached = (cap, schedule.block_intervals(cap.threads), schedule.warp_intervals(cap.threads))
        st.session_state["_scheduling_tables"] = cached
    return cached[1], cached[2]


captured_blocks, captured_warps = captured_tables()

if cap.measured:
    source = cap.source
    num_sms = int(launch["num_sms"])
    max_warps = int(launch["max_threads_per_sm"]) // WARP_SIZE
    arch = f"sm_{str(launch.get('compute_capability') or '').replace('.', '')}"
    regs = (launch.get("instrumented") or {}).get("registers_per_thread")
    theoretical_warps, blocks_per_sm = None, None
    if regs is not None and arch in ARCHS:
        try:
            occ = occupancy(
                arch,
                tpb,
                int(regs),
                launch.get("dynamic_smem_bytes") or 0,
                launch.get("static_smem_bytes") or 0,
            )
            theoretical_warps, blocks_per_sm = occ.warps_per_sm, occ.blocks_per_sm
            st.caption(
                f"Theoretical occupancy from the calculator for {arch} at {regs} registers/thread "
                f"(the instrumented build): {occ.reason}"
            )
        except ValueError as exc:
            st.warning(f"No theoretical occupancy: {exc}")
    elif (launch.get("instrumented") or {}).get("driver_blocks_per_sm"):
        blocks_per_sm = int(launch["instrumented"]["driver_blocks_per_sm"])
        theoretical_warps = blocks_per_sm * warps_per_block
        st.caption(f"Theoretical occupancy from the driver ({arch} is not in the calculator).")
    blocks, warps = captured_blocks, captured_warps
    st.caption(f"Data source: {source}: real `%smid` and `%globaltimer` read inside the kernel.")
else:
    counted = ptxas_count(cap)  # ptxas's count for sm_90 (web/asm.py), once it has counted
    counted_regs = counted["registers"] if counted else None
    show_link_notices(
        from_link("sched_gpu", "H200", list(MODEL_GPUS)),
        from_link("sched_regs", counted_regs or 32, (1, 255)),
    )
    counted_for = (launch.get("kernel"), str(sorted(launch["params"].items())), counted_regs)
    if counted_regs and st.session_state.get("sched_regs_for") not in (None, counted_for):
        st.session_state.sched_regs = counted_regs  # counted since the input was set: model with the count
    st.session_state.sched_regs_for = counted_for
    c1, c2 = st.columns(2)
    gpu = c1.selectbox(
        "GPU model (modelled)",
        list(MODEL_GPUS),
        key="sched_gpu",
        format_func=lambda g: f"{g}: {ARCHS[MODEL_GPUS[g]].num_sms} SMs ({MODEL_GPUS[g]})",
        help="The SM count and per-SM limits of this GPU feed the modelled schedule.",
    )
    regs = int(
        c2.number_input(
            "registers per thread (modelled)",
            1,
            255,
            key="sched_regs",
            help="More registers per thread leave room for fewer resident blocks per SM.",
        )
    )
    to_link("sched_gpu", "sched_regs")
    arch = MODEL_GPUS[gpu]
    try:
        blocks = schedule.modelled_schedule(
            launch, arch, regs, active_threads=captured_blocks["active_threads"].to_numpy()
        )
    except ValueError as exc:
        st.error(f"This block cannot run on the modelled {gpu}: {exc}")
        st.stop()
    warps = schedule.modelled_warps(blocks, captured_warps)
    source = schedule.source_of(blocks)
    num_sms = int(blocks.attrs["num_sms"])
    max_warps = int(blocks.attrs["max_warps_per_sm"])
    theoretical_warps, blocks_per_sm = int(blocks.attrs["warps_per_sm"]), int(blocks.attrs["blocks_per_sm"])
    if counted_regs is None:
        regs_from = (
            "assumed: nothing is compiled yet; *Under the hood* counts them with ptxas"
            if regs == 32
            else "as you set it; nothing is compiled yet"
        )
    elif regs == counted_regs:
        regs_from = count_words()
    else:
        regs_from = f"as you set it; ptxas -v counted {counted_regs} for sm_90"
    st.caption(
        f":orange[**Modelled**] on a {gpu} ({num_sms} SMs, {blocks_per_sm} blocks/SM at {regs} "
        f"registers/thread, {regs_from}): the simulator has no SMs (details below the chart)."
    )  # a caption, not a box: the chart must start above a 720-px projector's fold


def why_modelled() -> None:
    """How the modelled schedule is made, and the simulator's own order beside it (below the chart)."""
    st.caption(
        f"Blocks go out in blockIdx order to the first free slot; each takes {blocks.attrs['block_cost_ns']:g} "
        "ns × its share of active threads (a nominal cost). Times are model time, not GPU time."
    )
    with st.expander("Why modelled? The simulator runs blocks one after another"):
        st.markdown(
            "The CUDA simulator runs one block at a time on one CPU thread (each CUDA thread a greenlet), "
            "so its recorded 'SM' is a "
            "round-robin stand-in and its times are the host clock: the blocks never overlap, as below. "
            "The modelled charts use the occupancy calculator's limits instead."
        )
        chart(
            figs.sm_timeline_figure(schedule.assign_waves(captured_blocks), cap.source),
            key="sched_simulated_timeline",
        )


scheduled = schedule.assign_waves(blocks, blocks_per_sm)
achieved = schedule.achieved_occupancy(
    warps if cap.measured else blocks, {"num_sms": num_sms}, max_warps, theoretical_warps, blocks_per_sm
)

chart(figs.sm_timeline_figure(scheduled, source), key="sched_sm_timeline")  # titled: blocks on SMs
# the counters under the chart: above it they pushed it below a 720-px projector's fold
one_wave = achieved.waves <= 1
m1, m2, m3, m4 = st.columns(4)
m1.metric("SMs used", f"{achieved.sms_used} of {num_sms}")
m2.metric(
    "blocks per wave",
    f"{achieved.first_wave_blocks:,}",
    help=f"{num_sms} SMs × {achieved.blocks_per_sm} resident blocks per SM",
)
m3.metric(
    "waves", achieved.waves, help="full waves, plus one partial wave if the grid does not divide evenly"
)
tail_share = achieved.tail_ns / achieved.kernel_ns if achieved.kernel_ns else 0.0
m4.metric(
    "tail",
    f"{tail_share:.0%}" if achieved.has_tail else "none",
    help="share of the kernel's time spent in the last, partial wave (one wave has no tail); how idle "
    "the SMs were in it is said below",
)
st.caption(TRY)
if not cap.measured:
    why_modelled()
if one_wave:
    st.caption(
        f"All {achieved.blocks:,} blocks fit in one wave of {achieved.first_wave_blocks:,} "
        f"({achieved.blocks / achieved.first_wave_blocks:.1%} of the slots): every block starts at once, "
        "so there is nothing to wait for and no tail. A grid bigger than one wave shows the tail."
    )
elif achieved.tail_blocks:
    tail, first = achieved.tail_blocks, achieved.first_wave_blocks
    reach = (
        f"{tail:,} blocks cannot reach all {num_sms} SMs, so at least {num_sms - tail} SMs get none"
        if tail < num_sms
        else f"enough for every SM, but {first - tail:,} of the {first:,} resident slots stay empty"
    )
    held = f"{achieved.tail_avg_warps:.1f}" + (f" of {theoretical_warps}" if theoretical_warps else "")
    st.caption(
        f"{achieved.blocks:,} blocks = {achieved.full_waves} full wave(s) of {first:,} and a last wave of "
        f"{tail:,} ({tail / first:.0%} full): {reach}. From that wave's first block to the end "
        f"({achieved.tail_ns:,} of {achieved.kernel_ns:,} ns) whole SMs sat idle "
        f"{achieved.tail_idle_fraction:.0%} of the time, and an SM held {held} warps on average: "
        + ("this tail is idle SMs." if tail < num_sms else "this tail is empty slots, not idle SMs.")
    )
else:
    st.caption(
        f"{achieved.blocks:,} blocks = exactly {achieved.full_waves} full wave(s): no partial tail wave."
    )
if not cap.measured and not achieved.has_tail:
    try:
        suggestion = figs.wave_suggestion(arch, SIM_MAX_THREADS)
    except ValueError:
        suggestion = None
    if suggestion is not None:
        c1, c2 = st.columns([3, 2], vertical_alignment="center")
        c1.info(
            f"To see waves and a tail on the modelled {gpu}: *Vector add* with n = {suggestion['n']:,} and "
            f"block = {suggestion['block']} is {suggestion['blocks']:,} blocks; at {suggestion['regs']} "
            f"registers/thread a wave holds {suggestion['blocks_per_wave']:,}, so it runs in "
            f"{suggestion['waves']} waves. Its last wave is {suggestion['tail_blocks']} blocks, one each for "
            f"{suggestion['tail_blocks']} of the {num_sms} SMs: the other {suggestion['idle_sms']} sit idle.",
            icon=":material/lightbulb:",
        )
        if launch.get("user_kernel"):  # the suggestion is a built-in kernel: it would replace theirs
            c2.caption(
                "The suggested launch is the built-in *Vector add*, not your kernel, so there is no button "
                "for it here: pick *Vector add* in the sidebar (**Use a built-in kernel instead**) to run "
                "it, or give your kernel a bigger grid on the Your kernel page."
            )
        else:
            c2.button(
                f"Run n={suggestion['n']:,}, block={suggestion['block']} at {suggestion['regs']} regs",
                key="sched_suggest",
                on_click=_run_suggestion,
                args=(suggestion, st.session_state.config.backend),
                use_container_width=True,
            )

if not cap.measured:  # your run, simulated; beside it the launch as recorded on the H200 (shipped)
    schedule_beside(cap)

st.subheader("One SM's warps")
show_link_notices(from_link("sm", 0, (0, num_sms - 1)))
if st.session_state.get("sm", 0) > num_sms - 1:  # a smaller modelled GPU was picked
    st.session_state["sm"] = num_sms - 1
sm = int(
    st.columns([1, 3])[0].number_input(
        "SM", 0, num_sms - 1, key="sm", help="Which SM's warps to show (kept in the link)."
    )
)
to_link("sm")
chart(figs.warp_timeline_figure(warps, sm, source), key="sched_warp_timeline")

st.subheader("Resident warps and achieved occupancy")
o1, o2, o3 = st.columns(3)
o1.metric(
    "active warps per SM (while busy)",
    f"{achieved.avg_warps_busy:.1f}",
    help="time-weighted over the time each SM held at least one warp, as Nsight's achieved occupancy",
)
o2.metric(
    "achieved occupancy" if cap.measured else "occupancy in the model",
    f"{achieved.achieved:.0%}",
    delta=f"{(achieved.achieved - achieved.theoretical) * 100:+.0f} points vs theoretical"
    if achieved.theoretical is not None
    else None,
    delta_color="off",
    help=f"active warps / {max_warps} warps per SM",
)
o3.metric(
    "theoretical occupancy",
    f"{achieved.theoretical:.0%}" if achieved.theoretical is not None else "–",
    help=f"{theoretical_warps} warps per SM from the occupancy calculator"
    if theoretical_warps is not None
    else "no register count for this build",
)
st.caption(
    f"Over the whole kernel and all {num_sms} SMs (idle ones as zero): "
    f"{achieved.avg_warps_kernel:.1f} active warps per SM ({achieved.achieved_kernel:.0%})."
)
chart(
    figs.concurrency_figure(
        achieved.timeline, theoretical_warps, num_sms=num_sms, device=achieved.device, source=source
    ),
    key="sched_concurrency",
)

st.subheader("Waves")
st.caption(
    "All the blocks fit in one wave: the chart shows where they sit."
    if one_wave
    else "Press Play: each frame is one wave of blocks taking the SMs' resident slots."
)
chart(figs.waves_animation_figure(scheduled, num_sms, source), key="sched_waves")
