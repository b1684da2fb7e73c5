"""The worker process: imports numba for one backend, compiles kernels, launches, times, copies back.

It runs in its own process (see runner.py) so that a kernel that faults or hangs, or the
simulator's hundreds of Python threads, can never take down the caller. Requests and replies are
plain dicts of numpy arrays and numbers over a multiprocessing pipe.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
import traceback

import numpy as np

PER_WARP_ABOVE = 1 << 16  # above this many threads, record timing once per warp (lane 0)


def configure_backend(backend: str) -> None:
    """Must run before numba is imported: the simulator is chosen by an environment variable."""
    if backend == "sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        # The simulator runs one Python thread per CUDA thread. On one CPU they never fight over
        # the GIL across cores, and with fastsim's sleeping barrier a long switch interval means
        # fewer forced switches (measured: 3-6x faster than stock cudasim; docs/benchmarks.md).
        try:
            os.sched_setaffinity(0, {idlest_cpu()})
        except (AttributeError, OSError):
            pass
        sys.setswitchinterval(0.02)
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


def idlest_cpu(sample_s: float = 0.05) -> int:
    """The allowed CPU that was idle the most over a short sample (pinning to a busy one hurts)."""
    allowed = sorted(os.sched_getaffinity(0))

    def idle_times():
        with open("/proc/stat") as f:
            rows = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
        return {int(r[0][3:]): int(r[4]) + int(r[5]) for r in rows}

    try:
        before = idle_times()
        time.sleep(sample_s)
        after = idle_times()
    except (OSError, ValueError, IndexError):
        return allowed[0]
    return max(allowed, key=lambda cpu: after.get(cpu, 0) - before.get(cpu, 0))


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

            fastsim.install()  # event-driven syncthreads instead of a busy-polling manager
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

    def kernel_ms(self, launch_fn, repeats: int) -> list[float]:
        """CUDA-event milliseconds of each of ``repeats`` launches (GPU only; already warmed up)."""
        from visualizer.gpu_timing import numba_event_ms

        return numba_event_ms(self.cuda, launch_fn, repeats, warmup=0)


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


def torch_baseline(spec, values, inputs, device, repeats: int) -> dict:
    """The kernel's work done by PyTorch on the same device arrays, timed the same way (if torch is there)."""
    if spec.torch_op is None:
        return {}
    try:
        import torch
    except ImportError:
        return {}
    try:
        from visualizer.gpu_timing import torch_event_ms

        torch.backends.cuda.matmul.allow_tf32 = False  # compare fp32 with fp32
        tensors = {k: torch.as_tensor(device[k], device="cuda") for k in inputs}
        label, call = spec.torch_op(torch, tensors, values)
        times, _ = torch_event_ms(torch, call, repeats, warmup=2)
        return {"torch_ms": statistics.median(times), "torch_op": label}
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


def capture(backend: Backend, request: dict) -> dict:
    """Run one kernel: allocate, copy in, launch instrumented, copy out, time, free."""
    from visualizer import catalog

    cuda = backend.cuda
    info = backend.device_info()
    limits = catalog.DeviceLimits(
        name=info["device_name"],
        max_threads_per_block=info["max_threads_per_block"],
        smem_per_block=info["smem_per_block"],
        smem_per_block_optin=info["smem_per_block_optin"],
        num_sms=info["num_sms"],
    )
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

    _, steps["kernel"] = backend.timed(lambda: traced[config](*args))

    def copy_out():
        return {k: device[k].copy_to_host() for k in host}

    result_arrays, steps["copy_out"] = backend.timed(copy_out)

    timing: dict = {"backend": backend.name, "host_steps_ns": steps, "compile_ns": compile_ns}
    repeats = int(request.get("repeats", 20))
    if backend.simulator:
        timing["clock"] = "simulator wall time on the CPU (not GPU time)"
        timing["instrumented_ms"] = steps["kernel"] / 1e6
        if request.get("time_clean", True):
            _, clean_ns = backend.timed(lambda: clean[config](*args))
            timing["clean_ms"] = clean_ns / 1e6
    else:
        timing["clock"] = "CUDA events on the GPU, median after warm-up"
        inst = backend.kernel_ms(lambda: traced[config](*args), repeats)
        cln = backend.kernel_ms(lambda: clean[config](*args), repeats)
        timing.update(
            repeats=repeats,
            instrumented_ms=statistics.median(inst),
            clean_ms=statistics.median(cln),
            instrumented_ms_all=inst,
            clean_ms_all=cln,
        )
        if request.get("torch", True):
            timing.update(torch_baseline(spec, values, inputs, device, repeats))
    if "clean_ms" in timing and timing["clean_ms"] > 0:
        timing["overhead_ratio"] = timing["instrumented_ms"] / timing["clean_ms"]
    nbytes, flops = spec.work(values)
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
    return {"launch": launch_info, "timing": timing, "arrays": result_arrays, "inputs": inputs}


def capture_source(backend: Backend, request: dict) -> dict:
    """Run a user's kernel from its source (request["op"] == "source"): visualizer/userkernel/."""
    from visualizer.userkernel.execute import capture_source as run_user_source

    return run_user_source(backend, request)


def serve(conn, backend_name: str) -> None:
    """Worker main loop: one request at a time until None or the pipe closes."""
    configure_backend(backend_name)

    def progress(n):
        try:
            conn.send(("progress", n))
        except (BrokenPipeError, OSError):
            pass

    try:
        backend = Backend(backend_name, progress)
    except Exception as exc:
        conn.send(("error", one_line(exc)))
        return
    conn.send(("ready", backend.device_info()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        try:
            if request.get("op") == "info":
                conn.send(("ok", backend.device_info()))
                continue
            result = (capture_source if request.get("op") == "source" else capture)(backend, request)
            conn.send(("ok", result))
        except Exception as exc:
            from visualizer.catalog import LaunchError

            if isinstance(exc, LaunchError):
                conn.send(("invalid", str(exc)))
                continue
            fatal = is_fatal_cuda_error(exc)
            detail = traceback.format_exc(limit=-3)
            conn.send(("fatal" if fatal else "error", one_line(exc), detail))
            if fatal:
                # A faulted CUDA context is unusable, and freeing its memory at exit only repeats the
                # error: leave at once so the runner starts a fresh worker.
                conn.close()
                os._exit(3)


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
