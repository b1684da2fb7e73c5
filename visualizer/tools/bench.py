"""Benchmarks: ``python -m visualizer bench [--backend gpu|sim] [--quick] --out FILE.json``.

Every figure is a median over repeats after warm-up; every comparison is a ratio of two numbers
measured in the same run. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from visualizer.specs.launch import ceil_div

ROOT = Path(__file__).resolve().parents[2]

# FP32 lanes per SM by compute capability (for the FP32 peak: lanes x 2 flops x clock x SMs)
FP32_LANES = {(7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128}

TARGETS = {
    "vector_add_vs_torch": ("vector add bandwidth vs torch a + b at 2^28 elements", ">=", 0.95),
    "instrumentation_overhead": ("instrumented / clean kernel time at realistic sizes (worst)", "<=", 1.3),
    "flash_vs_unfused_torch": (
        "FlashAttention speed-up over unfused torch fp32 at seq_len >= 4096",
        ">",
        1.0,
    ),
    "sim_speedup": (
        "simulator launch speed-up over the stock Numba simulator, same launch (worst case)",
        ">=",
        10.0,
    ),
    "slider_to_figure_s": ("server-side slider change to re-rendered figure on a cached trace", "<=", 0.5),
    "big_grid_payload_mb": ("grid figure payload for a 1M-thread grid (MB)", "<=", 5.0),
}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "pandas", "plotly", "streamlit", "torch", "greenlet"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            pass
    try:
        from importlib.metadata import version

        out["numba-cuda"] = version("numba-cuda")
    except Exception:
        pass
    return out


# ---------------------------------------------------------------------------------------------- GPU
# Device time is measured as nvbench does (launches queued behind a spin kernel; gpu_timing.py) and
# the host's launch overhead beside it; torch the same way on the same (legacy default) stream.

METHODS_SIZES = (1000, 1 << 20, 1 << 24)  # the table: where dispatch hides the kernel, and not


def _buffers(cuda, np, spec, launch):
    from visualizer.engine.capture.builtin import probe_buffers

    return {k: cuda.to_device(v) for k, v in probe_buffers(spec, launch).items()}


def _timed(ops, fn, reps: int, flush: bool = False, warmup: int = 3) -> dict:
    """Device time and launch overhead of ``fn`` as one row's numbers."""
    from visualizer.engine.timing import gpu_timing

    m = gpu_timing.measure(ops, fn, reps, warmup=warmup, flush=flush)
    return {
        "ms": m.device_median_ms,
        "launch_us": m.launch_median_us,
        "queue_covered": m.queue_covered,
        "spin_us": m.spin_ns / 1e3,
    }


def launch_methods(cuda, torch, reps: int, sizes=METHODS_SIZES) -> list[dict]:
    """Vector add (block 256) and torch's add at each size, every way of timing them: CUDA events around
    one launch (the old way), device time behind a spin (warm L2, and L2 flushed before each repeat),
    the host launch loop, and the instrumented build's own recorded span."""
    from visualizer.engine.timing import gpu_timing

    nops = gpu_timing.NumbaOps(cuda)
    tops = gpu_timing.TorchOps(torch, cuda) if torch is not None else None
    return [_methods_row(cuda, torch, nops, tops, n, reps) for n in sizes]


def _methods_row(cuda, torch, nops, tops, n: int, reps: int) -> dict:
    import numpy as np

    from visualizer.engine.capture.builds import pair
    from visualizer.engine.timing import gpu_timing
    from visualizer.kernels.vector_add import vector_add

    vector_add_traced, vector_add_clean = pair(vector_add, "i < n")
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, np.float32)
    blocks = ceil_div(n, 256)
    per_warp = n > (1 << 16)  # as the worker records (capture/builtin.PER_WARP_ABOVE)
    trace = cuda.device_array((3, blocks * 8 if per_warp else blocks * 256), np.int64)
    active = cuda.device_array(blocks * 256, np.uint8)

    def clean():
        vector_add_clean[blocks, 256](da, db, dc, n)

    def traced():
        vector_add_traced[blocks, 256](da, db, dc, n, trace, active)

    warm = gpu_timing.measure(nops, clean, reps)
    cold = gpu_timing.measure(nops, clean, reps, flush=True)
    inst = gpu_timing.measure(nops, traced, reps, flush=True)
    traced()
    rec = trace.copy_to_host()
    row = {
        "n": n,
        "ours_one_launch_events_us": gpu_timing.median(gpu_timing.one_launch_event_ms(nops, clean, reps))
        * 1e3,
        "ours_device_warm_us": warm.device_median_ms * 1e3,
        "ours_device_cold_us": cold.device_median_ms * 1e3,
        "ours_launch_us": warm.launch_median_us,
        "ours_instrumented_device_us": inst.device_median_ms * 1e3,
        "ours_recorded_span_us": float(rec[2].max() - rec[1].min()) / 1e3,
        "ours_queue_covered": warm.queue_covered and cold.queue_covered and inst.queue_covered,
        "spin_us": warm.spin_ns / 1e3,
        "spin_ran_us": warm.spun_ns / 1e3,
        "correct": bool(np.array_equal(dc.copy_to_host(), a + b)),
    }
    if tops is not None:
        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (da, db, dc))

        def add():
            return torch.add(ta, tb, out=tc)

        twarm = gpu_timing.measure(tops, add, reps)
        tcold = gpu_timing.measure(tops, add, reps, flush=True)
        row.update(
            torch_one_launch_events_us=gpu_timing.median(gpu_timing.torch_event_ms(torch, add, reps)[0])
            * 1e3,
            torch_device_warm_us=twarm.device_median_ms * 1e3,
            torch_device_cold_us=tcold.device_median_ms * 1e3,
            torch_launch_us=twarm.launch_median_us,
            torch_queue_covered=twarm.queue_covered and tcold.queue_covered,
        )
    return row


def reduction_full_sum(cuda, torch, n: int, block: int, reps: int) -> dict:
    """Like with like for the reduction: a full sum on both sides. Ours is the partials kernel run
    again on its own partials until one value is left (ceil(log_block n) launches, all timed);
    torch's is ``torch.sum(x)``."""
    import numpy as np

    from visualizer.engine.capture.builds import pair
    from visualizer.engine.timing import gpu_timing
    from visualizer.kernels.reduction import reduction_kernel

    _, clean = pair(reduction_kernel(block))
    x = np.random.default_rng(0).integers(0, 10, n).astype(np.float32)  # exact in float32
    sizes = [n]
    while sizes[-1] > 1:
        sizes.append(ceil_div(sizes[-1], block))
    bufs = [cuda.to_device(x)] + [cuda.device_array(m, np.float32) for m in sizes[1:]]
    rows_buf = cuda.device_array((1, 1, 1, 2), np.float32)

    def ours():
        for i in range(len(sizes) - 1):
            clean[sizes[i + 1], block](bufs[i], bufs[i + 1], sizes[i], rows_buf)

    nops = gpu_timing.NumbaOps(cuda)
    row = {"n": n, "block": block, "launches": len(sizes) - 1, "ours": _timed(nops, ours, reps, flush=True)}
    ours()
    want = float(x.astype(np.float64).sum())  # float32 partials round above 2^24: compare relatively
    row["ours_correct"] = math.isclose(float(bufs[-1].copy_to_host()[0]), want, rel_tol=1e-5)
    if torch is not None:
        tx = torch.as_tensor(bufs[0], device="cuda")
        row["torch"] = _timed(gpu_timing.TorchOps(torch, cuda), lambda: torch.sum(tx), reps, flush=True)
        row["torch_correct"] = math.isclose(float(torch.sum(tx)), want, rel_tol=1e-5)
        row["torch_op"] = "torch.sum(x)"
    return row


def _log(section: str, value) -> None:
    """Each GPU section's numbers on stderr as soon as measured (kept if a later section fails)."""
    print(f"[bench gpu] {section}: {json.dumps(value, default=str)}", file=sys.stderr, flush=True)


def gpu_bench(quick: bool) -> dict:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    import numpy as np
    from numba import cuda

    import visualizer.kernels.probes  # noqa: F401  (numpy 2.5 shim before any compile)
    from visualizer.engine.capture.builtin import build_kernels, launch_args
    from visualizer.engine.timing import gpu_timing
    from visualizer.specs import catalog

    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception:
        torch = None
    dev = cuda.get_current_device()
    cc = tuple(dev.compute_capability)
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    sms = dev.MULTIPROCESSOR_COUNT
    peak_fp32 = sms * FP32_LANES.get(cc, 128) * 2 * dev.CLOCK_RATE * 1e3
    reps = 10 if quick else 30
    rows, res = [], {"device": f"{name} (sm_{cc[0]}{cc[1]}, {sms} SMs)"}
    res["method"] = {
        "device_time": gpu_timing.DEVICE_TIME_METHOD,
        "launch_overhead": gpu_timing.LAUNCH_OVERHEAD_METHOD,
        "l2_flush": "before each repeat for memory-bound kernels (under 1 FLOP/byte: vector_add, "
        "vector_add_x4, reduction, the copy) and their torch baselines; not for matmul or attention",
        "repeats": reps,
    }
    nops = gpu_timing.NumbaOps(cuda)
    tops = gpu_timing.TorchOps(torch, cuda) if torch is not None else None

    # device copy bandwidth: the practical ceiling for memory-bound kernels (an async copy on the
    # default stream, so it queues behind the spin like everything else)
    def copy_bandwidth_gbs(nbytes: int) -> float:
        src = cuda.device_array(nbytes // 4, np.float32)
        dst = cuda.device_array(nbytes // 4, np.float32)
        t = _timed(nops, lambda: dst.copy_to_device(src, stream=nops.stream), reps, flush=True)
        return 2 * nbytes / t["ms"] / 1e6

    copy_gbs = copy_bandwidth_gbs((1 << 26 if quick else 1 << 28) * 4)
    res["copy_bandwidth_gbs"] = copy_gbs
    res["fp32_peak_tflops"] = peak_fp32 / 1e12
    _log("copy_bandwidth_gbs", copy_gbs)
    res["launch_methods"] = launch_methods(cuda, torch, reps)
    _log("launch_methods", res["launch_methods"])

    def run_kernel(kernel, params):
        spec, values, launch = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        dev_arrays = {k: cuda.to_device(v) for k, v in inputs.items()}
        dev_arrays.update(_buffers(cuda, np, spec, launch))
        traced_args, clean_args = launch_args(spec, launch, dev_arrays)
        built = build_kernels(spec, values)
        traced, clean = built.traced, built.clean
        cfg = (launch.grid, launch.block)
        nbytes, flops = spec.work(values)
        flush = gpu_timing.wants_l2_flush(nbytes, flops)
        traced[cfg](*traced_args)  # the checked output comes from the instrumented build
        got = {k: dev_arrays[k].copy_to_host() for k in spec.outputs}
        clean_t = _timed(nops, lambda: clean[cfg](*clean_args), reps, flush)
        traced_t = _timed(nops, lambda: traced[cfg](*traced_args), reps, flush)
        clean_ms, traced_ms = clean_t["ms"], traced_t["ms"]
        from visualizer.analysis.capture import check_outputs

        ok = check_outputs(spec, values, inputs, got)["correct"]
        row = {
            "kernel": kernel,
            "params": values,
            "clean_ms": clean_ms,
            "instrumented_ms": traced_ms,
            "overhead": traced_ms / clean_ms,
            "launch_us": clean_t["launch_us"],
            "l2_flush": flush,
            "queue_covered": clean_t["queue_covered"] and traced_t["queue_covered"],
            "gbs": nbytes / clean_ms / 1e6,
            "gflops": flops / clean_ms / 1e6,
            "correct": ok,
        }
        if tops is not None and spec.torch_op is not None:
            t_args = {k: torch.as_tensor(dev_arrays[k], device="cuda") for k in inputs}
            row["torch_op"], fn = spec.torch_op(torch, t_args, values)
            tt = _timed(tops, fn, reps, flush)
            row.update(
                torch_ms=tt["ms"], torch_launch_us=tt["launch_us"], torch_queue_covered=tt["queue_covered"]
            )
            row["vs_torch"] = row["torch_ms"] / clean_ms  # > 1: ours is faster
        rows.append(row)
        _log("kernel", row)
        return row

    n_vec = 1 << (24 if quick else 28)
    n_mm = 1024 if quick else 4096
    vec = run_kernel("vector_add", {"n": n_vec, "block": 256})
    run_kernel("vector_add_x4", {"n": n_vec, "block": 256})
    run_kernel("matmul_tiled", {"n": n_mm, "tile": 16})
    run_kernel("matmul_tiled", {"n": n_mm, "tile": 32})
    run_kernel("matmul_naive", {"n": n_mm // 2, "tile": 16})
    run_kernel("reduction", {"n": n_vec, "block": 256})
    res["kernels"] = rows
    res["reduction_full_sum"] = reduction_full_sum(cuda, torch, n_vec, 256, reps)
    _log("reduction_full_sum", res["reduction_full_sum"])
    res["vector_add_vs_torch"] = (
        (vec["gbs"] / (12 * n_vec / vec["torch_ms"] / 1e6)) if "torch_ms" in vec else None
    )
    res["vector_add_vs_copy"] = vec["gbs"] / copy_gbs
    for row in rows:
        row["fraction_of_copy_bw"] = row["gbs"] / copy_gbs
        row["fraction_of_fp32_peak"] = row["gflops"] * 1e9 / peak_fp32

    try:
        from visualizer.tools.attention_bench import attention_timings

        seqs = (1024, 4096) if quick else (512, 1024, 2048, 4096, 8192)
        res["attention"] = attention_timings(seq_lens=seqs)
        _log("attention", res["attention"])
        res["attention"] += attention_timings(seq_lens=(4096,) if quick else (4096, 8192), causal=True)
        _log("attention with causal", res["attention"])
    except ImportError as exc:
        res["attention_error"] = str(exc)

    # trace capture end to end through the runner (launch, copy back, tables) for 2^20 threads
    from visualizer.engine.run.runner import Runner

    with Runner("gpu") as runner:
        runner.capture("vector_add", {"n": 1 << 20, "block": 256}, repeats=3)
        walls = []
        for seed in range(3 if quick else 5):
            t = time.perf_counter()
            runner.capture("vector_add", {"n": 1 << 20, "block": 256}, repeats=3, seed=seed)
            walls.append(time.perf_counter() - t)
    res["capture_2p20_s"] = statistics.median(walls)
    return res


# ---------------------------------------------------------------------------------------- simulator

SIM_CASES = [
    ("vector_add", {"n": 4096, "block": 256}),
    ("matmul_tiled", {"n": 64, "tile": 16}),
    ("reduction", {"n": 4096, "block": 256}),
]
SIM_WARMUP = {"vector_add": {"n": 256}, "matmul_tiled": {"n": 16}, "reduction": {"n": 256}}


def _install_fastsim() -> None:
    from visualizer.engine.sim import fastsim

    fastsim.install()


# Simulator engines compared launch for launch, each in a fresh process. "stock": numba-cuda's
# cudasim as shipped (no pinning, stock defaults); "fast": visualizer.engine.sim.fastsim as the worker installs
# it; "fast+accesses": the same with the memory-access recorder on (visualizer/engine/sim/access_record.py), as
# `capture --accesses` runs it. sim_bench reports every engine listed.
SIM_ENGINES = {"stock": lambda: None, "fast": _install_fastsim, "fast+accesses": _install_fastsim}


def sim_launch_seconds(engine: str, kernel: str, params: dict, reps: int) -> dict:
    """Wall and CPU seconds of REPS instrumented launches (after a small warm-up launch of the same
    kernel), in this process, on the given simulator engine."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    SIM_ENGINES[engine]()
    import numpy as np

    from visualizer.engine.capture.builtin import build_kernels, launch_args, probe_buffers
    from visualizer.specs import catalog

    def prepared(p):
        spec, values, launch = catalog.plan_launch(kernel, p, "sim")
        host = {**spec.make_inputs(values, np.random.default_rng(0)), **probe_buffers(spec, launch)}
        traced = build_kernels(spec, values).traced
        if engine != "fast+accesses":
            args = launch_args(spec, launch, host)[0]
            return lambda: traced[launch.grid, launch.block](*args)
        import inspect

        from numba import cuda

        from visualizer.engine.capture.builtin import INSTRUMENTER_BUFFERS
        from visualizer.engine.sim import access_record as record

        # device arrays, as the worker passes them: the recorder knows arrays by their identity
        device = {k: cuda.to_device(v) for k, v in host.items()}
        args = launch_args(spec, launch, device)[0]
        names = list(inspect.signature(traced.py_func).parameters)
        roles = zip((*spec.args, *INSTRUMENTER_BUFFERS), names, strict=False)
        named = {name: device[role] for role, name in roles if role in device}
        probes = {name for role, name in zip(spec.args, names, strict=False) if role in record.PROBE_BUFFERS}

        def recorded():
            rec = record.Recorder.for_launch(
                named, probes | set(names[len(spec.args) :]), launch.grid, launch.block
            )
            rec.start()
            try:
                traced[launch.grid, launch.block](*args)
            finally:
                rec.stop()

        return recorded

    prepared({**params, **SIM_WARMUP.get(kernel, {})})()
    launch = prepared(params)
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        launch()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {"wall_s": wall, "cpu_s": cpu}


def _launch_in_subprocess(engine: str, kernel: str, params: dict, reps: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "visualizer.tools.bench",
            "--sim-launch",
            engine,
            kernel,
            json.dumps(params),
            str(reps),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def sim_bench(quick: bool) -> dict:
    """Every engine in SIM_ENGINES on the same instrumented launches, one after another in one run;
    plus the whole capture through the simulator worker (launch, copy back, tables)."""
    from visualizer.engine.run.runner import Runner

    reps = 1 if quick else 3
    rows = []
    load_before = os.getloadavg()  # on a shared machine, wall-time ratios depend on the load
    with Runner("sim") as runner:
        runner.capture("vector_add", {"n": 64, "block": 32})  # start the worker
        for kernel, params in SIM_CASES[:2] if quick else SIM_CASES:
            row: dict = {"kernel": kernel, "params": params}
            for engine in SIM_ENGINES:
                got = _launch_in_subprocess(engine, kernel, params, reps)
                row[f"{engine}_s"] = statistics.median(got["wall_s"])
                row[f"{engine}_cpu_s"] = statistics.median(got["cpu_s"])
            captures = []
            for _ in range(reps):
                t = time.perf_counter()
                runner.capture(kernel, params, time_clean=False)
                captures.append(time.perf_counter() - t)
            row["ours_s"] = row["fast_s"]
            row["speedup"] = row["stock_s"] / row["fast_s"]
            row["cpu_speedup"] = row["stock_cpu_s"] / row["fast_cpu_s"]
            row["capture_s"] = statistics.median(captures)
            row["capture_speedup"] = row["stock_s"] / row["capture_s"]
            row["accesses_speedup"] = row["stock_s"] / row["fast+accesses_s"]
            rows.append(row)
    return {
        "engines": list(SIM_ENGINES),
        "cases": rows,
        "sim_speedup": min(r["speedup"] for r in rows),
        "sim_cpu_speedup": min(r["cpu_speedup"] for r in rows),
        "sim_capture_speedup": min(r["capture_speedup"] for r in rows),
        "sim_accesses_speedup": min(r["accesses_speedup"] for r in rows),
        "load_avg_1min": [load_before[0], os.getloadavg()[0]],
    }


# ----------------------------------------------------------------------------------------------- app


def app_bench(quick: bool) -> dict:
    """Server-side slider -> figure time on a cached trace, and the 1M-thread grid payload."""
    out: dict = {}
    try:
        import numpy as np

        from visualizer.analysis.capture import threads_table
        from visualizer.figures.grid import grid_figure

        n = 1 << 20
        launch = {
            "grid": [n // 256, 1, 1], "block": [256, 1, 1], "threads_per_block": 256, "threads": n, "blocks": n // 256,
            "recorded_per": "warp", "source": "synthetic (benchmark input)", "backend": "gpu", "kernel": "vector_add",
        }  # fmt: skip
        warps = n // 32
        rng = np.random.default_rng(0)
        start = np.sort(rng.integers(0, 2_000_000, warps))
        trace = np.stack([np.arange(warps) // 8 % 132, start, start + 5000], axis=1).astype(np.int64)
        threads = threads_table(launch, trace, np.ones(n, np.uint8))
        t = time.perf_counter()
        fig = grid_figure(threads, launch, color_by="sm", animate=True)
        payload = len(fig.to_json())
        out["big_grid_build_s"] = time.perf_counter() - t
        out["big_grid_payload_mb"] = payload / 1e6
    except Exception as exc:  # reported, not hidden
        out["big_grid_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from streamlit.testing.v1 import AppTest

        at = AppTest.from_file(str(ROOT / "visualizer" / "app.py"), default_timeout=300)
        for k, v in {"kernel": "vector_add", "backend": "sim", "n": "60000", "block": "256"}.items():
            at.query_params[k] = v
        at.run()
        at.switch_page("web/pages/grid.py").run()
        colour = at.radio(key="grid_color_by")
        times = []
        from visualizer.figures.grid import available_colorings

        options = available_colorings(at.session_state.capture.launch)
        for value in (options * 4)[: 4 if quick else 8]:
            t = time.perf_counter()
            colour.set_value(value).run()
            times.append(time.perf_counter() - t)
        out["slider_to_figure_s"] = statistics.median(times)
        out["slider_widget"] = colour.key
    except Exception as exc:  # reported, not hidden
        out["slider_error"] = f"{type(exc).__name__}: {exc}"
    return out


# ----------------------------------------------------------------------------------------- report


def targets(results: dict) -> list[dict]:
    gpu, sim, app = results.get("gpu", {}), results.get("sim", {}), results.get("app", {})
    values = {
        "vector_add_vs_torch": gpu.get("vector_add_vs_torch"),
        "instrumentation_overhead": max((r["overhead"] for r in gpu.get("kernels", [])), default=None),
        "flash_vs_unfused_torch": _flash_speedup(gpu.get("attention")),
        "sim_speedup": sim.get("sim_speedup"),
        "slider_to_figure_s": app.get("slider_to_figure_s"),
        "big_grid_payload_mb": app.get("big_grid_payload_mb"),
    }
    out = []
    for key, (what, op, bound) in TARGETS.items():
        v = values[key]
        met = None if v is None else (v >= bound if op == ">=" else v <= bound if op == "<=" else v > bound)
        out.append({"target": key, "what": what, "bound": f"{op} {bound}", "value": v, "met": met})
    return out


def _flash_speedup(rows) -> float | None:
    """Worst ratio, over seq_len >= 4096 without a causal mask (the target's case), of unfused torch
    fp32 time to our clean flash kernel's."""
    if not rows:
        return None
    by = {(r["seq_len"], r["impl"]): r["ms"] for r in rows if r.get("ms") and not r.get("causal")}
    ratios = [
        by[(s, "torch plain fp32")] / by[(s, "ours flash (clean)")]
        for s in {r["seq_len"] for r in rows}
        if s >= 4096 and (s, "torch plain fp32") in by and (s, "ours flash (clean)") in by
    ]
    return min(ratios, default=None)


def markdown(results: dict) -> str:
    lines = [f"Run {results['date']} on {results['machine']}; versions: {results['versions']}", ""]
    gpu = results.get("gpu")
    if gpu:
        lines += gpu_markdown(gpu)
    sim = results.get("sim")
    if sim:
        engines = sim.get("engines", ["stock", "fast"])
        lines += [
            "| simulator case | "
            + " | ".join(f"{e} launch s (CPU s)" for e in engines)
            + " | speed-up (CPU) | whole capture s | capture vs stock launch |",
            "|---|" + "---|" * (len(engines) + 3),
        ]
        for r in sim["cases"]:
            per_engine = " | ".join(f"{r[f'{e}_s']:.3f} ({r[f'{e}_cpu_s']:.3f})" for e in engines)
            lines.append(
                f"| {r['kernel']} {r['params']} | {per_engine} | ×{r['speedup']:.1f} (×{r['cpu_speedup']:.1f}) | "
                f"{r['capture_s']:.3f} | ×{r['capture_speedup']:.1f} |"
            )
        if "load_avg_1min" in sim:
            lines.append(
                f"\nLoad average (1 min) before / after: {sim['load_avg_1min'][0]:.1f} / {sim['load_avg_1min'][1]:.1f}"
            )
        lines.append("")
    app = results.get("app")
    if app:
        lines += [f"App: {json.dumps({k: _fmt(v) for k, v in app.items()})}", ""]
    lines += ["| target | bound | measured | met |", "|---|---|---|---|"]
    for t in results["targets"]:
        met = "not measured" if t["met"] is None else ("met" if t["met"] else "**missed**")
        lines.append(f"| {t['what']} | {t['bound']} | {_fmt(t['value'])} | {met} |")
    return "\n".join(lines)


def gpu_markdown(gpu: dict, header: bool = True) -> list[str]:
    """The GPU section's tables: how each timing method reads, kernels, the full sum, attention."""
    nan = float("nan")
    lines = []
    if header:
        method = gpu.get("method", {})
        lines += [
            f"GPU: {gpu['device']}; device copy bandwidth {gpu['copy_bandwidth_gbs']:,.0f} GB/s; "
            f"FP32 peak {gpu['fp32_peak_tflops']:.1f} TFLOP/s",
            f"Method: {method.get('device_time', 'CUDA events')}; L2: {method.get('l2_flush', '')}",
            "",
        ]
    if gpu.get("launch_methods"):
        lines += [
            "Vector add (block 256), µs. one launch: events around a single launch; device: queued behind "
            "a spin (warm L2 / L2 flushed); launch: host time per launch; span: the instrumented build's "
            "own %globaltimer span (its device time beside it).",
            "",
            "| n | ours one launch | ours device warm | ours device cold | ours launch | instrumented device | "
            "recorded span | torch one launch | torch device warm | torch device cold | torch launch | covered |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in gpu["launch_methods"]:
            covered = r["ours_queue_covered"] and r.get("torch_queue_covered", True)
            lines.append(
                f"| {r['n']:,} | {r['ours_one_launch_events_us']:.1f} | {r['ours_device_warm_us']:.1f} | "
                f"{r['ours_device_cold_us']:.1f} | {r['ours_launch_us']:.1f} | {r['ours_instrumented_device_us']:.1f} | "
                f"{r['ours_recorded_span_us']:.1f} | {r.get('torch_one_launch_events_us', nan):.1f} | "
                f"{r.get('torch_device_warm_us', nan):.1f} | {r.get('torch_device_cold_us', nan):.1f} | "
                f"{r.get('torch_launch_us', nan):.1f} | {covered} |"
            )
        lines.append("")
    if not gpu.get("kernels"):
        return lines
    lines += [
        "| kernel | params | clean ms | instrumented ms | overhead | launch µs | L2 flushed | GB/s | GFLOP/s | "
        "torch ms | torch launch µs | torch / ours | of copy BW | of FP32 peak | correct | covered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in gpu["kernels"]:
        lines.append(
            f"| {r['kernel']} | {r['params']} | {r['clean_ms']:.4f} | {r['instrumented_ms']:.4f} | "
            f"×{r['overhead']:.2f} | {r.get('launch_us', nan):.1f} | {r.get('l2_flush', '')} | {r['gbs']:,.0f} | "
            f"{r['gflops']:,.0f} | {r.get('torch_ms', nan):.4f} | {r.get('torch_launch_us', nan):.1f} | "
            f"{r.get('vs_torch', nan):.2f} | {r['fraction_of_copy_bw']:.0%} | {r['fraction_of_fp32_peak']:.1%} | "
            f"{r['correct']} | {r.get('queue_covered', '')} |"
        )
    full = gpu.get("reduction_full_sum")
    if full:
        torch_ms = full.get("torch", {}).get("ms", nan)
        lines += [
            "",
            f"Full sum of {full['n']:,} float32 (like with like): ours {full['ours']['ms']:.4f} ms "
            f"({full['launches']} launches of the partials kernel, block {full['block']}, correct: "
            f"{full['ours_correct']}) vs {full.get('torch_op', 'torch')} {torch_ms:.4f} ms; "
            f"torch / ours {torch_ms / full['ours']['ms']:.2f}.",
        ]
    if gpu.get("attention"):
        cols = ["seq_len", "causal", "impl", "backend", "ms", "launch_us", "tflops", "peak_mb", "max_abs_err"]
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in gpu["attention"]:
            lines.append("| " + " | ".join(_fmt(r.get(k, "")) for k in cols) + " |")
    lines += ["", f"Trace capture end to end, 2^20-thread vector_add: {gpu['capture_2p20_s']:.3f} s", ""]
    return lines


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str]) -> int:
    from visualizer.tools.args import OneLineParser

    p = OneLineParser(prog="python -m visualizer bench")
    p.add_argument("--backend", choices=("gpu", "sim"), default=None, help="default: gpu if present, and sim")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--out", required=True, help="JSON file for the results")
    p.add_argument("--no-app", action="store_true", help="skip the app measurements")
    from visualizer.tools.capture_report import add_sim_engine_flag

    add_sim_engine_flag(p)  # the app measurements' simulator captures
    args = p.parse_args(argv)
    from visualizer.engine.run.runner import SIM_ENGINE_ENV

    os.environ[SIM_ENGINE_ENV] = args.sim_engine  # the runners' default (engine/run/runner.py)
    from visualizer.tools.args import writable_file

    problem = writable_file(args.out)
    if problem:  # before minutes of benchmarks, not after
        print(f"error: --out: {problem}", file=sys.stderr)
        return 2
    from visualizer.engine.run.runner import gpu_present

    results = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "versions": {},
        "quick": args.quick,
        "sim_engine": args.sim_engine,
    }
    out = Path(args.out)

    def save():  # after every section, so a later failure loses nothing measured
        from visualizer.tools.atomic import write_text

        write_text(out, json.dumps(results, indent=2, default=str) + "\n")  # never a half-written file

    if args.backend in (None, "gpu"):
        if gpu_present():
            results["gpu"] = gpu_bench(args.quick)
            save()
        elif args.backend == "gpu":
            print("error: --backend gpu asked for, but this machine has no CUDA GPU", file=sys.stderr)
            return 2
    if args.backend in (None, "sim"):
        results["sim"] = sim_bench(args.quick)
        save()
    if not args.no_app:
        results["app"] = app_bench(args.quick)
        save()
    results["versions"] = versions()
    results["targets"] = targets(results)
    save()
    print(markdown(results))
    return 0


def launch_methods_main(out: str, reps: int = 30) -> int:
    """``python -m visualizer.tools.bench --launch-methods OUT.json``: only the timing-methods table (GPU)."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    from numba import cuda

    import visualizer.kernels.probes  # noqa: F401  (numpy 2.5 shim before any compile)

    try:
        import torch
    except ImportError:
        torch = None
    rows = launch_methods(cuda, torch, reps)
    from visualizer.tools.atomic import write_text

    write_text(out, json.dumps({"launch_methods": rows, "versions": versions()}, indent=2) + "\n")
    print("\n".join(gpu_markdown({"launch_methods": rows, "kernels": []}, header=False)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--launch-methods":
        sys.exit(launch_methods_main(sys.argv[2]))
    elif len(sys.argv) >= 2 and sys.argv[1] == "--sim-launch":
        engine, kernel, params, reps = sys.argv[2:6]
        print(json.dumps(sim_launch_seconds(engine, kernel, json.loads(params), int(reps))))
    else:
        sys.exit(main(sys.argv[1:]))
