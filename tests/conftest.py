import os

# In-process kernel imports in tests use the simulator; GPU tests go through the runner, whose
# worker process chooses its own backend. Must be set before numba is imported anywhere.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
# The suite must pass on a loaded machine: the simulator's and the sandbox's wall-clock limits per run
# (300 s, 120 s) become hang guards; the CPU-time limits (runner.SIM_RUN_CPU_S, the sandbox's RLIMIT_CPU,
# fastsim's) still hold, and cost the same CPU seconds however busy the machine is. Tests of a wall
# limit pass theirs explicitly (run_timeout=, timeout=).
os.environ.setdefault("VISUALIZER_SIM_TIMEOUT_S", "600")
os.environ.setdefault("VISUALIZER_USER_TIMEOUT_S", "600")
# The pages' beside-panels read the measured set shipped in visualizer/data/h200 (docs/measured-set.md): the
# suite's page tests see none unless a test points VISUALIZER_MEASURED_SET at one (tests/web/test_app_measured.py),
# so recording the H200's set changes no other test's page.
os.environ.setdefault("VISUALIZER_MEASURED_SET", os.path.join(os.path.dirname(__file__), "no-measured-set"))

import pytest  # noqa: E402
import tiers  # noqa: E402  (tests/tiers.py: the quick tier and --full)

from visualizer.engine.run.runner import Runner, gpu_present  # noqa: E402

SHARED_SCOPES = {"module", "class", "package"}


def pytest_addoption(parser):
    parser.addoption(
        "--full", action="store_true", help="also run the tests marked slow (tests/tiers.py); CI runs --full"
    )


def runs_slow_tests(config) -> bool:
    """--full, a -m of the caller's own, or a test named by its node id (`pytest file::test`) runs them."""
    return bool(config.getoption("--full") or config.option.markexpr or any("::" in a for a in config.args))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    slow_functions = tiers.listed_slow()  # measured slow on a 2-core machine (devtools/slow_tests.py)
    for item in items:
        if tiers.function_of(item.nodeid) in slow_functions:
            item.add_marker(pytest.mark.slow)
    if not runs_slow_tests(config):
        slow = [item for item in items if "slow" in item.keywords]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if "slow" not in item.keywords]
        config._vz_slow_left_out = len(slow)
    # Tests that share a module-scoped fixture (a capture, a server, a cluster) run on one xdist worker,
    # so it is built once rather than once per worker; the rest are handed out one by one, which keeps
    # the workers evenly loaded (pyproject.toml: --dist loadgroup).
    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope in SHARED_SCOPES for fixturedefs in defs.values() for d in fixturedefs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sim_runner():
    with Runner("sim") as runner:
        yield runner


@pytest.fixture(scope="session")
def gpu_runner():
    with Runner("gpu") as runner:
        yield runner


APP_ENTRY = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "visualizer" / "app.py")


def new_app(timeout: int = 600, **query):  # a hang guard, not a speed bar: a loaded 2-core CI compiles slowly
    """The app as AppTest sees it, with these URL parameters set (values as strings), not run yet."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP_ENTRY, default_timeout=timeout)
    for key, value in query.items():
        at.query_params[key] = str(value)
    return at


def open_app(switch_to: str | None = None, *, direct: bool = False, timeout: int = 600, **query):
    """The app after a visit with these URL parameters (``page=`` among them is the URL's), then on
    ``switch_to`` (a file of web/pages, e.g. "grid").

    ``direct``: the link itself opens the page (no first run on the default page). Fails on any
    exception the app raised on the way.
    """
    at = new_app(timeout, **query)
    if not direct or switch_to is None:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if "token" in query:  # that run only judged the key (web/guard.py take_token): now the page
            at.run()
            assert not at.exception, [e.value for e in at.exception]
    if switch_to is not None:
        at.switch_page(f"web/pages/{switch_to}.py").run()
        assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def visitor_runs_on_fastsim(monkeypatch):
    """Visitors' kernels (user_runner) run on fastsim where a test checks the page, the sandbox or the
    link, not the engine: a sandbox compiles every run afresh on the compiled engine (no compiled code
    may cross sandboxes), about 5 CPU-s per build of a small example against well under 1 s on fastsim.
    The compiled engine in the sandbox is tested in test_user_runner.py and test_sim_engine.py."""
    from visualizer.engine.run import user_runner

    monkeypatch.setattr(user_runner, "default_sim_engine", lambda: "fastsim")


def pytest_terminal_summary(terminalreporter, config):
    if runs_slow_tests(config) or hasattr(config, "workerinput"):
        return
    left_out = getattr(config, "_vz_slow_left_out", None)  # None under xdist: the workers collect
    if left_out == 0:
        return
    count = f"{left_out} tests" if left_out is not None else "the tests"
    terminalreporter.write_line(
        f"quick tier: {count} marked slow were left out; `python -m pytest -n auto --full` runs the whole "
        "suite, as CI does (tests/tiers.py)"
    )
