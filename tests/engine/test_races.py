"""Races you can watch happen (issue 25): the same launch run N times in seeded schedules on the
simulator, outputs compared cell by cell; races nobody here wrote, as visitors' sources."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import race_cases  # noqa: E402  (the visitors' sources)
from race_cases import source  # noqa: E402
from tiers import every_builtin

from visualizer.analysis import races
from visualizer.engine.instrument.delays import DelayPass
from visualizer.engine.run.user_runner import UserRunner
from visualizer.specs.catalog import KERNELS, LaunchError, admit_capture
from visualizer.specs.source import plan_source_launch

SOURCES = race_cases.CASES


def launch_plan(name: str, racy: bool):
    _, kernel, grid, block, args, ref, *_ = SOURCES[name]
    return plan_source_launch(
        source(name, racy), kernel, grid=grid, block=block, args=args, reference=[ref], filename=f"{name}.py"
    )


@pytest.fixture(scope="module")
def runner(sim_runner):
    """conftest's session simulator runner (one worker for the whole suite), by this file's name."""
    return sim_runner


@pytest.fixture(scope="module")
def user_runner():
    with UserRunner("sim") as r:
        yield r


# --- the built-in race demo ------------------------------------------------------------------


def test_reduction_race_gives_several_outputs_over_8_seeded_runs_and_replays_bit_for_bit(runner):
    cap = runner.capture("reduction_race", {"n": 1000, "block": 128}, runs=8, schedule_seed=1)
    r = cap.launch["runs"]
    assert r["count"] == 8 and r["seed"] == 1
    assert cap.runs["partial"].shape == (8, 8)
    assert r["distinct"] >= 2 and r["differing_elements"] >= 1
    # run 0 is the capture itself: its tables and its outputs are the first run's
    np.testing.assert_array_equal(cap.runs["partial"][0], cap.outputs["partial"])
    assert len(r["correct"]) == 8 and not all(r["correct"])
    again = runner.capture("reduction_race", {"n": 1000, "block": 128}, runs=8, schedule_seed=1)
    np.testing.assert_array_equal(again.runs["partial"], cap.runs["partial"])  # the same schedules
    other = runner.capture("reduction_race", {"n": 1000, "block": 128}, runs=8, schedule_seed=2)
    assert not np.array_equal(other.runs["partial"], cap.runs["partial"])  # other seeds, other orders


def test_race_free_reduction_gives_exactly_one_output_in_8_seeded_runs(runner):
    cap = runner.capture("reduction", {"n": 1000, "block": 128}, runs=8, schedule_seed=1)
    assert cap.launch["runs"]["distinct"] == 1 and cap.launch["runs"]["differing_elements"] == 0
    assert all(cap.launch["runs"]["correct"])
    table = races.runs_table(cap.runs, cap.launch["runs"]["correct"], cap.launch["runs"]["schedules"], "sim")
    assert races.verdict(table) == "Right in all 8 runs, with the same output, bit for bit."
    # the schedules really differed: each run drew its own warp steps
    assert len({json.dumps(s) for s in cap.launch["runs"]["schedules"]}) > 1


def test_unseeded_runs_keep_the_fixed_order(runner):
    plain = runner.capture("reduction_race", {"n": 512, "block": 128})
    runs = runner.capture("reduction_race", {"n": 512, "block": 128}, runs=3)
    assert runs.launch["runs"]["distinct"] == 1  # no seed: the simulator's one linear order, every run
    np.testing.assert_array_equal(runs.runs["partial"][2], plain.outputs["partial"])


def test_runs_cost_is_n_times_one_launch_under_the_admission_rules():
    params = {"n": 2**12, "block": 128}
    _, _, _, one = admit_capture("reduction_race", params, "sim")
    _, _, _, eight = admit_capture("reduction_race", params, "sim", runs=8)
    assert eight.thread_steps == 8 * one.thread_steps
    with pytest.raises(LaunchError, match="run 64 times would take about"):
        admit_capture("reduction_race", {"n": 2**16, "block": 128}, "sim", runs=64)
    with pytest.raises(LaunchError, match="runs must be"):
        admit_capture("reduction_race", params, "sim", runs=65)


# --- visitors' kernels: the Your-kernel path --------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_visitor_races_differ_over_8_seeds_and_their_fixes_do_not(user_runner, name):
    racy = user_runner.capture_source(launch_plan(name, racy=True), runs=8, schedule_seed=5, time_clean=False)
    r = racy.launch["runs"]
    assert r["distinct"] >= 2, r
    assert not all(r["correct"]), r["correct"]
    again = user_runner.capture_source(
        launch_plan(name, racy=True), runs=8, schedule_seed=5, time_clean=False
    )
    for k in racy.runs:
        np.testing.assert_array_equal(again.runs[k], racy.runs[k])
    fixed = user_runner.capture_source(
        launch_plan(name, racy=False), runs=8, schedule_seed=5, time_clean=False
    )
    assert fixed.launch["runs"]["distinct"] == 1 and all(fixed.launch["runs"]["correct"])


# --- the tables ------------------------------------------------------------------------------


def test_cells_and_verdict_on_a_hand_made_stack():
    runs = {"out": np.array([[1, 2, 3], [1, 2, 4], [1, 5, 6], [1, 2, 3]], np.float32)}
    s = races.summary(runs)
    assert s == {"count": 4, "distinct": 3, "differing_elements": 2}
    cells = races.cells(runs, "out", "simulated")
    assert cells["distinct"].tolist() == [1, 2, 3] and cells["differs"].tolist() == [False, True, True]
    t = races.runs_table(runs, [True, False, False, True], None, "simulated")
    assert t["outcome"].tolist() == [0, 1, 2, 0]
    assert races.verdict(t) == "Right in 2 of 4 runs — and wrong in two (3 different outputs)."
    one = races.runs_table(runs, [True, True, False, True], None, "simulated")
    assert races.verdict(one).startswith("Right in 3 of 4 runs — and wrong in one")
    nan = {"x": np.array([[np.nan], [np.nan]], np.float32)}
    assert races.summary(nan)["distinct"] == 1  # NaN equals NaN, bit for bit


def test_hazards_join_the_cells_that_differ(runner):
    cap = runner.capture("reduction_race", {"n": 512, "block": 128}, runs=8, schedule_seed=2, accesses=True)
    cells = races.cells(cap.runs, "partial", cap.source)
    joined = races.hazards_at(cells, cap.hazards, cap.accesses)
    assert set(joined["index"]) == set(cells.loc[cells["differs"], "index"])
    assert (joined["space"] == "shared").all() and set(joined["kind"]) >= {"RAW"}
    assert isinstance(races.hazard_summary(joined), pd.DataFrame)


# --- the command line ------------------------------------------------------------------------


def test_cli_runs_writes_runs_npz_and_refuses_too_many_runs_in_one_line(tmp_path):
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "visualizer", "capture", "reduction_race", "--backend", "sim", "--param",
           "n=512", "--out", str(out), "--runs", "4", "--seed", "3"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    launch = json.loads((out / "launch.json").read_text())
    with np.load(out / "runs.npz") as z:
        assert z["partial"].shape == (4, 4)
        assert launch["runs"]["distinct"] == len({z["partial"][i].tobytes() for i in range(4)})
    assert launch["runs"]["count"] == 4 and launch["runs"]["seed"] == 3
    bad = subprocess.run([*cmd[:-4], "--runs", "65"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "runs must be" in bad.stderr


# --- seeded delays before shared accesses and barriers (the GPU's perturbation) ----------------


def _traced_fn(tree, kernel):
    import ast

    from visualizer.engine.instrument.instrumenter import traced_name

    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == traced_name(kernel))


def delay_sites(tree) -> list:
    """The delays pass's (line, kinds) sites in an instrumented module (none: no delays pass)."""
    return tree.vz_info.get("delays", {}).get("sites", [])


def test_instrumenter_puts_a_delay_before_every_load_store_atomic_and_barrier():
    import ast

    from visualizer.engine.instrument.delays import DELAY, DELAY_FN
    from visualizer.engine.instrument.instrumenter import instrument

    tree = instrument(ast.parse(source("matmul", racy=False)), "matmul", passes=(DelayPass(),))
    fn = _traced_fn(tree, "matmul")
    assert fn.args.args[-1].arg == DELAY
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == DELAY_FN]
    # two tile stores (each loading A or B), a barrier, the multiply-add reading both tiles, the
    # second barrier, the store of C
    kinds = ["load+store", "load+store", "barrier", "load", "barrier", "store"]
    assert [what for _, what in delay_sites(tree)] == kinds
    assert sorted(c.args[1].value for c in calls) == list(range(6))
    lines = source("matmul", racy=False).splitlines()
    assert [lines[line - 1].strip() for line, _ in delay_sites(tree)][-1] == "C[y, x] = acc"
    plain = instrument(ast.parse(source("matmul", racy=False)), "matmul")
    assert delay_sites(plain) == [] and DELAY_FN not in ast.unparse(plain)
    # the histogram's global bins: a read-modify-write (racy) or an atomic (fixed), each after the load of x
    racy = instrument(ast.parse(source("histogram", racy=True)), "histogram", passes=(DelayPass(),))
    fixed = instrument(ast.parse(source("histogram", racy=False)), "histogram", passes=(DelayPass(),))
    assert [w for _, w in delay_sites(racy)] == ["load", "load+store"]
    assert [w for _, w in delay_sites(fixed)] == ["load", "atomic"]


def test_each_threads_local_array_is_no_delay_site():
    import ast

    from visualizer.engine.instrument.instrumenter import instrument

    src = """
from numba import cuda, float32

@cuda.jit
def k(a):
    tmp = cuda.local.array(4, float32)
    tmp[0] = 1.0
    a[cuda.grid(1)] = tmp[0]
"""
    tree = instrument(ast.parse(src), "k", passes=(DelayPass(),))
    assert delay_sites(tree) == [(8, "store")]  # a[...] = tmp[0]: the store to a; tmp is the thread's own


def test_delay_tables_are_named_by_seed_and_run_and_vary_what_they_delay():
    import ast

    from visualizer.engine.instrument.delays import DELAY_MAX_NS, DELAY_MIN_NS, DELAY_SLOTS, delay_table
    from visualizer.engine.instrument.instrumenter import instrument

    sites = delay_sites(instrument(ast.parse(source("matmul", racy=True)), "matmul", passes=(DelayPass(),)))
    kinds = [set(w.split("+")) for _, w in sites]
    drawn = [delay_table(7, i, sites) for i in range(32)]
    for table, fields in drawn:
        assert table.shape == (len(sites), DELAY_SLOTS) and table.dtype == np.uint32
        on = [i for i, k in enumerate(kinds) if k & set(fields["delay_kinds"])]
        assert fields["delayed_sites"] == on and fields["delay_kinds"]
        assert not table[[i for i in range(len(sites)) if i not in on]].any()  # a site not drawn never waits
        waits = table[table > 0]
        assert fields["delayed_slots"] == waits.size and waits.size <= len(on) * DELAY_SLOTS
        assert (
            waits.min(initial=DELAY_MIN_NS) >= DELAY_MIN_NS and waits.max(initial=0) <= fields["max_delay_ns"]
        )
    table, fields = delay_table(7, 3, sites)
    again, fields_again = delay_table(7, 3, sites)
    np.testing.assert_array_equal(table, again)  # (seed, run) replays
    assert fields == fields_again
    assert not np.array_equal(table, delay_table(7, 4, sites)[0])
    assert not np.array_equal(table, delay_table(8, 3, sites)[0])
    # over the runs the draws differ in what they delay, how many warps and how long
    assert len({tuple(f["delay_kinds"]) for _, f in drawn}) >= 3
    assert any("load" not in f["delay_kinds"] for _, f in drawn) and any(
        "load" in f["delay_kinds"] for _, f in drawn
    )
    assert {f["max_delay_ns"] for _, f in drawn} == set(DELAY_MAX_NS)
    assert len({f["delay_p"] for _, f in drawn}) == 3
    empty, nothing = delay_table(7, 0, [])  # a kernel with no site: one row that never waits
    assert empty.shape == (1, DELAY_SLOTS) and not empty.any() and nothing["delayed_sites"] == []


def test_delayed_runs_are_named_by_seed_and_run_and_keep_race_free_kernels_right(user_runner):
    from visualizer.engine.instrument.delays import delay_table

    cap = user_runner.capture_source(
        launch_plan("reverse", racy=False), runs=3, schedule_seed=4, delays=True, time_clean=False
    )
    r = cap.launch["runs"]
    assert r["distinct"] == 1 and all(r["correct"])
    assert [w for _, w in r["delay_sites"]] == ["load+store", "barrier", "load+store"]
    sites = [tuple(x) for x in r["delay_sites"]]
    for i, entry in enumerate(r["schedules"]):
        _, fields = delay_table(4, i, sites)
        assert {k: entry[k] for k in fields} == fields and entry["run"] == i and entry["seed"] == 4


def test_builtin_race_demo_takes_the_same_delays_pass_from_its_own_file(runner):
    """Built-in kernels get their delays from the instrumenter pass a visitor's kernel gets
    (engine/instrument/delays.py): sites on kernels/reduction.py's own lines, each run's draw recorded."""
    import inspect

    from visualizer.engine.instrument.delays import delay_table
    from visualizer.kernels import reduction

    cap = runner.capture(
        "reduction_race",
        {"n": 1000, "block": 128},
        runs=3,
        schedule_seed=1,
        delays=True,
        time_clean=False,
        sim_engine="fastsim",  # its schedule entries count fastsim's steps
    )
    r = cap.launch["runs"]
    sites = [tuple(x) for x in r["delay_sites"]]
    lines = inspect.getsource(reduction).splitlines()
    at = {lines[line - 1].strip(): what for line, what in sites}
    assert at["s[tid] += s[tid + stride]  # without the barrier: s[tid + stride] may not be summed yet"] == (
        "load+store"
    )
    assert at["partial[cuda.blockIdx.x] = s[0]"] == "load+store" and at["cuda.syncthreads()"] == "barrier"
    for i, entry in enumerate(r["schedules"]):
        assert entry["steps"] > 0  # still the simulator's seeded interleaving, with the delays on top
        _, fields = delay_table(1, i, sites)
        assert {k: entry[k] for k in fields} == fields
    assert "with seeded per-warp delays (seed 1, run 0..2)" in races.describe(r)[0]
    table = races.runs_table(cap.runs, r["correct"], r["schedules"], cap.source)
    assert table["delays"].tolist() == [
        " and ".join(k + "s" for k in delay_table(1, i, sites)[1]["delay_kinds"]) for i in range(3)
    ]
    fixed = runner.capture(
        "reduction", {"n": 1000, "block": 128}, runs=3, schedule_seed=1, delays=True, time_clean=False
    )
    assert fixed.launch["runs"]["distinct"] == 1 and all(fixed.launch["runs"]["correct"])


def test_describe_names_the_simulators_schedules_and_a_gpus_delays_apart():
    gpu = {"count": 8, "seed": 3, "distinct": 8, "differing_elements": 5, "correct": [False] * 8,
           "schedules": [{"seed": 3, "run": i} for i in range(8)]}  # fmt: skip
    assert (
        "the backend's own schedule:" in races.describe(gpu)[0]
    )  # a seed without delays: no seeded schedule
    delayed = {**gpu, "delay_sites": [[9, "load+store"]]}
    assert (
        "the backend's own schedule with seeded per-warp delays (seed 3, run 0..7)"
        in races.describe(delayed)[0]
    )
    sim = {**gpu, "schedules": [{"seed": 3, "run": i, "steps": 10, "stalls": 1} for i in range(8)]}
    assert races.describe(sim)[0].startswith(
        "runs: 8 of the same launch in seeded schedules (seed 3, run 0..7)"
    )


def test_cli_delays_need_runs_and_a_seed_in_one_line(tmp_path):
    base = [sys.executable, "-m", "visualizer", "capture", "reduction_race", "--backend", "sim", "--out",
            str(tmp_path / "b"), "--delays"]  # fmt: skip
    for extra in ([], ["--runs", "4"], ["--seed", "1"]):
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--delays needs" in done.stderr


# --- the lesson --------------------------------------------------------------------------------


def test_race_runs_lesson_answers_from_its_8_runs(runner):
    from visualizer.analysis import lesson_answers as A
    from visualizer.web.lessons import RACE_RUNS

    v = RACE_RUNS.defaults()
    (r,) = RACE_RUNS.runs(v).values()
    cap = runner.capture(r.kernel, r.params, time_clean=False, **r.options())
    right = A.runs_right(cap)
    assert right.value == sum(cap.launch["runs"]["correct"]) and right.facts["runs"] == 8
    spread = A.runs_spread(cap)
    assert spread.value in RACE_RUNS.questions[0].choices
    assert spread.value == ("all 8" if right.value == 8 else "none" if right.value == 0 else "some")
    assert "seeded schedules (seed 1" in right.source
    text = RACE_RUNS.questions[0].explain(spread, v)
    assert right.facts["verdict"] in text and f"{right.facts['distinct']} different set" in text
    figs = RACE_RUNS.charts({"main": cap}, v, [spread, right])
    assert len(figs) == 2 and all("simulated" in f.layout.title.text for _, f in figs)


def test_cli_runs_a_visitors_source_n_times(tmp_path):
    src = tmp_path / "histogram.py"
    src.write_text(source("histogram", racy=True))
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "visualizer", "capture", "--source", str(src), "--block", "128", "--grid", "2",
           "--arg", "x=arange:int32:256", "--arg", "bins=zeros:int32:4", "--reference",
           "bins=np.bincount(x % 4, minlength=4).astype(np.int32)", "--backend", "sim", "--runs", "8", "--seed",
           "5", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "right in 0 of 8 runs" in done.stdout  # lost updates: wrong, as it should
    launch = json.loads((out / "launch.json").read_text())
    with np.load(out / "runs.npz") as z:
        assert z["bins"].shape == (8, 4) and launch["runs"]["distinct"] >= 2


def test_histogram_race_joins_global_hazards_on_the_cells_at_the_visitors_line(user_runner):
    cap = user_runner.capture_source(
        launch_plan("histogram", racy=True),
        runs=8,
        schedule_seed=5,
        accesses=True,
        time_clean=False,  # the default engine hands the seeded runs to fastsim (a global read-modify-write)
    )
    assert cap.launch["sim_engine"] == "fastsim" and "read-modify-write" in cap.launch["sim_engine_note"]
    cells = races.cells(cap.runs, "bins", cap.source)
    joined = races.hazards_at(cells, cap.hazards, cap.accesses)
    line = 1 + source("histogram", racy=True).splitlines().index("        bins[b] += 1")
    assert cells["differs"].any() and set(joined["index"]) == set(cells.loc[cells["differs"], "index"])
    assert set(joined["via"]) == {"on the cell itself"} and (joined["hazard_array"] == "bins").all()
    assert set(joined["line_a"]) == set(joined["line_b"]) == {line}  # the kernel's line, seeded or not


RACE_FREE = [
    k
    for k, s in KERNELS.items()
    if not s.deliberately_wrong and k not in ("out_of_bounds_write", "flash_attention", "naive_attention")
]  # fmt: skip  (flash_attention_fast stays: its warp shuffles and tensor-core tiles under seeded schedules)


# the heaviest at its defaults, made lighter: one head of two (each head is a grid row of the same work)
LIGHTER = {"flash_attention_fast": {"heads": 1}}


@pytest.mark.parametrize("kernel", every_builtin(RACE_FREE))
def test_every_race_free_builtin_gives_one_output_in_seeded_schedules(runner, kernel):
    cap = runner.capture(kernel, LIGHTER.get(kernel, {}), runs=3, schedule_seed=1, time_clean=False)
    assert cap.launch["runs"]["distinct"] == 1, kernel
    assert all(cap.launch["runs"]["correct"]), kernel
    # really seeded: fastsim's schedule drew its warp steps, or the compiled engine ran its seeded variant
    assert all(
        s["seed"] == 1 and (s.get("steps", 0) > 0 or s.get("engine") == "compiled")
        for s in cap.launch["runs"]["schedules"]
    )


@pytest.mark.parametrize("kernel", every_builtin(RACE_FREE))
def test_every_race_free_builtin_stays_right_with_the_delays_pass(runner, kernel):
    cap = runner.capture(
        kernel, LIGHTER.get(kernel, {}), runs=2, schedule_seed=1, delays=True, time_clean=False
    )
    r = cap.launch["runs"]
    assert r["delay_sites"] and r["distinct"] == 1 and all(r["correct"]), kernel
    assert all(s["delay_slots"] == 256 * len(r["delay_sites"]) for s in r["schedules"])
