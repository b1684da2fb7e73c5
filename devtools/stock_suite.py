"""numba-cuda's own simulator tests (``numba.cuda.tests.cudapy`` and ``cudasim``, shipped inside the
installed package) run on each simulator engine: ``stock`` (numba-cuda's simulator as released),
``fastsim`` (visualizer/engine/sim/fastsim.py) and ``compiled`` (visualizer/engine/compiled/, fastsim
behind it). Counts per engine, which launches the compiled engine ran and why it fell back, and the tests
that pass on fastsim but not on compiled (docs/benchmarks.md).

    python -m devtools.stock_suite [--engine stock,fastsim,compiled] [--modules test_sync,...]
        [--jobs N] [--timeout S] --out results.json
    python -m devtools.stock_suite --merge a.json b.json --out results.json   (split runs joined)

Each test module runs in a fresh process of its own (the engine installed before numba's tests import),
bounded by ``--timeout`` CPU seconds (and a wall-clock guard of ``WALL_FACTOR`` times that): a hang is
counted as "timed out", never stops the run. The tests need
the ``filecheck`` package (requirements-bench.txt). Not part of the pytest suite (minutes per engine).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from devtools import child_env  # the child runs in a temporary directory: the checkout on its path

ENGINES = ("stock", "fastsim", "compiled")
PACKAGES = ("numba.cuda.tests.cudapy", "numba.cuda.tests.cudasim")
OUTCOMES = ("passed", "failed", "errored", "skipped", "expected_failure", "unexpected_success")
MESSAGE_MAX = 300  # characters kept of a failure's last line
WALL_FACTOR = 6.0  # a module's wall-clock guard, in multiples of its CPU limit (2 shared cores)


def _test_dir(package: str) -> str:
    """The folder of one of numba-cuda's test packages, found without importing it (its import pulls in
    numba.cuda, which must wait for the worker's environment)."""
    import importlib.util

    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("numba is not installed")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, *package.split(".")[1:])
        if os.path.isdir(path):
            return path
    raise SystemExit(f"{package} is not installed (numba-cuda ships it)")


def all_modules() -> list[str]:
    """Every test module of numba-cuda's simulator-capable test packages, as dotted names."""
    names = []
    for package in PACKAGES:
        for f in sorted(os.listdir(_test_dir(package))):
            if f.startswith("test_") and f.endswith(".py"):
                names.append(f"{package}.{f[:-3]}")
    return names


def _resolve(name: str, known: list[str]) -> str:
    if name in known:
        return name
    matches = [m for m in known if m.rsplit(".", 1)[-1] == name]
    if len(matches) != 1:
        raise ValueError(f"unknown numba-cuda test module {name!r}")
    return matches[0]


# ------------------------------------------------------------------------------------------ worker


class _Result(unittest.TestResult):
    """Each test's outcome and, with the compiled engine installed, the launches it made."""

    def __init__(self, launches: list, after_test=None):
        super().__init__()
        self.rows: list[dict] = []
        self._after_test = after_test  # called with the rows after every test (a module cut short keeps them)
        self._launches = launches
        self._row: dict = {}
        self._start = 0

    def _row_for(self, test) -> dict:
        """The row of ``test``; a new one for a test that never started (a class-level skip or error)."""
        if self._row.get("test") != test.id():
            self._row = {"test": test.id(), "outcome": "passed"}
            self._start = len(self._launches)
            self.rows.append(self._row)
        return self._row

    def _set(self, test, outcome, err=None, message=None):
        row = self._row_for(test)
        if row["outcome"] in ("failed", "errored") and outcome in ("failed", "errored"):
            return  # the first failure of a test (its subtests) is the one reported
        row["outcome"] = outcome
        if err is not None:
            message = (self._exc_info_to_string(err, test).strip().splitlines() or ["?"])[-1]
        if message is not None:
            row["message"] = str(message)[:MESSAGE_MAX]

    def startTest(self, test):
        super().startTest(test)
        self._row = {}
        self._row_for(test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "failed", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "errored", err)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._set(test, "failed" if issubclass(err[0], test.failureException) else "errored", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skipped", message=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "expected_failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "unexpected_success")

    def stopTest(self, test):
        super().stopTest(test)
        row = self._row_for(test)
        made = self._launches[self._start :]
        if made:
            compiled = sum(1 for e in made if e.get("engine") == "compiled")
            row["launches"] = {"compiled": compiled, "fastsim": len(made) - compiled}
            reasons = [e.get("fallback") or "?" for e in made if e.get("engine") != "compiled"]
            if reasons:
                row["fallbacks"] = dict(collections.Counter(r[:MESSAGE_MAX] for r in reasons))
        if self._after_test is not None:
            self._after_test(self.rows)


def _install(engine: str) -> list:
    """Put ``engine`` in front of numba's simulator before any test imports; the launches list it fills."""
    launches: list = []
    if engine == "fastsim":
        from visualizer.engine.sim import fastsim

        fastsim.install()
    elif engine == "compiled":
        from visualizer.engine.compiled import simulator

        simulator.install(default="compiled")
        record = simulator._record

        def keep(entry: dict) -> None:  # every launch, not just the last KEEP the module holds
            record(entry)
            launches.append({"engine": entry.get("engine"), "fallback": entry.get("fallback")})

        simulator._record = keep
    return launches


def worker(engine: str, module: str, out: str | None = None) -> dict:
    """Run one test module on ``engine`` in this process (NUMBA_ENABLE_CUDASIM=1 set by the parent);
    ``out``: rewritten after every test, so a module stopped at its limit still counts what finished."""
    launches = _install(engine)
    started = time.process_time()
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(module)
    except unittest.SkipTest as e:  # the whole module skips itself on import (as discovery counts it)
        return {"module": module, "engine": engine, "cpu_s": 0.0,
                "tests": [{"test": module, "outcome": "skipped", "message": str(e)[:MESSAGE_MAX]}]}  # fmt: skip
    except Exception as e:  # an import error: counted for the module, as numba's runner does
        return {"module": module, "engine": engine, "import_error": f"{type(e).__name__}: {e}"[:MESSAGE_MAX],
                "tests": []}  # fmt: skip

    def partial(rows):
        _write(out, {"module": module, "engine": engine, "partial": True, "tests": rows})

    result = _Result(launches, partial if out else None)
    suite.run(result)
    return {"module": module, "engine": engine, "cpu_s": round(time.process_time() - started, 2),
            "tests": result.rows}  # fmt: skip


# ------------------------------------------------------------------------------------------ parent


def _cpu_limit(seconds: float):
    """The child's CPU-time limit (SIGXCPU past it): a busy machine stretches wall time, not this."""

    def apply():
        import resource

        limit = max(1, int(seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))

    return apply


def _partial(path: str) -> list[dict]:
    """The tests a stopped worker finished (its last rewrite of ``path``), none if it wrote nothing."""
    try:
        with open(path) as f:
            return json.load(f)["tests"]
    except (OSError, ValueError, KeyError):
        return []


def run_module(engine: str, module: str, timeout: float, wall_factor: float = WALL_FACTOR) -> dict:
    """One module in a fresh process: ``timeout`` CPU seconds, and ``wall_factor`` times that of wall
    time as a guard against a process that waits without spending CPU."""
    env = child_env({**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
                     "VISUALIZER_COMPILED_CACHE": "off"})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="stock-suite-") as tmp:
        out = os.path.join(tmp, "module.json")
        cmd = [sys.executable, "-m", "devtools.stock_suite", "--worker", module, "--engine", engine,
               "--out", out]  # fmt: skip
        started = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout * wall_factor,
                               cwd=tmp, preexec_fn=_cpu_limit(timeout))  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"module": module, "engine": engine, "timed_out": "wall", "tests": _partial(out),
                    "wall_s": round(timeout * wall_factor, 1)}  # fmt: skip
        wall = round(time.monotonic() - started, 1)
        if p.returncode == -signal.SIGXCPU:
            return {
                "module": module,
                "engine": engine,
                "timed_out": "cpu",
                "wall_s": wall,
                "tests": _partial(out),
            }
        if p.returncode != 0 and os.path.exists(out):  # died in the middle: what finished, and why
            last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            return {"module": module, "engine": engine, "crashed": last[:MESSAGE_MAX], "wall_s": wall,
                    "tests": _partial(out)}  # fmt: skip
        if not os.path.exists(out):
            last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            return {"module": module, "engine": engine, "crashed": last[:MESSAGE_MAX], "wall_s": wall,
                    "tests": []}  # fmt: skip
        with open(out) as f:
            row = json.load(f)
        row["wall_s"] = wall
        return row


def summarize(modules: list[dict]) -> dict:
    """One engine's counts from its modules' rows."""
    counts = collections.Counter()
    launch_tests = collections.Counter()
    reasons = collections.Counter()
    for m in modules:
        counts["modules"] += 1
        for key in ("timed_out", "crashed", "import_error"):
            if m.get(key):
                counts[f"modules_{key}"] += 1
        for t in m["tests"]:
            counts["run"] += t["outcome"] != "skipped"
            counts[t["outcome"]] += 1
            launches = t.get("launches")
            if launches:
                if launches["fastsim"] == 0:
                    launch_tests["all_compiled"] += 1
                elif launches["compiled"] == 0:
                    launch_tests["all_fastsim"] += 1
                else:
                    launch_tests["mixed"] += 1
                launch_tests["launches_compiled"] += launches["compiled"]
                launch_tests["launches_fastsim"] += launches["fastsim"]
            for why in t.get("fallbacks", {}):
                reasons[why] += 1  # tests, not launches, that fell back for this reason
    out = {k: counts.get(k, 0) for k in ("modules", "run", *OUTCOMES)}
    out.update({k: v for k, v in counts.items() if k.startswith("modules_")})
    out["cpu_s"] = round(sum(m.get("cpu_s", 0.0) for m in modules), 1)
    out["wall_s"] = round(sum(m.get("wall_s", 0.0) for m in modules), 1)
    if launch_tests:
        out["tests_with_launches"] = {k: launch_tests.get(k, 0) for k in
                                      ("all_compiled", "mixed", "all_fastsim", "launches_compiled",
                                       "launches_fastsim")}  # fmt: skip
        out["fallback_reasons"] = dict(reasons.most_common())
    return out


def compare(by_engine: dict, good: str = "fastsim", new: str = "compiled") -> list[dict]:
    """Tests that pass on ``good`` and do not pass on ``new`` (each a bug or a missing fallback)."""
    if good not in by_engine or new not in by_engine:
        return []

    def outcomes(rows):
        res = {}
        for m in rows:
            for t in m["tests"]:
                res[t["test"]] = t
            if m.get("timed_out") or m.get("crashed"):
                res[m["module"]] = {"outcome": "timed out" if m.get("timed_out") else "crashed",
                                    "message": m.get("crashed", "")}  # fmt: skip
        return res

    a, b = outcomes(by_engine[good]), outcomes(by_engine[new])
    done = {m["module"] for m in by_engine[new]}  # a module not run (yet) on the new engine is not compared
    worse = []
    for name, t in sorted(a.items()):
        module = next((m for m in done if name.startswith(m + ".")), None)
        if t["outcome"] != "passed" or module is None:
            continue
        other = b.get(name) or b.get(
            module, {"outcome": "missing"}
        )  # missing: its module timed out or crashed
        if other["outcome"] not in ("passed", "expected_failure"):
            worse.append({"test": name, "outcome": other["outcome"], "message": other.get("message", ""),
                          "fallbacks": other.get("fallbacks", {})})  # fmt: skip
    return worse


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def merge(parts: list[dict]) -> dict:
    """Split runs (modules on several runners) as one: each engine's module rows, the first run of each
    module kept unless it timed out or crashed and a later one did not; the counts and the comparison
    redone."""
    rows: dict[str, dict[str, dict]] = {}
    for part in parts:
        for engine, modules in part["rows"].items():
            for m in modules:
                kept = rows.setdefault(engine, {}).get(m["module"])
                cut = kept is not None and (kept.get("timed_out") or kept.get("crashed"))
                if kept is None or cut and (not (m.get("timed_out") or m.get("crashed"))
                                            or len(m["tests"]) > len(kept["tests"])):  # fmt: skip
                    rows[engine][m["module"]] = m  # a module run again with more time replaces its time-out
    joined = {e: sorted(ms.values(), key=lambda r: r["module"]) for e, ms in rows.items()}
    return {"versions": parts[0]["versions"], "timeout_s": parts[0]["timeout_s"],
            "modules": sorted({m for ms in rows.values() for m in ms}), "rows": joined,
            "engines": {e: summarize(r) for e, r in joined.items()},
            "pass_fastsim_not_compiled": compare(joined)}  # fmt: skip


def _print_summary(data: dict) -> None:
    for e, s in data["engines"].items():
        print(f"{e}: run {s['run']}, passed {s['passed']}, failed {s['failed']}, errored {s['errored']}, "
              f"skipped {s['skipped']}, modules timed out {s.get('modules_timed_out', 0)}")  # fmt: skip
    if data["pass_fastsim_not_compiled"]:
        print(f"pass on fastsim, not on compiled: {len(data['pass_fastsim_not_compiled'])}")


def _write(path: str, data: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".stock-suite-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.stock_suite", description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=",".join(ENGINES), help="comma-separated: stock, fastsim, compiled")
    ap.add_argument("--modules", default="", help="comma-separated test modules (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="modules run at once (default 1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="CPU seconds per module (default 300)")
    ap.add_argument("--out", required=True, help="results JSON (rewritten after every module)")
    ap.add_argument(
        "--merge", nargs="+", metavar="RESULTS", help="no run: results files of split runs joined"
    )
    ap.add_argument("--worker", metavar="MODULE", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    engines = [e.strip() for e in a.engine.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        print(f"error: unknown engine {bad[0] if bad else a.engine!r} (known: {', '.join(ENGINES)})",
              file=sys.stderr)  # fmt: skip
        return 2
    if a.worker:
        _write(a.out, worker(engines[0], a.worker, a.out))
        return 0
    if a.merge:
        try:
            data = merge([_read(p) for p in a.merge])
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"error: cannot merge: {e}"[:MESSAGE_MAX], file=sys.stderr)
            return 2
        _write(a.out, data)
        _print_summary(data)
        return 0
    if a.jobs < 1 or a.timeout <= 0:
        print("error: --jobs and --timeout must be positive", file=sys.stderr)
        return 2
    try:
        import filecheck  # noqa: F401  (numba-cuda's test support imports it)
    except ImportError:
        print("error: numba-cuda's tests need the filecheck package (pip install -r requirements-bench.txt)",
              file=sys.stderr)  # fmt: skip
        return 2
    known = all_modules()
    try:
        modules = [_resolve(m.strip(), known) for m in a.modules.split(",") if m.strip()] or known
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": sys.version.split()[0]}
    for package in ("numba", "numba-cuda", "numpy"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    rows: dict[str, list[dict]] = {e: [] for e in engines}
    data = {"versions": versions, "modules": modules, "timeout_s": a.timeout, "engines": {}, "rows": rows}

    lock = threading.Lock()

    def one(job):
        engine, module = job
        row = run_module(engine, module, a.timeout)
        with lock:  # the results so far, rewritten after every module: a stopped run keeps them
            rows[engine].append(row)
            data["engines"] = {e: summarize(rows[e]) for e in engines}
            data["pass_fastsim_not_compiled"] = compare(rows)
            _write(a.out, data)
        status = "timed out" if row.get("timed_out") else ("crashed" if row.get("crashed") else "")
        print(f"{engine:8} {module}: {len(row['tests'])} tests {status}", file=sys.stderr, flush=True)

    jobs = [(e, m) for m in modules for e in engines]  # module by module: a stopped run still compares
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        list(pool.map(one, jobs))
    for e in engines:
        rows[e].sort(key=lambda r: r["module"])
    data["engines"] = {e: summarize(rows[e]) for e in engines}
    data["pass_fastsim_not_compiled"] = compare(rows)
    _write(a.out, data)
    _print_summary(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
