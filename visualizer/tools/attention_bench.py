"""GPU timings of the attention kernels against PyTorch and numpy (run on a GPU, not in tests).

    python -m visualizer.tools.attention_bench [--seq-lens 512,1024,...] [--tile 32] [--causal] [--json PATH]

For each sequence length: the median device time (CUDA events queued behind a spin kernel, after a
warm-up that includes compiling; visualizer/engine/timing/gpu_timing.py) and the host launch overhead of our
clean and instrumented FlashAttention kernels (the teaching kernel and the fast one,
kernels/attention_fast.py) and the naive kernel; PyTorch fp32 when torch is
importable: ``scaled_dot_product_attention`` as a user calls it (default backend selection; which
backend it picked is recorded), SDPA's math backend, and the unfused softmax(q kᵀ·scale) v, TF32
off; and numpy on the CPU at the smallest length only.
All GPU inputs live on the device before timing starts. Errors are max |ours - torch| (or
against a float64 numpy reference on a few rows when torch is absent), and for every row
max |out - ref| / max |ref| against float64 numpy on 16 query rows (rel_err_f64).
``--json PATH`` also writes the rows as a self-describing document (``write_json``), the file the
app's FlashAttention page draws; a causal run and a non-causal run can share one file.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np

from visualizer.engine.capture.builds import pair
from visualizer.engine.timing import gpu_timing
from visualizer.specs.launch import ceil_div

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
NAIVE_BLOCK = 128  # threads (query rows) per block of the naive kernel
NUMPY_MAX_SEQ_LEN = 2048  # the CPU reference runs only at the smallest length, and only up to this


def _flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool) -> float:
    f = 4.0 * batch * heads * seq_len * seq_len * head_dim
    return f / 2 if causal else f


def _resources(dispatcher, launch=None) -> dict:
    """Registers, shared and local memory of the compiled kernel; with its launch, the occupancy
    those allow on an H200 (visualizer/analysis/occupancy.py, as cudaOccupancyMaxActiveBlocksPerMultiprocessor)."""
    try:
        (_, kernel), *_ = dispatcher.overloads.items()
        out = {
            "registers": int(kernel.regs_per_thread),
            "smem_bytes": int(kernel.shared_mem_per_block),
            "local_bytes": int(kernel.local_mem_per_thread),
        }
    except Exception:  # resources are informative only
        return {}
    if launch is not None:
        from visualizer.analysis.occupancy import occupancy

        occ = occupancy("sm_90", launch.threads_per_block, out["registers"], smem_static=out["smem_bytes"])
        out["warps_per_sm"] = occ.warps_per_sm
        out["occupancy"] = occ.occupancy
    return out


def _reference_rows(q, k, v, causal: bool, rows: np.ndarray) -> np.ndarray:
    """float64 attention for the given query rows only (batch, heads, len(rows), head_dim)."""
    head_dim = q.shape[-1]
    qq = q[:, :, rows].astype(np.float64)
    s = np.einsum("bhrd,bhkd->bhrk", qq, k.astype(np.float64)) / math.sqrt(head_dim)
    if causal:
        s = np.where(np.arange(k.shape[2])[None, :] <= rows[:, None], s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    return np.einsum("bhrk,bhkd->bhrd", w, v.astype(np.float64)) / w.sum(axis=-1)[..., None]


def attention_timings(
    seq_lens=(512, 1024, 2048, 4096, 8192),
    batch: int = 1,
    heads: int = 8,
    head_dim: int = 64,
    tile: int = 32,
    repeats: int = 10,
    causal: bool = False,
    naive_max_seq_len: int = 8192,
    seed: int = 0,
    reg_budget: int | None = None,
    torch_too: bool = True,
) -> list[dict]:
    """One dict per (seq_len, implementation): seq_len, impl, ms (median), tflops, peak_mb,
    max_abs_err, and registers/smem_bytes/local_bytes for our kernels."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for seq_len in seq_lens:
        shape = (batch, heads, seq_len, head_dim)
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        rows += _one_length(
            q, k, v, tile, causal, repeats, seq_len <= naive_max_seq_len, reg_budget, torch_too
        )
        if seq_len == min(seq_lens) and seq_len <= NUMPY_MAX_SEQ_LEN:
            rows += _numpy_cpu(q, k, v, causal, rows)
    return rows


def _row(q, causal, impl, times, peak_bytes, err, **extra) -> dict:
    """``times``: a gpu_timing.Measurement (device time and launch overhead) or CPU milliseconds."""
    batch, heads, seq_len, head_dim = q.shape
    if isinstance(times, gpu_timing.Measurement):
        extra = {
            "launch_us": times.launch_median_us,
            "queue_covered": times.queue_covered,
            **extra,
        }
        times = times.device_ms
    ms = statistics.median(times)
    return {
        "seq_len": seq_len,
        "impl": impl,
        "causal": bool(causal),
        "ms": ms,
        "tflops": _flops(batch, heads, seq_len, head_dim, causal) / (ms * 1e-3) / 1e12,
        "peak_mb": peak_bytes / 2**20,
        "max_abs_err": err,
        **extra,
    }


def rel_err_f64(got: np.ndarray, ref64: np.ndarray) -> float:
    """max |got - ref| / max |ref| against a float64 reference (NaN anywhere gives inf)."""
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got.astype(np.float64) - ref64).max() / np.abs(ref64).max())


def _check_rows(seq_len: int) -> np.ndarray:
    return np.unique(np.linspace(0, seq_len - 1, 16).astype(int))


def _sdpa_backend_picked(torch, sdpa, default_out) -> str:
    """Which backend SDPA's default selection ran: the one whose output is bit-identical to it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        kind = getattr(SDPBackend, backend, None)
        if kind is None:
            continue
        try:
            with sdpa_kernel(kind), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch explains each backend it cannot use
                out = sdpa()
        except RuntimeError:  # not available for these inputs (e.g. flash needs fp16/bf16)
            continue
        if torch.equal(out, default_out):
            return backend.lower()
    return "unknown"


def _torch_impls(q, k, v, causal: bool, repeats: int) -> tuple[list[dict], np.ndarray | None]:
    """Rows for PyTorch fp32 (SDPA as a user calls it, SDPA's math backend, and the unfused form) and
    the unfused form's output; ([], None) without torch."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [], None
    if not torch.cuda.is_available():
        return [], None
    from numba import cuda

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    seq_len, head_dim = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim)
    tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
    ops = gpu_timing.TorchOps(torch, cuda)

    def plain():
        s = torch.matmul(tq, tk.transpose(-1, -2)) * scale
        if causal:
            mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device="cuda").triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), tv)

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

    def sdpa_math():
        with sdpa_kernel(SDPBackend.MATH):
            return sdpa()

    rows, want = [], None
    rs = _check_rows(seq_len)
    ref64 = _reference_rows(q, k, v, causal, rs)
    for impl, fn in (
        ("torch plain fp32", plain),
        ("torch sdpa default fp32", sdpa),
        ("torch sdpa math fp32", sdpa_math),
    ):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m = gpu_timing.measure(ops, fn, repeats, warmup=2)
        peak = torch.cuda.max_memory_allocated()  # inputs + output + intermediates
        out = fn()
        got = out.cpu().numpy()
        if want is None:
            want = got
        err = float(np.abs(got[:, :, rs] - want[:, :, rs]).max())
        extra = {"backend": _sdpa_backend_picked(torch, sdpa, out)} if fn is sdpa else {}
        extra["rel_err_f64"] = rel_err_f64(got[:, :, rs], ref64)
        rows.append(_row(q, causal, impl, m, peak, err, **extra))
        del out
    return rows, want


def _one_length(
    q, k, v, tile: int, causal: bool, repeats: int, with_naive: bool, reg_budget=None, torch_too=True
) -> list[dict]:
    from numba import cuda

    from visualizer.engine.capture.builtin import record_buffers
    from visualizer.kernels.attention import flash_attention_kernel, naive_attention_kernel
    from visualizer.specs.catalog import plan_launch

    batch, heads, seq_len, head_dim = q.shape
    c = int(causal)
    rows, want = _torch_impls(q, k, v, causal, repeats) if torch_too else ([], None)
    rs = _check_rows(seq_len)
    # ours are checked against torch's plain fp32 output, or float64 numpy on a few rows
    want_rows = want[:, :, rs] if want is not None else _reference_rows(q, k, v, causal, rs)

    ref64 = _reference_rows(q, k, v, causal, rs)

    def error(out) -> float:
        return float(np.abs(out[:, :, rs] - want_rows).max())

    def errors(out) -> tuple[float, dict]:
        return error(out), {"rel_err_f64": rel_err_f64(out[:, :, rs], ref64)}

    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    do = cuda.device_array(q.shape, np.float32)
    ops = gpu_timing.NumbaOps(cuda)
    base = 4 * q.nbytes  # q, k, v, o

    params = {
        "batch": batch,
        "heads": heads,
        "seq_len": seq_len,
        "head_dim": head_dim,
        "tile": tile,
        "causal": c,
    }
    spec, _, launch = plan_launch("flash_attention", params, backend="gpu")
    cfg = (launch.grid, launch.block)
    # the instrumented build writes the record buffers the app reads; the clean build ignores
    # its own (same-typed, one-element) ones
    full = record_buffers(spec, launch)
    tiny = {n: np.zeros((1,) * (b.ndim - 1) + (b.shape[-1],), b.dtype) for n, b in full.items()}
    traced, clean = pair(flash_attention_kernel(tile, head_dim), spec.active_when)
    for impl, kern, bufs in (
        ("ours flash (clean)", clean, tiny),
        ("ours flash (instrumented)", traced, full),
    ):
        dev = {n: cuda.to_device(b) for n, b in bufs.items()}
        args = (dq, dk, dv, do, seq_len, c, dev["tiles"], dev["rows"])
        if kern is traced:  # the instrumenter's buffers come after the kernel's own
            args += (dev["trace"], dev["active"])
        times = gpu_timing.measure(ops, lambda kern=kern, args=args: kern[cfg](*args), repeats, warmup=2)
        rec = sum(b.nbytes for b in bufs.values()) if bufs is full else 0
        err, rel = errors(do.copy_to_host())
        rows.append(_row(q, causal, impl, times, base + rec, err, **rel, **_resources(kern, launch)))
        del dev

    # the fast kernel (kernels/attention_fast.py): same buffers, its own launch geometry
    from visualizer.kernels.attention_fast import flash_attention_fast_for

    fparams = {k: params[k] for k in ("batch", "heads", "seq_len", "head_dim", "causal")}
    fspec, _, flaunch = plan_launch("flash_attention_fast", fparams, backend="gpu")
    fcfg = (flaunch.grid, flaunch.block)
    ffull = record_buffers(fspec, flaunch)
    fn = flash_attention_fast_for(head_dim, bool(causal), seq_len, heads, batch)
    ftraced, fclean = pair(fn, fspec.active_when)
    for impl, kern, bufs in (
        ("ours fast (clean)", fclean, tiny),
        ("ours fast (instrumented)", ftraced, ffull),
    ):
        dev = {n: cuda.to_device(b) for n, b in bufs.items()}
        args = (dq, dk, dv, do, seq_len, c, dev["tiles"], dev["rows"])
        if kern is ftraced:
            args += (dev["trace"], dev["active"])
        do.copy_to_device(np.full(q.shape, np.nan, np.float32))  # poison: every element must be written
        times = gpu_timing.measure(ops, lambda kern=kern, args=args: kern[fcfg](*args), repeats, warmup=2)
        rec = sum(b.nbytes for b in bufs.values()) if bufs is ffull else 0
        err, rel = errors(do.copy_to_host())
        rows.append(_row(q, causal, impl, times, base + rec, err, **rel, **_resources(kern, flaunch)))
        del dev

    if with_naive:
        _, naive = pair(naive_attention_kernel(head_dim))
        ds = cuda.device_array((batch, heads, seq_len, seq_len), np.float32)
        grid = (ceil_div(seq_len, NAIVE_BLOCK), heads, batch)
        times = gpu_timing.measure(
            ops,
            lambda: naive[grid, (NAIVE_BLOCK, 1, 1)](dq, dk, dv, ds, do, seq_len, c),
            max(1, min(repeats, 3)),  # slow at long lengths
            warmup=1,
        )
        err, rel = errors(do.copy_to_host())
        rows.append(
            _row(q, causal, "ours naive (clean)", times, base + ds.nbytes, err, **rel, **_resources(naive))
        )
    return rows


def _numpy_cpu(q, k, v, causal: bool, rows: list[dict]) -> list[dict]:
    from visualizer.specs.attention import attention_reference

    t = time.perf_counter()
    got = attention_reference(q, k, v, causal)  # float64 numpy on the CPU: the catalog's reference
    ms = (time.perf_counter() - t) * 1e3
    rs = _check_rows(q.shape[2])
    err = float(np.abs(got[:, :, rs] - _reference_rows(q, k, v, causal, rs)).max())
    return [_row(q, causal, "numpy float64 (CPU)", [ms], 5 * q.nbytes, err)]


def correctness_sweep(seq_len: int = 77, batch: int = 2, heads: int = 3, seed: int = 1) -> list[dict]:
    """Launch every (tile, head_dim, causal) the catalog accepts once, plus the naive kernel for each
    head_dim, and compare with the float64 reference: compiles each specialisation on this backend."""
    import itertools

    from numba import cuda

    from visualizer.engine.capture.builtin import launch_args, record_buffers
    from visualizer.kernels.attention import flash_attention_kernel, naive_attention_kernel
    from visualizer.specs.attention import attention_reference
    from visualizer.specs.catalog import LaunchError, plan_launch

    rng = np.random.default_rng(seed)
    out = []
    cases = [
        ("flash_attention", t, d, c)
        for t, d, c in itertools.product((8, 16, 32, 64), (16, 32, 64, 128), (0, 1))
    ]
    cases += [("naive_attention", 16, d, 1) for d in (16, 32, 64, 128)]
    for name, tile, head_dim, causal in cases:
        p = {
            "batch": batch,
            "heads": heads,
            "seq_len": seq_len,
            "head_dim": head_dim,
            "tile": tile,
            "causal": causal,
        }
        case = {"kernel": name, "tile": tile, "head_dim": head_dim, "causal": causal}
        try:
            spec, values, launch = plan_launch(name, p, backend="sim" if SIMULATED else "gpu")
        except LaunchError as exc:
            out.append({**case, "refused": str(exc)})
            continue
        x = spec.make_inputs(values, rng)
        bufs = record_buffers(spec, launch)
        fn = (
            flash_attention_kernel(tile, head_dim)
            if name == "flash_attention"
            else naive_attention_kernel(head_dim)
        )
        traced, _ = pair(fn, spec.active_when)
        args = launch_args(spec, launch, {**x, **bufs})[0]
        t = time.perf_counter()
        traced[launch.grid, launch.block](*args)
        cuda.synchronize()
        err = float(np.abs(x["o"] - attention_reference(x["q"], x["k"], x["v"], bool(causal))).max())
        out.append({**case, "max_abs_err": err, "s": time.perf_counter() - t, **_resources(traced)})
    return out


def fast_variants(
    configs, seq_lens=(4096, 8192), batch=1, heads=8, head_dim=64, repeats=10, seed=0
) -> list[dict]:
    """Time clean builds of kernels/attention_fast.py for several (warps, block_k, min_blocks)
    configurations, causal and not: the tuning table behind attention_fast.CONFIGS."""
    from numba import cuda

    from visualizer.analysis.occupancy import occupancy
    from visualizer.kernels.attention_fast import fast_grid, flash_attention_fast_kernel

    rng = np.random.default_rng(seed)
    ops = gpu_timing.NumbaOps(cuda)
    out = []
    for seq_len in seq_lens:
        shape = (batch, heads, seq_len, head_dim)
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
        do = cuda.device_array(shape, np.float32)
        tiles, st = cuda.device_array((1, 1, 1, 5), np.int64), cuda.device_array((1, 1, 1, 2), np.float32)
        rs = _check_rows(seq_len)
        for causal in (0, 1):
            ref64 = _reference_rows(q, k, v, bool(causal), rs)
            for warps, bk, mb in configs:
                _, kern = pair(
                    flash_attention_fast_kernel(head_dim, bool(causal), warps, bk, min_blocks=mb or None)
                )
                cfg = (fast_grid(batch, heads, seq_len, 16 * warps, bool(causal)), (32, warps, 1))
                do.copy_to_device(np.full(shape, np.nan, np.float32))
                args = (dq, dk, dv, do, seq_len, causal, tiles, st)
                m = gpu_timing.measure(
                    ops, lambda kern=kern, cfg=cfg, args=args: kern[cfg](*args), repeats, warmup=2
                )
                got = do.copy_to_host()
                res = _resources(kern)
                occ = occupancy(
                    "sm_90", 32 * warps, res.get("registers", 0), smem_static=res.get("smem_bytes", 0)
                )
                ms = statistics.median(m.device_ms)
                out.append(
                    {
                        "seq_len": seq_len,
                        "causal": causal,
                        "config": f"warps{warps} bk{bk} minb{mb}",
                        "ms": ms,
                        "tflops": _flops(batch, heads, seq_len, head_dim, bool(causal)) / (ms * 1e-3) / 1e12,
                        "rel_err_f64": rel_err_f64(got[:, :, rs], ref64),
                        "all_written": bool(np.isfinite(got).all()),
                        "warps_per_sm": occ.warps_per_sm,
                        **res,
                    }
                )
                print(out[-1], flush=True)
    return out


def markdown(rows: list[dict]) -> str:
    head = (
        "| seq_len | causal | implementation | ms | launch µs | TFLOP/s | peak MB | max abs err | "
        "rel err vs f64 | regs | smem B | warps/SM |\n"
    )
    head += "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    lines = [
        f"| {r['seq_len']} | {r.get('causal', '')} | {r['impl']}{_backend(r)} | {r['ms']:.3f} | "
        f"{_num(r.get('launch_us'), '.1f')} | {r['tflops']:.2f} | {r['peak_mb']:.0f} | "
        f"{r['max_abs_err']:.2e} | {_num(r.get('rel_err_f64'), '.1e')} | {r.get('registers', '')} | "
        f"{r.get('smem_bytes', '')} | {r.get('warps_per_sm', '')} |"
        for r in rows
    ]
    return head + "\n".join(lines)


def _backend(row: dict) -> str:
    return f" (picked: {row['backend']})" if row.get("backend") else ""


def _num(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


# --- the JSON document the app's FlashAttention page reads ------------------------------------------

JSON_KIND = "visualizer.attention_bench timings"
JSON_FORMAT_VERSION = 1


def _mode(causal: bool) -> str:
    return "causal" if causal else "non-causal"


def _device_header() -> dict:
    """The GPU the rows were measured on, read from the device."""
    from numba import cuda

    dev = cuda.get_current_device()
    cc = tuple(dev.compute_capability)
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"gpu": name, "sm": f"sm_{cc[0]}{cc[1]}", "sm_count": int(dev.MULTIPROCESSOR_COUNT)}


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for package, module in (("numba", "numba"), ("numba-cuda", None), ("numpy", "numpy"), ("torch", "torch")):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # e.g. a torch built into the image: ask the module
            mod = sys.modules.get(module) if module else None
            out[package] = getattr(mod, "__version__", None)
    return out


def _definitions(repeats: int) -> dict:
    """How every recorded number is defined, in words (stored in the document's config)."""
    return {
        "timing": (
            f"ms: median device time of {repeats} launches queued behind a spin kernel "
            f"(visualizer/engine/timing/gpu_timing.py: {gpu_timing.DEVICE_TIME_METHOD}), after 2 warm-up launches "
            f"(the first compiles); the naive kernel min(repeats, 3) = {max(1, min(repeats, 3))} launches "
            "after 1 warm-up; numpy float64 (CPU): wall time of one run (time.perf_counter), at the "
            "smallest length only"
        ),
        "launch_us": gpu_timing.LAUNCH_OVERHEAD_METHOD + " (microseconds)",
        "queue_covered": "whether the spin kernel was still running when the last launch was queued",
        "flops": "4 * batch * heads * seq_len^2 * head_dim (causal: half of that)",
        "tflops": "flops / (ms * 1e-3) / 1e12",
        "peak_mb": (
            "MiB; torch: torch.cuda.max_memory_allocated over the timed launches (inputs, output, "
            "intermediates); ours: the device arrays the launch uses (q, k, v, o, plus S for the naive "
            "kernel and the record buffers for instrumented builds); numpy: 5 x the bytes of q"
        ),
        "max_abs_err": (
            "max |out - torch plain fp32 out| on 16 query rows (without torch: against float64 numpy); "
            "numpy: against a float64 reference of those rows"
        ),
        "rel_err_f64": (
            "max |out - ref| / max |ref| on 16 query rows against a float64 numpy reference; "
            "null: the output was not finite"
        ),
        "backend": "SDPA default only: the backend whose forced output is bit-identical to it",
        "registers": (
            "ours: registers per thread of the compiled kernel (with smem_bytes per block and "
            "local_bytes per thread); warps_per_sm and occupancy: what those allow on sm_90 "
            "(visualizer/analysis/occupancy.py)"
        ),
    }


def _json_value(value):
    """numpy scalars as Python numbers; non-finite floats as null (strict JSON has no inf/NaN)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def timings_document(rows: list[dict], run: dict, causal: bool, existing: dict | None = None) -> dict:
    """The document for this run's rows (one causal mode) and ``run`` (its header), keeping the rows
    and header of the other causal mode from ``existing`` when that is the same kind of document."""
    mode = _mode(causal)
    doc = {"kind": JSON_KIND, "format_version": JSON_FORMAT_VERSION, "runs": {}, "rows": []}
    same_kind = (
        isinstance(existing, dict)
        and existing.get("kind") == JSON_KIND
        and existing.get("format_version") == JSON_FORMAT_VERSION
    )
    if same_kind:
        other = _mode(not causal)
        if other in existing.get("runs", {}):
            doc["runs"][other] = existing["runs"][other]
            doc["rows"] = [r for r in existing.get("rows", []) if bool(r.get("causal")) != causal]
    doc["runs"][mode] = run
    doc["rows"] += [{k: _json_value(v) for k, v in r.items()} for r in rows]
    doc["runs"] = dict(sorted(doc["runs"].items(), reverse=True))  # non-causal first
    doc["rows"].sort(key=lambda r: (bool(r.get("causal")), r["seq_len"]))  # stable: bench order within
    return doc


def write_json(path, rows: list[dict], config: dict, argv: list[str]) -> dict:
    """Write (atomically) ``rows`` of one causal mode with a header: GPU, UTC date and time, the
    command, versions, ``config`` and the definitions of every column; see timings_document."""
    import datetime as dt
    import json
    import shlex
    from pathlib import Path

    path = Path(path)
    now = dt.datetime.now(dt.UTC)
    run = {
        "measured_on": _device_header(),
        "date": now.strftime("%Y-%m-%d"),
        "time_utc": now.strftime("%H:%M:%S"),
        "command": shlex.join(["python", "-m", "visualizer.tools.attention_bench", *argv]),
        "versions": _versions(),
        "config": {**config, **_definitions(config["repeats"])},
    }
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):  # no file yet, or not JSON: start afresh
        existing = None
    doc = timings_document(rows, run, config["causal"], existing)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)  # never a half-written file
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-lens", default="512,1024,2048,4096,8192")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--tile", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--naive-max", type=int, default=8192, help="skip the naive kernel above this length")
    ap.add_argument("--reg-budget", type=int, default=None, help="flash kernel's register budget (0: none)")
    ap.add_argument("--sweep", action="store_true", help="only check every tile/head_dim combination")
    ap.add_argument(
        "--fast-variants",
        default="",
        help="only time fast-kernel configs 'warps,block_k,min_blocks;...' (min_blocks 0: none)",
    )
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the rows here (write_json)")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    if a.fast_variants:
        configs = [tuple(int(x) for x in c.split(",")) for c in a.fast_variants.split(";")]
        seq_lens = tuple(int(x) for x in a.seq_lens.split(","))
        fast_variants(configs, seq_lens, a.batch, a.heads, a.head_dim, a.repeats)
        return
    if a.sweep:
        for r in correctness_sweep():
            print(r)
        return
    rows = attention_timings(
        tuple(int(x) for x in a.seq_lens.split(",")),
        a.batch,
        a.heads,
        a.head_dim,
        a.tile,
        a.repeats,
        a.causal,
        a.naive_max,
        reg_budget=a.reg_budget,
    )
    print(
        f"batch {a.batch}, heads {a.heads}, head_dim {a.head_dim}, tile {a.tile}, causal {a.causal}, "
        f"fp32; median device time of {a.repeats} launches queued behind a spin kernel, after warm-up"
    )
    print(markdown(rows))
    if a.json:
        config = {
            "seq_lens": [int(x) for x in a.seq_lens.split(",")],
            "batch": a.batch,
            "heads": a.heads,
            "head_dim": a.head_dim,
            "tile": a.tile,
            "dtype": "float32",
            "causal": a.causal,
            "repeats": a.repeats,
            "naive_max_seq_len": a.naive_max,
            "reg_budget": a.reg_budget,
        }
        doc = write_json(a.json, rows, config, argv)
        print(f"wrote {a.json}: {len(doc['rows'])} rows ({', '.join(doc['runs'])})")


if __name__ == "__main__":
    main()
