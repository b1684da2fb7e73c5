"""Captures on a real Dask cluster (127.0.0.1 only): one scheduler, two workers, two app replicas.

The load test's visitors are spread over both replicas; each must see exactly the capture it asked
for; a capture made through one replica is served from the cluster's memory through the other; a
Dask worker killed mid-run gives that visitor one line and the next run works; and no process the
test started ever holds a socket to an address off loopback. Skipped without Dask
(requirements-cluster.txt). Also: the pool sized to the machine, and serve's new flags."""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from visualizer.engine.run import runner
from visualizer.tools.loadtest import Server, Visitor, classroom, query
from visualizer.tools.localcluster import LocalCluster, descendants, sockets_off_loopback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- one machine, all of it (no Dask needed) ------------------------------------------------------


def test_simulator_pool_is_sized_to_the_cores_and_the_memory(monkeypatch):
    monkeypatch.delenv(runner.SIM_WORKERS_ENV, raising=False)
    monkeypatch.setattr(runner, "machine_memory_bytes", lambda: 256 * 2**30)
    for cores, want in ((1, 1), (2, 2), (4, 3), (16, 15)):
        monkeypatch.setattr(runner, "machine_cores", lambda c=cores: c)
        assert runner.default_workers("sim") == want
    monkeypatch.setattr(runner, "machine_memory_bytes", lambda: 8 * 2**30)  # 4 workers' worth
    assert runner.default_workers("sim") == 4
    monkeypatch.setenv(runner.SIM_WORKERS_ENV, "7")  # serve --sim-workers 7
    assert runner.default_workers("sim") == 7


def test_one_gpu_worker_per_visible_gpu_each_pinned():
    assert runner.visible_gpus(env=None, count=0) == []
    assert runner.visible_gpus(env="", count=0) == []
    assert runner.visible_gpus(env="2,5", count=2) == ["2", "5"]
    assert runner.visible_gpus(env=" GPU-ab12 , 3 ", count=2) == ["GPU-ab12", "3"]
    assert runner.visible_gpus(env="0,1,2", count=1) == ["0"]  # the driver saw one: the first
    r = runner.Runner("sim", device="5")
    assert r.device == "5"


def _serve(*args):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", "serve", *args, "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--sim-workers", "0"], "--sim-workers 0 is not 1..256"),
        (["--cluster", "http://127.0.0.1:8786"], "is not a Dask scheduler address"),
        (["--cluster", "tcp://127.0.0.1:99999"], "is not a Dask scheduler address"),
        (["--cluster", "tcp://a b:1"], "is not a Dask scheduler address"),
    ],
)
def test_serve_refuses_bad_worker_flags_in_one_line(args, says):
    res = _serve(*args)
    assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_without_a_cluster_the_app_never_imports_dask():
    code = (
        "import sys, visualizer.web.session, visualizer.web.timing, visualizer.engine.run.cluster as c\n"
        "q = c.capture_queue('sim')\n"
        "assert type(q).__name__ == 'RunQueue', q\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]\n"
    )
    env = {k: v for k, v in os.environ.items() if k != runner.CLUSTER_ENV}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


# --- many machines: a real local Dask cluster -------------------------------------------------------


class SocketWatch:
    """Samples the sockets of every process the test started (and their children) until stopped."""

    def __init__(self, roots):
        self.roots = roots  # a callable: the pids started so far
        self.bad: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.3):
            pids = set()
            for pid in self.roots():
                pids |= {pid, *descendants(pid)}
            self.bad.update(sockets_off_loopback(pids))
            self.samples += 1

    def stop(self):
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A scheduler and two workers (a killed worker's task fails at once: allowed-failures 0, so
    the visitor's line is seen), and two app replicas sending captures to it. Skipped without Dask."""
    distributed = pytest.importorskip("distributed")
    logs = tmp_path_factory.mktemp("cluster")
    cluster = LocalCluster(2, log_dir=logs, allowed_failures=0)
    servers = []
    watch = SocketWatch(lambda: [*cluster.pids(), *(s.proc.pid for s in servers)])
    try:
        for r in range(2):
            # fastsim reports each block as it finishes, so a visitor can leave mid-run; the compiled engine
            # runs a launch in one call and may end before any report reaches a replica
            args = ["--cluster", cluster.address, "--sim-engine", "fastsim"]
            servers.append(Server(logs / f"replica-{r}.log", serve_args=args))
        client = distributed.Client(cluster.address, set_as_default=False, timeout=30)
        yield cluster, servers, client, watch
        client.close()
    finally:
        for s in servers:
            s.stop()
        cluster.stop()
        watch.stop()


def _runs(client) -> int:
    from visualizer.engine.run.cluster_worker import worker_runs

    return sum(sum(runs.values()) for runs in client.run(worker_runs).values())


def test_two_replicas_share_the_cluster_and_every_visitor_sees_its_capture(deployment):
    cluster, servers, client, _ = deployment
    res = classroom(12, servers=servers, cluster_pids=cluster.pids)
    wrong = [o for o in res["outcomes"] if not o["correct"]]
    assert res["finished_visitors"] == 12 and not wrong, wrong
    asked = [o for o in res["outcomes"] if o["asked"] is not None]
    assert len(asked) == 10 and all(o["shown"] == o["asked"] for o in asked)
    assert res["left_mid_run"] >= 1  # progress came from the cluster's workers, and visitors left
    assert res["workers_started"] == 0  # no replica ran a capture itself
    assert res["peak_cluster_rss_mb"] > 0 and res["wait_p95_s"] is not None


def test_a_capture_made_through_one_replica_is_a_cache_hit_through_the_other(deployment):
    _, (a, b), client, _ = deployment
    asked = ("vector_add", {"n": 777, "block": 64})
    first = Visitor(a.port)
    first.rerun(query(*asked))
    assert first.wait() and first.shown() == asked
    first.close()
    before = _runs(client)
    second = Visitor(b.port)
    second.rerun(query(*asked))
    assert second.wait() and second.shown() == asked and not second.texts("exception")
    second.close()
    assert _runs(client) == before  # served from the cluster's memory: no worker ran it again


def test_a_worker_killed_mid_run_costs_that_visitor_one_line_and_the_next_run_works(deployment):
    cluster, (a, b), client, _ = deployment
    for n in (96, 112, 128):  # 144+ blocks: seconds simulated (a busy machine may be quicker than that)
        v = Visitor(a.port)
        v.rerun(query("matmul_naive", {"n": n, "tile": 8}))
        assert v.wait(lambda v=v: v.saw_progress or v.finished is not None)
        if v.saw_progress and v.finished is None:
            break
        v.close()
    assert v.saw_progress, "every run finished before it could be interrupted"
    busy = [w for w, keys in client.processing().items() if keys]
    assert len(busy) == 1
    pid = client.run(os.getpid, workers=busy)[busy[0]]
    os.kill(pid, signal.SIGKILL)
    assert v.wait()
    alerts = v.texts("alert")
    assert any("was lost" in t for t in alerts), alerts
    assert not v.texts("exception") and v.shown() is None
    v.close()
    again = ("matmul_naive", {"n": 20, "tile": 8})
    w = Visitor(b.port)
    w.rerun(query(*again))
    assert w.wait() and w.shown() == again and not w.texts("exception")
    w.close()
    deadline = time.monotonic() + 90  # the nanny starts the killed worker again
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(client.scheduler_info()["workers"]) == 2
    assert pid not in client.run(os.getpid).values()  # a new process


def test_no_process_started_held_a_socket_off_loopback(deployment):
    cluster, servers, _, watch = deployment
    # the watch samples every 0.3 s from the deployment's start: after fewer tests of this module (the
    # quick tier) it may have fewer samples so far, so wait for enough to mean something
    deadline = time.monotonic() + 120
    while watch.samples <= 10 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert watch.samples > 10
    assert not watch.bad, sorted(watch.bad)[:10]
    # and every listener is on 127.0.0.1: the scheduler, the workers, the nannies, both replicas
    pids = set(cluster.pids()) | {s.proc.pid for s in servers}
    assert not sockets_off_loopback(pids)


def test_a_run_left_and_asked_again_at_once_is_answered(deployment):
    """Streamlit's rerun: the visitor's run is cancelled from its progress callback and the same
    capture asked for again before the cancel is through; the second ask gets the capture."""
    from visualizer.engine.run.cluster import Cluster, ClusterQueue

    cluster, _, _, _ = deployment
    link = Cluster(cluster.address)
    try:
        queue = ClusterQueue(link, "sim")
        # a request no other test asks for (no answer from the workers' memory) and long enough to
        # report progress before it ends, on a loaded machine too
        params, seed = {"n": 128, "tile": 8}, 8231

        class Left(Exception):
            pass

        def leave(done, total):
            raise Left

        with pytest.raises(Left):
            queue.capture("matmul_naive", params, progress=leave, seed=seed, sim_engine="fastsim")
        cap = queue.capture("matmul_naive", params, seed=seed, sim_engine="fastsim")
        assert cap.launch["kernel"] == "matmul_naive" and cap.launch["params"] == params
        assert cap.check["correct"], cap.check
        assert queue.abandoned == 1
    finally:
        link.close()


def test_the_replicas_engine_runs_on_the_cluster(deployment, monkeypatch):
    """`serve --sim-engine fastsim --cluster ...`: the workers run the replica's engine, not their own default."""
    from visualizer.engine.run.cluster import Cluster, ClusterQueue
    from visualizer.engine.run.runner import SIM_ENGINE_ENV

    cluster, _, _, _ = deployment
    link = Cluster(cluster.address)
    try:
        for engine in ("fastsim", "compiled"):
            monkeypatch.setenv(SIM_ENGINE_ENV, engine)
            cap = ClusterQueue(link, "sim").capture("vector_add", {"n": 77, "block": 32}, seed=3)
            assert cap.launch["sim_engine"] == engine and cap.check["correct"]
    finally:
        link.close()


def test_a_run_nobody_wants_is_stopped_on_its_worker(deployment):
    """Nothing computes for nobody: the visitor leaves, no replica holds the task, and the worker's
    project worker is stopped at its next progress report."""
    from visualizer.engine.run.cluster import Cluster, ClusterQueue
    from visualizer.engine.run.cluster_worker import worker_abandoned

    cluster, _, client, _ = deployment
    before = sum(client.run(worker_abandoned).values())
    link = Cluster(cluster.address)
    try:
        queue = ClusterQueue(link, "sim")

        def leave(done, total):
            raise KeyboardInterrupt  # what a visitor closing the tab amounts to

        with pytest.raises(KeyboardInterrupt):
            # fastsim reports each block as it finishes; the compiled engine runs the launch in one call
            # and reports after it, so a launch this small would end before anyone could leave
            queue.capture("matmul_naive", {"n": 120, "tile": 8}, progress=leave, seed=0, sim_engine="fastsim")
        deadline = time.monotonic() + 30
        while sum(client.run(worker_abandoned).values()) == before and time.monotonic() < deadline:
            time.sleep(0.3)
        assert sum(client.run(worker_abandoned).values()) == before + 1
    finally:
        link.close()


def test_serve_hands_the_pool_size_and_the_cluster_to_the_app(monkeypatch, capsys):
    from visualizer.tools import serve

    seen = {}

    def execve(path, cmd, env):
        seen.update(env)
        raise SystemExit(0)

    monkeypatch.setattr(serve.os, "execve", execve)
    monkeypatch.setattr(serve.os, "chdir", lambda path: None)
    monkeypatch.delenv(runner.CLUSTER_ENV, raising=False)
    with pytest.raises(SystemExit):
        serve.main(["--sim-workers", "3", "--port", "8599"])
    assert seen[runner.SIM_WORKERS_ENV] == "3" and seen[runner.CLUSTER_ENV] == ""
    assert "Captures run here: 3 simulator workers, on the compiled engine." in capsys.readouterr().out
    assert seen[runner.SIM_ENGINE_ENV] == "compiled"  # the app's captures: serve --sim-engine NAME
    with pytest.raises(SystemExit):
        serve.main(["--sim-engine", "fastsim", "--port", "8599"])
    assert seen[runner.SIM_ENGINE_ENV] == "fastsim"
    if importlib.util.find_spec("distributed") is None:
        return
    seen.clear()
    with pytest.raises(SystemExit):
        serve.main(["--cluster", "tcp://127.0.0.1:8786", "--port", "8599"])
    assert seen[runner.CLUSTER_ENV] == "tcp://127.0.0.1:8786"
    assert "Dask cluster at tcp://127.0.0.1:8786" in capsys.readouterr().out


def test_localcluster_without_distributed_says_so_in_one_line_and_leaves_no_temp_dir(
    monkeypatch, tmp_path, capsys
):
    import importlib.util
    import tempfile

    from visualizer.tools import localcluster

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a)
    )
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a leftover dir would appear
    assert localcluster.main(["--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "distributed" in err
    assert list(tmp_path.iterdir()) == []
