"""The quick tier's cut: ``python -m devtools.slow_tests LOG [LOG ...] > tests/slow_tests.txt``.

Each LOG is the output of ``python -m pytest -n auto --durations=0`` (with ``--full``, or without: the
quick tier) on a 2-core machine with an empty compiled-kernel cache (``XDG_CACHE_HOME`` pointing at a
new folder): a fresh clone's first run, the run a newcomer makes. A test's time is setup, call and
teardown together (wall time, so a test that waits out a limit counts), its longest over the logs. A
test function whose tests took more than ``--over`` seconds each on average is written out;
tests/conftest.py marks it slow, and the README's test command leaves it to ``--full`` and CI. Names in
``tests/tiers.py``'s KEEP stay quick whatever they took.

Why more than one log: a kernel's first build costs seconds and falls on the first test that needs it,
so leaving one test out moves that cost onto the next one; a log of the quick tier's own fresh run finds
those (the list in tests/slow_tests.txt is the union of a full run's and the quick tier's).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict

from devtools import ROOT

sys.path.insert(0, str(ROOT / "tests"))  # tests/ is not a package
from tiers import KEEP, function_of  # noqa: E402

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(tests/\S+::\S+)")


def read_durations(lines) -> dict[str, float]:
    """Each test's setup + call + teardown seconds, by node id."""
    seconds: dict[str, float] = defaultdict(float)
    for line in lines:
        m = LINE.match(line)
        if m:
            seconds[m.group(3)] += float(m.group(1))
    return seconds


def slow_functions(seconds: dict[str, float], over: float, keep=frozenset()) -> list[tuple[str, float, int]]:
    per_function: dict[str, list[float]] = defaultdict(list)
    for nodeid, s in seconds.items():
        per_function[function_of(nodeid)].append(s)
    out = [
        (fn, sum(v) / len(v), len(v))
        for fn, v in per_function.items()
        if sum(v) / len(v) > over and fn not in keep
    ]
    return sorted(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.slow_tests", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="pytest --durations=0 output")
    parser.add_argument("--over", type=float, default=4.5, help="seconds a test takes on average (4.5)")
    args = parser.parse_args(argv)
    seconds: dict[str, float] = {}
    for log in args.logs:
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                these = read_durations(f)
        except OSError as exc:
            print(f"slow_tests: cannot read {log}: {exc.strerror}", file=sys.stderr)
            return 2
        if not these:
            print(f"slow_tests: {log} has no --durations=0 lines", file=sys.stderr)
            return 2
        for nodeid, s in these.items():
            seconds[nodeid] = max(s, seconds.get(nodeid, 0.0))
    print(f"# tests over {args.over:g} s each on average (python -m devtools.slow_tests; tests/tiers.py)")
    for fn, mean, count in slow_functions(seconds, args.over, KEEP):
        print(f"{fn}  # {mean:.1f} s x {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
