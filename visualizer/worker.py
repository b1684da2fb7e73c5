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


class Backend:
    """What differs between the GPU and the simulator, behind one small interface."""

    def __init__(self, name: str, progress=None):
        from numba import cuda

        self.name = name
        self.cuda = cuda
        self.progress = progress
        self.simulator = name == "sim"
        if self.simulator:
            from visualizer import fastsim

            # greenlet threads, per-block shared memory; a hung kernel stops with KernelHangError,
            # and a worker stuck past that exits so the runner starts a fresh one
            fastsim.install(exit_if_stuck=True)
            self._install_progress_hook()
        elif not cuda.is_available():
            raise RuntimeError("no CUDA GPU is available to numba-cuda on this machine")

    # --- device description ---------------------------------------------------------------
    def device_info(self) -> dict:
        if self.simulator:
            return {
                "backend": "sim",
                "device_name": "CUDA simulator on CPU",
                "compute_capability": None,
                "models": "NVIDIA H200 (132 SMs)",
                "num_sms": 132,
                "max_threads_per_block": 1024,
                "smem_per_block": 48 * 1024,
                "smem_per_block_optin": 232448,
                "max_threads_per_sm": 2048,
                "max_blocks_per_sm": 32,
                "regs_per_sm": 65536,
                "smem_per_sm": 233472,
            }
        dev = self.cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        cc = dev.compute_capability
        info = {
            "backend": "gpu",
            "device_name": name,
            "compute_capability": f"{cc[0]}.{cc[1]}",
            "num_sms": dev.MULTIPROCESSOR_COUNT,
            "max_threads_per_block": dev.MAX_THREADS_PER_BLOCK,
            "smem_per_block": dev.MAX_SHARED_MEMORY_PER_BLOCK,
            "smem_per_block_optin": dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "max_threads_per_sm": dev.MAX_THREADS_PER_MULTIPROCESSOR,
            "max_blocks_per_sm": dev.MAX_BLOCKS_PER_MULTIPROCESSOR,
            "regs_per_sm": dev.MAX_REGISTERS_PER_MULTIPROCESSOR,
            "smem_per_sm": dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            "clock_khz": dev.CLOCK_RATE,
            "memory_clock_khz": dev.MEMORY_CLOCK_RATE,
            "memory_bus_bits": dev.GLOBAL_MEMORY_BUS_WIDTH,
        }
        try:  # global memory, for the runner's admission check (catalog.check_cost)
            info["memory_bytes"] = int(self.cuda.current_context().get_memory_info()[1])
        except Exception:
            pass
        # DRAM peak: 2 transfers per clock (DDR) x bus width in bytes
        info["peak_bandwidth_gbs"] = 2 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8 / 1e9
        return info

    def _install_progress_hook(self) -> None:
        """Count simulated blocks as they finish, so a long run can show progress."""
        from numba.cuda.simulator import kernel as simkernel

        original = simkernel.BlockManager.run
        backend = self

        def run(manager, grid_point, *args):
            original(manager, grid_point, *args)
            if backend.progress is not None:
                backend.progress(1)

        simkernel.BlockManager.run = run

    # --- timing primitives -------------------------------------------------------------------
    def sync(self) -> None:
        if not self.simulator:
            self.cuda.synchronize()

    def timed(self, fn) -> tuple[object, float]:
        """Run fn and return (its result, wall ns), synchronised with the device."""
        self.sync()
        t = time.perf_counter_ns()
        out = fn()
        self.sync()
        return out, time.perf_counter_ns() - t


def build_kernels(spec, values):
    module = importlib.import_module(spec.build[0])
    if spec.build_args:
        return getattr(module, spec.build[1])(*[values[a] for a in spec.build_args])
    return getattr(module, spec.build[1] + "_traced"), getattr(module, spec.build[1] + "_clean")


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

        from visualizer import gpu_timing

        torch.backends.cuda.matmul.allow_tf32 = False  # compare fp32 with fp32
        tensors = {k: torch.as_tensor(device[k], device="cuda") for k in inputs}
        label, call = spec.torch_op(torch, tensors, values)
        m = gpu_timing.measure(gpu_timing.TorchOps(torch, cuda), call, repeats, warmup=3, flush=flush)
        return gpu_timing.torch_fields(label, m)
    except Exception as exc:  # a baseline must never cost the capture
        return {"torch_error": one_line(exc)}


def resources(backend: Backend, dispatcher, launch) -> dict:
    """Registers, static shared memory and the driver's occupancy answer for one compiled build."""
    if backend.simulator:
        return {}
    try:
        (argtypes, kernel), *_ = dispatcher.overloads.items()
        regs = int(kernel.regs_per_thread)
        smem = int(kernel.shared_mem_per_block)
        local = int(kernel.local_mem_per_thread)
        cufunc = kernel._codelibrary.get_cufunc()
        ctx = backend.cuda.current_context()
        blocks = ctx.get_active_blocks_per_multiprocessor(
            cufunc, launch.threads_per_block, launch.dynamic_smem
        )
        return {
            "registers_per_thread": regs,
            "static_smem_bytes": smem,
            "local_bytes_per_thread": local,
            "driver_blocks_per_sm": int(blocks),
        }
    except Exception as exc:  # resources are a bonus; the capture stands without them
        return {"error": f"{type(exc).__name__}: {exc}"}


def kernel_timing(
    backend: Backend, steps: dict, compile_ns: int, repeats: int, time_clean: bool,
    run_clean, run_traced, nbytes: float, flops: float,
) -> dict:  # fmt: skip
    """timing.json for one capture (built-in or user kernel): on a GPU, device time of both builds
    queued behind a spin kernel with launch overhead beside it (visualizer/gpu_timing.py); on the
    simulator, CPU wall time of the instrumented launch already in ``steps`` (and one clean launch)."""
    timing: dict = {"backend": backend.name, "host_steps_ns": steps, "compile_ns": compile_ns}
    if backend.simulator:
        timing["clock"] = "simulator wall time on the CPU (not GPU time)"
        timing["method"] = {
            "device_time": "none: the simulator has no GPU clock; times are CPU wall time of one "
            "simulated launch, and SM placement and in-kernel times are modelled"
        }
        timing["instrumented_ms"] = steps["kernel"] / 1e6
        if time_clean:
            _, clean_ns = backend.timed(run_clean)
            timing["clean_ms"] = clean_ns / 1e6
    else:
        from visualizer import gpu_timing

        flush = gpu_timing.wants_l2_flush(nbytes, flops)
        ops = gpu_timing.NumbaOps(backend.cuda)
        cln = gpu_timing.measure(ops, run_clean, repeats, flush=flush)
        inst = gpu_timing.measure(ops, run_traced, repeats, flush=flush)
        one = gpu_timing.one_launch_event_ms(ops, run_clean, min(repeats, 5))
        timing.update(gpu_timing.timing_fields(cln, inst, one))
        timing["method"]["l2_flush_why"] = gpu_timing.l2_flush_reason(nbytes, flops)
    if timing.get("clean_ms", 0) > 0:
        timing["overhead_ratio"] = timing["instrumented_ms"] / timing["clean_ms"]
    return timing


def capture(backend: Backend, request: dict) -> dict:
    """Run one kernel: allocate, copy in, launch instrumented, copy out, time, free."""
    from visualizer import catalog

    cuda = backend.cuda
    info = backend.device_info()
    limits = catalog.limits_from_info(info)
    spec, values, launch = catalog.plan_launch(request["kernel"], request.get("params"), backend.name, limits)
    rng = np.random.default_rng(request.get("seed", 0))
    inputs = spec.make_inputs(values, rng)
    host = {**inputs, **{k: v for k, v in record_buffers(spec, launch).items() if k in spec.args}}

    t_compile = time.perf_counter_ns()
    traced, clean = build_kernels(spec, values)
    grid, block = launch.grid, launch.block
    config = (grid, block, 0, launch.dynamic_smem) if launch.dynamic_smem else (grid, block)
    steps: dict[str, float] = {}

    if backend.progress is not None:
        backend.progress(-launch.blocks)  # announce the total number of blocks

    # allocate -> copy in -> kernel -> copy out -> free: each step on its own, synchronised
    device, steps["allocate"] = backend.timed(
        lambda: {k: cuda.device_array(v.shape, v.dtype) for k, v in host.items()}
    )

    def copy_in():
        for k, v in host.items():
            device[k].copy_to_device(v)

    _, steps["copy_in"] = backend.timed(copy_in)
    args = [device[a] if a in device else launch.scalars[a] for a in spec.args]

    compile_ns = 0
    if not backend.simulator:
        # warm-up compiles both builds (excluded from timing), then the buffers are reset
        t = time.perf_counter_ns()
        traced[config](*args)
        clean[config](*args)
        cuda.synchronize()
        compile_ns = time.perf_counter_ns() - t
        copy_in()
    else:
        compile_ns = time.perf_counter_ns() - t_compile

    recorder = (
        start_access_recording(backend, spec, values, launch, traced, device)
        if request.get("accesses")
        else None
    )
    try:
        _, steps["kernel"] = backend.timed(lambda: traced[config](*args))
    except Exception:
        if recorder is not None and recorder.overflow:
            from visualizer.catalog import LaunchError

            raise LaunchError(access_limit_message(recorder.limit)) from None
        raise
    finally:
        if recorder is not None:
            from visualizer.memory import record

            record.stop()

    def copy_out():
        return {k: device[k].copy_to_host() for k in host}

    result_arrays, steps["copy_out"] = backend.timed(copy_out)

    repeats = int(request.get("repeats", 20))
    nbytes, flops = spec.work(values)
    timing = kernel_timing(
        backend,
        steps,
        compile_ns,
        repeats,
        request.get("time_clean", True),
        lambda: clean[config](*args),
        lambda: traced[config](*args),
        nbytes,
        flops,
    )
    if not backend.simulator and request.get("torch", True):
        flush = timing["method"]["l2_flush"]
        timing.update(torch_baseline(spec, values, inputs, device, repeats, flush))
    timing["bytes_moved"] = nbytes
    timing["flops"] = flops
    if not backend.simulator:
        sec = timing["clean_ms"] / 1e3
        timing["clean_gbs"] = nbytes / sec / 1e9 if sec > 0 else None
        timing["clean_gflops"] = flops / sec / 1e9 if sec > 0 else None

    def free():
        device.clear()
        if not backend.simulator:
            cuda.current_context().deallocations.clear()

    _, steps["free"] = backend.timed(free)

    launch_info = {
        **info,
        "kernel": spec.name,
        "params": values,
        "grid": list(grid),
        "block": list(block),
        "threads": launch.threads,
        "blocks": launch.blocks,
        "threads_per_block": launch.threads_per_block,
        "static_smem_bytes": launch.static_smem,
        "dynamic_smem_bytes": launch.dynamic_smem,
        "recorded_per": "warp" if host["trace"].shape[1] < launch.threads else "thread",
        "tile_operands": list(spec.tile_operands),
        "row_table": list(spec.row_table) if spec.row_table else None,
        "source": "measured (GPU)"
        if not backend.simulator
        else "simulated (CUDA simulator; SM ids and times modelled)",
        "instrumented": resources(backend, traced, launch),
        "clean": resources(backend, clean, launch),
    }
    if not backend.simulator and launch_info["instrumented"].get("static_smem_bytes") is not None:
        launch_info["static_smem_bytes"] = launch_info["instrumented"]["static_smem_bytes"]
    reply = {"launch": launch_info, "timing": timing, "arrays": result_arrays, "inputs": inputs}
    if recorder is not None:
        reply["accesses"] = recorder.buffers()
    return reply


# --- memory-access recording (simulator only; visualizer/memory) -------------------------------


def access_limit_message(limit: int) -> str:
    return (
        f"too many memory accesses to record (limit {limit:,} accesses, RECORD_LIMIT in "
        "visualizer/memory/record.py); use a smaller launch"
    )


def start_access_recording(backend: Backend, spec, values, launch, traced, device):
    """Start recording the instrumented launch's loads and stores (the simulator only)."""
    import inspect

    from visualizer.catalog import LaunchError
    from visualizer.memory import record

    if not backend.simulator:
        raise LaunchError("memory-access recording needs the simulator backend (--backend sim)")
    estimate = spec.extra.get("accesses")
    if callable(estimate) and estimate(values) > record.RECORD_LIMIT:
        raise LaunchError(
            f"about {int(estimate(values)):,} memory accesses: " + access_limit_message(record.RECORD_LIMIT)
        )
    # arrays are named by the kernel's own parameter names; spec.args gives their roles
    try:
        names = list(inspect.signature(traced.py_func).parameters)
    except (TypeError, ValueError, AttributeError):
        names = list(spec.args)
    named = {}
    excluded = set()
    for role, name in zip(spec.args, names, strict=False):
        if role in device:
            named[name] = device[role]
            if role in record.PROBE_BUFFERS:
                excluded.add(name)
    return record.start(named, excluded, launch.grid, launch.block)


def capture_source(backend: Backend, request: dict) -> dict:
    """Run a user's kernel from its source (request["op"] == "source"): visualizer/userkernel/."""
    from visualizer.userkernel.execute import capture_source as run_user_source

    return run_user_source(backend, request)


def serve(conn, backend_name: str, after_ready=None, once: bool = False, user_code: bool = False) -> None:
    """Worker main loop: one request at a time until None or the pipe closes.

    Every message carries the id of the request it answers (progress too), so the runner can
    tell a reply to its own request from one left over by a request it gave up on.
    ``after_ready(backend)`` runs once the backend is up, before any request is read; ``once``: leave
    after one request; ``user_code``: only a sandboxed worker (visualizer/userkernel/sandbox.py) runs
    visitors' source (op "source"), never a worker of the built-in kernels.
    """
    configure_backend(backend_name)
    limit_memory()
    current = {"id": None}  # the request being served, echoed on its progress messages

    def progress(n):
        try:
            conn.send(("progress", current["id"], n))
        except (BrokenPipeError, OSError):
            pass

    try:
        backend = Backend(backend_name, progress)
    except Exception as exc:
        conn.send(("error", None, one_line(exc)))
        return
    conn.send(("ready", None, backend.device_info()))
    if after_ready is not None:
        after_ready(backend)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        rid = current["id"] = request.get("id")
        limit_cpu(request.get("cpu_limit_s"))
        try:
            if request.get("op") == "info":
                conn.send(("ok", rid, backend.device_info()))
                continue
            if (request.get("op") == "source") != user_code:
                conn.send(("error", rid, "this worker does not run that kind of request"))
                continue
            result = (capture_source if user_code else capture)(backend, request)
            conn.send(("ok", rid, result))
        except Exception as exc:
            from visualizer.catalog import LaunchError

            if isinstance(exc, LaunchError):
                conn.send(("invalid", rid, str(exc)))
                continue
            fatal = is_fatal_cuda_error(exc)
            detail = traceback.format_exc(limit=-3)
            conn.send(("fatal" if fatal else "error", rid, one_line(exc), detail))
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
