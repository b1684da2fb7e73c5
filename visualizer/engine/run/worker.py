"""The worker process: imports numba for one backend, compiles kernels, launches, times, copies back.

It runs in its own process (see runner.py) so that a kernel that faults or hangs, or the
simulator's hundreds of Python threads, can never take down the caller. Requests and replies are
plain dicts of numpy arrays and numbers over a multiprocessing pipe.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

from visualizer.engine.capture.backend import Backend
from visualizer.engine.run.messages import Message, one_line

SIM_THREAD_STACK_BYTES = 4 * 2**20


def configure_backend(backend: str) -> None:
    """Must run before numba is imported: the simulator is chosen by an environment variable."""
    if backend == "sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        # fastsim runs every simulated thread on this one OS thread (greenlets), so there is no
        # GIL contention to pin against; a long switch interval only delays its watchdog thread.
        sys.setswitchinterval(0.02)
        # Small OS thread stacks (the stock simulator, still used for some paths, starts one OS
        # thread per simulated thread): 8 MiB each would leave no room under limit_memory's cap.
        threading.stack_size(SIM_THREAD_STACK_BYTES)
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


def limit_memory() -> None:
    """Cap this worker's address space (the runner passes the size): a launch that grows past it
    fails with MemoryError in this process instead of pushing the server out of memory. No core
    files either: a worker stopped by its CPU limit (SIGXCPU) would otherwise dump one."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    size = os.environ.get("VISUALIZER_WORKER_MEMORY", "")
    if not size.isdigit():
        return
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = int(size) if hard == resource.RLIM_INFINITY else min(int(size), hard)
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


def limit_cpu(seconds: float | None) -> None:
    """At most ``seconds`` more CPU time for this request: past it the kernel sends SIGXCPU and the
    worker dies, even if nobody is watching it any more (the runner names the limit)."""
    if not seconds:
        return
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):
        pass


def capture(backend: Backend, request) -> dict:
    """Run one built-in kernel through the capture sequence (engine/capture/builtin.py)."""
    from visualizer.engine.capture.builtin import capture as run_builtin

    return run_builtin(backend, request)


def capture_source(backend: Backend, request) -> dict:
    """Run a visitor's kernel from its source (a request with ``source``): engine/capture/source.py."""
    from visualizer.engine.capture.source import capture_source as run_user_source

    return run_user_source(backend, request)


def serve(conn, backend_name: str, after_ready=None, once: bool = False, user_code: bool = False) -> None:
    """Worker main loop: one request at a time until None or the pipe closes.

    Every message carries the id of the request it answers (progress too), so the runner can
    tell a reply to its own request from one left over by a request it gave up on.
    ``after_ready(backend)`` runs once the backend is up, before any request is read; ``once``: leave
    after one request; ``user_code``: only a sandboxed worker (visualizer/engine/run/sandbox.py) runs
    visitors' source (op "source"), never a worker of the built-in kernels.
    """
    configure_backend(backend_name)
    limit_memory()
    current = {"id": None}  # the request being served, echoed on its progress messages

    def say(kind, payload=None, detail=None):
        conn.send(Message(kind, current["id"], payload, detail).to_wire())

    def tell(kind):  # progress messages: a worker whose runner left keeps running its request
        def send(n):
            try:
                say(kind, n)
            except (BrokenPipeError, OSError):
                pass

        return send

    try:
        backend = Backend(backend_name, tell("progress"), tell("blocks"))
    except Exception as exc:
        say("error", one_line(exc))
        return
    say("ready", backend.device_info())
    if after_ready is not None:
        after_ready(backend)
    while True:
        try:
            wire = conn.recv()  # a plain dict: typed below (engine/capture/request.py)
        except EOFError:
            return
        if wire is None:
            return
        current["id"] = wire.get("id")
        limit_cpu(wire.get("cpu_limit_s"))
        op = wire.get("op")
        try:
            if op == "info":
                say("ok", backend.device_info())
                continue
            visitor_op = op in ("source", "ptx_source")
            if visitor_op != user_code:
                say("error", "this worker does not run that kind of request")
                continue
            if op == "steps":  # a host loop of launches (engine/capture/steps.py)
                from visualizer.engine.capture.steps import run_steps

                result = run_steps(backend, str(wire.get("kernel")), dict(wire.get("params") or {}),
                                   wire.get("steps"), wire.get("every"), int(wire.get("seed", 0)))  # fmt: skip
            elif op == "ptx_source":  # compiled here, in the visitor's sandbox
                from visualizer.engine.capture import ptx

                result = ptx.source_asm(wire, str(wire.get("arch", "sm_90")), bool(wire.get("sass", True)))
            else:
                from visualizer.engine.capture.request import CaptureRequest

                request = CaptureRequest.from_wire(wire)
                checked = None
                if user_code and backend.simulator and wire.get("gpu_check"):
                    # before the simulator runs it: what no GPU compiles is refused here (GpuRefused is a
                    # LaunchError: "invalid", one line naming the kernel's line), ptxas counts the rest
                    from visualizer.engine.capture import ptx

                    checked = ptx.gpu_check(wire)
                result = (capture_source if user_code else capture)(backend, request)
                if checked is not None:
                    result["gpu_check"] = checked
            say("ok", result)
        except Exception as exc:
            from visualizer.specs.catalog import LaunchError

            if isinstance(exc, LaunchError):
                say("invalid", str(exc))
                continue
            fatal = is_fatal_cuda_error(exc)
            detail = traceback.format_exc(limit=-3)
            say("fatal" if fatal else "error", one_line(exc), detail)
            if fatal:
                # A faulted CUDA context is unusable, and freeing its memory at exit only repeats the
                # error: leave at once so the runner starts a fresh worker.
                conn.close()
                os._exit(3)
        finally:
            current["id"] = None
        if once:
            return


def is_fatal_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(
        s in text for s in ("CudaAPIError", "ILLEGAL_ADDRESS", "illegal", "LAUNCH_FAILED", "CUDA_ERROR")
    )


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])), sys.argv[2])
