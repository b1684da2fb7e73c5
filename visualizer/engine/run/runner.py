"""Runs kernels in one worker process per backend and turns what they record into a Capture.

The caller (CLI, web app, tests) never imports numba: a kernel that faults, hangs or floods the
GIL with simulator threads only ever hurts its worker, which is restarted for the next launch.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from visualizer.analysis.capture import Capture, build_capture
from visualizer.engine.capture.request import CaptureRequest
from visualizer.engine.run import wire
from visualizer.engine.run.messages import MalformedMessage, Message
from visualizer.specs.catalog import LaunchError, admit_accesses, admit_capture, limits_from_info

BACKENDS = ("auto", "gpu", "sim")
START_TIMEOUT_S = 180.0  # importing numba and creating a CUDA context can take a while on a cold machine
# Per-run wall-clock limits. The simulator's run is limited by its CPU time (SIM_RUN_CPU_S), which costs the
# same however busy the server is; its wall-clock limit is a hang guard well above it, so a fine launch on a
# loaded machine (a cold compile of FlashAttention's access pass: ~36 CPU s, ~75 s of wall on a busy 2-core
# server) is not stopped for the load around it.
SIM_RUN_TIMEOUT_S = float(os.environ.get("VISUALIZER_SIM_TIMEOUT_S", "300"))  # the test suite raises it
GPU_RUN_TIMEOUT_S = 300.0  # compiles both builds, then times each over repeats (and torch)
RUN_TIMEOUT_S = {"sim": SIM_RUN_TIMEOUT_S, "gpu": GPU_RUN_TIMEOUT_S}
# CPU seconds one run may use in a simulator worker (the kernel enforces it: SIGXCPU): the simulator's
# limit; it holds even if the app stops watching.
SIM_RUN_CPU_S = 90
SIM_ENGINE_ENV = "VISUALIZER_SIM_ENGINE"  # `serve --sim-engine NAME` sets it for the app's captures


def default_sim_engine() -> str:
    """The simulator's engine of a capture that names none: the environment's (serve's), else "compiled"."""
    from visualizer.engine.capture.request import DEFAULT_SIM_ENGINE

    return os.environ.get(SIM_ENGINE_ENV) or DEFAULT_SIM_ENGINE


SIM_MEMORY_BYTES = 8 * 2**30  # address space of one simulator worker (RLIMIT_AS)
# the most bytes one message of a built-in kernels' worker may take (a pickled reply): the catalog admits
# far smaller captures; a length over it is refused before anything is allocated
BUILTIN_MESSAGE_BYTES = 16 * 2**30


SIM_WORKERS_ENV = "VISUALIZER_SIM_WORKERS"  # `serve --sim-workers N` sets it for the app
SIM_WORKER_RESIDENT_BYTES = 2**30  # about what a busy simulator worker holds: the pool fits in memory


def machine_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_workers(backend: str) -> int:
    """Simulator workers: one per core but one (the server's), at least two where there are two
    cores (one heavy run then holds one worker, not every visitor; each worker runs its simulated
    threads on one OS thread), and no more than the memory holds; VISUALIZER_SIM_WORKERS overrides.
    The GPU gets one worker per visible GPU: concurrent captures on one GPU would distort each other's
    timings, so each worker is pinned to its own (CUDA_VISIBLE_DEVICES)."""
    if backend != "sim":
        return max(1, len(visible_gpus()))
    env = os.environ.get(SIM_WORKERS_ENV, "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = machine_cores()
    n = min(cores, max(2, cores - 1))
    memory = machine_memory_bytes()
    if memory:
        n = min(n, max(1, memory // (2 * SIM_WORKER_RESIDENT_BYTES)))  # half the memory for the pool
    return max(1, n)


STUCK_EXIT_CODE = (
    70  # = visualizer.engine.sim.fastsim.STUCK_EXIT_CODE (not imported: the runner never loads the simulator)
)


class KernelError(RuntimeError):
    """The kernel (or its worker) failed; the message is one line, the runner stays usable."""


@functools.cache
def gpu_count() -> int:
    """Ask the CUDA driver directly (no numba import): how many GPUs this process may use
    (the driver applies CUDA_VISIBLE_DEVICES)."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cu = ctypes.CDLL(lib)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if cu.cuInit(0) != 0:
            return 0
        return count.value if cu.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
    return 0


def gpu_present() -> bool:
    """Is there at least one GPU this process may use?"""
    return gpu_count() > 0


def visible_gpus(env: str | None = None, count: int | None = None) -> list[str]:
    """One CUDA_VISIBLE_DEVICES value per GPU this process may use: the entries of its own
    CUDA_VISIBLE_DEVICES (indices or GPU-uuids), or 0..count-1 when it is unset."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    count = gpu_count() if count is None else count
    if env is None:
        return [str(i) for i in range(count)]
    return [e.strip() for e in env.split(",") if e.strip()][:count]


CLUSTER_ENV = "VISUALIZER_CLUSTER"  # `serve --cluster tcp://HOST:PORT` sets it (engine/run/cluster.py)


def cluster_address() -> str:
    return os.environ.get(CLUSTER_ENV, "").strip()


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "gpu" if gpu_present() else "sim"
    if backend == "gpu" and not gpu_present():
        raise LaunchError("backend 'gpu' asked for, but this machine has no CUDA GPU (use sim or auto)")
    return backend


ROOT = Path(__file__).resolve().parents[3]


class Runner:
    """One worker process for one backend ("gpu" or "sim"); launches are serialised by a lock.

    Every request carries an id and the worker echoes it on every message, so a reply is only
    ever taken by the request that asked for it. A request given up while its kernel runs (the
    caller's progress callback raised, as Streamlit does when a visitor leaves or changes a
    widget; a timeout; KeyboardInterrupt) kills the worker: nothing computes for nobody, and
    nothing the abandoned run produced can reach another caller.
    """

    def __init__(self, backend: str = "auto", run_timeout: float | None = None, device: str | None = None):
        self.backend = resolve_backend(backend)
        self.device = device  # the GPU this worker is pinned to (its CUDA_VISIBLE_DEVICES), if any
        self.run_timeout = run_timeout or RUN_TIMEOUT_S[self.backend]
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._ids = itertools.count(1)
        self.device_info: dict | None = None
        self.restarts = 0  # workers replaced after a fault, a timeout or an abandoned run
        self.abandoned = 0  # runs given up while the kernel ran (caller left, time limit)
        self.last_exit_code: int | None = None  # of the last worker that died under a request
        self.respawn = False  # start a replacement worker in the background after a kill (pools)
        self.one_run_per_worker = False  # UserRunner: the worker is stopped after every request
        self._closed = False

    # --- process management ----------------------------------------------------------------
    def _start(self) -> None:
        # A fresh interpreter (not fork: never copy a process that may hold a CUDA context; not
        # multiprocessing's spawn: it re-imports the caller's __main__, e.g. a test or app script).
        parent, child = socket.socketpair()
        args = self._popen_args(child.fileno())
        if self.device is not None:  # one GPU: a fault there restarts this worker alone
            args["env"] = {**args["env"], "CUDA_VISIBLE_DEVICES": self.device}
        close_after = args.pop("close_after", [])  # e.g. the pipe bubblewrap reads the seccomp filter from
        try:
            proc = subprocess.Popen(**args, stdin=subprocess.DEVNULL)
        finally:
            child.close()
            for fd in close_after:
                os.close(fd)
        self._proc, self._conn = proc, self._channel(Connection(parent.detach()))
        try:
            first = self._receive(None, START_TIMEOUT_S, None, "starting the worker")
        except RunTimeout as exc:
            self._stop(kill=True)
            raise KernelError(f"{exc}; the worker was stopped") from None
        if first.kind != "ready":
            self._stop()
            raise KernelError(f"{self.backend} worker failed to start: {first.payload}")
        self.device_info = first.payload

    def _popen_args(self, fd: int) -> dict:
        """How a worker is started (UserRunner starts a sandboxed one instead)."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.pop("VISUALIZER_TOKEN", None)  # the operator's key for visitor code stays in the server
        if self.backend == "sim":
            env["VISUALIZER_WORKER_MEMORY"] = str(SIM_MEMORY_BYTES)
        args = [sys.executable, "-m", "visualizer.engine.run.worker", str(fd), self.backend]
        return {"args": args, "pass_fds": [fd], "env": env, "cwd": ROOT}

    def _exit_status(self, code: int | None) -> int | None:
        return code

    def _channel(self, conn: Connection):
        """The connection to the worker as this runner speaks it (UserRunner: no pickles); every read
        from it has a deadline and a byte budget (engine/run/wire.py)."""
        return wire.PickleChannel(conn, BUILTIN_MESSAGE_BYTES)

    def _stop(self, kill: bool = False) -> None:
        """Ask the worker to leave (or kill it: a busy worker never reads the request to leave)."""
        if self._proc is not None:
            if not kill:
                try:
                    self._conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
            try:
                self._proc.wait(timeout=0 if kill else 2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._conn.close()
        self._proc = self._conn = None

    def _receive(self, rid, timeout: float, progress, what: str, launches: int = 1):
        """The reply to request ``rid``; its progress goes to the callback on the way.

        Messages for any other request are dropped: they answer a request nobody waits for.
        The callback is also called about once a second while nothing arrives, so a caller that
        wants to leave (Streamlit raises from its next element update) is heard promptly.
        """
        deadline = time.monotonic() + timeout
        total = done = 0  # blocks of every launch the simulator runs for this request
        last_call = time.monotonic()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                where = "simulator" if self.backend == "sim" else "GPU"
                raise RunTimeout(f"{what} timed out: over the {where}'s limit of {timeout:g} s per run")
            try:
                ready = self._conn.poll(min(left, 0.25))
            except (EOFError, OSError):
                ready = True
            if not ready:
                if self._proc.poll() is not None:
                    return self._died(what)
                if progress is not None and total and time.monotonic() - last_call > 1.0:
                    last_call = time.monotonic()
                    progress(done, total)
                continue
            try:  # a deadline on every read: a message stopped half-way cannot hold this past the limit
                msg = Message.from_wire(self._conn.recv(deadline=deadline))
            except wire.WireTimeout:
                where = "simulator" if self.backend == "sim" else "GPU"
                raise RunTimeout(
                    f"{what} timed out: over the {where}'s limit of {timeout:g} s per run "
                    "(its worker stopped half-way through a message)"
                ) from None
            except wire.WireError as exc:  # a refused message (a sandbox's), not a lost worker
                self._stop(kill=True)
                self.restarts += 1
                raise KernelError(f"{what}: {exc}; the worker was stopped") from None
            except (EOFError, OSError):
                return self._died(what)
            except MalformedMessage as exc:
                self._stop(kill=True)
                raise KernelError(f"{what}: {exc}; the worker was stopped") from None
            except Exception as exc:  # a pickle our worker should never send: one line
                self._stop(kill=True)
                self.restarts += 1
                raise KernelError(
                    f"{what}: an unreadable message ({type(exc).__name__}); the worker was stopped"
                ) from None
            if msg.request_id != rid:
                continue  # left over from an earlier request
            if msg.kind == "blocks":  # a launch begins: its blocks, times the launches of this request
                if not total:
                    total, done = msg.payload * launches, 0
                continue
            if msg.kind == "progress":
                done += msg.payload
                if progress is not None and total:
                    last_call = time.monotonic()
                    progress(done, total)
                continue
            return msg

    def _died(self, what: str):
        code = None
        if self._proc is not None:
            try:  # the pipe can close a moment before the exit status is there
                code = self._exit_status(self._proc.wait(timeout=2))
            except subprocess.TimeoutExpired:
                pass
        self.last_exit_code = code  # which limit stopped it, for callers that explain it their way
        self._stop(kill=True)
        self.restarts += 1
        if code == -signal.SIGXCPU:
            raise KernelError(
                f"{what} used more than its {SIM_RUN_CPU_S} s of CPU time and was stopped; use a smaller launch"
            )
        if (
            code == STUCK_EXIT_CODE
        ):  # visualizer/engine/sim/fastsim.py's watchdog gave up interrupting the kernel
            raise KernelError(
                f"{what}: the simulated kernel hung (a deadlock or an endless loop) where the simulator's "
                "watchdog could not stop it; the worker was restarted"
            )
        if code == -signal.SIGKILL:
            raise KernelError(
                f"the {self.backend} worker was killed while {what} (out of memory?); it will be restarted"
            )
        raise KernelError(
            f"the {self.backend} worker died while {what} (exit code {code}); it will be restarted"
        )

    def _warm_up(self) -> None:
        """Start a worker now, so the next visitor does not wait for numba to import."""
        with self._lock:
            if not self._closed and not self.warm:
                try:
                    self._start()
                except KernelError:
                    pass  # the next capture tries again and reports it

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def warm(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _exchange(self, message: dict, timeout: float, progress, what: str, launches: int = 1, admit=None):
        """Send ``message`` (a request on the wire) to this runner's worker and return its reply
        ``(kind, id, payload...)``.

        ``admit(device_info)`` may refuse the request once the worker is up. A request given up
        for any reason (RunTimeout, a progress callback that raised, KeyboardInterrupt...) kills the
        worker: it would go on computing for nobody, and its reply must never be read by the next
        request. A worker that reported a GPU fault is reaped so the next call starts a fresh one.
        """
        with self._lock:
            if not self.warm:
                self._start()
            if admit is not None:
                admit(self.device_info)
            message["id"] = rid = next(self._ids)
            answered = False
            try:
                self._conn.send(message)
                reply = self._receive(rid, timeout, progress, what, launches)
                answered = True
            finally:
                if not answered and self._proc is not None:
                    self._stop(kill=True)
                    self.restarts += 1
                    self.abandoned += 1
                    if self.respawn:
                        threading.Thread(target=self._warm_up, daemon=True).start()
                elif self.one_run_per_worker:
                    self._stop(kill=True)  # a fresh process for every run: nothing of this one stays
            if reply.kind == "fatal":
                self._stop(kill=True)
                self.restarts += 1
        return reply

    def _launch(self, kernel, request, timeout, progress, what, smaller, launches=1, admit=None):
        """``_exchange`` for a request that launches ``kernel``: its reply's payload, or LaunchError /
        KernelError (one line; ``smaller`` says what to try after a timeout)."""
        try:
            reply = self._exchange(request, timeout, progress, what, launches, admit)
        except RunTimeout as exc:
            raise KernelError(f"{exc}; it was stopped (try {smaller})") from None
        if reply.kind == "invalid":
            raise LaunchError(reply.payload)
        if reply.kind == "fatal":
            raise KernelError(f"{kernel} faulted on the GPU: {reply.payload} (the worker was restarted)")
        if reply.kind == "error":
            raise KernelError(f"{kernel} failed: {reply.payload}")
        return reply.payload

    # --- the one thing callers do ------------------------------------------------------------
    def info(self) -> dict:
        with self._lock:
            if not self.warm:
                self._start()
            return dict(self.device_info)

    def capture(
        self,
        kernel: str,
        params: dict | None = None,
        *,
        seed: int = 0,
        repeats: int = 20,
        time_clean: bool = True,
        progress=None,
        timeout: float | None = None,
        **options,
    ) -> Capture:
        """Launch ``kernel`` once instrumented (and timed clean); raises LaunchError or KernelError.

        ``options``: the lenses asked for and their options (engine/lenses/: ``accesses=True``...);
        ``runs=N, schedule_seed=S``: the launch run N times, on the simulator in seeded schedules.
        """
        runs = int(options.get("runs", 1))
        fields = {"kernel": kernel, "params": dict(params or {}), "seed": seed, "repeats": repeats,
                  "time_clean": time_clean}  # fmt: skip
        for key in ("runs", "schedule_seed", "torch", "sim_engine"):
            if key in options:
                fields[key] = options.pop(key)
        if self.backend == "sim":
            fields["sim_engine"] = fields.get("sim_engine") or default_sim_engine()
            fields["cpu_limit_s"] = SIM_RUN_CPU_S
        typed = CaptureRequest.of(fields, options)  # engine/capture/request.py
        if self.backend == "sim":  # refuse bad input before starting a worker, at its engine's limits
            admit_capture(kernel, params, "sim", runs=runs, sim_engine=typed.planned_sim_engine()[0])
            if typed.wants("accesses") and typed.lenses["accesses"].get("access_engine") != "pass":
                admit_accesses(kernel, params)  # every thread recorded: refused now, naming what to lower
        request = typed.to_wire()

        def admit(info):  # on a GPU, against the memory the worker's device reports
            if self.backend == "gpu":
                admit_capture(kernel, params, "gpu", limits_from_info(info), runs=runs)

        # the worker announces one launch's blocks; the simulator runs it twice when timing clean
        launches = (2 if self.backend == "sim" and time_clean else 1) + runs - 1
        what = f"running {kernel}"
        timeout = timeout or self.run_timeout
        payload = self._launch(kernel, request, timeout, progress, what, "a smaller launch", launches, admit)
        return build_capture(payload)

    def steps(self, kernel: str, params: dict | None = None, *, steps: int, every: int, seed: int = 0,
              progress=None, timeout: float | None = None) -> dict:  # fmt: skip
        """``kernel`` launched ``steps`` times by a host loop, a frame every ``every`` steps
        (engine/capture/steps.py); raises LaunchError or KernelError (one line)."""
        from visualizer.engine.capture.steps import STEPS_CPU_S, STEPS_TIMEOUT_S, plan_steps

        plan_steps(kernel, params, steps, every, self.backend)  # refused before a worker starts
        cpu_limit = {"cpu_limit_s": STEPS_CPU_S} if self.backend == "sim" else {}
        request = {"op": "steps", "kernel": kernel, "params": dict(params or {}), "steps": steps,
                   "every": every, "seed": seed, **cpu_limit}  # fmt: skip
        what = f"running {steps} steps of {kernel}"
        return self._launch(
            kernel, request, timeout or STEPS_TIMEOUT_S, progress, what, "fewer steps or a smaller grid"
        )


class RunTimeout(Exception):
    pass


class RunQueue:
    """One first-come-first-served queue in front of a small pool of workers of one backend.

    A caller waiting for a free worker is told its place (``waiting(ahead, running)``) about once
    a second; if that callback raises (the visitor left), it leaves the queue.
    """

    runner_class = Runner  # UserRunQueue: UserRunner, a fresh sandboxed process per run
    respawn = True  # a warm worker waits for the next run (not for visitor code: nothing stays)

    def __init__(self, backend: str = "auto", workers: int | None = None, run_timeout: float | None = None):
        self.backend = resolve_backend(backend)
        n = workers or default_workers(self.backend)
        gpus = visible_gpus() if self.backend == "gpu" else []
        # one worker per GPU, each pinned to its own (a worker beyond the GPUs shares them in turn)
        devices = [gpus[i % len(gpus)] if gpus else None for i in range(n)]
        self.runners = [self.runner_class(self.backend, run_timeout) for _ in range(n)]
        for r, device in zip(self.runners, devices, strict=True):
            r.device = device
            r.respawn = self.respawn
        if self.respawn and len(set(devices) - {None}) > 1:  # every GPU's worker now: captures spread
            for r in self.runners[1:]:
                threading.Thread(target=r._warm_up, daemon=True).start()
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._idle = list(self.runners)

    @property
    def restarts(self) -> int:
        return sum(r.restarts for r in self.runners)

    @property
    def abandoned(self) -> int:
        return sum(r.abandoned for r in self.runners)

    def status(self) -> dict:
        with self._cond:
            return {
                "workers": len(self.runners),
                "running": len(self.runners) - len(self._idle),
                "queued": len(self._queue),
            }

    def _acquire(self, waiting) -> Runner:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
        try:
            while True:
                with self._cond:
                    if self._queue[0] is ticket and self._idle:
                        self._queue.popleft()
                        # a worker that is already up first (starting one takes a second or two)
                        runner = max(self._idle, key=lambda r: r.warm)
                        self._idle.remove(runner)
                        self._cond.notify_all()
                        return runner
                    running = len(self.runners) - len(self._idle)
                    ahead = self._queue.index(ticket) + running
                if waiting is not None:
                    waiting(ahead, running)  # may raise: the caller left the queue
                with self._cond:
                    self._cond.wait(timeout=1.0)
        except BaseException:
            with self._cond:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._cond.notify_all()
            raise

    def _release(self, runner: Runner) -> None:
        with self._cond:
            self._idle.append(runner)
            self._cond.notify_all()

    def info(self) -> dict:
        runner = self._acquire(None)
        try:
            return runner.info()
        finally:
            self._release(runner)

    def capture(
        self, kernel: str, params: dict | None = None, *, waiting=None, fresh=False, **kwargs
    ) -> Capture:
        """Runner.capture on the next free worker, after waiting in line (see ``waiting``). Every
        call is a new run (``fresh`` is for the cluster's queue, which may answer from its memory)."""
        # refused: never waits in line; a simulator's at its engine's limits (the runner then checks the
        # engine its lenses leave: Runner.capture)
        engine = (kwargs.get("sim_engine") or default_sim_engine()) if self.backend == "sim" else "fastsim"
        admit_capture(kernel, params, self.backend, runs=kwargs.get("runs", 1), sim_engine=engine)
        runner = self._acquire(waiting)
        try:
            return runner.capture(kernel, params, **kwargs)
        finally:
            self._release(runner)

    def steps(self, kernel: str, params: dict | None = None, *, waiting=None, **kwargs) -> dict:
        """Runner.steps on the next free worker, after waiting in line."""
        from visualizer.engine.capture.steps import plan_steps

        plan_steps(kernel, params, kwargs.get("steps", 0), kwargs.get("every", 0), self.backend)
        runner = self._acquire(waiting)
        try:
            return runner.steps(kernel, params, **kwargs)
        finally:
            self._release(runner)

    def close(self) -> None:
        for r in self.runners:
            r.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_QUEUES: dict[tuple[type, str], Any] = {}
_QUEUES_LOCK = threading.Lock()


def shared_queue(kind: type, backend: str = "auto"):
    """The process-wide queue of ``kind`` (RunQueue; user_runner.UserRunQueue) for a backend, created on
    first use."""
    name = resolve_backend(backend)
    with _QUEUES_LOCK:
        if (kind, name) not in _QUEUES:
            _QUEUES[(kind, name)] = kind(name)
        return _QUEUES[(kind, name)]


def get_runner(backend: str = "auto") -> RunQueue:
    """The process-wide queue of workers for a backend, created on first use."""
    return shared_queue(RunQueue, backend)


def capture(kernel: str, params: dict | None = None, backend: str = "auto", **kwargs) -> Capture:
    return get_runner(backend).capture(kernel, params, **kwargs)
