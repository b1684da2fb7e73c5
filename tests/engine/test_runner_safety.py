"""One server, many visitors: replies never cross requests, abandoned runs are killed, the queue
says where you are, and launches are admitted by cost with the limit named."""

import threading

import numpy as np
import pytest

from visualizer.engine.run.runner import KernelError, Runner, RunQueue
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError


class VisitorLeft(Exception):
    """What Streamlit's StopException is to the runner: raised from inside the progress callback."""


def leave(done, total):
    raise VisitorLeft()


def shows(cap, kernel, **params):
    return cap.launch["kernel"] == kernel and all(cap.launch["params"][k] == v for k, v in params.items())


def test_abandoned_capture_never_reaches_the_next_caller():
    # The bug: the abandoned run's reply stayed in the pipe and the next caller read it (n=77 was
    # shown matmul_naive, n=88 was shown n=77's capture, ...).
    with Runner("sim") as runner:
        with pytest.raises(VisitorLeft):
            runner.capture("matmul_naive", {"n": 32, "tile": 8}, progress=leave)
        assert runner.abandoned == 1 and not runner.warm  # killed, not left computing for nobody
        for n in (77, 88, 99):
            cap = runner.capture("vector_add", {"n": n, "block": 32})
            assert shows(cap, "vector_add", n=n), cap.launch["params"]
            np.testing.assert_array_equal(cap.outputs["c"], cap.inputs["a"] + cap.inputs["b"])


def test_keyboard_interrupt_while_waiting_kills_the_worker():
    def interrupt(done, total):
        raise KeyboardInterrupt

    with Runner("sim") as runner:
        runner.info()
        worker = runner._proc
        with pytest.raises(KeyboardInterrupt):
            runner.capture("matmul_naive", {"n": 32, "tile": 8}, progress=interrupt)
        assert worker.poll() is not None  # the process is gone
        assert shows(runner.capture("reduction", {"n": 64, "block": 32}), "reduction", n=64)


def test_a_reply_to_another_request_is_dropped():
    # Defence in depth: even a reply already in the pipe (here a request sent behind the runner's
    # back with its own id) is never taken by a request with a different id.
    with Runner("sim") as runner:
        runner.info()
        stray = {"id": -1, "kernel": "matmul_naive", "params": {"n": 16, "tile": 8}, "time_clean": False}
        runner._conn.send(stray)
        cap = runner.capture("vector_add", {"n": 77, "block": 32})
        assert shows(cap, "vector_add", n=77)


def test_extra_request_options_reach_the_worker_unchanged(monkeypatch):
    sent = []
    with Runner("sim") as runner:
        runner.info()
        send = runner._conn.send
        monkeypatch.setattr(runner._conn, "send", lambda req: (sent.append(req), send(req)))
        runner.capture("vector_add", {"n": 40, "block": 32}, accesses=True, time_clean=False)
    assert sent[0]["accesses"] is True and sent[0]["time_clean"] is False and sent[0]["id"] >= 1


def test_timeout_names_the_limit_and_restarts():
    with Runner("sim", run_timeout=0.5) as runner:
        with pytest.raises(KernelError, match=r"timed out: over the simulator's limit of 0.5 s per run"):
            # fastsim: ~7 s of CPU, far past 0.5 s anywhere (the compiled engine, its build kept on disk by
            # an earlier test, can finish it inside 0.5 s)
            runner.capture("matmul_naive", {"n": 160, "tile": 16}, sim_engine="fastsim")
        assert runner.restarts == 1
        # the restarted worker works; how fast it starts is the machine's business (a hang guard only)
        assert shows(runner.capture("vector_add", {"n": 32, "block": 32}, timeout=600), "vector_add", n=32)


def test_a_run_past_its_cpu_time_is_stopped_by_the_kernel(monkeypatch):
    # the CPU limit holds even when nobody watches the worker (here: a wall limit far away)
    from visualizer.engine.run import runner as runner_module

    monkeypatch.setattr(runner_module, "SIM_RUN_CPU_S", 1)
    with Runner("sim") as runner:
        with pytest.raises(KernelError, match="more than its 1 s of CPU time"):
            runner.capture("matmul_naive", {"n": 160, "tile": 16}, sim_engine="fastsim")  # ~7 s of CPU
        assert runner.restarts == 1
        # fastsim: a fresh worker's compiled engine spends more than this 1 s compiling (its limit is 90 s)
        cap = runner.capture("vector_add", {"n": 32, "block": 32}, sim_engine="fastsim")
        assert shows(cap, "vector_add", n=32)


def test_a_heavy_run_holds_one_worker_not_everyone():
    with RunQueue("sim", workers=2) as queue:
        queue.info()
        heavy_started, heavy_done, stop_heavy = threading.Event(), threading.Event(), threading.Event()
        outcome = {}

        def heavy_progress(done, total):
            heavy_started.set()
            if stop_heavy.is_set():
                raise VisitorLeft()

        def heavy():
            try:
                queue.capture(
                    "flash_attention", {"seq_len": 256, "tile": 32, "heads": 1}, progress=heavy_progress
                )
                outcome["heavy"] = "finished"
            except VisitorLeft:
                outcome["heavy"] = "left"
            finally:
                heavy_done.set()

        t = threading.Thread(target=heavy)
        t.start()
        assert heavy_started.wait(60)
        small = queue.capture("vector_add", {"n": 50, "block": 32})
        assert shows(small, "vector_add", n=50)
        assert not heavy_done.is_set()  # served beside the heavy run, not behind it
        stop_heavy.set()  # its visitor leaves: the run is cancelled and its worker killed
        t.join(60)
        assert outcome["heavy"] == "left" and queue.abandoned == 1
        assert queue.status() == {"workers": 2, "running": 0, "queued": 0}
        assert shows(queue.capture("vector_add", {"n": 51, "block": 32}), "vector_add", n=51)


def test_the_queue_says_how_many_runs_are_ahead_and_a_leaver_leaves_it():
    with RunQueue("sim", workers=1) as queue:
        queue.info()
        release = threading.Event()
        first_running = threading.Event()
        told: dict[str, list] = {"second": [], "third": []}

        def hold(done, total):  # the first run keeps its worker until released
            first_running.set()
            if not release.is_set():
                release.wait(0.5)

        def second():
            cap = queue.capture(
                "vector_add", {"n": 22, "block": 32}, waiting=lambda a, r: told["second"].append((a, r))
            )
            told["second_cap"] = cap

        def third_waiting(ahead, running):
            told["third"].append((ahead, running))
            if len(told["third"]) >= 2:
                raise VisitorLeft()

        first = threading.Thread(
            target=lambda: queue.capture("matmul_naive", {"n": 32, "tile": 8}, progress=hold)
        )
        first.start()
        assert first_running.wait(60)
        t2 = threading.Thread(target=second)
        t2.start()
        while not told["second"]:
            threading.Event().wait(0.05)
        with pytest.raises(VisitorLeft):
            queue.capture("vector_add", {"n": 33, "block": 32}, waiting=third_waiting)
        release.set()
        first.join(60)
        t2.join(60)
    assert told["second"][0] == (1, 1)  # one run ahead: the one running
    assert told["third"][0] == (2, 1)  # the running one and the second visitor's
    assert shows(told["second_cap"], "vector_add", n=22)
    assert queue.status()["queued"] == 0


# --- admission by cost ------------------------------------------------------------------------


def test_record_bytes_match_the_buffers_the_worker_allocates():
    from visualizer.engine.capture.builtin import record_buffers

    for name, params in [
        ("vector_add", {"n": 1000, "block": 96}),
        ("vector_add", {"n": 1 << 20, "block": 256}),  # recorded per warp
        ("matmul_tiled", {"n": 40, "tile": 8}),
        ("reduction", {"n": 1000, "block": 64}),
        ("flash_attention", {"seq_len": 100, "tile": 16}),
        ("naive_attention", {"seq_len": 100, "tile": 16}),
    ]:
        spec, values, launch = catalog.plan_launch(name, params, "gpu")
        allocated = sum(v.nbytes for k, v in record_buffers(spec, launch).items() if k in spec.args)
        assert catalog.record_bytes(spec, launch) == allocated, name


def test_array_bytes_match_the_inputs_the_kernel_gets():
    rng = np.random.default_rng(0)
    for name, params in [
        ("vector_add", {"n": 1000}),
        ("matmul_naive", {"n": 40}),
        ("reduction", {"n": 1000, "block": 64}),
        ("flash_attention", {"seq_len": 100, "heads": 3, "batch": 2}),
        ("naive_attention", {"seq_len": 100, "heads": 3, "batch": 2}),
    ]:
        spec, values, launch = catalog.plan_launch(name, params, "sim")
        inputs = spec.make_inputs(values, rng)
        assert catalog.launch_cost(spec, values, launch).array_bytes == sum(a.nbytes for a in inputs.values())


def test_naive_attention_counts_its_score_matrix():
    p = {"batch": 2, "heads": 3, "seq_len": 500, "tile": 64}
    naive = catalog.launch_cost(*catalog.plan_launch("naive_attention", p, "gpu"))
    flash = catalog.launch_cost(*catalog.plan_launch("flash_attention", p, "gpu"))
    assert naive.array_bytes - flash.array_bytes == 2 * 3 * 500 * 500 * 4


@pytest.mark.parametrize(
    "name, params, backend, words",
    [
        # passes the thread cap (8192 threads) but would run for hours: refused by its work
        ("naive_attention", {"seq_len": 8192, "heads": 1, "tile": 64}, "sim", "thread-steps"),
        ("matmul_naive", {"n": 256, "tile": 16}, "sim", "8 million simulated thread-steps per launch"),
        # 64 x 128 x 32768^2 x 4 bytes of S
        ("naive_attention", {"seq_len": 32768, "heads": 128, "batch": 64}, "gpu", "of the device's"),
        ("vector_add", {"n": 1 << 30, "block": 1024}, "gpu", "trace tables"),
    ],
)
def test_costly_launches_are_refused_with_the_limit_named(name, params, backend, words):
    with pytest.raises(LaunchError, match=words):
        catalog.admit_capture(name, params, backend)


def test_limits_hold_against_the_workers_own_device_memory():
    small = catalog.DeviceLimits(memory_bytes=2**30)
    p = {"seq_len": 8192, "heads": 8, "tile": 64}  # 2 GiB of S
    catalog.plan_launch("naive_attention", p, "gpu")
    with pytest.raises(LaunchError, match="512 MiB per run"):
        catalog.plan_launch("naive_attention", p, "gpu", small)


def test_simulator_memory_limit_is_named():
    cost = catalog.Cost(thread_steps=1.0, array_bytes=300 * 2**20, record_bytes=0, capture_bytes=0)
    with pytest.raises(LaunchError, match="limit of 256 MiB per run"):
        catalog.check_cost("k", cost, catalog.DeviceLimits(), "sim")


def test_the_queue_refuses_before_queueing():
    queue = RunQueue("sim", workers=1)
    with pytest.raises(LaunchError, match="thread-steps"):
        queue.capture("naive_attention", {"seq_len": 8192, "heads": 1, "tile": 64})
    assert not queue.runners[0].warm  # no worker was started for it


@pytest.mark.gpu
def test_gpu_launches_are_checked_against_the_devices_own_memory(gpu_runner):
    memory = gpu_runner.info()["memory_bytes"]
    assert memory > 2**30
    too_big = {"seq_len": 32768, "heads": 128, "batch": 64}  # 32 TiB of S
    with pytest.raises(LaunchError, match=f"of the device's {catalog._mib(memory)}"):
        gpu_runner.capture("naive_attention", too_big)
    assert gpu_runner.capture("vector_add", {"n": 1000, "block": 128}).check["correct"]


def test_stuck_exit_code_is_the_simulators():
    # the runner names a hang for this exit status without importing the simulator engine
    from visualizer.engine.run import runner
    from visualizer.engine.sim import fastsim

    assert runner.STUCK_EXIT_CODE == fastsim.STUCK_EXIT_CODE


def test_the_simulators_limit_is_cpu_time_and_its_wall_limit_only_a_hang_guard():
    """A fine launch on a busy server is not stopped for the load around it: a simulator run is limited by its
    CPU seconds, and the default wall-clock limit sits well above them (room for a run at the CPU limit on a
    machine loaded three times over)."""
    import os
    import subprocess
    import sys

    code = "from visualizer.engine.run import runner as r; print(r.SIM_RUN_TIMEOUT_S, r.SIM_RUN_CPU_S)"
    env = {k: v for k, v in os.environ.items() if k != "VISUALIZER_SIM_TIMEOUT_S"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wall, cpu = map(float, done.stdout.split())
    assert wall >= 3 * cpu
