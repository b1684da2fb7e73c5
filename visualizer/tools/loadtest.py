"""A simulated classroom: visitors drive a real server over Streamlit's own websocket protocol.

``python -m visualizer.tools.loadtest --visitors 30 [--out FILE.json]`` starts ``python -m visualizer
serve`` on 127.0.0.1 and lets each visitor open a link, wait, leave mid-run, switch pages or
kernels mid-run, or resubmit the form, exactly as a browser would (BackMsg/ForwardMsg protobufs on
/_stcore/stream). Each visitor reads the capture the sidebar says it is showing and compares it
with what it asked for. tests/tools/test_load.py runs it; docs/benchmarks.md records its figures.
``--sim-workers N`` sizes each server's pool; ``--cluster-workers N --replicas M`` starts a Dask
cluster on 127.0.0.1 (tools/localcluster.py) and M servers sharing it (tests/engine/test_cluster.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from visualizer.engine.capture.request import SIM_ENGINES
from visualizer.tools.localcluster import children  # a process's children, from /proc

ROOT = Path(__file__).resolve().parents[2]
BEHAVIOURS = ("stay", "leave", "hop", "switch", "form", "same")
FINISHED = 0  # ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Server:
    """``python -m visualizer serve`` on 127.0.0.1 (the launcher execs streamlit: one pid)."""

    def __init__(self, log_path: Path | None = None, plain_from: Path | None = None, serve_args=()):
        """``plain_from``: start ``streamlit run`` from that directory instead, with no settings but
        the loopback address (what someone who skips the launcher gets). ``serve_args``: more flags
        for ``serve`` (``--sim-workers N``, ``--cluster ADDRESS``)."""
        self.port = free_port()
        self.log = open(log_path or os.devnull, "w")  # noqa: SIM115 (closed in stop)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("STREAMLIT_") and k != "VISUALIZER_ALLOW_REMOTE"
        }
        env["PYTHONPATH"] = str(ROOT)
        cmd = [sys.executable, "-m", "visualizer", "serve", "--port", str(self.port), *serve_args]
        if plain_from is not None:
            app = str(ROOT / "visualizer" / "app.py")
            cmd = [sys.executable, "-m", "streamlit", "run", app, "--server.port", str(self.port)]
            cmd += ["--server.address", "127.0.0.1", "--server.headless", "true"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=plain_from or ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.peak_server = 0
        self.peak_workers = 0
        self.worker_pids: set[int] = set()
        self.max_live_workers = 0
        self._stop = threading.Event()
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited early (code {self.proc.returncode})")
            try:
                url = f"http://127.0.0.1:{self.port}/_stcore/health"
                if urllib.request.urlopen(url, timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not become healthy in 90 s")
            time.sleep(0.3)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            workers = children(self.proc.pid)
            self.worker_pids.update(workers)
            self.max_live_workers = max(self.max_live_workers, len(workers))
            self.peak_server = max(self.peak_server, rss_bytes(self.proc.pid))
            self.peak_workers = max(self.peak_workers, sum(rss_bytes(w) for w in workers))

    def live_workers(self) -> list[int]:
        return children(self.proc.pid)

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()


class Visitor:
    """One browser tab, speaking Streamlit's websocket protocol."""

    def __init__(self, port: int, source: str | None = None, host: str = "127.0.0.1"):
        from websockets.sync.client import connect

        sock = None
        if source is not None or host != "127.0.0.1":
            # source: bind that loopback address first; host: the name the visitor's Host header
            # carries (a DNS-rebinding page's own name), while the socket still goes to 127.0.0.1
            sock = socket.socket()
            if source is not None:
                sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
        self.ws = connect(
            f"ws://{host}:{port}/_stcore/stream",
            subprotocols=["streamlit"],
            max_size=None,
            open_timeout=60,
            sock=sock,
        ).__enter__()  # closed in close(); websockets warns about a connection used any other way
        self.elements: dict[tuple, tuple[str, str, object]] = {}
        self.pages: dict[str, str] = {}
        self.finished: int | None = None
        self.saw_progress = False
        self.asked_run = False

    def rerun(self, query: str = "", page: str = "", widgets=()) -> None:
        from streamlit.proto.BackMsg_pb2 import BackMsg

        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = query
        state.page_script_hash = self.pages.get(page, "")
        state.widget_states.widgets.extend(widgets)
        self.finished = None
        self.saw_progress = False
        self.asked_run = True  # until a run starts for this request, a finish is the old run's
        self.ws.send(msg.SerializeToString())

    def _read(self, timeout: float) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = ForwardMsg()
        msg.ParseFromString(self.ws.recv(timeout=timeout))
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self.elements = {}  # a script run starts
            self.finished = None
            self.asked_run = False
        elif kind == "navigation":
            self.pages = {p.page_name: p.page_script_hash for p in msg.navigation.app_pages}
        elif kind == "script_finished":
            self.finished = msg.script_finished
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            etype = element.WhichOneof("type")
            body = getattr(element, etype)
            text = ""
            for attr in ("body", "text", "label", "message"):
                value = getattr(body, attr, None)
                if isinstance(value, str) and value:
                    text = value
                    break
            self.elements[tuple(msg.metadata.delta_path)] = (etype, text, body)
            if etype == "progress" and "blocks simulated" in text:
                self.saw_progress = True

    def wait(self, until=None, timeout: float = 120) -> bool:
        """Read until ``until()`` is true, or the script finished a run; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until is not None and until():
                return True
            if until is None and self.finished == FINISHED and not self.asked_run:
                return True
            try:
                self._read(max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                return False
        return False

    def texts(self, etype: str) -> list[str]:
        return [t for e, t, _ in self.elements.values() if e == etype]

    def widget(self, etype: str, label: str):
        for e, t, body in self.elements.values():
            if e == etype and t == label:
                return body.id
        raise LookupError(f"no {etype} {label!r} on the page")

    def shown(self) -> tuple[str, dict] | None:
        """(kernel, params) of the capture the sidebar says it is showing."""
        for text in self.texts("markdown"):
            if text.startswith("showing: "):  # "showing: vector_add (n=100, block=32)" (ui/sidebar.py)
                kernel, _, params = text[len("showing: ") :].partition(" ")
                pairs = (p.split("=", 1) for p in params.strip("()").split(", ") if p)
                return kernel, {k: ast.literal_eval(v) for k, v in pairs}
        return None

    def close(self) -> None:
        self.ws.close()


@dataclass
class Outcome:
    index: int
    behaviour: str
    asked: tuple[str, dict] | None = None
    shown: tuple[str, dict] | None = None
    left_mid_run: bool = False
    wait_s: float | None = None
    exceptions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failure: str | None = None

    @property
    def correct(self) -> bool:
        return (
            self.failure is None and not self.exceptions and (self.asked is None or self.shown == self.asked)
        )


def query(kernel: str, params: dict) -> str:
    return "&".join([f"kernel={kernel}", "backend=sim", *(f"{k}={v}" for k, v in params.items())])


def heavy_params(i: int) -> dict:
    # matmul_naive n=80-109: 100-196 blocks, about 0.5-1.2 s simulated (2026-12-01, 2-core machine). A
    # visitor can only leave mid-run if the run outlasts a progress report reaching it (a cluster replica
    # looks every 0.25 s); n=41 takes 0.09 s, too short to be caught reliably.
    return {"n": 80 + i, "tile": 8}


def visit(port: int, i: int, behaviour: str, started: list[threading.Event]) -> Outcome:
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    out = Outcome(i, behaviour)
    v = Visitor(port)
    t0 = time.monotonic()
    try:
        if behaviour == "stay":
            out.asked = ("vector_add", {"n": 100 + i, "block": 32})
            v.rerun(query(*out.asked))
            ok = v.wait()
        elif behaviour == "leave":
            v.rerun(query("matmul_naive", heavy_params(i)))
            started[i].set()
            v.wait(lambda: v.saw_progress or v.finished is not None)
            out.left_mid_run = v.saw_progress and v.finished is None
            return out  # the tab closes (finally) mid-run
        elif behaviour == "same":
            started[i - 4].wait(60)  # the visitor who will leave this same run
            out.asked = ("matmul_naive", heavy_params(i - 4))
            v.rerun(query(*out.asked))
            ok = v.wait()
        elif behaviour == "hop":
            out.asked = ("matmul_naive", heavy_params(i))
            v.rerun(query(*out.asked))
            v.wait(lambda: v.saw_progress or v.finished is not None)
            out.left_mid_run = v.saw_progress and v.finished is None
            v.rerun(page="Grid layout")  # another page: Streamlit stops the run from its progress bar
            ok = v.wait()
            if ok and not any("Grid" in h for h in v.texts("heading")):
                out.failure = f"not on the grid page: {v.texts('heading')}"
        elif behaviour == "switch":
            v.rerun(query("reduction", {"n": 3000 + i, "block": 64}))
            v.wait(lambda: v.saw_progress or v.finished is not None)
            out.left_mid_run = v.saw_progress and v.finished is None
            picked = WidgetState(id=v.widget("selectbox", "Kernel"), string_value="Vector add")
            out.asked = ("vector_add", {"n": 1000, "block": 128})  # the kernel's defaults
            v.rerun(widgets=[picked])
            ok = v.wait()
        elif behaviour == "form":
            v.rerun(query("vector_add", {"n": 300 + i, "block": 32}))
            ok = v.wait()
            n = WidgetState(id=v.widget("number_input", "n"), double_value=600 + i)
            run = WidgetState(id=v.widget("button", "Run"), trigger_value=True)
            out.asked = ("vector_add", {"n": 600 + i, "block": 32})
            v.rerun(widgets=[n, run])
            ok = ok and v.wait()
        else:
            raise ValueError(behaviour)
        out.wait_s = time.monotonic() - t0
        if not ok:
            out.failure = "no finished run within the time limit"
        out.shown = v.shown()
        out.exceptions = v.texts("exception")
        out.errors = [t for t in v.texts("alert") if "matches the numpy reference" not in t]
    except Exception as exc:  # reported, never raised: one broken visitor must not hide the others
        out.failure = f"{type(exc).__name__}: {exc}"
    finally:
        v.close()
    return out


def classroom(
    visitors: int = 30,
    stagger_s: float = 0.1,
    log_path: Path | None = None,
    replicas: int = 1,
    serve_args=(),
    cluster_pids=None,
    during=None,
    servers=None,
) -> dict:
    """Run ``visitors`` visitors (behaviours in turn) against fresh servers; outcomes and figures.

    ``replicas`` app servers (``serve_args`` each, e.g. the same ``--cluster``) share the visitors in
    turn; a "same" visitor goes to another replica than the visitor who leaves that run, so with a
    cluster their run is shared across replicas. ``cluster_pids()``: the cluster's processes, whose
    memory is sampled too; ``during(t0)`` runs in a thread while the visitors do (e.g. kills a worker).
    ``servers``: running Servers to use instead (left running).
    """
    log_path = Path(log_path) if log_path else None
    own = servers is None
    servers = [] if own else list(servers)
    replicas = len(servers) or replicas
    try:
        for r in range(replicas if own else 0):
            log = log_path.with_name(f"{log_path.stem}-{r}{log_path.suffix}") if log_path and r else log_path
            servers.append(Server(log, serve_args=serve_args))
    except BaseException:
        for s in servers:
            s.stop()
        raise
    started = [threading.Event() for _ in range(visitors)]
    outcomes: list[Outcome | None] = [None] * visitors
    peak_cluster = [0]
    sampling = threading.Event()

    def sample_cluster():
        while cluster_pids is not None and not sampling.wait(0.5):
            peak_cluster[0] = max(peak_cluster[0], sum(rss_bytes(p) for p in cluster_pids()))

    threading.Thread(target=sample_cluster, daemon=True).start()
    try:
        for s in servers:  # the first page load imports the app: not part of the figures
            warm = Visitor(s.port)
            warm.rerun(query("vector_add", {"n": 64, "block": 32}))
            warm.wait()
            warm.close()
        t0 = time.monotonic()
        if during is not None:
            threading.Thread(target=during, args=(t0,), daemon=True).start()

        def one(i):
            behaviour = BEHAVIOURS[i % len(BEHAVIOURS)]
            replica = (i + (behaviour == "same")) % replicas
            outcomes[i] = visit(servers[replica].port, i, behaviour, started)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(visitors)]
        for t in threads:
            t.start()
            time.sleep(stagger_s)
        for t in threads:
            t.join(240)
        elapsed = time.monotonic() - t0
        time.sleep(1.0)  # abandoned runs are killed at once; give the sampler a last look
        live_after = sum(len(s.live_workers()) for s in servers)
    finally:
        sampling.set()
        for s in servers if own else ():
            s.stop()
    done = [o for o in outcomes if o is not None]
    waits = sorted(o.wait_s for o in done if o.wait_s is not None and o.asked is not None)
    shown = sum(1 for o in done if o.asked is not None and o.shown == o.asked)
    return {
        "visitors": visitors,
        "finished_visitors": len(done),
        "elapsed_s": elapsed,
        "captures_shown": shown,
        "runs_per_minute": 60 * shown / elapsed if elapsed else None,
        "captures_per_s": shown / elapsed if elapsed else None,
        "replicas": replicas,
        "wait_p50_s": statistics.median(waits) if waits else None,
        "wait_p95_s": waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else None,
        "left_mid_run": sum(o.left_mid_run for o in done),
        "workers_started": sum(len(s.worker_pids) for s in servers),
        "max_live_workers": max(s.max_live_workers for s in servers),
        "live_workers_after": live_after,
        "peak_server_rss_mb": sum(s.peak_server for s in servers) / 2**20,
        "peak_workers_rss_mb": sum(s.peak_workers for s in servers) / 2**20,
        "peak_cluster_rss_mb": peak_cluster[0] / 2**20,
        "load_average_1min": os.getloadavg()[0],
        "outcomes": [o.__dict__ | {"correct": o.correct} for o in done],
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m visualizer.tools.loadtest")
    p.add_argument("--visitors", type=int, default=30)
    p.add_argument("--out", help="JSON file for the figures and every visitor's outcome")
    p.add_argument("--sim-workers", type=int, help="simulator workers of each server (serve --sim-workers)")
    p.add_argument("--replicas", type=int, default=1, help="app servers sharing the visitors (default 1)")
    p.add_argument(
        "--cluster-workers",
        type=int,
        default=0,
        help="start a Dask cluster on 127.0.0.1 with this many workers and serve --cluster it",
    )
    p.add_argument(
        "--sim-engine",
        choices=SIM_ENGINES,
        help="the simulator engine the servers run (serve --sim-engine; default: serve's)",
    )
    args = p.parse_args(argv)
    serve_args = ["--sim-workers", str(args.sim_workers)] if args.sim_workers else []
    serve_args += ["--sim-engine", args.sim_engine] if args.sim_engine else []
    if args.cluster_workers:
        from distributed import Client

        from visualizer.engine.run.cluster_worker import worker_abandoned, worker_runs
        from visualizer.tools.localcluster import LocalCluster

        with LocalCluster(args.cluster_workers) as cluster:
            res = classroom(
                args.visitors,
                replicas=args.replicas,
                serve_args=[*serve_args, "--cluster", cluster.address],
                cluster_pids=cluster.pids,
            )
            with Client(cluster.address, set_as_default=False, timeout=30) as client:
                res["cluster_runs"] = sum(sum(r.values()) for r in client.run(worker_runs).values())
                res["cluster_runs_stopped"] = sum(client.run(worker_abandoned).values())
    else:
        res = classroom(args.visitors, replicas=args.replicas, serve_args=serve_args)
    wrong = [o for o in res["outcomes"] if not o["correct"]]
    for key, value in res.items():
        if key != "outcomes":
            print(f"{key}: {value:.3g}" if isinstance(value, float) else f"{key}: {value}")
    for o in wrong:
        print(f"WRONG: {o}")
    if args.out:
        from visualizer.tools.atomic import write_text

        write_text(args.out, json.dumps(res, indent=2, default=str) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
