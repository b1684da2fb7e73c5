"""devtools.stock_suite: numba-cuda's own simulator tests run per engine and counted. One tiny
numba test module on fastsim (in a child process, as the tool runs them all); the counting itself on
made-up unittest cases. Counts, never speed."""

from __future__ import annotations

import ast
import json
import os
import unittest

import pytest

from devtools import stock_suite

LAUNCHES: list = []  # what the made-up cases "launch" (the compiled engine's records in the real tool)


class _Cases(unittest.TestCase):
    __test__ = False  # run by the test below through the tool's result, not collected by pytest

    def test_pass(self):
        LAUNCHES.append({"engine": "compiled", "fallback": None})

    def test_fail(self):
        LAUNCHES.append({"engine": "fastsim", "fallback": "why not"})
        LAUNCHES.append({"engine": "compiled", "fallback": None})
        self.assertEqual(1, 2)

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("not here")
    def test_skip(self):
        pass

    def test_subtest_fails(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 1)

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)


class _SkippedClass(unittest.TestCase):
    __test__ = False

    @classmethod
    def setUpClass(cls):
        raise unittest.SkipTest("class skipped")

    def test_never(self):
        pass


def test_each_outcome_and_its_launches_are_counted():
    LAUNCHES.clear()
    suite = unittest.TestSuite()
    suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(_Cases))
    suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(_SkippedClass))
    result = stock_suite._Result(LAUNCHES)
    suite.run(result)
    rows = {r["test"].rsplit(".", 1)[-1]: r for r in result.rows}
    assert {k: r["outcome"] for k, r in rows.items() if k.startswith("test_")} == {
        "test_pass": "passed", "test_fail": "failed", "test_error": "errored", "test_skip": "skipped",
        "test_subtest_fails": "failed", "test_xfail": "expected_failure",
    }  # fmt: skip
    assert "RuntimeError: boom" in rows["test_error"]["message"]
    assert rows["test_pass"]["launches"] == {"compiled": 1, "fastsim": 0}
    assert rows["test_fail"]["launches"] == {"compiled": 1, "fastsim": 1}
    assert rows["test_fail"]["fallbacks"] == {"why not": 1}
    assert "launches" not in rows["test_error"]
    # the class whose setUpClass skipped: one row, skipped, none of its tests started
    assert [r["outcome"] for r in result.rows if "_SkippedClass" in r["test"]] == ["skipped"]

    s = stock_suite.summarize([{"module": "m", "engine": "compiled", "tests": result.rows}])
    assert (s["run"], s["passed"], s["failed"], s["errored"], s["skipped"]) == (5, 1, 2, 1, 2)
    assert s["tests_with_launches"]["all_compiled"] == 1 and s["tests_with_launches"]["mixed"] == 1
    assert s["fallback_reasons"] == {"why not": 1}


def test_pass_on_fastsim_fail_on_compiled_lists_only_those():
    def module(outcomes, **extra):
        return {"module": "pkg.m", "tests": [{"test": f"pkg.m.C.{k}", "outcome": v} for k, v in outcomes.items()],
                **extra}  # fmt: skip

    fast = [module({"a": "passed", "b": "passed", "c": "failed", "d": "passed"})]
    comp = [module({"a": "passed", "b": "failed", "c": "failed", "d": "expected_failure"})]
    worse = stock_suite.compare({"fastsim": fast, "compiled": comp})
    assert [w["test"] for w in worse] == ["pkg.m.C.b"]
    assert stock_suite.compare({"fastsim": fast, "compiled": []}) == []  # not run there (yet): not compared
    timed_out = [{"module": "pkg.m", "timed_out": True, "tests": []}]
    worse = stock_suite.compare({"fastsim": fast, "compiled": timed_out})
    assert {w["test"]: w["outcome"] for w in worse} == {f"pkg.m.C.{k}": "timed out" for k in "abd"}
    # split runs joined: a module run again to the end replaces its time-out, not the other way round
    part = {"versions": {}, "timeout_s": 1, "rows": {"fastsim": fast, "compiled": timed_out}}
    again = {"versions": {}, "timeout_s": 1, "rows": {"compiled": comp}}
    for order in ([part, again], [again, part]):
        joined = stock_suite.merge(order)
        assert joined["rows"]["compiled"] == comp and [
            w["test"] for w in joined["pass_fastsim_not_compiled"]
        ] == ["pkg.m.C.b"]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert stock_suite.main(["--engine", "gpu", "--out", str(tmp_path / "r.json")]) == 2
    assert "unknown engine 'gpu'" in capsys.readouterr().err
    if _has_filecheck():
        assert stock_suite.main(["--modules", "test_nonesuch", "--out", str(tmp_path / "r.json")]) == 2
        assert "unknown numba-cuda test module" in capsys.readouterr().err


def _has_filecheck() -> bool:
    try:
        import filecheck  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_filecheck(), reason="numba-cuda's tests need filecheck (requirements-bench.txt)")
def test_one_numba_module_on_fastsim_is_counted(tmp_path):
    module = "numba.cuda.tests.cudasim.test_cudasim_issues"
    out = tmp_path / "results.json"
    assert (
        stock_suite.main(
            ["--engine", "fastsim", "--modules", "test_cudasim_issues", "--out", str(out), "--timeout", "600"]
        )
        == 0
    )  # fmt: skip  (a hang guard, not a speed limit)
    data = json.loads(out.read_text())
    # the tests the module defines, read from its source: each one is counted once
    path = os.path.join(stock_suite._test_dir("numba.cuda.tests.cudasim"), "test_cudasim_issues.py")
    defined = {n.name for n in ast.walk(ast.parse(open(path).read())) if isinstance(n, ast.FunctionDef)
               and n.name.startswith("test_")}  # fmt: skip
    rows = data["rows"]["fastsim"]
    assert [r["module"] for r in rows] == [module]
    assert {t["test"].rsplit(".", 1)[-1] for t in rows[0]["tests"]} == defined
    s = data["engines"]["fastsim"]
    assert s["modules"] == 1 and s.get("modules_timed_out", 0) == 0
    assert s["run"] + s["skipped"] == len(defined)
    assert (
        s["passed"] + s["failed"] + s["errored"] + s["expected_failure"] + s["unexpected_success"] == s["run"]
    )
    assert s["passed"] == s["run"] > 0  # fastsim passes this module today (docs/benchmarks.md)
    assert data["versions"]["numba-cuda"] and data["pass_fastsim_not_compiled"] == []
