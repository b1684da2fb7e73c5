"""Runs kernels in one worker process per backend and turns what they record into a Capture.

The caller (CLI, web app, tests) never imports numba: a kernel that faults, hangs or floods the
GIL with simulator threads only ever hurts its worker, which is restarted for the next launch.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from visualizer.catalog import LaunchError, plan_launch
from visualizer.trace import Capture, build_capture

BACKENDS = ("auto", "gpu", "sim")
START_TIMEOUT_S = 180.0  # importing numba and creating a CUDA context can take a while on a cold machine
RUN_TIMEOUT_S = 600.0


class KernelError(RuntimeError):
    """The kernel (or its worker) failed; the message is one line, the runner stays usable."""


@functools.cache
def gpu_present() -> bool:
    """Ask the CUDA driver directly (no numba import): is there at least one GPU?"""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cu = ctypes.CDLL(lib)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if cu.cuInit(0) != 0:
            return False
        return cu.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    return False


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "gpu" if gpu_present() else "sim"
    if backend == "gpu" and not gpu_present():
        raise LaunchError("backend 'gpu' asked for, but this machine has no CUDA GPU (use sim or auto)")
    return backend


ROOT = Path(__file__).resolve().parents[1]


class Runner:
    """One worker process for one backend ("gpu" or "sim"); launches are serialised by a lock."""

    def __init__(self, backend: str = "auto", run_timeout: float = RUN_TIMEOUT_S):
        self.backend = resolve_backend(backend)
        self.run_timeout = run_timeout
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self.device_info: dict | None = None
        self.restarts = 0

    # --- process management ----------------------------------------------------------------
    def _start(self) -> None:
        # A fresh interpreter (not fork: never copy a process that may hold a CUDA context; not
        # multiprocessing's spawn: it re-imports the caller's __main__, e.g. a test or app script).
        parent, child = socket.socketpair()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "visualizer.worker", str(child.fileno()), self.backend],
            pass_fds=[child.fileno()],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        child.close()
        self._proc, self._conn = proc, Connection(parent.detach())
        kind, *payload = self._receive(START_TIMEOUT_S, None, "starting the worker")
        if kind != "ready":
            self._stop()
            raise KernelError(f"{self.backend} worker failed to start: {payload[0]}")
        self.device_info = payload[0]

    def _stop(self) -> None:
        if self._proc is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._conn.close()
        self._proc = self._conn = None

    def _receive(self, timeout: float, progress, what: str):
        """Next reply from the worker; progress messages go to the callback on the way."""
        deadline = time.monotonic() + timeout
        total = done = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._stop()
                self.restarts += 1
                raise KernelError(f"{what} timed out after {timeout:.0f} s; the worker was restarted")
            try:
                ready = self._conn.poll(min(left, 0.5))
            except (EOFError, OSError):
                ready = True
            if not ready:
                if self._proc.poll() is not None:
                    return self._died(what)
                continue
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                return self._died(what)
            if msg[0] == "progress":
                if msg[1] < 0:
                    total, done = -msg[1], 0
                else:
                    done += msg[1]
                if progress is not None and total:
                    progress(done, total)
                continue
            return msg

    def _died(self, what: str):
        code = self._proc.poll() if self._proc is not None else None
        self._stop()
        self.restarts += 1
        raise KernelError(
            f"the {self.backend} worker died while {what} (exit code {code}); it will be restarted"
        )

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the one thing callers do ------------------------------------------------------------
    def info(self) -> dict:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
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
        accesses: bool = False,
    ) -> Capture:
        """Launch ``kernel`` once instrumented (and timed clean); raises LaunchError or KernelError."""
        request = {
            "kernel": kernel,
            "params": dict(params or {}),
            "seed": seed,
            "repeats": repeats,
            "time_clean": time_clean,
        }
        if accesses:  # record every load/store on the simulator (visualizer/memory)
            request["accesses"] = True
        if self.backend == "sim":
            plan_launch(kernel, params, "sim")  # refuse bad input before starting a worker
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            self._conn.send(request)
            reply = self._receive(timeout or self.run_timeout, progress, f"running {kernel}")
        kind = reply[0]
        if kind == "invalid":
            raise LaunchError(reply[1])
        if kind == "fatal":
            # the worker exits after a GPU fault; reap it now so the next call starts a fresh one
            with self._lock:
                self._stop()
                self.restarts += 1
            raise KernelError(f"{kernel} faulted on the GPU: {reply[1]} (the worker was restarted)")
        if kind == "error":
            raise KernelError(f"{kernel} failed: {reply[1]}")
        return build_capture(reply[1])


_RUNNERS: dict[str, Runner] = {}
_RUNNERS_LOCK = threading.Lock()


def get_runner(backend: str = "auto") -> Runner:
    """The process-wide runner for a backend (one worker each), created on first use."""
    name = resolve_backend(backend)
    with _RUNNERS_LOCK:
        if name not in _RUNNERS:
            _RUNNERS[name] = Runner(name)
        return _RUNNERS[name]


def capture(kernel: str, params: dict | None = None, backend: str = "auto", **kwargs) -> Capture:
    return get_runner(backend).capture(kernel, params, **kwargs)
