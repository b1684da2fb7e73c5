"""The Dask side of engine/run/cluster.py: what runs on the cluster's workers and scheduler.

Imported only where Dask is (a worker runs these tasks; an app replica imports it when it connects),
so an app without ``--cluster`` never imports Dask.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from distributed.diagnostics.plugin import WorkerPlugin

from visualizer.engine.run.runner import KernelError, RunQueue

_POOLS: dict[str, RunQueue] = {}
_POOLS_LOCK = threading.Lock()
RUNS: Counter = Counter()  # captures this Dask worker ran, by key (what cross-replica hits avoid)


class Abandoned(KernelError):
    """Nobody wants this task any more (every replica that asked for it cancelled it)."""


def worker_pool(backend: str, workers: int | None = None) -> RunQueue:
    """The warm project workers of one backend in this Dask worker process, made on first use."""
    with _POOLS_LOCK:
        if backend not in _POOLS:
            _POOLS[backend] = RunQueue(backend, workers=workers)
        return _POOLS[backend]


def worker_runs() -> dict:
    """For tests and operators (``client.run(worker_runs)``): captures run here, by key."""
    return dict(RUNS)


def _worker_backend(worker) -> str:
    return "gpu" if worker.state.total_resources.get("GPU") else "sim"


class WarmWorkers(WorkerPlugin):
    """Start this Dask worker's project workers now (numba imported, a CUDA context on a GPU worker),
    so the first capture does not wait; tasks then reuse them. Registering it again (another replica
    connecting) keeps the running workers."""

    def setup(self, worker):
        backend = _worker_backend(worker)
        pool = worker_pool(backend, worker.state.nthreads if backend == "sim" else None)
        for runner in pool.runners:
            threading.Thread(target=runner._warm_up, daemon=True).start()


def run_capture_task(backend: str, kernel: str, params: dict, options: dict, topic: str):
    """The Dask task: one capture on this worker's warm project worker; returns the Capture."""
    from distributed import get_worker

    worker = get_worker()
    key = worker.get_current_task()
    RUNS[key] += 1
    pool = worker_pool(backend, worker.state.nthreads if backend == "sim" else None)
    last = [0.0]

    def progress(done, total):
        ts = worker.state.tasks.get(key)
        if ts is None or ts.state in ("cancelled", "released", "forgotten"):
            raise Abandoned("every visitor who asked for this capture left")
        now = time.monotonic()
        if now - last[0] >= 0.5 or done >= total:
            last[0] = now
            worker.log_event(topic, {"key": key, "done": int(done), "total": int(total)})

    return pool.capture(kernel, params, progress=progress, **options)


def line_on_scheduler(dask_scheduler=None, prefix: str = "") -> dict:
    """On the scheduler: every capture waiting for a worker -> (runs ahead of it, runs running)."""
    running, waiting = 0, []
    for ts in dask_scheduler.tasks.values():
        if not (isinstance(ts.key, str) and ts.key.startswith(prefix)):
            continue
        if ts.state == "processing":
            running += 1
        elif ts.state in ("queued", "no-worker", "waiting", "released"):
            waiting.append((ts.priority or (), ts.key))
    waiting.sort()
    return {key: (i + running, running) for i, (_, key) in enumerate(waiting)}


def pool_info(backend: str) -> dict:
    from distributed import get_worker

    worker = get_worker()
    return worker_pool(backend, worker.state.nthreads if backend == "sim" else None).info()


def worker_abandoned() -> int:
    """For tests and operators: runs this Dask worker's project workers gave up (nobody wanted them)."""
    with _POOLS_LOCK:
        return sum(pool.abandoned for pool in _POOLS.values())
