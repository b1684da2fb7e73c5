"""The PMPP path's lessons: the chapters of *Programming Massively Parallel Processors* that had none.

Same shape as ``lessons.py`` (predict, run, compare; every answer from ``analysis/pmpp_answers.py`` or
``lesson_answers.py`` applied to the learner's own launch). Memory questions read the simulator's
recorded accesses; work and step questions read the SIMT lens, which records on a GPU too. Their words
live in ``lessons_pmpp.toml``.
"""

from __future__ import annotations

from pathlib import Path

from visualizer.analysis import lesson_answers as A
from visualizer.analysis import pmpp_answers as P
from visualizer.figures import lessons as lfigs
from visualizer.web.lesson_file import Ask, LessonFile
from visualizer.web.lesson_types import Run, beside, of

WORDS = LessonFile(Path(__file__).with_name("lessons_pmpp.toml"))  # titles, intros, questions, templates

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


COARSENING = WORDS.lesson(
    "coarsening",
    runs=_coarse_runs,
    answers=(of("coarse", P.launched_threads), beside("coarse", "plain", P.load_requests, ("a", "b"))),
    charts=_coarse_charts,
)


# --- ch. 6: AoS vs SoA ---------------------------------------------------------------------------


def _layout_charts(caps, v, answers):
    rows = [("particles_aos (p[i, 0])", answers[0].value), ("particles_soa (x[i])", answers[1].value)]
    return [
        ("", lfigs.pair_bars_figure(rows, "Sectors per warp load request", "32-byte sectors", P.RECORDED))
    ]


LAYOUT = WORDS.lesson(
    "aos_soa",
    runs=lambda v: {
        k: Run(f"particles_{k}", {"n": v["n"], "block": v["block"]}, accesses=True) for k in ("aos", "soa")
    },
    answers=(of("aos", P.sectors_per_request, "p"), of("soa", P.sectors_per_request, "x")),
    charts=_layout_charts,
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


CONVOLUTION = WORDS.lesson(
    "convolution",
    runs=lambda v: {k: Run(f"conv2d_{k}", _conv_params(v), accesses=True) for k in ("naive", "tiled")},
    answers=(
        Ask(
            of("tiled", P.busiest_block_loads, "x"),
            more={"outputs": lambda a, v: (v["tile"] - 2 * v["radius"]) ** 2},
        ),
        Ask(_conv_ratio, more={"mask": lambda a, v: (2 * v["radius"] + 1) ** 2}),
    ),
    charts=_conv_charts,
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


HISTOGRAM_CONTENTION = WORDS.lesson(
    "histogram_contention",
    runs=lambda v: {
        k: Run(
            f"histogram_{k}", {"n": 4096, "nbins": v["nbins"], "hot": v["hot"], "block": 256}, accesses=True
        )
        for k in ("global", "shared")
    },
    answers=(of("global", _total_atomics), of("shared", _total_atomics)),
    charts=_contention_charts,
)


# --- ch. 10: reduction trees -----------------------------------------------------------------------


def _reduce_params(v):
    return {"n": 4 * v["block"], "block": v["block"]}


def _trees_charts(caps, v, answers):
    rows = [("reduce_divergent", answers[0].value), ("reduce_convergent", answers[1].value)]
    return [("", lfigs.pair_bars_figure(rows, "Block 0: warp visits of the add with some lanes off",
                                        "divergent visits", answers[0].source))]  # fmt: skip


REDUCTION_TREES = WORDS.lesson(
    "reduction_trees",
    runs=lambda v: {
        k: Run(f"reduce_{k}", _reduce_params(v), branches=True) for k in ("divergent", "convergent")
    },
    answers=(of("divergent", P.divergent_adds), of("convergent", P.divergent_adds)),
    charts=_trees_charts,
)


def _shuffle_charts(caps, v, answers):
    rows = [("reduce_convergent (tree)", P.shared_bytes(caps["tree"]).value),
            ("reduce_shuffle", P.shared_bytes(caps["shuffle"]).value)]  # fmt: skip
    return [("", lfigs.pair_bars_figure(rows, "Shared memory per block", "bytes", caps["tree"].source))]


def _engine_words(a, v) -> str:
    engine = a.facts.get("engine")
    return f" This run: the simulator's {engine} engine." if engine else ""


REDUCTION_SHUFFLE = WORDS.lesson(
    "reduction_shuffle",
    runs=lambda v: {
        "tree": Run("reduce_convergent", _reduce_params(v), branches=True),
        "shuffle": Run("reduce_shuffle", _reduce_params(v), branches=True),
    },
    answers=(
        Ask(
            of("shuffle", P.shared_bytes),
            more={"tree_bytes": lambda a, v: 4 * v["block"], "engine": _engine_words},
        ),
        of("tree", P.loop_steps),
    ),
    charts=_shuffle_charts,
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


KOGGE_STONE = WORDS.lesson(
    "kogge_stone",
    runs=lambda v: {"ks": Run("scan_kogge_stone", _scan_params(v), branches=True)},
    answers=(
        Ask(of("ks", P.loop_steps), more={"half": lambda a, v: v["block"] // 2}),
        Ask(of("ks", P.loop_work), more={"serial": lambda a, v: v["block"] - 1}),
    ),
    charts=_scan_charts,
)


BRENT_KUNG = WORDS.lesson(
    "brent_kung",
    runs=lambda v: {
        "ks": Run("scan_kogge_stone", _scan_params(v), branches=True),
        "bk": Run("scan_brent_kung", _scan_params(v), branches=True),
    },
    answers=(beside("bk", "ks", P.loop_steps), beside("bk", "ks", P.loop_work)),
    charts=_scan_charts,
)


# --- ch. 12: merge -----------------------------------------------------------------------------------


def _merge_charts(caps, v, answers):
    a = answers[0]
    rows = [("co-rank searches", a.facts["search_loads"]), ("the sequential merges", a.facts["loads"] - a.facts["search_loads"])]  # fmt: skip
    return [("", lfigs.pair_bars_figure(rows, "Global loads of A and B, whole launch", "loads", P.RECORDED))]


def _search_share(caps, v):
    loads = P.corank_loads(caps["main"])
    return A.Answer(round(loads.facts["share"], 1), loads.facts, P.RECORDED)


MERGE = WORDS.lesson(
    "merge",
    runs=lambda v: {
        "main": Run(
            "merge_corank",
            {"m": v["size"], "n": v["size"], "per_thread": v["per_thread"], "block": 32},
            accesses=True,
        )  # fmt: skip
    },
    answers=(
        Ask(of("main", P.corank_loads), more={"steps": lambda a, v: v["size"].bit_length()}),
        _search_share,
    ),
    charts=_merge_charts,
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


SPMV_CSR = WORDS.lesson(
    "spmv_csr",
    runs=lambda v: {"csr": Run("spmv_csr", _spmv_params(v), accesses=True)},
    answers=(of("csr", P.bytes_used, "values"), of("csr", P.global_loads, "values")),
    charts=_spmv_charts,
)


SPMV_ELL = WORDS.lesson(
    "spmv_ell",
    runs=lambda v: {k: Run(f"spmv_{k}", _spmv_params(v), accesses=True) for k in ("csr", "ell")},
    answers=(beside("ell", "csr", P.bytes_used, "values"), beside("ell", "csr", P.global_loads, "values")),
    charts=_spmv_charts,
)


PMPP_LESSONS = (
    COARSENING, LAYOUT, CONVOLUTION, HISTOGRAM_CONTENTION, REDUCTION_TREES, REDUCTION_SHUFFLE, KOGGE_STONE,
    BRENT_KUNG, MERGE, SPMV_CSR, SPMV_ELL,
)  # fmt: skip
WORDS.check_all_built()
