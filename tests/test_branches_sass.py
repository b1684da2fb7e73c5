"""The SIMT lens's second number, branch efficiency as Nsight Compute counts it: the lens's visits of
the source lines whose clean build has a conditional jump (analysis/branches.as_ncu_counts), on a
hand-made table and on kernels compiled here for sm_90 (numba -> PTX, ptxas, nvdisasm)."""

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
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
