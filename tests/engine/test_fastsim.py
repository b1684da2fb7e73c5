"""visualizer.engine.sim.fastsim against the stock numba-cuda simulator: the same kernels, each engine in its own
process (fastsim is installed by monkeypatching), results compared exactly.

Also the places where fastsim differs on purpose (per-block poisoned shared memory, exceptions stock
loses, deadlock and runaway reports), checked on each engine.
"""

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
CASES_PY = HERE / "fastsim_cases.py"
sys.path.insert(0, str(HERE))
import fastsim_cases  # noqa: E402  (names only: the kernels run in subprocesses)

DIVERGENT = {
    "shared_first_read",
    "shared_first_read_int",
    "dynamic_shared_first_read",
    "two_arg_exception",
    "votes_with_exited_threads",
    "sys_exit_ends_the_thread",
}
SAME = [name for name in fastsim_cases.CASES if name not in DIVERGENT]


def run_engines(tmp_path, jobs: dict[str, tuple[str, list[str], dict]]) -> dict:
    """Run every job (engine, case names, extra env) in its own process at once; {job: results}."""
    procs = {}
    for job, (engine, names, env) in jobs.items():
        out = tmp_path / f"{job}.pkl"
        procs[job] = (
            subprocess.Popen(
                [sys.executable, str(CASES_PY), engine, str(out), *names],
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            out,
        )
    results = {}
    for job, (proc, out) in procs.items():
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"{job}: the engine process hung")
        assert proc.returncode == 0, f"{job} failed:\n{err[-3000:]}"
        results[job] = pickle.loads(out.read_bytes())
    return results


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return run_engines(
        tmp_path_factory.mktemp("fastsim"), {"stock": ("stock", [], {}), "fast": ("fast", [], {})}
    )


def assert_same(stock, fast, where=""):
    if isinstance(stock, dict):
        assert isinstance(fast, dict) and stock.keys() == fast.keys(), f"{where}: {stock} vs {fast}"
        for k in stock:
            assert_same(stock[k], fast[k], f"{where}.{k}")
    elif isinstance(stock, np.ndarray):
        assert fast.dtype == stock.dtype, where
        np.testing.assert_array_equal(fast, stock, err_msg=where)
    else:
        assert fast == stock, where


@pytest.mark.parametrize("name", SAME)
def test_same_result_as_stock(engines, name):
    stock, fast = engines["stock"][name], engines["fast"][name]
    if name == "debug_divide_by_zero":
        # several threads divide by zero: stock reports whichever its polling finds first
        assert stock["raised"] == fast["raised"] == "FloatingPointError"
        for r in (stock, fast):
            assert re.match(r"tid=\[\d, 0, 0\] ctaid=\[0, 0, 0\]: divide by zero", r["message"])
        return
    assert_same(stock, fast, name)


def test_the_cases_test_something(engines):
    stock = engines["stock"]
    # the vote probe: exited threads do not vote (stock's "and" counts them as false); the
    # first fastsim carried block 0's votes over and gave [32, 32, 32], [1, 1, 1], [1, 1, 1]
    np.testing.assert_array_equal(stock["votes_with_exited_threads"]["count"], [32, 16, 16])
    np.testing.assert_array_equal(stock["votes_with_exited_threads"]["and"], [1, 0, 0])
    np.testing.assert_array_equal(stock["votes_with_exited_threads"]["or"], [1, 0, 0])
    np.testing.assert_array_equal(stock["votes_mixed"]["and"][1:3], [1, 0])
    np.testing.assert_array_equal(stock["spin_lock"]["total"], [32])
    np.testing.assert_array_equal(stock["block_order"]["order"], [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11])
    assert stock["exception_one_thread"] == {
        "raised": "ValueError",
        "message": "tid=[5, 0, 0] ctaid=[1, 0, 0]: boom",
    }
    assert stock["out_of_bounds"]["raised"] == "IndexError"
    assert stock["out_of_bounds"]["message"].startswith("tid=[5, 0, 0] ctaid=[1, 0, 0]:")
    np.testing.assert_array_equal(stock["sys_exit_ends_the_thread"]["out"], np.arange(16) % 2 == 0)


def test_shared_memory_is_fresh_and_poisoned_per_block(engines):
    stock, fast = engines["stock"]["shared_first_read"], engines["fast"]["shared_first_read"]
    # stock: block b reads what block b-1 left; a second launch reads the first one's last block
    np.testing.assert_array_equal(stock["out"][1:, 0], [1, 2])
    np.testing.assert_array_equal(stock["out2"][0, 0], 3)
    # fastsim: every block, every launch, starts from the poison value
    assert np.isnan(fast["out"]).all() and np.isnan(fast["out2"]).all()
    stock_int, fast_int = engines["stock"]["shared_first_read_int"], engines["fast"]["shared_first_read_int"]
    np.testing.assert_array_equal(stock_int["out"][1], 7)
    assert (fast_int["out"].view(np.uint32) == 0xDEADBEEF).all()
    stock_dyn, fast_dyn = (
        engines["stock"]["dynamic_shared_first_read"],
        engines["fast"]["dynamic_shared_first_read"],
    )
    np.testing.assert_array_equal(stock_dyn["out"][1], 5.0)  # block 0's writes
    assert np.isnan(fast_dyn["out"]).all()


def test_exited_threads_do_not_vote(engines):
    # stock counts an exited thread's vote as false ("and" 0); fastsim counts live threads only, as
    # the hardware does (tests/engine/test_warp_sim.py checks a kernel of this kind on the GPU)
    fast = engines["fast"]["votes_with_exited_threads"]
    np.testing.assert_array_equal(fast["count"], [32, 16, 16])
    np.testing.assert_array_equal(fast["and"], [1, 1, 1])
    np.testing.assert_array_equal(fast["or"], [1, 0, 0])


def test_sys_exit_is_refused_in_one_line(engines):
    fast = engines["fast"]["sys_exit_ends_the_thread"]["raised"]
    assert fast["raised"] == "NotSimulatedError"
    assert fast["message"] == (
        "tid=[1, 0, 0] ctaid=[0, 0, 0]: sys.exit() in a kernel is not supported: numba cannot compile it "
        "for a GPU (end the thread with return)"
    )


def test_exception_with_two_argument_constructor_is_reported(engines):
    # stock cannot rebuild TwoArgError(msg): its thread dies quietly and the launch "succeeds"
    assert engines["stock"]["two_arg_exception"]["raised"] is None
    fast = engines["fast"]["two_arg_exception"]["raised"]
    assert fast == {"raised": "TwoArgError", "message": "tid=[2, 0, 0] ctaid=[0, 0, 0]: code 42: bad"}


def test_deadlocks_and_runaways_are_reported_not_hung(tmp_path):
    names = [
        "deadlock_plain_spin",
        "deadlock_atomic_spin",
        "runaway",
        "long_atomic_loop",
        "blocks_wait_for_each_other",
        "syncwarp_spin",
        "long_warp_loop",
        "polls_until_another_thread_sets",
        "usable_after_hangs",
    ]
    res = run_engines(
        tmp_path,
        {
            "stall": ("fast", names, {"FASTSIM_STALL_S": "1"}),
            "cpu": (
                "fast",
                ["runaway", "usable_after_hangs"],
                {"FASTSIM_STALL_S": "100", "FASTSIM_CPU_LIMIT_S": "1.5"},
            ),
        },
    )
    stall, cpu = res["stall"], res["cpu"]
    barrier = fastsim_cases.lines_marked("BARRIER LINE")
    spin = fastsim_cases.lines_marked("SPIN LINE")
    for name, (b_line, s_line) in {
        "deadlock_plain_spin": (barrier[0], spin[0]),
        "deadlock_atomic_spin": (barrier[1], spin[1]),
    }.items():
        r = stall[name]
        assert r["raised"]["raised"] == "KernelHangError", r
        msg = r["raised"]["message"]
        # "for 1 s of CPU time", or more (wall clock) on a loaded machine: the limit, not the speed
        assert (
            msg.startswith("deadlock: no thread finished or passed a barrier for ")
            and "in block [0, 0, 0]" in msg
        )
        assert f"16 threads (0,0,0)..(15,0,0) wait at a barrier at fastsim_cases.py:{b_line}" in msg
        # a plain loop is running at its line; a loop of atomics that repeat themselves spins there
        assert (
            f"{'running' if name == 'deadlock_plain_spin' else 'spinning'} at fastsim_cases.py:{s_line}"
            in msg
        )
        assert "\n" not in msg
    # issue 39: spins through atomics and syncwarp are caught like the plain loop, threads and line named
    r = stall["blocks_wait_for_each_other"]["raised"]
    line = fastsim_cases.lines_marked("INTERBLOCK SPIN LINE")[0]
    assert r["raised"] == "KernelHangError" and r["message"].startswith("threads spin: for "), r
    assert f"in block [0, 0, 0]: thread (0,0,0) is spinning at fastsim_cases.py:{line}" in r["message"]
    assert "a wait for another block's write needs a cooperative launch" in r["message"]
    r = stall["syncwarp_spin"]["raised"]
    spin_line = fastsim_cases.lines_marked("SYNCWARP SPIN LINE")[0]
    barrier_line = fastsim_cases.lines_marked("SYNCWARP BARRIER LINE")[0]
    assert r["raised"] == "KernelHangError" and r["message"].startswith("deadlock: "), r
    assert (
        f"63 threads (1,0,0)..(63,0,0) wait at a barrier at fastsim_cases.py:{barrier_line}" in r["message"]
    )
    assert f"thread (0,0,0) is spinning at fastsim_cases.py:{spin_line}" in r["message"]
    # work through warp intrinsics and atomics whose steps differ is no spin, however long it takes
    assert stall["long_warp_loop"]["raised"] is None
    np.testing.assert_array_equal(stall["long_warp_loop"]["out"], sum(range(3000)))  # lane ^ 1 has the same i
    polls = stall["polls_until_another_thread_sets"]
    assert polls["raised"] is None and polls["flag"][0] == 31 * 3000 and (polls["out"] == 1).all()
    runaway_line = fastsim_cases.lines_marked("RUNAWAY LINE")[0]
    assert (
        f"thread (1,0,0) is running at fastsim_cases.py:{runaway_line}"
        in stall["runaway"]["raised"]["message"]
    )
    assert "CPU-time limit of 1.5 s exceeded" in cpu["runaway"]["raised"]["message"]
    for r in (stall, cpu):  # the same process keeps running kernels, exactly
        assert r["usable_after_hangs"]["current_thread_restored"]
        x = np.random.default_rng(6).random(128).astype(np.float32)
        np.testing.assert_allclose(r["usable_after_hangs"]["out"], x.reshape(2, 64).sum(axis=1), rtol=1e-5)


def test_worker_reports_a_hang_in_one_line_and_exits_when_the_kernel_cannot_be_stopped(tmp_path):
    res = run_engines(tmp_path, {"worker": ("worker", ["worker_one_line_error"], {"FASTSIM_STALL_S": "1"})})
    line = res["worker"]["worker_one_line_error"]["line"]
    assert (
        line.startswith("KernelHangError: deadlock: no thread finished or passed a barrier")
        and len(line) <= 500
    )
    # a thread stuck inside a C call cannot be interrupted: the worker exits (the runner restarts it)
    proc = subprocess.run(
        [sys.executable, str(CASES_PY), "worker", str(tmp_path / "stuck.pkl"), "worker_exits_when_stuck"],
        env={**os.environ, "FASTSIM_STALL_S": "1"},
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 70, proc.stderr[-2000:]
    stuck_line = fastsim_cases.lines_marked("STUCK LINE")[0]
    assert f"thread (0,0,0) is running at fastsim_cases.py:{stuck_line}" in proc.stderr
    assert "the thread did not stop, exiting" in proc.stderr


def test_recorder_hooks(tmp_path):
    r = run_engines(tmp_path, {"fast": ("fast", ["recorder_hooks"], {})})["fast"]["recorder_hooks"]
    assert r["blocks"] == [(0, 0, 0), (1, 0, 0)]
    np.testing.assert_array_equal(r["out"], 12)  # a wrapper in between does not alias a and b
    # 2 lines x 4 threads x 2 blocks calls; the first call of each line in each block gets a fresh,
    # fully poisoned array (the later ones see thread 0's write)
    assert r["calls"] == 16 and r["fresh"] == 4


def test_simulator_launch_cap_is_named_in_the_refusal():
    from visualizer.specs import catalog

    assert catalog.SIM_MAX_THREADS == 524_288
    catalog.plan_launch("vector_add", {"n": 524_288, "block": 256}, "sim")  # at the cap: accepted
    with pytest.raises(catalog.LaunchError, match=r"524,289 threads is too many .*\(limit 524,288 threads"):
        catalog.plan_launch("vector_add", {"n": 524_289, "block": 1}, "sim")
