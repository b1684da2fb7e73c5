"""The SIMT lens: the branch pass (an AST transform), the barrier pass, the visit tables and the branch
efficiency, on the simulator against independent models (tests/branch_cases.py) and (marked gpu) on a GPU
against the same models."""

import ast
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis import branches
from visualizer.analysis.provenance import source_of
from visualizer.engine.instrument.branches import (
    BRANCH_FN,
    BarrierPass,
    BranchPass,
    apply_passes,
    branch_buffers,
)

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))
import branch_cases  # noqa: E402  (sources and models; the kernels run in subprocesses)
from case_scripts import run_case_script  # noqa: E402


def run_cases(tmp_path, engine: str) -> dict:
    return run_case_script(HERE / "branch_cases.py", tmp_path, engine)


def visits(rows: pd.DataFrame) -> dict:
    got: dict = {}
    for r in rows.sort_values(["block", "warp", "site", "visit"]).itertuples():
        got.setdefault((r.block, r.warp, r.site), []).append((r.active_mask, r.taken_mask))
    return got


def assert_matches_model(case: dict, name: str):
    got, want = visits(case["rows"]), case["expected"]
    wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not wrong, (
        f"{name}: {len(wrong)} (block, warp, site) differ, first {wrong[0]}: {got.get(wrong[0])} != {want.get(wrong[0])}"
    )
    if "want" in case:
        np.testing.assert_allclose(case["out"], case["want"], rtol=1e-5, atol=1e-4)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("branches_sim"), "sim")


def test_the_simulators_own_activemask_is_not_a_gpus_reconvergence(sim):
    # after `for _ in range(lane % 4)` the lanes see masks grouped by when they left the loop, where
    # structured reconvergence has the whole warp together again
    assert sim["fastsim_activemask"] == [0x11111111, 0x22222222, 0x44444444, 0x88888888]


@pytest.mark.parametrize(
    "name", ["odd_even", "mandel", "collatz", "classify", "partial_sums", "const_loop", "reduction_example"]
)
def test_simulated_visits_are_exact(sim, name):
    assert_matches_model(sim[name], name)


def test_simulated_tables_have_the_columns_and_numbers(sim):
    rows = sim["odd_even"]["rows"]
    assert list(rows.columns[: len(branches.ROW_COLUMNS)]) == branches.ROW_COLUMNS
    assert (rows["line"] == 7).all() and (rows["kind"] == "if").all()  # `if cuda.threadIdx.x % 2 == 0:`
    # 2 blocks x 3 warps (the last of 16 lanes), every one split evenly
    assert rows[["active", "taken"]].values.tolist() == [[32, 16], [32, 16], [16, 8]] * 2
    s = branches.summary(rows)
    assert s["efficiency"] == 0.0 and s["divergent_warps"] == 6 and s["warps"] == 6
    assert source_of(rows).startswith("modelled")
    mandel = branches.summary(sim["mandel"]["rows"])
    assert 0 < mandel["efficiency"] < 100 and mandel["truncated"] == 0


def test_summary_and_efficiency_on_a_hand_made_table():
    recs = [  # block, warp, site, visit, active, taken
        (0, 0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF),  # uniform taken
        (0, 0, 1, 0, 0xFFFFFFFF, 0x0000FFFF),  # divergent
        (0, 1, 0, 0, 0xFFFFFFFF, 0),  # uniform not taken
        (0, 1, 2, 0, 0xFF, 0xFF),  # for-body: not counted
    ]
    sites = [
        {"site": 0, "line": 3, "kind": "if", "loops": []},
        {"site": 1, "line": 5, "kind": "while", "loops": []},
        {"site": 2, "line": 9, "kind": "for-body", "loops": []},
    ]
    rows = branches._frame(recs, sites, "measured (GPU)")
    assert rows["active"].tolist() == [32, 32, 32, 8] and rows["taken"].tolist() == [32, 16, 0, 8]
    s = branches.summary(rows)
    assert s["efficiency"] == pytest.approx(200 / 3, abs=1e-3)
    assert s["divergent_warps"] == 1 and s["visits"] == 3 and s["divergent_visits"] == 1
    pw = branches.per_warp(rows)
    assert pw["efficiency"].tolist() == [50.0, 100.0]


def _plain(source: str, kernel: str):
    """The branch pass applied to a plain Python function; the probe logs (site, cond)."""
    tree = apply_passes(ast.parse(source), kernel, [BranchPass()])
    log: list = []
    ns = {BRANCH_FN: lambda _log, _count, site, cond: log.append((site, bool(cond))) or cond}
    exec(compile(tree, "k.py", "exec"), ns)
    return ns[kernel + "__traced"], tree.vz_info["branches"], log


LOOPS = """\
def loops(out, n, step):
    for i in range(n, -1, -2):
        out.append(("down", i))
    for j in range(0, n, step):
        if j == 2:
            continue
        out.append(("var", j))
    for k in range(n):
        if k == 3:
            break
    out.append(("last", k))
"""


def test_for_over_range_keeps_python_semantics_and_records_every_test():
    traced, info, log = _plain(LOOPS, "loops")
    ns: dict = {}
    exec(LOOPS, ns)
    want, got = [], []
    ns["loops"](want, 5, 1)
    traced(got, 5, 1, None, None)
    assert got == want  # negative literal step, a run-time step with continue, break, the loop variable after
    want, got = [], []
    ns["loops"](want, 6, -1)  # a negative run-time step: no iteration
    traced(got, 6, -1, None, None)
    assert got == want
    kinds = [(s["line"], s["kind"], s["loops"]) for s in info["sites"]]
    assert kinds == [(2, "for", []), (4, "for", []), (5, "if", [1]), (8, "for", []), (9, "if", [3])]
    # range(5, -1, -2) tests 5, 3, 1, -1 (three times true, once false); range(6, -1, -2) 6, 4, 2, 0, -2
    assert [c for s, c in log if s == 0] == [True] * 3 + [False] + [True] * 4 + [False]


def test_static_tests_are_left_alone_and_elif_is_its_own_site():
    src = """\
FLAG = True
TILE = 16


def k(x, out):
    if FLAG:
        out.append(1)
    if not FLAG or TILE > 8 and not (TILE < 4):
        out.append(5)
    if FLAG and x > 3:
        out.append(6)
    if x > 2:
        out.append(2)
    elif x > 1:
        out.append(3)
    else:
        if x > 0:
            out.append(4)
    while True:
        break
"""
    traced, info, log = _plain(src, "k")
    assert [(s["line"], s["kind"]) for s in info["sites"]] == [
        (10, "if"),  # FLAG and x > 3: x decides it at run time
        (12, "if"),
        (14, "elif"),
        (17, "if"),
        (19, "while"),
    ]
    out: list = []
    traced(0.5, out, None, None)
    assert out == [1, 5, 4] and log == [(0, False), (1, False), (2, False), (3, True), (4, True)]


def test_the_traced_copy_keeps_the_kernel_lines_and_the_clean_kernel_is_untouched():
    src = branch_cases.COLLATZ
    tree = apply_passes(ast.parse(src), "collatz", [BranchPass(), BarrierPass()])
    clean, traced = tree.body[1], tree.body[2]
    assert ast.unparse(clean) == ast.unparse(ast.parse(src).body[1])
    assert [a.arg for a in traced.args.args][-4:] == ["_vz_br", "_vz_brn", "_vz_bar", "_vz_barn"]
    lines = {n.lineno for n in ast.walk(traced) if hasattr(n, "lineno")}
    assert lines <= set(range(traced.lineno - 1, len(src.splitlines()) + 1))


def test_barrier_pass_wraps_every_syncthreads_statement():
    src = open(branch_cases.REDUCTION_EXAMPLE).read()
    tree = apply_passes(ast.parse(src), "block_sum", [BarrierPass()])
    info = tree.vz_info["barriers"]
    lines = [i + 1 for i, t in enumerate(src.splitlines()) if t.strip() == "cuda.syncthreads()"]
    assert [s["line"] for s in info["sites"]] == lines and len(lines) == 2
    text = ast.unparse(tree.body[-1])
    assert text.count("_vz_bar_arrive()") == 2 and text.count("_vz_bar_release(") == 2


def test_the_analysis_reads_the_buffers_the_passes_add():
    from visualizer.engine.instrument import branches as ib

    names = (ib.BRANCH_LOG, ib.BRANCH_COUNT, ib.BAR_LOG, ib.BAR_COUNT)
    assert names == (branches.BRANCH_LOG, branches.BRANCH_COUNT, branches.BAR_LOG, branches.BAR_COUNT)
    passes, bufs = ib.lens(False, 4, 96, branches=True, barriers=True)
    assert [n for p in passes for n in p.params] == list(bufs) == list(names)
    passes, bufs = ib.lens(False, 4, 96, branches=False, barriers=True)
    assert [n for p in passes for n in p.params] == list(bufs) == list(names[2:])
    passes, bufs = ib.lens(True, 4, 96, branches=True, barriers=True)
    assert [n for p in passes for n in p.params] == list(bufs) == list(names[:2])  # no clock: no barriers


def test_buffers_are_bounded():
    sim = branch_buffers(True, 4096, 256)
    gpu = branch_buffers(False, 1 << 16, 1024)
    assert sum(a.nbytes for a in sim.values()) < 80 << 20 and sum(a.nbytes for a in gpu.values()) < 140 << 20
    assert gpu["_vz_br"].shape[1] >= 1 and branch_buffers(False, 64, 256)["_vz_br"].shape[1] == 1 << 14


def test_the_gpu_log_holds_the_divergence_pair_at_the_lessons_largest_size():
    """2^20 threads, reps 128: 2 x (128 + 1) loop tests, the guard and the parity test per warp (the
    benchmark's first run cut this pair at 85 of 132 visits)."""
    from visualizer.specs import catalog

    spec, _, launch = catalog.plan_launch("branch_lanes", {"n": 1 << 20, "reps": 128, "block": 256}, "gpu")
    log = branch_buffers(False, launch.blocks, launch.threads_per_block)["_vz_br"]
    assert log.shape == (launch.blocks * 8, log.shape[1], 3) and log.shape[1] >= 2 * (128 + 1) + 2


def test_a_cut_log_says_so_wherever_its_efficiency_is_shown():
    """Warp 0 made 3 visits, the row kept 2: the summary, the CLI's words and the page's say how many."""
    log = np.zeros((1, 2, 3), np.int32)
    log[0, 0] = (0, -1, -1)  # all 32 lanes (0xFFFFFFFF as int32), all taken
    log[0, 1] = (0, -1, 0x0000FFFF)  # divergent
    rows = branches.rows(
        False, log, np.array([3], np.int32), [{"site": 0, "line": 4, "kind": "while", "loops": []}], 32
    )
    assert rows["active"].tolist() == [32, 32] and rows["taken"].tolist() == [32, 16]
    s = branches.summary(rows)
    assert s["truncated"] == 1 and (s["recorded"], s["made"], s["of"]) == (2, 3, "warp visits")
    words = branches.cut_words(s)
    assert "2 recorded of 3 warp visits" in words and "not the whole launch" in words
    assert any("2 recorded of 3 warp visits" in line for line in branches.describe(s))
    whole = branches.rows(
        False, log, np.array([2], np.int32), [{"site": 0, "line": 4, "kind": "while", "loops": []}], 32
    )
    assert branches.cut_words(branches.summary(whole)) == "" and "made" not in branches.summary(whole)


def test_barrier_rows_find_the_last_warp_and_the_waits():
    log = np.zeros((2, 4, 3), np.int64)  # 2 warps of one block, 2 barriers each
    log[0, 0] = (0, 1000, 1500)
    log[0, 1] = (1, 1700, 2600)
    log[1, 0] = (0, 1400, 1500)
    log[1, 1] = (1, 2500, 2600)
    bars = branches.barrier_rows(log, np.array([2, 2]), [{"site": 0, "line": 5}, {"site": 1, "line": 9}], 64)
    assert bars["wait_ns"].tolist() == [500, 900, 100, 100]
    assert bars["last"].tolist() == [False, False, True, True]
    seg = branches.barrier_segments(bars, 0, starts={0: 0, 1: 0})
    w1 = seg[seg["warp"] == 1]
    assert w1["what"].tolist() == ["work", "wait", "work", "wait"]
    assert w1["end_ns"].tolist() == [400, 500, 1500, 1600]  # ns since the first arrival


def test_gpu_records_become_visits_in_order():
    log = np.zeros((2, 4, 3), np.int64)  # 2 warps of one 64-thread block
    log[0, :3] = [(0, 0xF, 0x3), (1, 0xF, 0xF), (1, 0xF, 0)]
    log[1, :2] = [
        (0, -1, 0),
        (7, 1, 1),
    ]  # ballot of all lanes as numba types it (int32 -1); a site never made
    sites = [
        {"site": 0, "line": 3, "kind": "if", "loops": []},
        {"site": 1, "line": 5, "kind": "while", "loops": []},
    ]
    rows = branches.rows(False, log, np.array([3, 2]), sites, 64)
    assert rows[["block", "warp", "site", "visit", "active", "taken"]].values.tolist() == [
        [0, 0, 0, 0, 4, 2],
        [0, 0, 1, 0, 4, 4],
        [0, 0, 1, 1, 4, 0],
        [0, 1, 0, 0, 32, 0],
    ]
    assert source_of(rows) == "measured (GPU)" and rows.attrs["truncated"] == 0


def lane_totals(rows: pd.DataFrame) -> dict:
    """Per (block, warp, site): lane-evaluations and lanes taken, whatever the grouping into visits."""
    g = rows.groupby(["block", "warp", "site"])
    return {
        k: (int(a), int(t)) for k, a, t in zip(g.groups, g["active"].sum(), g["taken"].sum(), strict=True)
    }


def model_totals(expected: dict) -> dict:
    return {
        k: (sum(bin(a).count("1") for a, _ in v), sum(bin(t).count("1") for _, t in v))
        for k, v in expected.items()
    }


# on the H200 the compiler does not reconverge a warp's lanes at the loop test after a `continue`:
# the lanes that continued evaluate the remaining tests as a group of their own (measured; the
# simulator's structured model merges the groups), so those kernels are compared lane by lane. In
# const_loop (REPS unrolled: no loop test left) the lanes that continued at j run j + 1's tests
# apart from the rest: 6 visits of `(i + j) % 3 == 0` per warp where the model has 3 (H200,
# 2026-12-01; the lane totals equal the model's)
GPU_SPLITS = {"partial_sums", "const_loop"}


@pytest.mark.gpu
def test_gpu_visits_match_the_same_models(tmp_path):
    gpu = run_cases(tmp_path, "gpu")
    for name, case in gpu.items():
        assert source_of(case["rows"]) == "measured (GPU)"
        assert lane_totals(case["rows"]) == model_totals(case["expected"]), name
        if name not in GPU_SPLITS:
            assert_matches_model(case, name)
    split = visits(gpu["partial_sums"]["rows"])[(0, 0, 0)]
    assert len(split) > len(gpu["partial_sums"]["expected"][(0, 0, 0)])  # more groups than the model's visits
    split = visits(gpu["const_loop"]["rows"])[(0, 0, 1)]
    assert len(split) > len(gpu["const_loop"]["expected"][(0, 0, 1)])
    assert all(t & ~a == 0 for a, t in split)  # each group's taken lanes are lanes it had
    bars = gpu["reduction_example"]["bars"]
    assert len(bars) == 4 * 8 * 9 and (bars["wait_ns"] >= 0).all()  # a barrier before the tree, one per level
    assert (bars.groupby(["block", "instance"])["last"].sum() >= 1).all()


def test_damaged_buffers_are_read_without_inventing_visits():
    sites = [{"site": 0, "line": 3, "kind": "if", "loops": []}]
    log = np.array([[0 * 2 + 1, 99 * 2, -5], [1, 0, 0]], np.int32)  # thread 0: a site 99 and a negative code
    rows = branches.rows(True, log, np.array([3, 1]), sites, 64)
    assert rows[["site", "active_mask", "taken_mask"]].values.tolist() == [[0, 3, 3]]
    gpu = np.array([[[0, 1, 1], [42, 1, 1]]], np.int64)
    assert branches.rows(False, gpu, np.array([-3]), sites, 32).empty  # a negative count: nothing


def test_sass_jumps_per_line_leave_out_the_trailing_self_loop():
    sass = pd.DataFrame(
        [
            (0, "k.py", 5, "ISETP.GE.AND", "ISETP.GE.AND P0, PT, R0, R1, PT"),
            (16, "k.py", 5, "EXIT", "@P0 EXIT"),  # a predicated guard: no jump
            (32, "k.py", 7, "BRA", "@P1 BRA `(.L_x_1)"),
            (48, "k.py", 7, "BRA", "BRA `(.L_x_2)"),
            (64, "other.py", 7, "BRA", "@P2 BRA `(.L_x_3)"),  # a device function's file
            (80, "k.py", 9, "EXIT", "EXIT"),
            (96, "k.py", 9, "BRA", "BRA `(.L_x_4)"),  # the jump-to-itself after the last EXIT
        ],
        columns=["address", "file", "line", "opcode", "text"],
    )
    jumps = branches.sass_branches(sass, sass["file"] == "k.py")
    assert jumps == {7: 2}
    recs = [(0, 0, 0, 0, 0xF, 0x3), (0, 0, 1, 0, 0xF, 0xF)]
    sites = [
        {"site": 0, "line": 5, "kind": "if", "loops": []},
        {"site": 1, "line": 7, "kind": "if", "loops": []},
    ]
    pl = branches.per_line(branches._frame(recs, sites, "measured (GPU)"), jumps)
    assert pl["sass_jumps"].tolist() == [0, 2]


def test_the_lessons_answer_says_when_its_log_was_cut():
    from visualizer.analysis.lesson_answers import Answer
    from visualizer.web import lessons

    facts = {
        "divergent_visits": 1,
        "visits": 2,
        "mean_active": 16.0,
        "truncated": 4,
        "recorded": 8,
        "made": 12,
    }
    question = lessons.DIVERGENCE.questions[0]
    cut = question.explain(Answer(50.0, {**facts, "of": "warp visits"}, "measured (GPU)"), {})
    whole = question.explain(Answer(50.0, {**facts, "truncated": 0}, "measured (GPU)"), {})
    assert (
        "Careful: the log was cut for 4 warps" in cut and "8 recorded of 12" in cut and "Careful" not in whole
    )


def test_a_constant_loop_is_no_branch_and_a_gpu_does_not_probe_it(sim):
    """`for j in range(REPS)` (a module constant): on the simulator its tests keep the inner branches'
    iterations apart, and its own visits are not in the table; on a GPU the loop is left as written
    (unrolled by the compiler), with the inner tests still probed; the site table is the same."""
    case = sim["const_loop"]
    assert not (case["rows"]["kind"] == "for-const").any() and set(case["rows"]["site"]) == {1, 2}
    assert (case["out"] == case["want"]).all()
    tree = ast.parse(branch_cases.CONST_LOOP)
    gpu = apply_passes(tree, "const_loop", [BranchPass(probe_constant_loops=False)])
    simulated = apply_passes(tree, "const_loop", [BranchPass()])
    assert gpu.vz_info["branches"]["sites"] == simulated.vz_info["branches"]["sites"]
    assert [s["kind"] for s in gpu.vz_info["branches"]["sites"]] == ["for-const", "if", "if"]
    traced = next(f for f in gpu.body if isinstance(f, ast.FunctionDef) and f.name.endswith("__traced"))
    loops = [n for n in ast.walk(traced) if isinstance(n, (ast.For, ast.While))]
    assert [type(n).__name__ for n in loops] == ["For"]  # not rewritten into a probed while
    assert ast.unparse(traced).count("_vz_branch(") == 2
    assert "constant trip count" in gpu.vz_info["branches"]["not_recorded"][0]["why"]


def _visits_one_lane_at_a_time(log, count, sites, tpb):
    """The visits as the per-lane walk made them before lanes sharing a sequence were combined: the oracle."""
    from visualizer.analysis import branches

    loops = {s["site"]: list(s["loops"]) for s in sites}
    is_loop = {s["site"]: s["kind"] in branches.LOOP_KINDS for s in sites}
    visits = {}
    for t in range(log.shape[0]):
        block, thread = divmod(t, tpb)
        warp, lane = divmod(thread, 32)
        stack = []
        for code in log[t, : min(count[t], log.shape[1])].tolist():
            site, took = code >> 1, code & 1
            if site not in loops:
                continue
            path = loops[site] + ([site] if is_loop[site] else [])
            keep = 0
            while keep < len(stack) and keep < len(path) and stack[keep][0] == path[keep]:
                keep += 1
            del stack[keep:]
            if is_loop[site]:
                if len(stack) == len(path):
                    stack[-1][1] += 1
                else:
                    stack.append([site, 0])
            bits = visits.setdefault((block, warp, site, tuple(i for _, i in stack)), [0, 0])
            bits[0] |= 1 << lane
            bits[1] |= took << lane
    out, counter = [], {}
    for key in sorted(visits):
        b, w, s, _ = key
        v = counter.get((b, w, s), 0)
        counter[(b, w, s)] = v + 1
        out.append((b, w, s, v, *visits[key]))
    return out


def test_lane_decisions_combined_per_sequence_make_the_per_lane_visits():
    from visualizer.analysis import branches

    loop = sorted(branches.LOOP_KINDS)[0]
    sites = [
        {"site": 0, "line": 1, "kind": loop, "loops": [], "text": ""},
        {"site": 1, "line": 2, "kind": "if", "loops": [0], "text": ""},
        {"site": 2, "line": 3, "kind": loop, "loops": [0], "text": ""},
        {"site": 3, "line": 4, "kind": "if", "loops": [0, 2], "text": ""},
        {"site": 4, "line": 5, "kind": "if", "loops": [], "text": ""},
    ]
    rng = np.random.default_rng(5)
    for _ in range(20):
        threads, records = int(rng.integers(1, 150)), 30
        shared = rng.choice([0, 1, 2, 3, 4, 9], size=records)  # 9: a code of no site, skipped
        log = np.empty((threads, records), np.int32)
        for t in range(threads):  # most lanes share one sequence of sites, some have their own
            seq = shared if rng.random() < 0.6 else rng.choice([0, 1, 2, 3, 4, 9], size=records)
            log[t] = seq * 2 + rng.integers(0, 2, records)
        count = rng.integers(0, records + 5, threads)  # some cut (count past the row)
        tpb = int(rng.choice([32, 48, 100]))
        got = branches.rows_from_lanes(log, count, sites, tpb)
        want = _visits_one_lane_at_a_time(log, count, sites, tpb)
        shown = [r for r in want if sites[r[2]]["kind"] not in branches.NOT_SHOWN]
        cols = ["block", "warp", "site", "visit", "active_mask", "taken_mask"]
        assert [tuple(r) for r in got[cols].itertuples(index=False)] == sorted(shown)
        assert got.attrs["truncated"] == int((count > records).sum())
