"""Captures on a Dask cluster: several app replicas share one pool of workers and one capture cache.

Optional (``pip install -r requirements-cluster.txt``); without ``serve --cluster`` (or
VISUALIZER_CLUSTER) nothing here is imported and the app runs its own workers (runner.py).

- **Where a capture runs.** A task on a Dask worker: simulator captures on any worker, GPU captures
  only on workers started with ``--resources GPU=1`` (one per GPU, each with its own
  CUDA_VISIBLE_DEVICES). The task hands the request to the project's own worker process, kept warm
  between tasks by a worker plugin (``WarmWorkers``: a runner.RunQueue per backend inside the Dask
  worker), so every limit of a local run holds there too (CPU and memory caps, the per-run timeout,
  request ids, a faulted GPU worker restarted alone), and a kernel that crashes never takes the Dask
  worker down.
- **The shared cache.** A capture's task key is the hash of its request (kernel, parameters, seed,
  options, backend), so the same capture asked for through any replica is the same Dask task: while
  it runs, a second replica's visitor waits for that run; once it is in a worker's memory, any replica
  asking for it gets it without running anything. Results stay in the Dask workers' memory while a
  replica holds its future: each replica holds its HOLD_MAX most recent captures (HOLD_MAX_BYTES in
  all). Nothing is written to disk by this module.
- **Leaving.** A visitor who leaves releases the future; if no other replica holds it, the scheduler
  frees the task, and its next progress report on the worker finds that out and kills the project worker
  (nothing computes for nobody), as a local run does.
- **Progress and place in line** come from the workers (``log_event``) and the scheduler.
- **A lost Dask worker.** Dask runs the task again on another worker; if it cannot (KilledWorker),
  the visitor gets one line and the next run works.

Security: a Dask scheduler runs what its clients send. Bind it and its workers to a private network
(or 127.0.0.1) and use ``tls://`` with certificates between machines; visitor code never goes to the
cluster (the Your kernel page runs it in this machine's sandbox).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections import OrderedDict

from visualizer.engine.run.runner import (
    KernelError,
    cluster_address,
    default_sim_engine,
    get_runner,
    gpu_present,
)
from visualizer.specs.catalog import LaunchError, admit_capture

KEY_PREFIX = "visualizer_capture"
TOPIC = "visualizer-progress"
PLUGIN_NAME = "visualizer-warm-workers"
HOLD_MAX = 64  # captures each replica keeps alive in the cluster's memory (the shared cache)
HOLD_MAX_BYTES = 512 * 2**20
CANCELLED_RETRIES = 3
CONNECT_TIMEOUT_S = 10.0
POLL_S = 0.25  # a visitor's progress, place in line and leaving are looked at this often
LINE_EVERY_S = 1.0
GPU_CHECK_EVERY_S = 30.0
PROGRESS_MAX = 10_000  # the scheduler is asked for the line at most this often per replica
SCHEMES = ("tcp", "tls")
_ADDRESS = re.compile(r"^(tcp|tls)://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:200]


def check_address(address: str) -> str | None:
    """None if ``address`` is a scheduler address this app can use, else why not (one line)."""
    m = _ADDRESS.match(address)
    if not m or not 1 <= int(m.group(3)) <= 65535:
        return (
            f"{address[:80]!r} is not a Dask scheduler address like tcp://127.0.0.1:8786 or tls://HOST:PORT"
        )
    try:
        import distributed  # noqa: F401
    except ImportError:
        return "Dask is not installed: pip install -r requirements-cluster.txt"
    return None


def task_key(backend: str, kernel: str, params: dict | None, options: dict) -> str:
    """The Dask key of a capture: the same request gives the same key in every replica."""
    text = json.dumps(
        {"backend": backend, "kernel": kernel, "params": dict(params or {}), "options": options},
        sort_keys=True,
        default=str,
    )
    return f"{KEY_PREFIX}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


# --- in an app replica ----------------------------------------------------------------------------


def capture_bytes(cap) -> int:
    arrays = sum(a.nbytes for a in (*cap.inputs.values(), *cap.outputs.values()))
    tables = sum(int(df.memory_usage(deep=True, index=True).sum()) for df in cap.tables().values())
    return int(arrays + tables)


class Cluster:
    """One replica's connection to the scheduler, shared by its backends' queues."""

    def __init__(self, address: str):
        self.address = address
        self._client = None
        self._lock = threading.Lock()
        self.progress: dict[str, tuple[int, int]] = {}
        self._held: OrderedDict = OrderedDict()  # key -> (future, bytes): the shared cache's share
        self._held_bytes = 0
        self._line: dict = {}
        self._line_at = 0.0
        self._line_lock = threading.Lock()
        self._gpu: tuple[float, bool] | None = None

    def client(self):
        with self._lock:
            if self._client is not None and self._client.status in ("running", "connecting"):
                return self._client
            from distributed import Client

            try:
                client = Client(
                    self.address, set_as_default=False, timeout=CONNECT_TIMEOUT_S, name="visualizer-app"
                )
            except (OSError, TimeoutError) as exc:
                raise KernelError(
                    f"the Dask cluster at {self.address} cannot be reached ({type(exc).__name__}); "
                    "try again in a moment"
                ) from None
            from visualizer.engine.run.cluster_worker import WarmWorkers

            client.register_plugin(WarmWorkers(), name=PLUGIN_NAME)
            client.subscribe_topic(TOPIC, self._on_progress)
            self._client = client
            return client

    def _on_progress(self, event) -> None:
        msg = event[1] if isinstance(event, tuple) else event
        if isinstance(msg, dict) and isinstance(msg.get("key"), str):
            if len(self.progress) > PROGRESS_MAX:  # reports that came after their run ended
                self.progress.clear()
            self.progress[msg["key"]] = (msg.get("done", 0), msg.get("total", 0))

    def has_gpu(self) -> bool:
        """Has some worker a GPU (``--resources GPU=1``)? Asked at most every GPU_CHECK_EVERY_S."""
        now = time.monotonic()
        if self._gpu is None or now - self._gpu[0] > GPU_CHECK_EVERY_S:
            workers = self.client().scheduler_info(n_workers=-1).get("workers", {}).values()
            self._gpu = (now, any(w.get("resources", {}).get("GPU") for w in workers))
        return self._gpu[1]

    def hold(self, key: str, future, nbytes: int) -> None:
        with self._lock:
            if key in self._held:
                self._held_bytes -= self._held.pop(key)[1]
            if nbytes > HOLD_MAX_BYTES:
                return
            self._held[key] = (future, nbytes)
            self._held_bytes += nbytes
            while len(self._held) > HOLD_MAX or self._held_bytes > HOLD_MAX_BYTES:
                _, (_, dropped) = self._held.popitem(last=False)
                self._held_bytes -= dropped

    def place(self, key: str) -> tuple[int, int] | None:
        """(ahead, running) of a capture waiting for a worker, across every replica (the scheduler's view)."""
        with self._line_lock:
            if time.monotonic() - self._line_at >= LINE_EVERY_S:
                self._line_at = time.monotonic()
                try:
                    from visualizer.engine.run.cluster_worker import line_on_scheduler

                    self._line = self.client().run_on_scheduler(line_on_scheduler, prefix=KEY_PREFIX)
                except Exception:
                    self._line = {}
            return self._line.get(key)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            self._held.clear()


class ClusterQueue:
    """RunQueue's interface (capture, info, status) for captures of one backend on a Dask cluster."""

    def __init__(self, cluster: Cluster, backend: str):
        if backend == "auto":
            backend = "gpu" if cluster.has_gpu() else "sim"
        if backend not in ("gpu", "sim"):
            raise LaunchError(f"unknown backend {backend!r}; choose one of auto, gpu, sim")
        if backend == "gpu" and not cluster.has_gpu():
            raise LaunchError(
                f"backend 'gpu' asked for, but no worker of the Dask cluster at {cluster.address} has a GPU "
                "(GPU workers start with --resources GPU=1)"
            )
        self.cluster = cluster
        self.backend = backend
        self.restarts = 0  # the workers' own restarts happen on the cluster
        self.abandoned = 0

    def status(self) -> dict:
        return {"cluster": self.cluster.address, "backend": self.backend}

    def info(self) -> dict:
        from visualizer.engine.run.cluster_worker import pool_info

        future = self.cluster.client().submit(
            pool_info, self.backend, pure=False, resources={"GPU": 1} if self.backend == "gpu" else None
        )
        return future.result(timeout=300)

    def capture(
        self, kernel: str, params: dict | None = None, *, waiting=None, progress=None, fresh=False, **options
    ):
        """The capture from the cluster (its memory, or a run on a worker); raises LaunchError or
        KernelError with one line. ``waiting``/``progress`` as in RunQueue.capture; either may raise
        to leave, which stops the run unless another replica waits for it too. ``fresh``: a new
        run, never one in the cluster's memory (Time again), and not kept there."""
        from distributed import CancelledError

        from visualizer.engine.run.cluster_worker import Abandoned

        # a refused launch never reaches the cluster; the simulator's, at its worker's engine's limits
        engine = (options.get("sim_engine") or default_sim_engine()) if self.backend == "sim" else "fastsim"
        admit_capture(kernel, params, self.backend, sim_engine=engine)
        # the engine this replica's operator chose (serve --sim-engine), not the worker's own default
        if self.backend == "sim":
            options["sim_engine"] = engine
        options.pop("timeout", None)  # the worker's runner applies the per-run limit
        key = task_key(self.backend, kernel, params, options)
        if fresh:
            key = f"{key}-fresh-{uuid.uuid4().hex}"
        for attempt in range(CANCELLED_RETRIES + 1):
            try:
                cap = self._run(key, kernel, params, options, waiting, progress)
                break
            except (CancelledError, Abandoned):
                # the run was stopped (a visitor left it) just before this replica asked for it again:
                # the worker ended it before it heard that someone wants it again; ask again
                if attempt == CANCELLED_RETRIES:
                    raise KernelError(f"the cluster cancelled the run of {kernel}; run it again") from None
                time.sleep(0.2)
        return cap

    def _run(self, key, kernel, params, options, waiting, progress):
        from distributed import CancelledError
        from distributed.scheduler import KilledWorker

        from visualizer.engine.run.cluster_worker import run_capture_task

        client = self.cluster.client()
        future = client.submit(
            run_capture_task,
            self.backend,
            kernel,
            dict(params or {}),
            options,
            TOPIC,
            key=key,
            resources={"GPU": 1} if self.backend == "gpu" else None,
            retries=0,
        )
        answered = False
        cap = None
        # Waited for with a callback, not future.result(timeout=...): distributed's sync() loses the
        # result (UnboundLocalError) when the awaited coroutine ends in asyncio.CancelledError (seen under load).
        finished = threading.Event()
        future.add_done_callback(lambda _: finished.set())
        try:
            while cap is None:
                if finished.wait(POLL_S) or future.done():
                    try:
                        cap = future.result()
                    except BaseException:
                        answered = True  # the run ended (it failed): the cluster's answer
                        raise
                    break
                ran = self.cluster.progress.get(key)  # one read: another run of this key may pop it
                if ran is not None:
                    if progress is not None:
                        progress(*ran)
                elif waiting is not None:
                    place = self.cluster.place(key)
                    if place is not None:
                        waiting(*place)
            answered = True
        except (LaunchError, KernelError, CancelledError):
            raise
        except KilledWorker:
            raise KernelError(
                f"the cluster's worker running {kernel} was lost (stopped or out of memory); run it again"
            ) from None
        except OSError as exc:  # the connection (CommClosedError is one)
            if not answered:
                raise
            raise KernelError(
                f"lost the Dask cluster at {self.cluster.address} ({type(exc).__name__}); run it again"
            ) from None
        except Exception as exc:
            if not answered:  # the caller's callback raised: it left
                raise
            raise KernelError(f"the cluster could not run {kernel}: {one_line(exc)}") from None
        finally:
            self.cluster.progress.pop(key, None)
            if not answered:  # the visitor left: nobody in this replica wants it any more
                self.abandoned += 1
                # Released, not cancelled: once no replica holds it the scheduler frees it, and the
                # worker stops the run. (Client.cancel would also cancel the same key asked for again
                # a moment later by this replica: Streamlit's rerun does exactly that.)
                try:
                    future.release()
                except Exception:
                    pass
        if "-fresh-" not in key:
            self.cluster.hold(key, future, capture_bytes(cap))
        return cap

    def close(self) -> None:
        pass  # the connection is the replica's (Cluster.close)


_CLUSTERS: dict[str, Cluster] = {}
_QUEUES: dict[tuple[str, str], ClusterQueue] = {}
_LOCK = threading.Lock()


def cluster_for(address: str) -> Cluster:
    with _LOCK:
        if address not in _CLUSTERS:
            _CLUSTERS[address] = Cluster(address)
        return _CLUSTERS[address]


def cluster_queue(address: str, backend: str) -> ClusterQueue:
    """The replica-wide queue of a backend on the cluster at ``address`` (runner.get_runner's twin)."""
    with _LOCK:
        cluster = _CLUSTERS.setdefault(address, Cluster(address))
    name = backend
    if backend == "auto":
        name = "gpu" if cluster.has_gpu() else "sim"
    with _LOCK:
        if (address, name) not in _QUEUES:
            _QUEUES[(address, name)] = ClusterQueue(cluster, name)
        return _QUEUES[(address, name)]


def cluster_has_gpu(address: str) -> bool:
    try:
        return cluster_for(address).has_gpu()
    except Exception:
        return False  # unreachable: the capture itself then says so in one line


def capture_queue(backend: str):
    """Where the app's built-in captures go: the Dask cluster VISUALIZER_CLUSTER names, else this
    machine's workers (runner.get_runner)."""
    address = cluster_address()
    return cluster_queue(address, backend) if address else get_runner(backend)


def gpu_for_captures() -> bool:
    """Is there a GPU for built-in captures: here, or on the Dask cluster the app sends them to?"""
    address = cluster_address()
    return cluster_has_gpu(address) if address else gpu_present()
