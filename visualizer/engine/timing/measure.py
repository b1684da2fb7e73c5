"""What one capture measures beside the trace, for built-in and visitor kernels alike: the compiled
builds' resources (registers, shared memory, the driver's occupancy) and ``timing.json``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from visualizer.engine.capture.backend import Backend


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
    queued behind a spin kernel with launch overhead beside it (visualizer/engine/timing/gpu_timing.py); on the
    simulator, CPU wall time of the instrumented launch already in ``steps`` (and one clean launch).
    ``time_clean=False`` on a GPU: no timing at all (the instrumented build launched once, its compile
    in it), so a capture that wants only what the kernel recorded pays for one launch."""
    timing: dict = {"backend": backend.name, "host_steps_ns": steps, "compile_ns": compile_ns}
    if not backend.simulator and not time_clean:
        timing["clock"] = "not timed: this capture asked for no timing"
        timing["method"] = {"device_time": "none: the instrumented build was launched once, not timed"}
    elif backend.simulator:
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
        from visualizer.engine.timing import gpu_timing

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
