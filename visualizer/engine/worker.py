"""The worker process: imports numba for one backend, compiles kernels, launches, times, copies back.

It runs in its own process (see runner.py) so that a kernel that faults or hangs, or the
simulator's hundreds of Python threads, can never take down the caller. Requests and replies are
plain dicts of numpy arrays and numbers over a multiprocessing pipe.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import traceback

import numpy as np

from visualizer.engine.capture.backend import Backend
from visualizer.engine.messages import Message

PER_WARP_ABOVE = 1 << 16  # above this many threads, record timing once per warp (lane 0)
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


def kernel_function(spec, values):
    """The built-in kernel's plain Python function (kernels/): the function itself, or what its
    factory returns for this compile-time specialisation (``spec.build_args``)."""
    module = importlib.import_module(spec.build[0])
    fn = getattr(module, spec.build[1])
    if spec.build_args:
        fn = fn(*[values[a] for a in spec.build_args])
    return fn


def build_kernels(spec, values, passes: tuple = ()):
    """The spec's two builds (engine/builds.py): instrumented by engine/instrument.py like any
    kernel, and clean. Returns the Builds (traced, clean, the parameters the instrumenter added)."""
    from visualizer.engine.builds import builds

    return builds(kernel_function(spec, values), spec.active_when, passes)


def record_buffers(spec, launch) -> dict[str, np.ndarray]:
    """Host copies of the trace buffers the kernel writes into."""
    threads = launch.threads
    tpb = launch.threads_per_block
    per_warp = threads > PER_WARP_ABOVE
    records = launch.blocks * ((tpb + 31) // 32) if per_warp else threads
    bufs = {
        "trace": np.zeros((3, records), np.int64),
        "active": np.zeros(threads, np.uint8),
        "tiles": np.full(
            (launch.blocks, max(launch.tile_steps, 1), max(len(spec.tile_operands), 1), 5), -1, np.int64
        ),
        "rows": np.full((*(launch.row_state or (1, 1, 1)), 2), np.nan, np.float32),
    }
    return bufs


INSTRUMENTER_BUFFERS = ("trace", "active")  # what the instrumenter appends to every traced build


def probe_buffers(spec, launch) -> dict[str, np.ndarray]:
    """The probe buffers a launch of ``spec`` uses: the kernel's own domain ones and the trace."""
    return {
        k: v for k, v in record_buffers(spec, launch).items() if k in spec.args or k in INSTRUMENTER_BUFFERS
    }


def launch_args(spec, launch, named: dict) -> tuple[list, list]:
    """(instrumented, clean) argument lists of a hand-made launch: ``named`` holds the arrays and
    probe buffers by role; the instrumented build takes the trace buffers after the kernel's own."""
    clean = [named[a] if a in named else launch.scalars[a] for a in spec.args]
    return clean + [named[b] for b in INSTRUMENTER_BUFFERS], clean


def torch_baseline(spec, values, inputs, device, repeats: int, flush: bool = False) -> dict:
    """The kernel's work done by PyTorch on the same device arrays, timed the same way as ours (device
    time behind a spin on torch's stream, and launch overhead), if torch is there."""
    if spec.torch_op is None:
        return {}
    try:
        import torch
    except ImportError:
        return {}
    try:
        from numba import cuda

        from visualizer.engine import gpu_timing

        torch.backends.cuda.matmul.allow_tf32 = False  # compare fp32 with fp32
        tensors = {k: torch.as_tensor(device[k], device="cuda") for k in inputs}
        label, call = spec.torch_op(torch, tensors, values)
        m = gpu_timing.measure(gpu_timing.TorchOps(torch, cuda), call, repeats, warmup=3, flush=flush)
        return gpu_timing.torch_fields(label, m)
    except Exception as exc:  # a baseline must never cost the capture
        return {"torch_error": one_line(exc)}


def builtin_view(spec, fn, values: dict, host: dict):
    """What a lens may know of a built-in kernel (engine/lenses KernelView): its parameter names, the
    probe buffers among them, its closure (tile sizes, device functions), its host arrays by name."""
    from visualizer.engine.access_record import PROBE_BUFFERS
    from visualizer.engine.instrument import function_namespace
    from visualizer.engine.lenses import KernelView

    names = _param_names(fn)
    return KernelView(
        params=names,
        probe_params=frozenset(n for role, n in zip(spec.args, names, strict=False) if role in PROBE_BUFFERS),
        namespace=function_namespace(fn),
        host_arrays={n: host[role] for role, n in zip(spec.args, names, strict=False) if role in host},
        estimates=dict(spec.extra),
        values=values,
    )


def prepare_builtin(backend: Backend, request):
    """A built-in kernel's Job (engine/pipeline.py): its spec's launch, inputs, probe buffers, builds."""
    from visualizer.engine.builds import builds
    from visualizer.engine.instrument import ACTIVE, TRACE
    from visualizer.engine.lenses import Lenses
    from visualizer.engine.pipeline import Job
    from visualizer.specs import catalog

    limits = catalog.limits_from_info(backend.device_info())
    spec, values, launch = catalog.plan_launch(request.kernel, request.params, backend.name, limits)
    inputs = spec.make_inputs(values, np.random.default_rng(request.seed))
    buffers = probe_buffers(spec, launch)
    started = time.perf_counter_ns()
    fn = kernel_function(spec, values)
    kernel = builtin_view(spec, fn, values, {**inputs, **buffers})
    lenses = Lenses(backend, request, launch.grid, launch.block)  # the lenses asked for (engine/lenses/)
    built = builds(fn, spec.active_when, lenses.passes(kernel))
    lenses.built(built.info, kernel)
    buffers.update(lenses.buffers())
    layout = [
        ("array", a) if a in inputs else ("buffer", a) if a in buffers else ("value", launch.scalars[a])
        for a in spec.args
    ]  # the kernel's own parameters (domain probe buffers among them: no-ops in the clean build)
    # the instrumenter's, after the kernel's own: the trace, then the lenses' buffers
    added = [("buffer", b) for b in INSTRUMENTER_BUFFERS]
    added += lenses.buffer_args(built.params[len(INSTRUMENTER_BUFFERS) :])
    nbytes, flops = spec.work(values)
    job = Job(
        traced=built.traced, clean=built.clean, grid=launch.grid, block=launch.block, arrays=inputs,
        buffers=buffers, traced_args=layout + added, clean_args=layout, traced_names=[*kernel.params, TRACE, ACTIVE],
        lenses=lenses, dynamic_smem=launch.dynamic_smem, nbytes=nbytes, flops=flops, compile_started_ns=started,
    )  # fmt: skip
    return spec, values, launch, inputs, job


def _param_names(fn) -> list[str]:
    import inspect

    return list(inspect.signature(fn).parameters)


def capture(backend: Backend, request) -> dict:
    """Run one built-in kernel through the capture sequence (engine/pipeline.py)."""
    from visualizer.engine import pipeline

    spec, values, launch, inputs, job = prepare_builtin(backend, request)
    repeats = request.repeats
    baseline: dict = {}

    def torch_while_allocated(ran):
        if not backend.simulator and request.torch and request.time_clean:
            flush = ran.timing["method"]["l2_flush"]
            baseline.update(torch_baseline(spec, values, inputs, ran.device_arrays, repeats, flush))

    runs, schedule_seed = request.runs, request.schedule_seed
    ran = pipeline.run(backend, job, repeats, request.time_clean, torch_while_allocated, runs, schedule_seed)
    timing = {**ran.timing, **baseline, "bytes_moved": job.nbytes, "flops": job.flops}
    if not backend.simulator and "clean_ms" in timing:
        sec = timing["clean_ms"] / 1e3
        timing["clean_gbs"] = job.nbytes / sec / 1e9 if sec > 0 else None
        timing["clean_gflops"] = job.flops / sec / 1e9 if sec > 0 else None
    launch_info = {
        **pipeline.launch_fields(backend, job, ran),
        "kernel": spec.name,
        "params": values,
        "static_smem_bytes": launch.static_smem,
        "tile_operands": list(spec.tile_operands),
        "row_table": list(spec.row_table) if spec.row_table else None,
    }
    if not backend.simulator and ran.instrumented.get("static_smem_bytes") is not None:
        launch_info["static_smem_bytes"] = ran.instrumented["static_smem_bytes"]
    reply = {
        "launch": launch_info,
        "timing": timing,
        "buffers": ran.buffers,
        "inputs": inputs,  # as copied in (the reference check needs every one)
        "outputs": {k: ran.after[k] for k in spec.outputs},
    }
    if ran.runs is not None:  # every run's outputs, stacked (analysis/races.py compares them)
        reply["runs"] = {k: ran.runs[k] for k in spec.outputs}
        launch_info["runs"] = {"count": runs, "seed": schedule_seed, "schedules": ran.schedules}
    job.lenses.reply(reply, launch_info)  # each lens's part (engine/lenses/)
    return reply


def capture_source(backend: Backend, request) -> dict:
    """Run a visitor's kernel from its source (a request with ``source``): engine/source_capture.py."""
    from visualizer.engine.source_capture import capture_source as run_user_source

    return run_user_source(backend, request)


def serve(conn, backend_name: str, after_ready=None, once: bool = False, user_code: bool = False) -> None:
    """Worker main loop: one request at a time until None or the pipe closes.

    Every message carries the id of the request it answers (progress too), so the runner can
    tell a reply to its own request from one left over by a request it gave up on.
    ``after_ready(backend)`` runs once the backend is up, before any request is read; ``once``: leave
    after one request; ``user_code``: only a sandboxed worker (visualizer/engine/sandbox.py) runs
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
            if op == "ptx_source":  # compiled here, in the visitor's sandbox
                from visualizer.engine import ptx

                result = ptx.source_asm(wire, str(wire.get("arch", "sm_90")), bool(wire.get("sass", True)))
            else:
                from visualizer.engine.capture.request import CaptureRequest

                result = (capture_source if user_code else capture)(backend, CaptureRequest.from_wire(wire))
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


def one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:500]


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])), sys.argv[2])
