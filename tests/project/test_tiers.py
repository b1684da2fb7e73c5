"""The suite's two tiers (tests/tiers.py): the list of measured-slow tests names real tests, the tool that
writes it reads pytest's durations, and the README's command leaves them out while --full runs them."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import KEEP, QUICK_BUILTINS, function_of, listed_slow

from devtools import slow_tests

ROOT = Path(__file__).resolve().parents[2]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}::{n.name}" for n in cls.body if isinstance(n, ast.FunctionDef)}
    return names


def test_every_listed_slow_test_and_kept_test_exists():
    listed = listed_slow()
    assert len(listed) > 10
    for name in [*listed, *KEEP]:
        path, function = name.split("::", 1)
        assert function in _test_functions(ROOT / path), name  # a renamed test would drop out silently
    assert not KEEP & listed


def test_the_quick_builtins_are_built_in_kernels():
    from visualizer.specs.catalog import KERNELS

    assert QUICK_BUILTINS <= set(KERNELS)


def test_durations_are_summed_per_test_and_averaged_per_function():
    log = [
        "============================= slowest durations ==============================",
        "6.00s call     tests/a/test_x.py::test_big[1]",
        "1.50s setup    tests/a/test_x.py::test_big[1]",
        "2.00s call     tests/a/test_x.py::test_big[2]",
        "0.40s call     tests/a/test_x.py::test_small",
        "9.00s call     tests/a/test_x.py::test_kept",
        "(12 durations < 0.005s hidden.  Use -vv to show these durations.)",
    ]
    seconds = slow_tests.read_durations(log)
    assert seconds["tests/a/test_x.py::test_big[1]"] == pytest.approx(7.5)
    got = slow_tests.slow_functions(seconds, 4.5, keep={"tests/a/test_x.py::test_kept"})
    assert got == [("tests/a/test_x.py::test_big", pytest.approx(4.75), 2)]  # (7.5 + 2) / 2


def test_the_tool_says_bad_input_in_one_line_with_exit_2(tmp_path):
    empty = tmp_path / "log.txt"
    empty.write_text("no durations here\n")
    for arg in (str(empty), str(tmp_path / "missing.txt")):
        proc = subprocess.run(
            [sys.executable, "-m", "devtools.slow_tests", arg], cwd=ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc


def test_the_quick_tier_leaves_slow_tests_out_and_full_runs_them():
    def collected(*extra):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", *extra,
             "tests/engine/test_sandbox.py"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:]
        return {line for line in proc.stdout.splitlines() if "::" in line}, proc.stdout

    quick, out = collected()
    full, _ = collected("--full")
    left_out = {t for t in full if function_of(t) in listed_slow()}
    assert left_out and not left_out & quick and quick | left_out == full
    assert f"{len(left_out)} deselected" in out
    assert "quick tier" in out and "--full" in out  # says what it left out, and how to run it
