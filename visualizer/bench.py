"""Benchmarks: ``python -m visualizer bench [--backend gpu|sim] [--quick] --out FILE.json``.

Every figure is a median over repeats after warm-up; every comparison is a ratio of two numbers
measured in the same run. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from visualizer.gpu_timing import numba_event_ms, torch_event_ms

ROOT = Path(__file__).resolve().parents[1]

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
    "sim_speedup": ("simulator capture speed-up over stock Numba simulator defaults (worst)", ">=", 3.0),
    "slider_to_figure_s": ("server-side slider change to re-rendered figure on a cached trace", "<=", 0.5),
    "big_grid_payload_mb": ("grid figure payload for a 1M-thread grid (MB)", "<=", 5.0),
}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "pandas", "plotly", "streamlit", "torch"):
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


def _median_ms(cuda, fn, repeats: int) -> float:
    return statistics.median(numba_event_ms(cuda, fn, repeats, warmup=3))


def _buffers(cuda, np, spec, launch):
    from visualizer.worker import record_buffers

    return {k: cuda.to_device(v) for k, v in record_buffers(spec, launch).items() if k in spec.args}


def gpu_bench(quick: bool) -> dict:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    import numpy as np
    from numba import cuda

    import kernels.probes  # noqa: F401  (numpy 2.5 shim before any compile)
    from visualizer import catalog
    from visualizer.worker import build_kernels

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

    # device copy bandwidth: the practical ceiling for memory-bound kernels
    def copy_bandwidth_gbs(nbytes: int) -> float:
        src = cuda.device_array(nbytes // 4, np.float32)
        dst = cuda.device_array(nbytes // 4, np.float32)
        return 2 * nbytes / _median_ms(cuda, lambda: dst.copy_to_device(src), reps) / 1e6

    copy_gbs = copy_bandwidth_gbs((1 << 26 if quick else 1 << 28) * 4)
    res["copy_bandwidth_gbs"] = copy_gbs
    res["fp32_peak_tflops"] = peak_fp32 / 1e12

    def run_kernel(kernel, params):
        spec, values, launch = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        dev_arrays = {k: cuda.to_device(v) for k, v in inputs.items()}
        dev_arrays.update(_buffers(cuda, np, spec, launch))
        args = [dev_arrays[a] if a in dev_arrays else launch.scalars[a] for a in spec.args]
        traced, clean = build_kernels(spec, values)
        cfg = (launch.grid, launch.block)
        clean_ms = _median_ms(cuda, lambda: clean[cfg](*args), reps)
        traced_ms = _median_ms(cuda, lambda: traced[cfg](*args), reps)
        got = {k: dev_arrays[k].copy_to_host() for k in spec.outputs}
        from visualizer.trace import check_outputs

        ok = check_outputs(spec, values, inputs, got)["correct"]
        nbytes, flops = spec.work(values)
        row = {
            "kernel": kernel,
            "params": values,
            "clean_ms": clean_ms,
            "instrumented_ms": traced_ms,
            "overhead": traced_ms / clean_ms,
            "gbs": nbytes / clean_ms / 1e6,
            "gflops": flops / clean_ms / 1e6,
            "correct": ok,
        }
        if torch is not None and spec.torch_op is not None:
            t_args = {k: torch.as_tensor(dev_arrays[k], device="cuda") for k in inputs}
            row["torch_op"], fn = spec.torch_op(torch, t_args, values)
            row["torch_ms"] = statistics.median(torch_event_ms(torch, fn, reps, warmup=3)[0])
            row["vs_torch"] = row["torch_ms"] / clean_ms  # > 1: ours is faster
        rows.append(row)
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
    res["vector_add_vs_torch"] = (
        (vec["gbs"] / (12 * n_vec / vec["torch_ms"] / 1e6)) if "torch_ms" in vec else None
    )
    res["vector_add_vs_copy"] = vec["gbs"] / copy_gbs
    for row in rows:
        row["fraction_of_copy_bw"] = row["gbs"] / copy_gbs
        row["fraction_of_fp32_peak"] = row["gflops"] * 1e9 / peak_fp32

    try:
        from visualizer.attention_bench import attention_timings

        seqs = (1024, 4096) if quick else (512, 1024, 2048, 4096, 8192)
        res["attention"] = attention_timings(seq_lens=seqs)
    except ImportError as exc:
        res["attention_error"] = str(exc)

    # trace capture end to end through the runner (launch, copy back, tables) for 2^20 threads
    from visualizer.runner import Runner

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


def stock_sim_launch(kernel: str, params: dict) -> float:
    """One instrumented launch under stock cudasim defaults (no pinning, no fast barrier): seconds."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np

    from visualizer import catalog
    from visualizer.worker import build_kernels, record_buffers

    spec, values, launch = catalog.plan_launch(kernel, params, "sim")
    host = {**spec.make_inputs(values, np.random.default_rng(0))}
    host.update({k: v for k, v in record_buffers(spec, launch).items() if k in spec.args})
    args = [host[a] if a in host else launch.scalars[a] for a in spec.args]
    traced, _ = build_kernels(spec, values)
    t = time.perf_counter()
    traced[launch.grid, launch.block](*args)
    return time.perf_counter() - t


def sim_bench(quick: bool) -> dict:
    from visualizer.runner import Runner

    reps = 1 if quick else 3
    rows = []
    with Runner("sim") as runner:
        runner.capture("vector_add", {"n": 64, "block": 32})  # start the worker
        for kernel, params in SIM_CASES[:2] if quick else SIM_CASES:
            ours, stock = [], []
            for _ in range(reps):
                t = time.perf_counter()
                runner.capture(kernel, params, time_clean=False)
                ours.append(time.perf_counter() - t)
                out = subprocess.run(
                    [sys.executable, "-m", "visualizer.bench", "--stock-sim", kernel, json.dumps(params)],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    check=True,
                )
                stock.append(float(out.stdout.strip().splitlines()[-1]))
            o, s = statistics.median(ours), statistics.median(stock)
            rows.append({"kernel": kernel, "params": params, "ours_s": o, "stock_s": s, "speedup": s / o})
    return {"cases": rows, "sim_speedup": min(r["speedup"] for r in rows)}


# ----------------------------------------------------------------------------------------------- app


def app_bench(quick: bool) -> dict:
    """Server-side slider -> figure time on a cached trace, and the 1M-thread grid payload."""
    out: dict = {}
    try:
        import numpy as np

        from visualizer.figures.grid import grid_figure
        from visualizer.trace import threads_table

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
        at.switch_page("app_pages/grid.py").run()
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
    """Worst ratio, over seq_len >= 4096, of unfused torch fp32 time to our clean flash kernel's."""
    if not rows:
        return None
    by = {(r["seq_len"], r["impl"]): r["ms"] for r in rows if r.get("ms")}
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
        lines += [
            f"GPU: {gpu['device']}; device copy bandwidth {gpu['copy_bandwidth_gbs']:,.0f} GB/s; "
            f"FP32 peak {gpu['fp32_peak_tflops']:.1f} TFLOP/s",
            "",
            "| kernel | params | clean ms | instrumented ms | overhead | GB/s | GFLOP/s | torch ms | torch / ours | of copy BW | of FP32 peak | correct |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in gpu["kernels"]:
            lines.append(
                f"| {r['kernel']} | {r['params']} | {r['clean_ms']:.4f} | {r['instrumented_ms']:.4f} | "
                f"×{r['overhead']:.2f} | {r['gbs']:,.0f} | {r['gflops']:,.0f} | {r.get('torch_ms', float('nan')):.4f} | "
                f"{r.get('vs_torch', float('nan')):.2f} | {r['fraction_of_copy_bw']:.0%} | {r['fraction_of_fp32_peak']:.1%} | {r['correct']} |"
            )
        if gpu.get("attention"):
            keys = [k for k in gpu["attention"][0] if k not in ("batch", "heads", "head_dim")]
            lines += ["", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            for r in gpu["attention"]:
                lines.append("| " + " | ".join(_fmt(r.get(k)) for k in keys) + " |")
        lines += ["", f"Trace capture end to end, 2^20-thread vector_add: {gpu['capture_2p20_s']:.3f} s", ""]
    sim = results.get("sim")
    if sim:
        lines += ["| simulator case | ours s | stock s | speed-up |", "|---|---|---|---|"]
        for r in sim["cases"]:
            lines.append(
                f"| {r['kernel']} {r['params']} | {r['ours_s']:.2f} | {r['stock_s']:.2f} | ×{r['speedup']:.1f} |"
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


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str]) -> int:
    from visualizer.cli import OneLineParser

    p = OneLineParser(prog="python -m visualizer bench")
    p.add_argument("--backend", choices=("gpu", "sim"), default=None, help="default: gpu if present, and sim")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--out", required=True, help="JSON file for the results")
    p.add_argument("--no-app", action="store_true", help="skip the app measurements")
    args = p.parse_args(argv)
    from visualizer.cli import writable_file

    problem = writable_file(args.out)
    if problem:  # before minutes of benchmarks, not after
        print(f"error: --out: {problem}", file=sys.stderr)
        return 2
    from visualizer.runner import gpu_present

    results = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "versions": {},
        "quick": args.quick,
    }
    out = Path(args.out)

    def save():  # after every section, so a later failure loses nothing measured
        tmp = out.with_name(out.name + ".partial")
        tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
        tmp.replace(out)  # never a half-written file

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


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--stock-sim":
        print(stock_sim_launch(sys.argv[2], json.loads(sys.argv[3])))
    else:
        sys.exit(main(sys.argv[1:]))
