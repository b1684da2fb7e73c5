"""The PMPP path's lessons: every answer is computed from the run (change the launch and it follows,
by the chapter's formula worked out here independently), the path lists every lesson in the book's
order, and on a GPU (-m gpu) every new lesson answers from a real run."""

import math

import numpy as np
import pytest

from visualizer.analysis import pmpp_answers as P
from visualizer.web import lesson_path
from visualizer.web.lessons import BY_NAME, LESSONS
from visualizer.web.lessons_pmpp import PMPP_LESSONS


def run(runner, kernel, params, **options):
    return runner.capture(kernel, params, time_clean=False, **options)


def lesson_caps(runner, lesson, values, sim_runner=None):
    """The lesson's captures as its page makes them: recorded accesses on the simulator, the rest on
    ``runner``'s backend."""
    caps = {}
    for role, r in lesson.runs(values).items():
        where = sim_runner if (r.accesses and sim_runner is not None) else runner
        caps[role] = run(where, r.kernel, r.params, accesses=r.accesses, **r.options())
    return caps


@pytest.mark.parametrize("block", [32, 64])
def test_scan_work_and_steps_follow_the_section(sim_runner, block):
    log = int(math.log2(block))
    ks = P.loop_work(run(sim_runner, "scan_kogge_stone", {"n": 2 * block, "block": block}, branches=True))
    bk = P.loop_work(run(sim_runner, "scan_brent_kung", {"n": 2 * block, "block": block}, branches=True))
    assert ks.value == sum(block - s for s in (2**k for k in range(log)))  # every i >= s adds at stride s
    assert ks.facts["steps"] == log
    assert bk.value == 2 * (block - 1) - log  # up: block - 1, down: block - 1 - log2(block)
    assert bk.facts["steps"] == 2 * log - 1


@pytest.mark.parametrize("block", [64, 128])
def test_divergent_add_visits_follow_the_tree(sim_runner, block):
    warps = block // 32
    div = P.divergent_adds(run(sim_runner, "reduce_divergent", {"n": block, "block": block}, branches=True))
    con = P.divergent_adds(run(sim_runner, "reduce_convergent", {"n": block, "block": block}, branches=True))
    # at stride s the adders are the multiples of 2s: in every warp while 2s <= 32, else one lane in each
    # warp holding a multiple of 2s; every such visit has lanes off
    want = sum(
        warps if 2 * s <= 32 else block // (2 * s) for s in (2**k for k in range(int(math.log2(block))))
    )
    assert div.value == div.facts["visits"] == want
    assert con.value == 5  # s = 16 ... 1, inside warp 0 only
    assert con.facts["visits"] == sum(max(1, s // 32) for s in (2**k for k in range(int(math.log2(block)))))


def test_shuffle_reduction_uses_one_slot_per_warp_and_the_tree_a_barrier_per_level(sim_runner):
    shuffle = run(sim_runner, "reduce_shuffle", {"n": 256, "block": 128}, branches=True)
    tree = run(sim_runner, "reduce_convergent", {"n": 256, "block": 128}, branches=True)
    assert P.shared_bytes(shuffle).value == 128 and P.shared_bytes(tree).value == 512
    assert P.loop_steps(tree).value == 7
    plain = run(sim_runner, "reduce_shuffle", {"n": 256, "block": 128})
    assert plain.check["correct"] and plain.launch["sim_engine"] == "compiled"  # warp shuffles compile


@pytest.mark.parametrize(
    ("kernel", "array", "sectors"), [("particles_aos", "p", 16), ("particles_soa", "x", 4)]
)
def test_layout_sectors(sim_runner, kernel, array, sectors):
    cap = run(sim_runner, kernel, {"n": 256, "block": 64}, accesses=True)
    assert P.sectors_per_request(cap, array).value == sectors
    assert P.bytes_used(cap, array).value == pytest.approx(100 * 4 / sectors, abs=0.1)


@pytest.mark.parametrize(("radius", "tile"), [(1, 16), (2, 8)])
def test_convolution_loads_follow_the_tile_and_radius(sim_runner, radius, tile):
    p = {"ny": 32, "nx": 32, "radius": radius, "tile": tile}
    naive = run(sim_runner, "conv2d_naive", p, accesses=True)
    tiled = run(sim_runner, "conv2d_tiled", p, accesses=True)
    assert P.busiest_block_loads(tiled, "x").value == tile * tile  # an interior input tile
    # naive: each output loads its in-image neighbours, counted here with numpy
    inside = np.zeros((32 + 2 * radius, 32 + 2 * radius))
    inside[radius:-radius, radius:-radius] = 1
    k = 2 * radius + 1
    want = sum(inside[i : i + 32, j : j + 32].sum() for i in range(k) for j in range(k))
    assert P.global_loads(naive, "x").value == want
    out = tile - 2 * radius
    blocks = math.ceil(32 / out) ** 2
    assert P.global_loads(tiled, "x").facts["blocks"] == blocks
    assert P.global_loads(tiled, "x").value <= blocks * tile * tile


def test_spmv_work_and_bytes(sim_runner):
    p = {"rows": 128, "width": 16, "long": 5, "block": 64}
    csr = run(sim_runner, "spmv_csr", p, accesses=True)
    ell = run(sim_runner, "spmv_ell", p, accesses=True)
    assert P.global_loads(csr, "values").value == len(csr.inputs["values"])  # the non-zeros
    assert P.global_loads(ell, "values").value == 128 * 16  # padding included
    assert P.bytes_used(ell, "values").value == 100.0
    assert P.bytes_used(csr, "values").value < 50.0


def test_merge_searches_are_logarithmic(sim_runner):
    small = P.corank_loads(
        run(sim_runner, "merge_corank", {"m": 64, "n": 64, "per_thread": 8}, accesses=True)
    )
    big = P.corank_loads(
        run(sim_runner, "merge_corank", {"m": 256, "n": 256, "per_thread": 8}, accesses=True)
    )
    for a, size in ((small, 64), (big, 256)):
        steps = int(math.log2(size)) + 2
        assert 0 < a.value <= 2 * 4 * steps  # two searches, at most 4 loads a step
        assert 0 < a.facts["share"] < 100
    coarse = P.corank_loads(
        run(sim_runner, "merge_corank", {"m": 256, "n": 256, "per_thread": 32}, accesses=True)
    )
    assert coarse.facts["share"] < big.facts["share"]  # longer slices: the searches a smaller share


def test_coarsening_cuts_threads_not_requests(sim_runner):
    p = {"n": 4096, "block": 128}
    plain = run(sim_runner, "vector_add", p, accesses=True)
    coarse = run(sim_runner, "vector_add_x4", p, accesses=True)
    assert P.launched_threads(coarse).value == 4096 // 4 and P.launched_threads(plain).value == 4096
    assert P.load_requests(coarse, ("a", "b")).value == P.load_requests(plain, ("a", "b")).value == 256


def test_privatised_histogram_publishes_once_per_bin_per_block(sim_runner):
    from visualizer.web.lessons_pmpp import _total_atomics

    p = {"n": 2048, "nbins": 8, "hot": 50, "block": 256}
    glob = run(sim_runner, "histogram_global", p, accesses=True)
    shared = run(sim_runner, "histogram_shared", p, accesses=True)
    assert _total_atomics(glob).value == 2048
    x = shared.inputs["x"].reshape(-1, 256)
    assert _total_atomics(shared).value == sum(len(np.unique(row)) for row in x)  # non-zero bins per block


def test_every_new_lesson_answers_from_its_run_and_the_answer_follows_the_launch(sim_runner):
    """Each lesson's default and one other launch: answers computed, explained, drawn; the answers differ
    between the launches (none is a constant), except AoS vs SoA, whose sectors per request are the
    same at any n (the point of the lesson), though the runs it reads them from differ."""
    for lesson in PMPP_LESSONS:
        got, caps_of = [], []
        for values in (lesson.defaults(), other_launch(lesson)):
            caps = lesson_caps(sim_runner, lesson, values)
            for cap in caps.values():
                assert cap.check["correct"], (lesson.name, cap.check)
            answers = [q.answer(caps, values) for q in lesson.questions]
            for q, a in zip(lesson.questions, answers, strict=True):
                assert a.source and q.explain(a, values), lesson.name
            assert all(f.layout.title.text for _, f in lesson.charts(caps, values, answers)), lesson.name
            got.append([a.value for a in answers])
            caps_of.append(caps)
        if lesson.name == "aos_soa":
            assert got[0] == got[1] == [16.0, 4.0]
            assert len(caps_of[0]["aos"].requests) != len(caps_of[1]["aos"].requests)
        else:
            assert got[0] != got[1], (lesson.name, got)


OTHER = {"histogram_contention": {"hot": 0}}  # at 100 % in bin 0 the bin count changes nothing


def other_launch(lesson):
    """The defaults with the first control moved to another of its options (or OTHER's change)."""
    values = lesson.defaults()
    if lesson.name in OTHER:
        return {**values, **OTHER[lesson.name]}
    c = lesson.controls[0]
    values[c.key] = next(o for o in c.options if o != c.default)
    return values


def test_the_path_lists_every_lesson_once_in_the_books_order():
    named = [n for ch in lesson_path.CHAPTERS for n in ch.lessons]
    assert len(named) == len(set(named)) and set(named) <= set(BY_NAME)
    numbers = [int(ch.number) for ch in lesson_path.CHAPTERS]
    assert numbers == sorted(numbers)
    rows = lesson_path.path_rows(LESSONS, {"threads"})
    assert len(rows) == len(LESSONS) >= 22
    assert [r["#"] for r in rows] == list(range(1, len(LESSONS) + 1))
    assert rows[0]["chapter"].startswith("Ch. 2") and rows[-1]["lesson"] == BY_NAME[named[-1]].title
    assert [r["done"] for r in rows if r["lesson"] == BY_NAME["threads"].title] == ["✓"]
    by_title = {r["lesson"]: r["needs"] for r in rows}
    assert "SIMT lens" in by_title[BY_NAME["kogge_stone"].title]
    assert "memory-access lens" in by_title[BY_NAME["spmv_ell"].title]
    assert "seeded schedules" in by_title[BY_NAME["race_runs"].title]


def test_a_lesson_the_path_does_not_name_still_shows_last():
    from dataclasses import replace

    extra = replace(BY_NAME["threads"], name="airflow_demo", title="Airflow")
    order = lesson_path.ordered((*LESSONS, extra))
    assert order[-1] is extra and lesson_path.chapter_of("airflow_demo") is lesson_path.MORE


@pytest.mark.gpu
def test_every_new_lesson_answers_from_a_gpu_run(gpu_runner, sim_runner):
    """On the GPU: the SIMT-lens answers (steps, additions, divergent visits) equal the simulator's,
    exactly, and every lesson answers and draws (memory questions from the simulator, as on the page)."""
    for lesson in PMPP_LESSONS:
        values = lesson.defaults()
        gpu = lesson_caps(gpu_runner, lesson, values, sim_runner)
        for role, cap in gpu.items():
            assert cap.check["correct"], (lesson.name, role, cap.check)
        answers = [q.answer(gpu, values) for q in lesson.questions]
        for q, a in zip(lesson.questions, answers, strict=True):
            assert a.source and q.explain(a, values), lesson.name
        assert lesson.charts(gpu, values, answers), lesson.name
        if any(r.branches for r in lesson.runs(values).values()):
            sim = lesson_caps(sim_runner, lesson, values)
            want = [q.answer(sim, values).value for q in lesson.questions]
            assert [a.value for a in answers] == want, (lesson.name, answers, want)
            assert any(c.measured for c in gpu.values()), lesson.name
