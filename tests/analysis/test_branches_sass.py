"""The SIMT lens's second number, branch efficiency as Nsight Compute counts it: the lens's visits of
the source lines whose clean build has a conditional jump (analysis/branches.as_ncu_counts), on a
hand-made table and on kernels compiled here for sm_90 (numba -> PTX, ptxas, nvdisasm)."""

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))
import branch_cases  # noqa: E402

from visualizer.analysis import branches  # noqa: E402
from visualizer.engine.capture import ptx  # noqa: E402
from visualizer.specs.source import plan_source_launch  # noqa: E402

SITES = [
    {"site": 0, "line": 7, "kind": "if", "loops": []},
    {"site": 1, "line": 9, "kind": "while", "loops": []},
]


def test_only_lines_with_a_conditional_jump_count():
    recs = [  # block, warp, site, visit, active, taken: the if diverges, the loop's 3 tests do not
        (0, 0, 0, 0, 0xFFFFFFFF, 0x55555555),
        (0, 0, 1, 0, 0xFFFFFFFF, 0xFFFFFFFF),
        (0, 0, 1, 1, 0xFFFFFFFF, 0xFFFFFFFF),
        (0, 0, 1, 2, 0xFFFFFFFF, 0),
    ]
    rows = branches._frame(recs, SITES, "measured (GPU)")
    assert branches.efficiency(rows) == 75.0
    got = branches.as_ncu_counts(rows, {9: 2})  # the if was predicated: no jump on line 7
    assert (
        got["efficiency"] == 100.0 and got["visits"] == 3 and got["lines"] == [9] and got["left_out"] == [7]
    )
    assert branches.as_ncu_counts(rows, {})["efficiency"] is None  # no branch instruction at all


def _sass(source: str, kernel: str, args: dict, grid, block) -> tuple[dict, dict]:
    if not ptx.tool("ptxas") or not ptx.tool("nvdisasm"):
        pytest.skip("ptxas / nvdisasm not installed here")
    launch = plan_source_launch(source, kernel, grid=grid, block=block, args=args, filename=f"{kernel}.py")
    got = ptx.source_asm(launch.request("sim"))
    return branches.jumps_of(got)


def _rows(model: dict, sites: list[dict]):
    recs = [(b, w, s, v, a, t) for (b, w, s), vs in model.items() for v, (a, t) in enumerate(vs)]
    return branches._frame(recs, sites, "modelled")


def _sites(source: str, kernel: str) -> list[dict]:
    import ast

    from visualizer.engine.instrument.branches import BranchPass, apply_passes

    return apply_passes(ast.parse(source), kernel, [BranchPass()]).vz_info["branches"]["sites"]


def test_collatz_predicated_if_is_left_out_and_the_loop_counts_once_per_test():
    """Collatz: ptxas predicates `n // 2` / `3n + 1` (no jump on the if) and rotates `while n != 1` into
    an entry test and a back edge, one jump executed per source test; the guard is a predicated EXIT.
    So the SASS-counted number is the while's own efficiency (on the H200 it was ncu's to the visit:
    docs/benchmarks.md)."""
    start = np.random.default_rng(7).integers(1, 1000, 2048).astype(np.int64)
    jumps, cond = _sass(
        branch_cases.COLLATZ,
        "collatz",
        {"start": "zeros:int64:2048", "steps": "zeros:int64:2048"},
        "8",
        "256",
    )
    sites = _sites(branch_cases.COLLATZ, "collatz")
    line = {s["kind"]: s["line"] for s in sites}  # if (guard, first), while, if (parity, last wins)
    parity_if = [s["line"] for s in sites if s["kind"] == "if"][-1]
    assert cond.get(line["while"], 0) >= 1 and parity_if not in cond and sites[0]["line"] not in jumps
    rows = _rows(branch_cases.model_collatz(8, 256, start), sites)
    got = branches.as_ncu_counts(rows, cond)
    loop = rows[rows["kind"] == "while"]
    assert got["lines"] == [line["while"]] and got["visits"] == len(loop)
    assert got["efficiency"] == pytest.approx(100 * (~branches.divergent(loop)).mean())
    assert got["efficiency"] > branches.efficiency(rows) + 20  # the divergent parity test is not counted


def test_a_kernel_with_no_conditional_jump_has_no_ncu_count():
    """odd/even's two one-line bodies are predicated: ncu counts no branch, the lens one per warp."""
    _, cond = _sass(
        branch_cases.ODD_EVEN, "odd_even", {"a": "zeros:float32:512", "out": "zeros:float32:512"}, "2", "256"
    )
    rows = _rows(branch_cases.model_odd_even(2, 256), _sites(branch_cases.ODD_EVEN, "odd_even"))
    assert branches.efficiency(rows) == 0.0 and branches.as_ncu_counts(rows, cond)["efficiency"] is None


def _lane_loop_compiled() -> dict:
    if not ptx.tool("ptxas") or not ptx.tool("nvdisasm"):
        pytest.skip("ptxas / nvdisasm not installed here")
    launch = plan_source_launch(
        branch_cases.LANE_LOOP, "lane_loop", grid="2", block="128",
        args={"x": "rand:float32:256", "out": "zeros:float32:256"}, filename="lane_loop.py",
    )  # fmt: skip
    return ptx.source_asm(launch.request("sim"))


def _unrolled_sass_by_hand(trips: list[int], unroll: int) -> tuple[int, int]:
    """(jumps, uniform ones) one warp runs in a loop unrolled by ``unroll`` with a remainder loop, each
    lane walked through its five jumps alone (guard, over the unrolled loop, its back edge, over the
    remainder, its back edge), the lanes at the same jump instance grouped as they reconverge."""
    went: dict[tuple, set] = {}
    for t in trips:
        path = [("guard", 0, t == 0)]
        if t:
            path.append(("over_main", 0, t < unroll))
            path += [("main_back", j, j + 1 < t // unroll) for j in range(t // unroll)]
            path.append(("over_rest", 0, t % unroll == 0))
            path += [("rest_back", j, j + 1 < t % unroll) for j in range(t % unroll)]
        for jump, instance, taken in path:
            went.setdefault((jump, instance), set()).add(taken)
    return len(went), sum(len(ways) == 1 for ways in went.values())


def _loop_rows(trips_per_lane: list[int], sites: list[dict], groups: list[list[int]], warps: int):
    """Visits of the loop site (site 0) in which the lanes of each group test together, once per
    iteration of their own: groups=[all 32 lanes] is the simulator's model; smaller groups stand for a
    GPU running lanes in other groups. Each lane's trip count is the same either way."""
    recs = []
    for w in range(warps):
        v = 0
        for lanes in groups:
            for it in range(max(trips_per_lane[lane] for lane in lanes) + 1):
                active = [lane for lane in lanes if trips_per_lane[lane] >= it]
                taken = [lane for lane in active if trips_per_lane[lane] > it]
                recs.append((w // 4, w % 4, 0, v, sum(1 << x for x in active), sum(1 << x for x in taken)))
                v += 1
    return branches._frame(recs, sites, "modelled")


def test_a_lane_dependent_loop_ptxas_unrolled_is_counted_as_its_sass_runs():
    """`for k in range(threadIdx.x % 32)`: ptxas unrolls it by 4 with a remainder loop (five conditional
    jumps on the line); each warp runs 13 of them, 2 uniform, Nsight Compute's 15.38 % on the H200
    (issue 39), where the source has 32 tests per warp, 1 uniform (3.1 %)."""
    compiled = _lane_loop_compiled()
    _, cond = branches.jumps_of(compiled)
    sites = _sites(branch_cases.LANE_LOOP, "lane_loop")
    loop_line = sites[0]["line"]
    assert [s["kind"] for s in sites] == ["for"] and cond == {loop_line: 5}
    unrolled = branches.unrolled_loops(compiled)
    assert unrolled == {loop_line: 4}
    trips = list(range(32))  # lane l runs l iterations
    jumps, uniform = _unrolled_sass_by_hand(trips, 4)
    assert (jumps, uniform) == (13, 2)
    warps = 8  # 2 blocks of 128 threads
    sim_rows = _loop_rows(trips, sites, [list(range(32))], warps)
    assert branches.efficiency(sim_rows) == pytest.approx(100 / 32)
    gpu_like = _loop_rows(trips, sites, [list(range(g, g + 4)) for g in range(0, 32, 4)], warps)
    for rows in (sim_rows, gpu_like):  # however the lanes were grouped, the same SASS count
        got = branches.as_ncu_counts(rows, cond, unrolled, sites)
        assert got["modelled"] == {loop_line: 4} and got["lines"] == [loop_line]
        assert (got["visits"], got["divergent_visits"]) == (warps * jumps, warps * (jumps - uniform))
        assert got["efficiency"] == pytest.approx(100 * uniform / jumps)
        assert round(got["efficiency"], 2) == 15.38
    # without the unrolled loops it is the old per-visit count, the source's 3.1 %
    assert branches.as_ncu_counts(sim_rows, cond)["efficiency"] == pytest.approx(100 / 32)


def test_unrolled_jumps_of_uniform_trip_counts_and_of_lanes_that_never_enter():
    """A trip count the same in every lane (branch_lanes' `range(reps)`, reps=64): every jump uniform,
    19 of them (guard, over, 16 back edges, over the empty remainder); lanes of trip 0 only run the guard."""
    got = branches.unrolled_jumps(np.full(16, 64), np.arange(0, 32, 2), 4)
    assert len(got) == 19 and all(t in (0, a) for a, t in got)
    assert branches.unrolled_jumps(np.zeros(32, np.int64), np.arange(32), 4) == [(0xFFFFFFFF, 0xFFFFFFFF)]
    assert branches.unrolled_jumps(np.zeros(0, np.int64), np.zeros(0, np.int64), 4) == []


def test_no_unrolled_loop_is_claimed_where_the_sass_has_another_shape():
    """Collatz's `while` (entry test and back edge) and a text with no jumps: nothing modelled."""
    if not ptx.tool("ptxas") or not ptx.tool("nvdisasm"):
        pytest.skip("ptxas / nvdisasm not installed here")
    launch = plan_source_launch(
        branch_cases.COLLATZ, "collatz", grid="8", block="256",
        args={"start": "zeros:int64:2048", "steps": "zeros:int64:2048"}, filename="collatz.py",
    )  # fmt: skip
    assert branches.unrolled_loops(ptx.source_asm(launch.request("sim"))) == {}
    assert branches.unrolled_loops({"sass": "", "filename": "x.py"}) == {}
