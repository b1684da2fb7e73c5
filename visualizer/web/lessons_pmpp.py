"""The PMPP path's lessons: the chapters of *Programming Massively Parallel Processors* that had none.

Same shape as ``lessons.py`` (predict, run, compare; every answer from ``analysis/pmpp_answers.py`` or
``lesson_answers.py`` applied to the learner's own launch). Memory questions read the simulator's
recorded accesses; work and step questions read the SIMT lens, which records on a GPU too.
"""

from __future__ import annotations

from visualizer.analysis import lesson_answers as A
from visualizer.analysis import pmpp_answers as P
from visualizer.figures import lessons as lfigs
from visualizer.web.lesson_types import Control, Lesson, Question, Run, beside, of

# --- ch. 6: thread coarsening ------------------------------------------------------------------


def _coarse_runs(v):
    p = {"n": v["n"], "block": v["block"]}
    return {"plain": Run("vector_add", p, accesses=True), "coarse": Run("vector_add_x4", p, accesses=True)}


def _coarse_charts(caps, v, answers):
    rows = [
        (k, P.launched_threads(caps[r]).value)
        for k, r in (("vector_add", "plain"), ("vector_add_x4", "coarse"))
    ]
    reqs = [(k, P.load_requests(caps[r], ("a", "b")).value) for k, r in (("vector_add", "plain"), ("vector_add_x4", "coarse"))]  # fmt: skip
    src = caps["plain"].source
    return [
        ("", lfigs.pair_bars_figure(rows, f"Threads launched for n = {v['n']:,}", "threads", src)),
        ("", lfigs.pair_bars_figure(reqs, "Warp load requests of a and b", "requests", P.RECORDED)),
    ]


COARSENING = Lesson(
    name="coarsening",
    title="Thread coarsening: fewer threads, the same memory traffic",
    intro="`vector_add` gives each thread one element; `vector_add_x4` gives each thread **four**, a whole "
    "grid apart, so the launch has a quarter of the threads and blocks. Each thread then has four "
    "independent loads in flight. What shrinks, and what does not?",
    controls=(
        Control("n", "elements n", (2048, 4096, 8192), 4096),
        Control("block", "threads per block", (64, 128, 256), 128),
    ),
    runs=_coarse_runs,
    questions=(
        Question(
            "How many threads does vector_add_x4 launch?",
            of("coarse", P.launched_threads),
            lambda a, v: (
                f"{a.value:,} threads in {a.facts['blocks']} blocks (the grid is n ÷ (4 × block), rounded up); "
                f"vector_add launched one thread per element."
            ),
            unit="threads",
        ),
        Question(
            "How many warp-wide load requests of a and b does vector_add_x4 make, in all?",
            beside("coarse", "plain", P.load_requests, ("a", "b")),
            lambda a, v: (
                f"{a.value:,} requests moving {a.facts['sectors']:,} sectors; vector_add made {a.facts['plain']:,}. "
                "The same bytes must cross, each warp request still coalesced: coarsening cuts threads, blocks "
                "and their start-up cost, not memory traffic."
            ),
            unit="requests",
        ),
    ),
    charts=_coarse_charts,
    takeaway="Coarsen when the work per thread is too small to pay for a thread; keep every access "
    "coalesced (the four elements are a grid apart, not four neighbours).",
)


# --- ch. 6: AoS vs SoA ---------------------------------------------------------------------------


def _layout_charts(caps, v, answers):
    rows = [("particles_aos (p[i, 0])", answers[0].value), ("particles_soa (x[i])", answers[1].value)]
    return [
        ("", lfigs.pair_bars_figure(rows, "Sectors per warp load request", "32-byte sectors", P.RECORDED))
    ]


LAYOUT = Lesson(
    name="aos_soa",
    title="Array of structures vs structure of arrays",
    intro="A particle has x, y, vx, vy. **AoS** keeps them together, one row of four floats per particle; "
    "**SoA** keeps four arrays. Both kernels move every particle by its velocity. A warp's 32 lanes read one "
    "field of 32 neighbouring particles at once: how many 32-byte sectors must each load fetch?",
    controls=(
        Control("n", "particles n", (256, 1024, 4096), 1024),
        Control("block", "threads per block", (64, 128, 256), 128),
    ),
    runs=lambda v: {
        "aos": Run("particles_aos", {"n": v["n"], "block": v["block"]}, accesses=True),
        "soa": Run("particles_soa", {"n": v["n"], "block": v["block"]}, accesses=True),
    },
    questions=(
        Question(
            "AoS: sectors per warp load request of the particle array p (4 = perfectly coalesced floats)?",
            of("aos", P.sectors_per_request, "p"),
            lambda a, v: (
                f"{a.value:g} sectors per request over {a.facts['requests']:,} requests: lanes read words 16 "
                f"bytes apart, so a warp spans 512 bytes for the 128 it uses ({a.facts['moved']:,} bytes "
                f"moved for {a.facts['bytes']:,} used)."
            ),
            tolerance=0.05,
            unit="sectors",
        ),
        Question(
            "SoA: sectors per warp load request of x?",
            of("soa", P.sectors_per_request, "x"),
            lambda a, v: (
                f"{a.value:g} sectors per request: 32 neighbouring floats are 128 bytes, 4 sectors, all used "
                f"({a.facts['moved']:,} bytes moved for {a.facts['bytes']:,} used)."
            ),
            tolerance=0.05,
            unit="sectors",
        ),
    ),
    charts=_layout_charts,
    takeaway="Lay data out by how a warp reads it: the field the 32 lanes read together should be contiguous.",
)


# --- ch. 7: convolution with halo tiles ---------------------------------------------------------


def _conv_params(v):
    return {"ny": v["size"], "nx": v["size"], "radius": v["radius"], "tile": v["tile"]}


def _conv_ratio(caps, v):
    naive, tiled = P.global_loads(caps["naive"], "x"), P.global_loads(caps["tiled"], "x")
    return A.Answer(
        round(naive.value / tiled.value, 2),
        {"naive": naive.value, "tiled": tiled.value, "blocks": tiled.facts["blocks"]},
        P.RECORDED,
    )


def _conv_charts(caps, v, answers):
    naive, tiled = P.global_loads(caps["naive"], "x"), P.global_loads(caps["tiled"], "x")
    rows = [("conv2d_naive", naive.value), ("conv2d_tiled", tiled.value)]
    out = [
        ("", lfigs.pair_bars_figure(rows, "Global loads of the image x, whole launch", "loads", P.RECORDED))
    ]
    block = tiled.facts["busiest_block"]
    fig = lfigs.block_loads_figure(caps["tiled"].accesses, block, (v["size"], v["size"]), array="x")
    return out + [("", fig)]


CONVOLUTION = Lesson(
    name="convolution",
    title="Convolution: input tiles with a halo",
    intro="Each output pixel is a weighted sum of its (2R+1)² neighbours. `conv2d_naive` reads all of them "
    "from global memory, so neighbouring threads read the same pixels again and again. `conv2d_tiled` "
    "makes each block an **input tile**: tile × tile threads each stage one pixel (the output tile plus an "
    "R-pixel **halo**, zero past the image's edge) in shared memory, then the inner (tile − 2R)² threads "
    "compute from it. The mask is read-only and the same for every thread: on a GPU it belongs in "
    "**constant memory**, where a warp reading one weight gets it in one broadcast.",
    controls=(
        Control("radius", "mask radius R", (1, 2), 1),
        Control("tile", "input tile edge (threads per block edge)", (8, 16), 16),
        Control("size", "image size (pixels per side)", (32, 48), 32),
    ),
    runs=lambda v: {
        "naive": Run("conv2d_naive", _conv_params(v), accesses=True),
        "tiled": Run("conv2d_tiled", _conv_params(v), accesses=True),
    },
    questions=(
        Question(
            "conv2d_tiled: how many pixels of x does the busiest block load from global memory?",
            of("tiled", P.busiest_block_loads, "x"),
            lambda a, v: (
                f"Block {a.facts['busiest_block']}: {a.value} loads, one per thread of its "
                f"{v['tile']} × {v['tile']} input tile; it computes {(v['tile'] - 2 * v['radius']) ** 2} outputs "
                "(edge blocks load fewer: their ghost cells are zeros, not loads)."
            ),
            unit="loads",
        ),
        Question(
            "How many times as many global loads of x does conv2d_naive make as conv2d_tiled?",
            _conv_ratio,
            lambda a, v: (
                f"{a.facts['naive']:,} loads against {a.facts['tiled']:,}: {a.value:g}×. Naive reads up to "
                f"(2R+1)² = {(2 * v['radius'] + 1) ** 2} pixels per output; tiled reads each pixel once per "
                "block, plus the halo it shares with its neighbours."
            ),
            tolerance=0.25,
            unit="×",
        ),
    ),
    charts=_conv_charts,
    takeaway="The bigger the tile, the smaller the halo's share of what a block loads: tile 16 with R = 1 "
    "loads 256 pixels for 196 outputs, tile 8 loads 64 for 36.",
)


# --- ch. 9: privatised vs global histogram at contention -----------------------------------------


def _total_atomics(cap):
    from visualizer.analysis import lesson_answers

    per_bin = lesson_answers.atomics_per_bin(cap)
    return A.Answer(
        int(per_bin.sum()),
        {"busiest": int(per_bin.max()) if len(per_bin) else 0, "blocks": int(cap.launch["blocks"])},
        P.RECORDED,
    )


def _contention_charts(caps, v, answers):
    rows = [("histogram_global", answers[0].value), ("histogram_shared", answers[1].value)]
    return [("", lfigs.pair_bars_figure(rows, "Global atomic updates, whole launch", "atomics", P.RECORDED))]


HISTOGRAM_CONTENTION = Lesson(
    name="histogram_contention",
    title="Histogram at contention: privatised vs global bins",
    intro="When every value falls in a few bins, global atomics on those bins are served one after another. "
    "**Privatisation** gives each block its own bins in shared memory: the block's threads contend only "
    "with each other, and each block adds its non-zero bins to global memory once. Both kernels run on "
    "the same 4,096 values, 256 threads per block.",
    controls=(
        Control("nbins", "bins", (8, 64, 256), 64),
        Control("hot", "% of values in bin 0", (0, 50, 100), 100),
    ),
    runs=lambda v: {
        k: Run(
            f"histogram_{k}", {"n": 4096, "nbins": v["nbins"], "hot": v["hot"], "block": 256}, accesses=True
        )
        for k in ("global", "shared")
    },
    questions=(
        Question(
            "histogram_global: how many global atomic updates in all?",
            of("global", _total_atomics),
            lambda a, v: (
                f"{a.value:,}: one per value; the busiest bin queued {a.facts['busiest']:,} of them."
            ),
            unit="atomics",
        ),
        Question(
            "histogram_shared: how many global atomic updates in all?",
            of("shared", _total_atomics),
            lambda a, v: (
                f"{a.value:,}: at most one per non-zero bin per block ({a.facts['blocks']} blocks × up to "
                f"{v['nbins']} bins); the busiest global bin got {a.facts['busiest']} (one per block). The "
                "contention moved into each block's shared memory, where atomics are far cheaper."
            ),
            unit="atomics",
        ),
    ),
    charts=_contention_charts,
    takeaway="At 100 % in one bin, global atomics queue 4,096 deep on one address; privatised, 16 deep.",
)


# --- ch. 10: reduction trees -----------------------------------------------------------------------


def _reduce_params(v):
    return {"n": 4 * v["block"], "block": v["block"]}


def _trees_charts(caps, v, answers):
    rows = [("reduce_divergent", answers[0].value), ("reduce_convergent", answers[1].value)]
    return [("", lfigs.pair_bars_figure(rows, "Block 0: warp visits of the add with some lanes off",
                                        "divergent visits", answers[0].source))]  # fmt: skip


def _div_words(a, v, kernel):
    f = a.facts
    return (
        f"{kernel}: {a.value} of the {f['visits']} warp visits of the add in block 0 ran with some lanes off; "
        f"{f['idle_lanes']:,} idle lane-slots in all."
    )


REDUCTION_TREES = Lesson(
    name="reduction_trees",
    title="Reduction: a divergent tree vs a divergence-free tree",
    intro="Both kernels sum each block's slice in shared memory in log2(block) levels, with the same "
    "additions. `reduce_divergent` lets every **2s-th** thread add at stride s: the adding threads are "
    "scattered over every warp. `reduce_convergent` lets the **first s** threads add the slot s away: they "
    "are packed into the first warps, and a warp is all-on or all-off until s < 32. The SIMT lens records "
    "which lanes of each warp took the add.",
    controls=(Control("block", "threads per block", (64, 128, 256), 128),),
    runs=lambda v: {
        k: Run(f"reduce_{k}", _reduce_params(v), branches=True) for k in ("divergent", "convergent")
    },
    questions=(
        Question(
            "reduce_divergent, block 0: how many warp visits of the add ran with some lanes off?",
            of("divergent", P.divergent_adds),
            lambda a, v: (
                _div_words(a, v, "reduce_divergent")
                + " At every level each warp that holds an adding thread diverges: the adders are every 2s-th lane."
            ),
            unit="visits",
        ),
        Question(
            "reduce_convergent, block 0: and now?",
            of("convergent", P.divergent_adds),
            lambda a, v: (
                _div_words(a, v, "reduce_convergent")
                + " Only the last five levels (s = 16 … 1) split a warp: the others switch whole warps off, "
                "and a warp with no adding lane skips the add entirely."
            ),
            unit="visits",
        ),
    ),
    charts=_trees_charts,
    takeaway="Same additions, same barriers: which threads do the work decides whether warps diverge.",
)


def _shuffle_charts(caps, v, answers):
    rows = [("reduce_convergent (tree)", P.shared_bytes(caps["tree"]).value),
            ("reduce_shuffle", P.shared_bytes(caps["shuffle"]).value)]  # fmt: skip
    return [("", lfigs.pair_bars_figure(rows, "Shared memory per block", "bytes", caps["tree"].source))]


REDUCTION_SHUFFLE = Lesson(
    name="reduction_shuffle",
    title="Reduction with warp shuffles",
    intro="Inside a warp the lanes can read each other's registers: `cuda.shfl_down_sync(mask, v, d)` gives "
    "lane l the value of lane l + d. `reduce_shuffle` sums each warp's 32 values in five such steps, with "
    "no shared memory and no barrier, lane 0 writes the warp's sum to shared memory, one barrier, and "
    "warp 0 sums those. (The simulator's compiled engine has no warp intrinsics: this kernel runs on "
    "fastsim, said beside the run.)",
    controls=(Control("block", "threads per block", (64, 128, 256), 128),),
    runs=lambda v: {
        "tree": Run("reduce_convergent", _reduce_params(v), branches=True),
        "shuffle": Run("reduce_shuffle", _reduce_params(v), branches=True),
    },
    questions=(
        Question(
            "reduce_shuffle: how many bytes of shared memory does one block use?",
            of("shuffle", P.shared_bytes),
            lambda a, v: (
                f"{a.value} bytes: one float per warp slot (32 slots, enough for 1,024 threads); the tree "
                f"needs one float per thread, {4 * v['block']} bytes for {v['block']} threads."
                + (f" This run: the simulator's {a.facts['engine']} engine." if a.facts.get("engine") else "")
            ),
            unit="bytes",
        ),
        Question(
            "reduce_convergent (the shared-memory tree): how many times does block 0's first warp run the "
            "tree loop, each with a barrier after it?",
            of("tree", P.loop_steps),
            lambda a, v: (
                f"{a.value} levels, log2({v['block']}), each followed by a block-wide barrier. "
                "The shuffle version passes one barrier: its first five levels stay inside each warp."
            ),
            unit="levels",
        ),
    ),
    charts=_shuffle_charts,
    takeaway="Warp shuffles replace the last levels of a shared-memory tree: no shared traffic, no barrier.",
)


# --- ch. 11: prefix sums -----------------------------------------------------------------------------


def _scan_params(v):
    return {"n": 2 * v["block"], "block": v["block"]}


def _scan_charts(caps, v, answers):
    out = []
    works = {k: P.loop_work(caps[k]) for k in caps}
    names = {"ks": "Kogge-Stone", "bk": "Brent-Kung"}
    src = next(iter(works.values())).source
    out.append(
        (
            "",
            lfigs.pair_bars_figure(
                [(names[k], w.value) for k, w in works.items()],
                f"Additions per block of {v['block']} elements",
                "additions",
                src,
            ),
        )
    )
    out.append(
        (
            "",
            lfigs.pair_bars_figure(
                [(names[k], w.facts["steps"]) for k, w in works.items()],
                "Steps (loop iterations, each ending at a barrier)",
                "steps",
                src,
            ),
        )
    )
    return out  # fmt: skip


KOGGE_STONE = Lesson(
    name="kogge_stone",
    title="Prefix sum: Kogge-Stone",
    intro="An inclusive scan turns x into y with y[i] = x[0] + … + x[i]. One core needs n − 1 additions in "
    "n steps. **Kogge-Stone** does it in log2(n) steps: at stride s = 1, 2, 4, … every element i ≥ s adds "
    "the element s to its left. Each block scans its own section of block-many elements; the SIMT lens "
    "counts the lanes that took the add at every step.",
    controls=(Control("block", "threads per block (section size)", (32, 64, 128, 256), 128),),
    runs=lambda v: {"ks": Run("scan_kogge_stone", _scan_params(v), branches=True)},
    questions=(
        Question(
            "How many steps does the scan loop take (block 0's first warp)?",
            of("ks", P.loop_steps),
            lambda a, v: f"{a.value} steps: s = 1, 2, 4, … up to {v['block'] // 2}, log2({v['block']}).",
            unit="steps",
        ),
        Question(
            "How many additions does one block make?",
            of("ks", P.loop_work),
            lambda a, v: (
                f"{a.value:,} additions (the lanes that took `{a.facts['lines'][0]}`, summed over the steps): "
                f"{v['block']} − s at each step s. One core needs {v['block'] - 1}: Kogge-Stone does about "
                f"log2(n) times the work to finish in log2(n) steps."
            ),
            unit="adds",
        ),
    ),
    charts=_scan_charts,
    takeaway="Kogge-Stone trades work for steps: fine for a warp's worth, wasteful of energy for big sections.",
)


BRENT_KUNG = Lesson(
    name="brent_kung",
    title="Prefix sum: Brent-Kung vs Kogge-Stone, work vs steps",
    intro="**Brent-Kung** builds a reduction tree up (partial sums at positions 1, 3, 7, …), then a "
    "distribution tree down that pushes them to the positions between. Both scans run here on the same "
    "section size; the SIMT lens counts each one's additions and steps.",
    controls=(Control("block", "threads per block (section size)", (32, 64, 128, 256), 128),),
    runs=lambda v: {
        "ks": Run("scan_kogge_stone", _scan_params(v), branches=True),
        "bk": Run("scan_brent_kung", _scan_params(v), branches=True),
    },
    questions=(
        Question(
            "Brent-Kung: how many steps (both trees, block 0's first warp)?",
            beside("bk", "ks", P.loop_steps),
            lambda a, v: (
                f"{a.value} steps: log2({v['block']}) up and one fewer down; Kogge-Stone took {a.facts['ks']}."
            ),
            unit="steps",
        ),
        Question(
            "Brent-Kung: how many additions does one block make?",
            beside("bk", "ks", P.loop_work),
            lambda a, v: (
                f"{a.value:,} additions, about 2n: fewer than Kogge-Stone's {a.facts['ks']:,}, at the price of "
                f"more steps, and in the late steps most threads are idle."
            ),
            unit="adds",
        ),
    ),
    charts=_scan_charts,
    takeaway="Work-efficient or step-efficient: real scans use Kogge-Stone within a warp (shuffles) and "
    "Brent-Kung-style trees across warps.",
)


# --- ch. 12: merge -----------------------------------------------------------------------------------


def _merge_charts(caps, v, answers):
    a = answers[0]
    rows = [("co-rank searches", a.facts["search_loads"]), ("the sequential merges", a.facts["loads"] - a.facts["search_loads"])]  # fmt: skip
    return [("", lfigs.pair_bars_figure(rows, "Global loads of A and B, whole launch", "loads", P.RECORDED))]


MERGE = Lesson(
    name="merge",
    title="Merge: every thread finds its own slice (co-rank)",
    intro="Merging two sorted arrays A and B looks sequential. In parallel, thread t writes outputs "
    "[t × k, (t + 1) × k) of C; the **co-rank** of an output position p is how many of the first p "
    "outputs come from A, and a binary search finds it from p alone. So every thread searches its two "
    "ends, then merges its own slices of A and B, with no thread waiting for another. A and B have "
    "`size` sorted integers each.",
    controls=(
        Control("per_thread", "outputs per thread k", (4, 8, 32), 8),
        Control("size", "length of A and of B", (64, 256), 256),
    ),
    runs=lambda v: {
        "main": Run(
            "merge_corank",
            {"m": v["size"], "n": v["size"], "per_thread": v["per_thread"], "block": 32},
            accesses=True,
        )  # fmt: skip
    },
    questions=(
        Question(
            "The busiest thread: how many loads of A and B do its two co-rank searches make?",
            of("main", P.corank_loads),
            lambda a, v: (
                f"{a.value} loads: each search step reads two to four elements of A and B, a binary search "
                f"over up to {v['size']} positions takes about log2({v['size']}) + 1 = "
                f"{v['size'].bit_length()} steps, and each thread searches twice, for its first and its last "
                "output (answers within 50 % count)."
            ),
            tolerance=0.5,
            unit="loads",
        ),
        Question(
            "What share of all the loads of A and B are the searches, in percent?",
            lambda caps, v: A.Answer(
                round(P.corank_loads(caps["main"]).facts["share"], 1),
                P.corank_loads(caps["main"]).facts,
                P.RECORDED,
            ),  # fmt: skip
            lambda a, v: (
                f"{a.value:g} %: {a.facts['search_loads']:,} of {a.facts['loads']:,} loads over "
                f"{a.facts['threads']} threads. Longer slices per thread (bigger k) make the searches a "
                "smaller share."
            ),
            tolerance=0.25,
            unit="%",
        ),
    ),
    charts=_merge_charts,
    takeaway="Co-rank turns a sequential merge into independent pieces: the price is a log-time search per thread.",
)


# --- ch. 14: sparse matrix-vector products ----------------------------------------------------------


def _spmv_params(v):
    return {"rows": 256, "width": v["width"], "long": v["long"], "block": 64}


def _spmv_charts(caps, v, answers):
    used = [(f"spmv_{k}", P.bytes_used(caps[k], "values").value) for k in caps]
    madds = [(f"spmv_{k}", P.global_loads(caps[k], "values").value) for k in caps]
    title = "Loads of values: % of the bytes moved that a lane used"
    return [
        ("", lfigs.pair_bars_figure(used, title, "% of the bytes moved", P.RECORDED)),
        (
            "",
            lfigs.pair_bars_figure(
                madds, "Multiply-adds (one load of values each)", "multiply-adds", P.RECORDED
            ),
        ),
    ]


_SPMV_CONTROLS = (
    Control("width", "non-zeros of the longest rows", (8, 16, 32), 16),
    Control("long", "% of rows that long (the rest: 1 to 4)", (0, 5, 25), 5),
)

SPMV_CSR = Lesson(
    name="spmv_csr",
    title="Sparse matrix × vector: CSR",
    intro="A sparse matrix stores only its non-zeros. **CSR** puts row r's values at "
    "values[row_ptr[r] : row_ptr[r+1]]. One thread per row walks its own non-zeros: neighbouring lanes start "
    "at unrelated places in `values`, and a warp keeps looping until its longest row is done. The matrix has "
    "256 rows; most have 1 to 4 non-zeros, some are long.",
    controls=_SPMV_CONTROLS,
    runs=lambda v: {"csr": Run("spmv_csr", _spmv_params(v), accesses=True)},
    questions=(
        Question(
            "Of the bytes the warp loads of values move (whole 32-byte sectors), what percent does a lane use?",
            of("csr", P.bytes_used, "values"),
            lambda a, v: (
                f"{a.value:g} %: {a.facts['bytes']:,} bytes used of {a.facts['moved']:,} moved, over "
                f"{a.facts['requests']:,} warp requests. At slot k the lanes read 32 different rows' k-th "
                "non-zero, which lie apart in values, and once the short rows are done the few lanes still "
                "looping each pull a sector of their own."
            ),
            tolerance=0.1,
            unit="%",
        ),
        Question(
            "How many multiply-adds does the whole launch do (one load of values each)?",
            of("csr", P.global_loads, "values"),
            lambda a, v: f"{a.value:,}: exactly the non-zeros, no padding.",
            unit="FMAs",
        ),
    ),
    charts=_spmv_charts,
)


SPMV_ELL = Lesson(
    name="spmv_ell",
    title="Sparse matrix × vector: ELL vs CSR",
    intro="**ELL** pads every row to the longest row's width with zeros and stores the slots column-major: "
    "slot k of row r at values[k × rows + r]. At each k a warp's 32 lanes read 32 neighbouring words, and "
    "every lane loops the same number of times. The same matrix runs in both formats.",
    controls=_SPMV_CONTROLS,
    runs=lambda v: {
        "csr": Run("spmv_csr", _spmv_params(v), accesses=True),
        "ell": Run("spmv_ell", _spmv_params(v), accesses=True),
    },
    questions=(
        Question(
            "ELL: what percent of the bytes its loads of values move does a lane use?",
            beside("ell", "csr", P.bytes_used, "values"),
            lambda a, v: (
                f"{a.value:g} %: at each slot the 32 lanes read 32 neighbouring floats, whole sectors. CSR used "
                f"{a.facts['csr']:g} % of what it moved."
            ),
            tolerance=0.1,
            unit="%",
        ),
        Question(
            "ELL: how many multiply-adds does the whole launch do, padding included?",
            beside("ell", "csr", P.global_loads, "values"),
            lambda a, v: (
                f"{a.value:,}: 256 rows × width {v['width']}; CSR did {a.facts['csr']:,}, the non-zeros. With a "
                "few long rows, ELL's padding is most of its work: real code splits the long rows off (hybrid "
                "ELL + COO)."
            ),
            unit="FMAs",
        ),
    ),
    charts=_spmv_charts,
    takeaway="Try 25 % long rows: the padding shrinks, ELL's coalescing wins. At 0 % it is mostly padding.",
)


PMPP_LESSONS = (
    COARSENING, LAYOUT, CONVOLUTION, HISTOGRAM_CONTENTION, REDUCTION_TREES, REDUCTION_SHUFFLE, KOGGE_STONE,
    BRENT_KUNG, MERGE, SPMV_CSR, SPMV_ELL,
)  # fmt: skip
