"""The lessons: what each asks, which launches it runs, and how it answers from those runs.

Their words live in ``lessons.toml`` (``lesson_file.py`` joins them to the code here); plain data and
pure functions (no Streamlit): ``visualizer/web/pages/lessons.py`` draws them. The
order follows how CUDA is usually taught. Every answer comes from ``answers.py`` applied to the
captures of the learner's own launch; the explanations quote the numbers those functions return.
"""

from __future__ import annotations

from pathlib import Path

from visualizer.analysis import lesson_answers as A
from visualizer.analysis.occupancy import LIMIT_NAMES
from visualizer.analysis.transfers import H200_HBM_GBS, H200_HOST, modelled_gpu_timing
from visualizer.figures import lessons as lfigs
from visualizer.figures.memory_flow import memory_flow_figure
from visualizer.web.lesson_file import Ask, LessonFile
from visualizer.web.lesson_types import Control, Lesson, Question, Run, of  # noqa: F401  (re-exported)

WORDS = LessonFile(Path(__file__).with_name("lessons.toml"))  # titles, intros, questions, templates

# --- 1. CPU vs GPU ----------------------------------------------------------------------------


def _cpu_gpu_answer(caps, v):
    cap = caps["main"]
    return A.faster_side(cap, A.numpy_time_us(cap), "H200")


def _cpu_gpu_charts(caps, v, answers):
    answer = answers[0]
    f = answer.facts
    rows = [
        ("numpy on this CPU", f["numpy_us"], "measured: numpy.add on this machine, best of 7"),
        (
            "GPU: the kernel step alone",
            f["kernel_us"],
            answer.source.split(",")[0].split(":")[0] + ": launch and the add, data already on the GPU",
        ),
        ("GPU: allocate, copy in, kernel, copy back", f["gpu_us"], answer.source),
    ]
    return [("", lfigs.time_bars_figure(rows, f"c = a + b, n = {f['n']:,}: CPU vs GPU"))]


def _cpu_gpu_verdict(a, v) -> str:
    f = a.facts
    head = (
        f"numpy took {f['numpy_us']:,.2f} µs here; the GPU {f['gpu_us']:,.2f} µs from numpy arrays to numpy "
        f"arrays ({a.source}), of which the kernel step (launch and the add) {f['kernel_us']:,.2f} µs. "
    )
    if f["gpu_us"] <= f["numpy_us"]:
        return head + "The GPU wins even with its copies: the data is big enough for its bandwidth to matter."
    if f["kernel_us"] < f["numpy_us"]:
        return head + (
            "The kernel alone beats numpy, but copying a and b in and c back over the host link costs more "
            "than the add itself: a job that touches each byte once pays off on a GPU only when its data "
            "already lives there (many kernels between copies)."
        )
    return (
        head
        + "Even the kernel step alone (mostly its launch) costs more than numpy's add: small arrays lose."
    )


CPU_GPU = WORDS.lesson(
    "cpu_gpu",
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": 256})},
    answers=(Ask(_cpu_gpu_answer, explain=_cpu_gpu_verdict),),
    charts=_cpu_gpu_charts,  # drawn from the stored answer: the numpy time is measured once per run
)


# --- 2. threads, blocks, warps ------------------------------------------------------------------


def _grid_chart(caps, v, answers):
    from visualizer.figures.grid import grid_figure

    cap = caps["main"]
    return [("", grid_figure(cap.threads, cap.launch, "active", animate=False))]


def _idle_words(a, v) -> str:
    f = a.facts
    return (
        f"{f['warps']} warps × 32 = {f['lanes']:,} lanes, of which {f['active']:,} did work: {f['no_thread']} "
        f"lanes had no thread (partial warps) and {f['inactive_threads']} threads were past n. In the chart "
        "the threads past n are grey"
        + (
            " and the lanes with no thread pale yellow, right of each block's last thread."
            if f["no_thread"]
            else "; every warp is full, so no lane is without a thread."
        )
    )


THREADS = WORDS.lesson(
    "threads",
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": v["block"]})},
    answers=(of("main", A.warps_per_block), Ask(of("main", A.idle_lanes), explain=_idle_words)),
    charts=_grid_chart,
)


# --- 3. the block scheduler -------------------------------------------------------------------


def _waves_chart(caps, v, answers):
    from visualizer.analysis import schedule
    from visualizer.figures.scheduling import waves_animation_figure

    cap = caps["main"]
    blocks = schedule.modelled_schedule(cap.launch, A.GPU_ARCHS[v["gpu"]], 32)
    blocks = schedule.assign_waves(blocks, int(blocks.attrs["blocks_per_sm"]))
    return [("", waves_animation_figure(blocks, int(blocks.attrs["num_sms"])))]


def _tail_words(f: dict) -> str:
    """What the last wave leaves empty: whole SMs, or only slots (the chart's last frame shows which)."""
    if f["tail_blocks"] == f["per_wave"]:
        return "Every wave is full: no tail, no empty slot."
    light = " Play the chart: in the last frame the light cells are slots an earlier wave used that are empty now."
    if f["idle_sms"]:
        return (
            f"The scheduler gives each SM one block before any gets a second, so those {f['tail_blocks']:,} "
            f"blocks run on {f['tail_sms']} SMs and the other {f['idle_sms']} of {f['sms']} SMs sit idle"
            + (": the tail." if f["waves"] > 1 else ".")
            + light
        )
    return (
        f"That is enough for every one of the {f['sms']} SMs, so no SM is idle, but {f['empty_slots']:,} of "
        f"{f['per_wave']:,} resident slots stay empty: each SM runs fewer blocks than it could, which hides "
        "less latency." + light
    )


SCHEDULER = WORDS.lesson(
    "scheduler",
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": v["block"]})},
    answers=(
        Ask(
            lambda caps, v: A.waves(caps["main"], v["gpu"], 32),
            more={"tail": lambda a, v: _tail_words(a.facts)},
        ),
    ),
    charts=_waves_chart,
    options={"gpu": tuple(A.GPU_ARCHS)},
)


# --- 4. occupancy -----------------------------------------------------------------------------

LIMIT_WORDS = {
    "warps": "warp slots",
    "registers": "registers",
    "shared_memory": "shared memory",
    "blocks": "block slots",
    "barriers": "barriers",
}


def _limits_words(a, v) -> str:
    allowed = ", ".join(f"{LIMIT_WORDS[k]} {x}" for k, x in a.facts["limits"].items() if x is not None)
    return (
        f"Blocks per SM allowed by each limit: {allowed}. The smallest wins: {a.facts['blocks_per_sm']} "
        f"blocks ({a.facts['reason']})."
    )


def _occ_charts(caps, v, answers):
    from visualizer.figures.occupancy import limits_figure

    return [("", limits_figure(A.occupancy_of(caps["main"], v["gpu"], v["regs"])))]


OCCUPANCY = WORDS.lesson(
    "occupancy",
    runs=lambda v: {"main": Run("vector_add", {"n": 4 * v["block"], "block": v["block"]})},
    answers=(
        Ask(
            lambda caps, v: A.occupancy_answer(caps["main"], v["gpu"], v["regs"])[1],
            explain=_limits_words,
            choices=tuple(n for n in LIMIT_NAMES if n != "barriers"),
        ),
        lambda caps, v: A.occupancy_answer(caps["main"], v["gpu"], v["regs"])[0],
    ),
    charts=_occ_charts,
    options={"gpu": tuple(A.GPU_ARCHS)},
)


# --- 5. the memory flow -----------------------------------------------------------------------


def _flow_charts(caps, v, answers):
    cap = caps["main"]
    bytes_in, bytes_out = A.data_bytes(cap)
    if cap.measured:
        fig = memory_flow_figure(cap.timing, cap.launch, bytes_in, bytes_out, view="timeline")
    else:
        fig = memory_flow_figure(
            modelled_gpu_timing(bytes_in, bytes_out, "H200", len(cap.inputs), len(cap.outputs)), cap.launch,
            bytes_in, bytes_out,
            view="timeline", modelled_gpu="H200",
        )  # fmt: skip
    return [("", fig)]


MEMORY_FLOW = WORDS.lesson(
    "memory_flow",
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": 256})},
    answers=(of("main", A.copy_share, "H200"),),
    charts=_flow_charts,
    intro_facts={
        "h2d_gbs": H200_HOST["h2d_gbs"],
        "hbm_ratio": H200_HBM_GBS / H200_HOST["h2d_gbs"],
        "d2h_latency_us": H200_HOST["d2h_latency_ns"] / 1e3,
        "h2d_latency_us": H200_HOST["h2d_latency_ns"] / 1e3,
    },
)


# --- 6. coalescing and bank conflicts ---------------------------------------------------------


def _coalescing_run(v):
    if v["kernel"] == "strided_copy":
        return {"main": Run("strided_copy", {"n": 1024, "stride": v["stride"], "block": 128}, accesses=True)}
    return {"main": Run(v["kernel"], {"rows": 64, "cols": 64, "tile": 32}, accesses=True)}


def _coalescing_charts(caps, v, answers):
    from visualizer.analysis.memory import request_accesses, worst_request
    from visualizer.figures.memory import bank_figure, sector_figure

    cap = caps["main"]
    out = []
    glob = cap.requests[cap.requests["space"].astype(str) == "global"]
    worst = glob.sort_values("sectors").iloc[-1]
    out.append(("The worst global request", sector_figure(request_accesses(cap.accesses, worst), worst)))
    shared = cap.requests[cap.requests["space"].astype(str) == "shared"]
    if len(shared):
        w = worst_request(shared)
        out.append(("The worst shared-memory request", bank_figure(request_accesses(cap.accesses, w), w)))
    return out


def _worst_global_words(a, v) -> str:
    return (
        f"Line {a.facts.get('line')} ({a.facts.get('array')}): {a.value} sectors per request where "
        f"{a.facts.get('ideal_per_request', 0):.0f} would hold the same bytes. The chart shows one "
        "such request: each row a sector the warp had to move."
    )


def _bank_words(a, v) -> str:
    f = a.facts
    if not f.get("requests"):
        return "This kernel does not use shared memory."
    return (
        f"Line {f['line']} ({f['array']}, {f['op']}): {a.value} distinct words in one bank, "
        f"{f['conflicts']:,} extra wavefronts over {f['requests']:,} requests. Padding the tile by one column "
        "shifts each row into the next bank."
    )


COALESCING = WORDS.lesson(
    "coalescing",
    runs=_coalescing_run,
    answers=(
        Ask(of("main", A.worst_sectors_per_request, None), explain=_worst_global_words),
        Ask(of("main", A.worst_bank_ways), explain=_bank_words),
    ),
    charts=_coalescing_charts,
)


# --- 7. shared memory and barriers ------------------------------------------------------------

HAZARD_WORDS = {"RAW": "read-after-write", "WAR": "write-after-read", "WAW": "write-after-write"}


def kinds_text(kinds: dict) -> str:
    """Hazard counts by kind in words: {'RAW': 124} -> '124 read-after-write hazards (RAW)'; 'no hazards'."""
    parts = [f"{int(n):,} {HAZARD_WORDS[k]} hazard{'s' if n != 1 else ''} ({k})" if k in HAZARD_WORDS
             else f"{int(n):,} {k}" for k, n in kinds.items() if n]  # fmt: skip
    return ", ".join(parts) if parts else "no hazards"


def _barrier_charts(caps, v, answers):
    from visualizer.figures.memory import raced_words_figure, requests_heatmap

    cap = caps["main"]
    if len(cap.hazards) and (cap.hazards["kind"] != "UNINIT").any():
        return [("", raced_words_figure(cap.hazards))]
    return [("", requests_heatmap(cap.requests, "shared"))]


def _race_words(a, v) -> str:
    matched = "still matched numpy on this run" if a.facts["correct"] else "did not match numpy"
    return (
        f"Recorded from which thread touched which shared word in which barrier epoch: {a.facts['blocks']} "
        f"block(s) raced, with {kinds_text(a.facts['kinds'])}. The sums {matched}: a race is a bug even when "
        "a run happens to get lucky."
    )


BARRIERS = WORDS.lesson(
    "barriers",
    runs=lambda v: {"main": Run(v["kernel"], {"n": 4 * v["block"], "block": v["block"]}, accesses=True)},
    answers=(Ask(of("main", A.any_race), explain=_race_words), of("main", A.raced_words)),
    charts=_barrier_charts,
)


# --- 7b. the race, run again and again ---------------------------------------------------------


def _runs_charts(caps, v, answers):
    from visualizer.analysis import races
    from visualizer.figures.races import cells_heatmap, runs_strip

    cap = caps["main"]
    info = cap.launch["runs"]
    table = races.runs_table(cap.runs, info["correct"], info.get("schedules"), cap.source)
    return [
        ("", runs_strip(table, "partial")),
        ("", cells_heatmap(races.cells(cap.runs, "partial", cap.source))),
    ]


RACE_RUNS = WORDS.lesson(
    "race_runs",
    runs=lambda v: {
        "main": Run(
            "reduction_race", {"n": 8 * v["block"], "block": v["block"]}, runs=8, schedule_seed=v["seed"]
        )
    },
    answers=(of("main", A.runs_spread), of("main", A.runs_right)),
    charts=_runs_charts,
)


# --- 8. a stencil: the heat equation ------------------------------------------------------------


def _stencil_charts(caps, v, answers):
    cap = caps["main"]
    a = A.halo_loads_per_block(cap)
    return [("", lfigs.block_loads_figure(cap.accesses, a.facts["block"], (v["size"], v["size"])))]


STENCIL = WORDS.lesson(
    "stencil",
    runs=lambda v: {
        "main": Run("heat_stencil", {"ny": v["size"], "nx": v["size"], "tile": v["tile"]}, accesses=True)
    },
    answers=(of("main", A.halo_loads_per_block),),
    charts=_stencil_charts,
)


# --- 9. atomics: a histogram ------------------------------------------------------------------


def _hist_charts(caps, v, answers):
    cap = caps["main"]
    return [("", lfigs.atomics_figure(A.atomics_per_bin(cap), v["nbins"], cap.launch["kernel"]))]


def _expected_busiest(n: int, nbins: int, hot: int) -> str:
    """How many values bin 0 should get (hot % of them, plus its share of the uniform rest), in words."""
    expect = n * hot / 100 + n * (100 - hot) / 100 / nbins
    if hot == 100 or nbins == 1:
        return f"every one of the {n:,} values falls in bin 0."
    share = f"{hot} % of {n:,} plus 1/{nbins} of the rest" if hot else f"{n:,} ÷ {nbins} bins"
    return (
        f"bin 0 expects {share} ≈ {expect:,.0f}; the values are drawn at random, so the busiest bin "
        "lands near that, not on it (answers within 25 % count)."
    )


def _busiest_bin_words(a, v) -> str:
    f = a.facts
    return (
        f"Bin {f['bin']} took {a.value:,} global atomics of {f['total']:,} ({f['n']:,} values, {f['blocks']} "
        "blocks). Global atomics: one per value, so the busiest bin queues as many as it has values: "
        + _expected_busiest(f["n"], v["nbins"], v["hot"])
        + " Privatised: at most one per block."
    )


HISTOGRAM = WORDS.lesson(
    "histogram",
    runs=lambda v: {
        "main": Run(
            v["kernel"], {"n": 4096, "nbins": v["nbins"], "hot": v["hot"], "block": 256}, accesses=True
        )
    },
    answers=(Ask(of("main", A.busiest_bin_atomics), explain=_busiest_bin_words),),
    charts=_hist_charts,
)


# --- 10. FlashAttention's tiling --------------------------------------------------------------


def _flash_charts(caps, v, answers):
    s = A.score_matrix_kib(caps["naive"])
    t = A.flash_smem_kib(caps["flash"])
    rows = [
        (f"naive: S is N×N = {s.facts['seq_len']}² floats (global)", s.value * 1024),
        (f"flash: one block's tiles (shared), tile {t.facts['tile']}", t.value * 1024),
    ]
    return [("", lfigs.bytes_figure(rows, caps["flash"].source))]


FLASH = WORDS.lesson(
    "flash",
    runs=lambda v: {
        role: Run(
            f"{role}_attention", {"seq_len": v["seq_len"], "tile": v["tile"], "heads": 1, "head_dim": 32}
        )
        for role in ("naive", "flash")
    },
    answers=(of("naive", A.score_matrix_kib), of("flash", A.flash_smem_kib)),
    charts=_flash_charts,
)


# --- 2b. SIMT: when the lanes of a warp disagree ------------------------------------------------


def _divergence_charts(caps, v, answers):
    from visualizer.analysis import branches
    from visualizer.figures import branches as bfigs

    out = []
    for role in ("lanes", "warps"):
        cap = caps[role]
        sites = branches.sites_table(cap.launch["lens"]["branches"]["sites"])
        frames = bfigs.lane_strip_frames(cap.branches, sites, 0, 0)
        out.append(("", bfigs.lane_strip_figure(frames, kernel=f"branch_{role}")))
    return out


def _cut(a: A.Answer, v: dict) -> str:
    """A cut branch log in words (its efficiency is over the visits kept), '' when whole."""
    from visualizer.analysis import branches

    words = branches.cut_words(a.facts)
    return f" Careful: {words}." if words else ""


def _slowdown_words(a: A.Answer, v: dict) -> str:
    f = a.facts
    if "lanes_us" in f:
        return (
            f"branch_lanes took {f['lanes_us']:,.1f} µs and branch_warps {f['warps_us']:,.1f} µs ({a.source}): "
            f"{a.value:g}× for the same arithmetic."
        )
    return (
        f"On the simulator there is no GPU time; counting the branch bodies each warp runs, branch_lanes "
        f"runs {f['lanes_slots']:,} and branch_warps {f['warps_slots']:,}: {a.value:g}× ({a.source}). On an "
        "H200 (docs/benchmarks.md) the measured ratio was lower than 2: the loop's own instructions are not "
        "all that takes time."
    )


DIVERGENCE = WORDS.lesson(
    "divergence",
    runs=lambda v: {
        role: Run(f"branch_{role}", {"n": v["n"], "reps": v["reps"], "block": 256}, branches=True)
        for role in ("lanes", "warps")
    },
    answers=(
        Ask(of("lanes", A.branch_efficiency), more={"cut": _cut}),
        Ask(of("warps", A.branch_efficiency), more={"cut": _cut}),
        Ask(lambda caps, v: A.divergence_slowdown(caps["lanes"], caps["warps"]), explain=_slowdown_words),
    ),
    charts=_divergence_charts,
)


# --- 13. airflow over a wing: a lattice-Boltzmann step, AoS vs SoA ---------------------------------

AIRFLOW_SIZE = {"nx": 64, "ny": 16}  # small: every access of both kernels is recorded (the access lens)


def _airflow_runs(v):
    p = {**AIRFLOW_SIZE, "shape": 1 if v["obstacle"] == "wing" else 0}
    return {"aos": Run("lbm_aos", p, accesses=True), "soa": Run("lbm_soa", p, accesses=True)}


def _airflow_charts(caps, v, answers):
    from visualizer.analysis.memory import request_accesses
    from visualizer.figures.memory import sector_figure

    out = []
    for role, words in (("aos", "array of structures f[y, x, q]"), ("soa", "structure of arrays f[q, y, x]")):
        cap = caps[role]
        glob = cap.requests[(cap.requests["space"].astype(str) == "global")
                            & (cap.requests["array"].astype(str) == "f_in")]  # fmt: skip
        worst = glob.sort_values("sectors").iloc[-1]
        out.append((f"Streaming, {words}: the worst load of f_in",
                    sector_figure(request_accesses(cap.accesses, worst), worst)))  # fmt: skip
    return out


def _airflow_explain(a, v) -> str:
    return (
        f"Line {a.facts.get('line')} ({a.facts.get('array')}): {a.value} sectors per warp request, where "
        f"{a.facts.get('ideal_per_request', 0):.0f} would hold the same bytes."
    )


def _airflow_soa_explain(a, v) -> str:
    return _airflow_explain(a, v) + (
        " A pull from the neighbour one cell left or right is shifted by one float, so it may straddle one "
        "more sector than an aligned load."
    )


AIRFLOW = WORDS.lesson(
    "airflow",
    runs=_airflow_runs,
    answers=(
        Ask(of("aos", A.worst_sectors_per_request, "load"), explain=_airflow_explain),
        Ask(of("soa", A.worst_sectors_per_request, "load"), explain=_airflow_soa_explain),
    ),
    charts=_airflow_charts,
    extra={"animation": "web.flow"},
)


LESSONS: tuple[Lesson, ...] = (
    CPU_GPU, THREADS, DIVERGENCE, SCHEDULER, OCCUPANCY, MEMORY_FLOW, COALESCING, BARRIERS, RACE_RUNS, STENCIL,
    HISTOGRAM, FLASH, AIRFLOW,
)  # fmt: skip
# the PMPP path's lessons (web/lessons_pmpp.py)
from visualizer.web.lessons_pmpp import PMPP_LESSONS  # noqa: E402

LESSONS += PMPP_LESSONS
WORDS.check_all_built()
BY_NAME = {lesson.name: lesson for lesson in LESSONS}


def get(name: str) -> Lesson:
    return BY_NAME.get(name, LESSONS[0])
