"""The lessons: what each asks, which launches it runs, and how it answers from those runs.

Plain data and pure functions (no Streamlit): ``visualizer/web/pages/lessons.py`` draws them. The
order follows how CUDA is usually taught. Every answer comes from ``answers.py`` applied to the
captures of the learner's own launch; the explanations quote the numbers those functions return.
"""

from __future__ import annotations

from visualizer.analysis import lesson_answers as A
from visualizer.analysis.occupancy import LIMIT_NAMES
from visualizer.analysis.transfers import H200_HBM_GBS, H200_HOST, modelled_gpu_timing
from visualizer.figures import lessons as lfigs
from visualizer.figures.memory_flow import memory_flow_figure
from visualizer.web.lesson_types import Control, Lesson, Question, Run, of  # noqa: F401  (re-exported)

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


CPU_GPU = Lesson(
    name="cpu_gpu",
    title="CPU vs GPU: when does the kernel win?",
    intro="A GPU kernel adds two vectors with thousands of threads at once, but a and b must first be copied "
    "to the GPU and c back, every launch has a fixed cost, and numpy on one CPU core is already fast. Which "
    "wins, and what decides it?",
    controls=(Control("n", "elements n", (1000, 10_000, 100_000, 524_288), 1000),),
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": 256})},
    questions=(
        Question(
            "Which is faster for this n, from numpy arrays to a numpy array: numpy on the CPU, or the "
            "vector-add kernel on an H200 (copies included)?",
            lambda caps, v: _cpu_gpu_answer(caps, v),
            _cpu_gpu_verdict,
            kind="choice",
            choices=("numpy (CPU)", "GPU kernel"),
        ),
    ),
    charts=_cpu_gpu_charts,  # drawn from the stored answer: the numpy time is measured once per run
    takeaway="Try n = 1,000 and then n = 524,288, and compare the kernel step with the whole bar: the "
    "launch dominates small arrays, the copies big ones.",
)


# --- 2. threads, blocks, warps ------------------------------------------------------------------


def _grid_chart(caps, v, answers):
    from visualizer.figures.grid import grid_figure

    cap = caps["main"]
    return [("", grid_figure(cap.threads, cap.launch, "active", animate=False))]


THREADS = Lesson(
    name="threads",
    title="Threads, blocks and warps",
    intro="Threads come in **blocks**; the hardware runs a block's threads in **warps** of 32 lanes. A "
    "block of 100 threads still occupies 4 warps (128 lanes): 28 lanes have no thread. Threads past the "
    "end of the data (`i >= n`) exist but do nothing. Both are **idle lanes**.",
    controls=(
        Control("n", "elements n", (200, 500, 1000, 2000), 1000),
        Control("block", "threads per block", (32, 48, 64, 100, 128, 256), 128),
    ),
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": v["block"]})},
    questions=(
        Question(
            "How many warps does one block have?",
            of("main", A.warps_per_block),
            lambda a, v: (
                f"{a.facts['threads_per_block']} threads ÷ 32 lanes, rounded up = {a.value} warps "
                f"(counted from the warp column of the {a.facts['blocks']} recorded blocks)."
            ),
            unit="warps",
        ),
        Question(
            "How many lanes in the whole launch sit idle (no thread, or a thread with i ≥ n)?",
            of("main", A.idle_lanes),
            lambda a, v: (
                f"{a.facts['warps']} warps × 32 = {a.facts['lanes']:,} lanes, of which {a.facts['active']:,} "
                f"did work: {a.facts['no_thread']} lanes had no thread (partial warps) and "
                f"{a.facts['inactive_threads']} threads were past n. In the chart the threads past n are grey"
                + (
                    " and the lanes with no thread pale yellow, right of each block's last thread."
                    if a.facts["no_thread"]
                    else "; every warp is full, so no lane is without a thread."
                )
            ),
            unit="lanes",
        ),
    ),
    charts=_grid_chart,
    takeaway="Pick a block size that is a multiple of 32 and the partial warps vanish.",
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


SCHEDULER = Lesson(
    name="scheduler",
    title="The block scheduler: waves and the tail",
    intro="The GPU hands blocks to its SMs; each SM holds as many as its limits allow. A grid bigger than "
    "SMs × blocks-per-SM runs in **waves**. A last wave that is only partly full is the **tail**: it "
    "leaves resident **slots** empty, and when it has fewer blocks than the GPU has SMs, whole **SMs** "
    "sit idle. (Registers per thread: 32, modelled on the simulator.)",
    controls=(
        # 286,720 = 1,120 blocks of 256: on an H200 one full wave of 1,056 and a tail of 64 blocks for
        # 132 SMs (68 SMs idle); 400,000 = a tail of 507 blocks that still reaches every SM
        Control("n", "elements n", (100_000, 270_336, 286_720, 400_000, 524_288), 286_720),
        Control("block", "threads per block", (128, 256, 512, 1024), 256),
        Control("gpu", "GPU model", tuple(A.GPU_ARCHS), "H200"),
    ),
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": v["block"]})},
    questions=(
        Question(
            "How many waves does this grid take on the chosen GPU?",
            lambda caps, v: A.waves(caps["main"], v["gpu"], 32),
            lambda a, v: (
                f"{a.facts['blocks']:,} blocks; a wave is {a.facts['sms']} SMs × {a.facts['blocks_per_sm']} "
                f"resident blocks = {a.facts['per_wave']:,} blocks, so {a.value} wave(s); the last holds "
                f"{a.facts['tail_blocks']:,} blocks ({a.facts['tail_fill']:.0%} full). "
                + _tail_words(a.facts)
            ),
            unit="waves",
        ),
    ),
    charts=_waves_chart,
    takeaway="A T4 has 40 SMs, an H200 132: the same grid takes more waves on the smaller GPU.",
)


# --- 4. occupancy -----------------------------------------------------------------------------

LIMIT_WORDS = {
    "warps": "warp slots",
    "registers": "registers",
    "shared_memory": "shared memory",
    "blocks": "block slots",
    "barriers": "barriers",
}


def _occ_charts(caps, v, answers):
    from visualizer.figures.occupancy import limits_figure

    return [("", limits_figure(A.occupancy_of(caps["main"], v["gpu"], v["regs"])))]


OCCUPANCY = Lesson(
    name="occupancy",
    title="Occupancy: what limits it?",
    intro="**Occupancy** is resident warps ÷ the SM's maximum. Each SM has a fixed number of warp slots, "
    "block slots, registers and bytes of shared memory; the scarcest one for your launch sets how many "
    "blocks fit. Registers per thread are modelled on the simulator (it compiles no code).",
    controls=(
        Control("block", "threads per block", (32, 64, 128, 256, 768, 1024), 256),
        Control("regs", "registers per thread", (16, 32, 64, 128, 255), 32),
        Control("gpu", "GPU model", tuple(A.GPU_ARCHS), "H200"),
    ),
    runs=lambda v: {"main": Run("vector_add", {"n": 4 * v["block"], "block": v["block"]})},
    questions=(
        Question(
            "Which resource limits the blocks per SM?",
            lambda caps, v: A.occupancy_answer(caps["main"], v["gpu"], v["regs"])[1],
            lambda a, v: (
                "Blocks per SM allowed by each limit: "
                + ", ".join(f"{LIMIT_WORDS[k]} {x}" for k, x in a.facts["limits"].items() if x is not None)
                + f". The smallest wins: {a.facts['blocks_per_sm']} blocks ({a.facts['reason']})."
            ),
            kind="choice",
            choices=tuple(n for n in LIMIT_NAMES if n != "barriers"),
        ),
        Question(
            "What is the theoretical occupancy, in percent?",
            lambda caps, v: A.occupancy_answer(caps["main"], v["gpu"], v["regs"])[0],
            lambda a, v: (
                f"{a.facts['warps_per_sm']} resident warps of {a.facts['max_warps']} = {a.value} %. "
                "The red bar in the chart is the limit that bound."
            ),
            tolerance=0.1,
            unit="%",
        ),
    ),
    charts=_occ_charts,
    takeaway="Try 32-thread blocks (block slots bind) and 128 registers (registers bind).",
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


MEMORY_FLOW = Lesson(
    name="memory_flow",
    title="The memory flow: malloc → copy → kernel → copy → free",
    intro="A kernel only sees device memory: the inputs cross the host link (PCIe) to the GPU, the kernel "
    f"runs, the results cross back. On the H200 the link moved the app's arrays at {H200_HOST['h2d_gbs']:g} "
    f"GB/s, {H200_HBM_GBS / H200_HOST['h2d_gbs']:.0f}× slower than the GPU's own memory, and every copy "
    f"first waits {H200_HOST['d2h_latency_ns'] / 1e3:.0f}–{H200_HOST['h2d_latency_ns'] / 1e3:.0f} µs, so for "
    "a job that touches each byte once, the copies cost far more than the kernel.",
    controls=(Control("n", "elements n", (1000, 100_000, 524_288), 100_000),),
    runs=lambda v: {"main": Run("vector_add", {"n": v["n"], "block": 256})},
    questions=(
        Question(
            "What share of the whole flow do the two copies take, in percent?",
            of("main", A.copy_share, "H200"),
            lambda a, v: (
                f"Copies {a.facts['copies_us']:,.2f} µs against a kernel of {a.facts['kernel_us']:,.3f} µs "
                f"for {a.facts['bytes_in']:,} bytes in and {a.facts['bytes_out']:,} out ({a.source}). "
                "That is why real code keeps data on the GPU across many kernels."
            ),
            tolerance=0.1,
            unit="%",
        ),
    ),
    charts=_flow_charts,
)


# --- 6. coalescing and bank conflicts ---------------------------------------------------------

COALESCING_KERNELS = ("strided_copy", "transpose_naive", "transpose_tiled", "transpose_padded")


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


COALESCING = Lesson(
    name="coalescing",
    title="Coalescing and bank conflicts",
    intro="A warp's 32 loads are served together. Global memory moves **32-byte sectors**: 32 neighbouring "
    "floats are 4 sectors, 32 scattered ones 32. Shared memory has **32 banks**: two different words in "
    "one bank take turns (a bank conflict). The answers come from every address the run touched.",
    controls=(
        Control("kernel", "kernel", COALESCING_KERNELS, "strided_copy"),
        Control("stride", "stride (strided copy)", (1, 2, 4, 8, 16, 32), 1),
    ),
    runs=_coalescing_run,
    questions=(
        Question(
            "Sectors per warp request of the worst global load or store (4 = perfectly coalesced floats)?",
            of("main", A.worst_sectors_per_request, None),
            lambda a, v: (
                f"Line {a.facts.get('line')} ({a.facts.get('array')}): {a.value} sectors per request where "
                f"{a.facts.get('ideal_per_request', 0):.0f} would hold the same bytes. The chart shows one "
                "such request: each row a sector the warp had to move."
            ),
            tolerance=0.05,
            unit="sectors",
        ),
        Question(
            "Worst shared-memory bank conflict: how many words in one bank (1 = none, 0 = no shared memory)?",
            of("main", A.worst_bank_ways),
            lambda a, v: (
                "This kernel does not use shared memory."
                if not a.facts.get("requests")
                else f"Line {a.facts['line']} ({a.facts['array']}, {a.facts['op']}): {a.value} distinct "
                f"words in one bank, {a.facts['conflicts']:,} extra wavefronts over {a.facts['requests']:,} "
                "requests. Padding the tile by one column shifts each row into the next bank."
            ),
            unit="ways",
        ),
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


BARRIERS = Lesson(
    name="barriers",
    title="Shared memory and barriers: the race",
    intro="A block sums its slice in shared memory as a tree: each level, thread t adds slot t + stride into "
    "slot t. `cuda.syncthreads()` between levels makes every thread wait until the level is done. Take "
    "it out and a thread may read a partner's slot before the partner wrote it: a **race**.",
    controls=(
        Control("kernel", "version", ("reduction", "reduction_race"), "reduction_race"),
        Control("block", "threads per block", (32, 64, 128, 256), 64),
    ),
    runs=lambda v: {"main": Run(v["kernel"], {"n": 4 * v["block"], "block": v["block"]}, accesses=True)},
    questions=(
        Question(
            "Will the recorder find a race (two threads, one word, no barrier between them)?",
            of("main", A.any_race),
            lambda a, v: (
                f"Recorded from which thread touched which shared word in which barrier epoch: "
                f"{a.facts['blocks']} block(s) raced, with {kinds_text(a.facts['kinds'])}. The sums "
                f"{'still matched numpy on this run' if a.facts['correct'] else 'did not match numpy'}: "
                "a race is a bug even when a run happens to get lucky."
            ),
            kind="choice",
            choices=("yes", "no"),
        ),
        Question(
            "How many shared words were raced on, over all blocks?",
            of("main", A.raced_words),
            lambda a, v: f"{a.value} words in {a.facts['blocks']} block(s); the chart marks each one.",
            unit="words",
        ),
    ),
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


RACE_RUNS = Lesson(
    name="race_runs",
    title="The race, run again and again",
    intro="`reduction_race` is the tree reduction with the barrier between levels left out. On a GPU its "
    "answer depends on how the warps happen to interleave, so it can be right on one run and wrong on the "
    "next. Here the same launch, from the same inputs, runs **8 times**, each in a seeded schedule of the "
    "simulator (on its default compiled engine warps take turns between barriers in a seeded order, one "
    "warp running statements ahead of another; on fastsim lanes in lockstep with seeded stalls). Predict, "
    "then watch.",
    controls=(
        Control("block", "threads per block", (64, 128, 256), 128),
        Control("seed", "schedule seed (another 8 schedules)", (1, 2, 3, 4, 5), 1),
    ),
    runs=lambda v: {
        "main": Run(
            "reduction_race", {"n": 8 * v["block"], "block": v["block"]}, runs=8, schedule_seed=v["seed"]
        )
    },
    questions=(
        Question(
            "In the next 8 runs, will the racy reduction be right in all of them, in some, or in none?",
            of("main", A.runs_spread),
            lambda a, v: (
                f"{a.facts['verdict']} The 8 runs gave {a.facts['distinct']} different set(s) of block sums; "
                f"{a.facts['differing']} of the {a.facts['cells']} block sums changed from run to run. A race is a "
                "bug even in the runs that come out right: nothing in the code makes them right."
            ),
            kind="choice",
            choices=("all 8", "some", "none"),
        ),
        Question(
            "How many of the 8 runs give every block's sum right?",
            of("main", A.runs_right),
            lambda a, v: (
                f"{a.value} of 8, each run checked block by block against numpy; the strip shows each."
            ),
            unit="runs",
        ),
    ),
    charts=_runs_charts,
    takeaway="Run a racy kernel once and you see one answer; run it many times and you see the race.",
)


# --- 8. a stencil: the heat equation ------------------------------------------------------------


def _stencil_charts(caps, v, answers):
    cap = caps["main"]
    a = A.halo_loads_per_block(cap)
    return [("", lfigs.block_loads_figure(cap.accesses, a.facts["block"], (v["size"], v["size"])))]


STENCIL = Lesson(
    name="stencil",
    title="A stencil: one heat-equation step with a halo",
    intro="Each point of a plate becomes its temperature plus r × (its four neighbours − 4 × itself). A "
    "tile × tile block stages its cells in shared memory, plus a one-cell **halo** around the tile so the "
    "edge points can see their neighbours; then it reads only shared memory. Checked against numpy "
    "(float64) on every run.",
    controls=(
        Control("tile", "tile edge", (8, 16, 32), 16),
        Control("size", "plate size (cells per side)", (32, 48, 64), 48),
    ),
    runs=lambda v: {
        "main": Run("heat_stencil", {"ny": v["size"], "nx": v["size"], "tile": v["tile"]}, accesses=True)
    },
    questions=(
        Question(
            "How many global loads does the busiest block make (its tile plus the halo)?",
            of("main", A.halo_loads_per_block),
            lambda a, v: (
                f"Block {a.facts['block']}: {a.facts['tile_cells']} tile cells + {a.facts['halo']} halo "
                f"cells = {a.value} loads (tile² + 4 × tile for an interior block: corners are not needed). "
                f"Without the shared tile each point would load 5 values. Uninitialised shared reads: "
                f"{a.facts['uninit']}."
            ),
            unit="loads",
        ),
    ),
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


HISTOGRAM = Lesson(
    name="histogram",
    title="Atomics: a histogram and its contention",
    intro="Counting values into bins with `cuda.atomic.add` is correct however threads interleave, but "
    "atomics on one address are served one after another. With few bins or skewed data many threads "
    "queue on one bin. The fix: each block counts into **private bins in shared memory**, then adds each "
    "bin to global memory once. 4,096 values, 256 threads per block.",
    controls=(
        Control("kernel", "version", ("histogram_global", "histogram_shared"), "histogram_global"),
        Control("nbins", "bins", (1, 8, 64, 256), 64),
        # 100 % by default: every value in bin 0, a count one can reason out (at 0 % the busiest bin is
        # whichever a uniform draw happened to fill most)
        Control("hot", "% of values in bin 0", (0, 50, 100), 100),
    ),
    runs=lambda v: {
        "main": Run(
            v["kernel"], {"n": 4096, "nbins": v["nbins"], "hot": v["hot"], "block": 256}, accesses=True
        )
    },
    questions=(
        Question(
            "How many atomic updates land on the busiest bin in global memory?",
            of("main", A.busiest_bin_atomics),
            lambda a, v: (
                f"Bin {a.facts['bin']} took {a.value:,} global atomics of {a.facts['total']:,} "
                f"({a.facts['n']:,} values, {a.facts['blocks']} blocks). Global atomics: one per value, so "
                "the busiest bin queues as many as it has values: "
                + _expected_busiest(a.facts["n"], v["nbins"], v["hot"])
                + " Privatised: at most one per block."
            ),
            tolerance=0.25,  # a reasoned estimate of a random draw's busiest bin is right
            unit="atomics",
        ),
    ),
    charts=_hist_charts,
)


# --- 10. FlashAttention's tiling --------------------------------------------------------------


def _flash_answer_s(caps, v):
    return A.score_matrix_kib(caps["naive"])


def _flash_charts(caps, v, answers):
    s = A.score_matrix_kib(caps["naive"])
    t = A.flash_smem_kib(caps["flash"])
    rows = [
        (f"naive: S is N×N = {s.facts['seq_len']}² floats (global)", s.value * 1024),
        (f"flash: one block's tiles (shared), tile {t.facts['tile']}", t.value * 1024),
    ]
    return [("", lfigs.bytes_figure(rows, caps["flash"].source))]


FLASH = Lesson(
    name="flash",
    title="FlashAttention's tiling: never the N×N matrix",
    intro="Attention scores every query against every key: an N×N matrix S per head. The naive kernel "
    "writes all of S to global memory, so its memory grows with N². FlashAttention walks K and V in "
    "tiles, keeps a running max and sum per row, and never stores S: each block holds a few tiles in "
    "shared memory, whatever N is.",
    controls=(
        Control("seq_len", "sequence length N", (32, 64, 128, 256), 64),
        Control("tile", "tile", (16, 32), 16),
    ),
    runs=lambda v: {
        "naive": Run(
            "naive_attention", {"seq_len": v["seq_len"], "tile": v["tile"], "heads": 1, "head_dim": 32}
        ),
        "flash": Run(
            "flash_attention", {"seq_len": v["seq_len"], "tile": v["tile"], "heads": 1, "head_dim": 32}
        ),
    },
    questions=(
        Question(
            "How many KiB does the naive kernel's score matrix S take per head (float32)?",
            _flash_answer_s,
            lambda a, v: (
                f"N = {a.facts['seq_len']}: N² × 4 bytes = {a.value} KiB. Double N, four times the bytes."
            ),
            tolerance=0.05,
            unit="KiB",
        ),
        Question(
            "How many KiB of shared memory does one FlashAttention block hold?",
            of("flash", A.flash_smem_kib),
            lambda a, v: (
                f"{a.facts['bytes']:,} bytes for tile {a.facts['tile']}: it depends on the tile and head "
                "size, not on N. The kernel writes no S at all (its only output is O)."
            ),
            tolerance=0.05,
            unit="KiB",
        ),
    ),
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


def _cut(a: A.Answer) -> str:
    """A cut branch log in words (its efficiency is over the visits kept), '' when whole."""
    from visualizer.analysis import branches

    words = branches.cut_words(a.facts)
    return f" Careful: {words}." if words else ""


def _slowdown_words(a: A.Answer) -> str:
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


DIVERGENCE = Lesson(
    name="divergence",
    title="SIMT: when the lanes of a warp disagree",
    intro="A warp's 32 lanes run **one instruction at a time for all of them**. When a branch splits "
    "them, the warp runs one side with the other lanes switched off, then the other side: **divergence**. "
    "`branch_lanes` branches on `threadIdx.x % 2` (even and odd lanes disagree in every warp); "
    "`branch_warps` on `threadIdx.x // 32 % 2` (whole warps agree). Both do the same work per thread.",
    controls=(
        Control("reps", "multiply-adds per side", (8, 32, 128), 32),
        Control("n", "elements n", (2048, 65_536, 1_048_576), 2048),
    ),
    runs=lambda v: {
        role: Run(f"branch_{role}", {"n": v["n"], "reps": v["reps"], "block": 256}, branches=True)
        for role in ("lanes", "warps")
    },
    questions=(
        Question(
            "Branch efficiency of branch_lanes: the share of warp visits of a branch in which every lane "
            "went the same way (in %)?",
            of("lanes", A.branch_efficiency),
            lambda a, v: (
                f"{a.value:g}%: {a.facts['divergent_visits']:,} of {a.facts['visits']:,} visits diverged, one "
                f"per warp (the parity test); every loop test after it is uniform among the lanes on that "
                f"side ({a.source}). A high efficiency and still half the lanes idle: on average "
                f"{a.facts['mean_active']:.1f} of 32 lanes were on at a visit.{_cut(a)}"
            ),
            tolerance=0.02,
            unit="%",
        ),
        Question(
            "And of branch_warps (in %)?",
            of("warps", A.branch_efficiency),
            lambda a, v: (
                f"{a.value:g}%: {a.facts['divergent_visits']:,} divergent visits; the lanes of a warp always "
                f"agree, {a.facts['mean_active']:.1f} of 32 lanes on at a visit ({a.source}).{_cut(a)}"
            ),
            tolerance=0.02,
            unit="%",
        ),
        Question(
            "How many times as long as branch_warps does branch_lanes take?",
            lambda caps, v: A.divergence_slowdown(caps["lanes"], caps["warps"]),
            lambda a, v: _slowdown_words(a),
            tolerance=0.25,
            unit="×",
        ),
    ),
    charts=_divergence_charts,
    takeaway="Divergence is decided per warp: branch on something that is the same for 32 neighbouring "
    "threads (a warp index, a tile) and no warp runs both sides.",
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


AIRFLOW = Lesson(
    name="airflow",
    title="Airflow over a wing: the lattice-Boltzmann step, AoS vs SoA",
    intro="Air past a wing (or a cylinder) as a **lattice Boltzmann** (D2Q9) simulation: each cell holds nine "
    "numbers, the fluid moving in each lattice direction. One step, one thread per cell: *stream* (pull each "
    "direction's value from the neighbour it comes from; bounce back off the obstacle) then *collide* "
    "(relax toward equilibrium). Two kernels do the same arithmetic on the same numbers stored two ways: "
    "`lbm_aos` keeps a cell's nine values together (`f[y, x, q]`), `lbm_soa` keeps one plane per direction "
    "(`f[q, y, x]`). A warp is 32 neighbouring cells along x. Both are checked against a numpy step on every "
    "run; below, the same kernel runs step after step and the flow is drawn.",
    controls=(Control("obstacle", "obstacle", ("wing", "cylinder"), "wing"),),
    runs=_airflow_runs,
    questions=(
        Question(
            "Array of structures: sectors per warp request of the worst global load (4 = coalesced)?",
            of("aos", A.worst_sectors_per_request, "load"),
            _airflow_explain,
            tolerance=0.1,
            unit="sectors",
        ),
        Question(
            "Structure of arrays: sectors per warp request of the worst global load?",
            of("soa", A.worst_sectors_per_request, "load"),
            lambda a, v: (
                _airflow_explain(a, v) + " A pull from the neighbour one cell left or right is "
                "shifted by one float, so it may straddle one more sector than an aligned load."
            ),
            tolerance=0.1,
            unit="sectors",
        ),
    ),
    charts=_airflow_charts,
    takeaway="Same numbers, same arithmetic: the layout alone decides how many sectors each warp moves. "
    "On a GPU, whose LBM step is bound by memory bandwidth, that is the step's speed (Compare: lbm_layout).",
    extra={"animation": "web.flow"},
)


LESSONS: tuple[Lesson, ...] = (
    CPU_GPU, THREADS, DIVERGENCE, SCHEDULER, OCCUPANCY, MEMORY_FLOW, COALESCING, BARRIERS, RACE_RUNS, STENCIL,
    HISTOGRAM, FLASH, AIRFLOW,
)  # fmt: skip
# the PMPP path's lessons (web/lessons_pmpp.py)
from visualizer.web.lessons_pmpp import PMPP_LESSONS  # noqa: E402

LESSONS += PMPP_LESSONS
BY_NAME = {lesson.name: lesson for lesson in LESSONS}


def get(name: str) -> Lesson:
    return BY_NAME.get(name, LESSONS[0])
