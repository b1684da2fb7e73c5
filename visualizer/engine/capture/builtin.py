"""A built-in kernel's front end: its spec's launch, inputs, probe buffers and builds made into a Job
(engine/capture/pipeline.py), run, and replied to. A visitor's kernel has the other front end
(engine/capture/source.py); both hand the lenses (engine/lenses/) the same hooks."""

from __future__ import annotations

import importlib
import time

import numpy as np

from visualizer.engine.capture.backend import Backend
from visualizer.engine.run.messages import one_line

PER_WARP_ABOVE = 1 << 16  # above this many threads, record timing once per warp (lane 0)


def kernel_function(spec, values):
    """The built-in kernel's plain Python function (kernels/): the function itself, or what its
    factory returns for this compile-time specialisation (``spec.build_args``)."""
    module = importlib.import_module(spec.build[0])
    fn = getattr(module, spec.build[1])
    if spec.build_args:
        fn = fn(*[values[a] for a in spec.build_args])
    return fn


def build_kernels(spec, values, passes: tuple = ()):
    """The spec's two builds (engine/capture/builds.py): instrumented by engine/instrument/instrumenter.py like any
    kernel, and clean. Returns the Builds (traced, clean, the parameters the instrumenter added)."""
    from visualizer.engine.capture.builds import builds

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

        from visualizer.engine.timing import gpu_timing

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
    from visualizer.engine.instrument.instrumenter import function_namespace
    from visualizer.engine.lenses import KernelView
    from visualizer.engine.sim.access_record import PROBE_BUFFERS

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
    """A built-in kernel's Job (engine/capture/pipeline.py): its spec's launch, inputs, probe buffers, builds."""
    from visualizer.engine.capture.builds import builds
    from visualizer.engine.capture.pipeline import Job
    from visualizer.engine.instrument.instrumenter import ACTIVE, TRACE
    from visualizer.engine.lenses import Lenses
    from visualizer.specs import catalog

    limits = catalog.limits_from_info(backend.device_info())
    engine = request.planned_sim_engine()[0] if backend.simulator else "fastsim"
    spec, values, launch = catalog.plan_launch(request.kernel, request.params, backend.name, limits, engine)
    fastsim_refusal = None
    if engine == "compiled":  # admitted at the compiled engine's limits: may fastsim run it if need be?
        try:
            catalog.admit_capture(request.kernel, request.params, backend.name, limits, request.runs)
        except catalog.LaunchError as exc:
            fastsim_refusal = str(exc)
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
        traced_tree=built.traced_tree, traced_namespace=built.namespace, fastsim_refusal=fastsim_refusal,
    )  # fmt: skip
    return spec, values, launch, inputs, job


def _param_names(fn) -> list[str]:
    import inspect

    return list(inspect.signature(fn).parameters)


def capture(backend: Backend, request) -> dict:
    """Run one built-in kernel through the capture sequence (engine/capture/pipeline.py)."""
    from visualizer.engine.capture import pipeline

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
    static_smem = launch.static_smem
    if not backend.simulator and ran.instrumented.get("static_smem_bytes") is not None:
        static_smem = ran.instrumented["static_smem_bytes"]
    launch_info = pipeline.summary(
        backend, job, ran, kernel=spec.name, params=values, static_smem_bytes=static_smem,
        tile_operands=list(spec.tile_operands), row_table=list(spec.row_table) if spec.row_table else None,
        runs={"count": runs, "seed": schedule_seed, "schedules": ran.schedules} if ran.runs is not None else None,
    ).to_dict()  # fmt: skip
    reply = {
        "launch": launch_info,
        "timing": timing,
        "buffers": ran.buffers,
        "inputs": inputs,  # as copied in (the reference check needs every one)
        "outputs": {k: ran.after[k] for k in spec.outputs},
    }
    if ran.runs is not None:  # every run's outputs, stacked (analysis/races.py compares them)
        reply["runs"] = {k: ran.runs[k] for k in spec.outputs}
    job.lenses.reply(reply, launch_info)  # each lens's part (engine/lenses/)
    return reply
