"""The malloc -> copy -> kernel -> copy -> free flow as numbers: the five steps a run recorded, and
the model of the same flow on a GPU (latencies and bandwidths measured on the H200, or a data
sheet's peaks for other GPUs), with the label that says which is which."""

from __future__ import annotations

from visualizer.specs.gpus import H200_HBM_GBS, H200_HOST, MODEL_GPUS  # noqa: F401  (the pages read them here too)

# (key in host_steps_ns, label, CUDA runtime call, what the worker calls in Numba)
STEPS = (
    ("allocate", "allocate", "cudaMalloc", "cuda.device_array"),
    (
        "copy_in",
        "copy host → device",
        "cudaMemcpy(…, cudaMemcpyHostToDevice)",
        "DeviceNDArray.copy_to_device",
    ),
    ("kernel", "kernel", "kernel<<<grid, block>>>", "kernel[grid, block](…)"),
    ("copy_out", "copy device → host", "cudaMemcpy(…, cudaMemcpyDeviceToHost)", "DeviceNDArray.copy_to_host"),
    ("free", "free", "cudaFree", "release the device arrays"),
)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def fmt_us(us: float) -> str:
    if 0 < us < 1:
        return f"{us * 1000:,.1f} ns"
    if us >= 1e6:  # seconds past a thousand ms: the number stays short enough for a metric's column
        return f"{us / 1e6:,.2f} s"
    if us >= 1000:
        return f"{us / 1000:,.2f} ms"
    return f"{us:,.1f} µs" if us >= 10 else f"{us:,.2f} µs"


def _dims(v) -> str:
    v = list(v)
    while len(v) > 1 and v[-1] == 1:
        v.pop()
    return "(" + ", ".join(str(x) for x in v) + ")" if len(v) > 1 else str(v[0])


def cuda_call(step: str, launch: dict) -> str:
    """The CUDA runtime call a step stands for, with this launch's kernel and geometry."""
    if step == "kernel":
        return f"{launch['kernel']}<<<{_dims(launch['grid'])}, {_dims(launch['block'])}>>>"
    return next(s[2] for s in STEPS if s[0] == step)


def flow_steps(timing: dict, launch: dict, bytes_in: int, bytes_out: int) -> list[dict]:
    """The five steps in order with start/duration (µs), CUDA call and bytes; ValueError if any is missing."""
    host = timing.get("host_steps_ns") or {}
    missing = [key for key, *_ in STEPS if key not in host]
    if missing:
        raise ValueError(f"this run recorded no time for: {', '.join(missing)}")
    rows, t = [], 0.0
    for key, label, _, numba_call in STEPS:
        dur = float(host[key]) / 1e3
        nbytes = {"copy_in": bytes_in, "copy_out": bytes_out}.get(key)
        rows.append(
            {
                "key": key, "label": label, "call": cuda_call(key, launch), "numba": numba_call,
                "start_us": t, "dur_us": dur, "bytes": nbytes,
            }
        )  # fmt: skip
        t += dur
    total = t or 1.0
    for r in rows:
        r["share"] = 100.0 * r["dur_us"] / total
    return rows


def flow_model(gpu: str) -> dict:
    """The constants the modelled flow uses for ``gpu`` (ns and GB/s), and where each comes from."""
    if gpu not in MODEL_GPUS:
        raise ValueError(f"no bandwidths for {gpu!r}; choose one of {', '.join(MODEL_GPUS)}")
    g, h = MODEL_GPUS[gpu], H200_HOST
    model = {k: h[k] for k in ("launch_ns", "alloc_ns", "h2d_latency_ns", "d2h_latency_ns")}
    if g.get("measured"):
        model.update(h2d_gbs=h["h2d_gbs"], d2h_gbs=h["d2h_gbs"], mem_gbs=H200_HBM_GBS)
        model["bandwidths"] = (
            f"{g['link']} as measured on the H200 for pageable numpy arrays (pinned: {h['pinned_gbs']:g} of "
            f"a nominal {g['pcie_gbs']:g} GB/s), {g['mem']} {H200_HBM_GBS:,.0f} GB/s (measured copy)"
        )
    else:
        model.update(h2d_gbs=g["pcie_gbs"], d2h_gbs=g["pcie_gbs"], mem_gbs=g["mem_gbs"])
        model["bandwidths"] = (
            f"nominal peaks of a {gpu} (data sheet: {g['link']} {g['pcie_gbs']:g} GB/s, {g['mem']} "
            f"{g['mem_gbs']:,.0f} GB/s), so these are lower bounds"
        )
    return model


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.0f} µs" if ns >= 10_000 else f"{ns / 1e3:,.1f} µs"


def modelled_gpu_label(gpu: str) -> str:
    """Every constant of the model and its source in one line ('; '-separated parts, so a chart title
    can wrap them)."""
    m = flow_model(gpu)
    source = (
        "as measured on the H200 (Numba, pageable numpy arrays)"
        if MODEL_GPUS[gpu].get("measured")
        else f"nominal peaks of a {gpu} (data sheet: lower bounds), latencies measured on the H200 host"
    )
    return (
        f"modelled (not measured) for a {gpu}: host→device {_us(m['h2d_latency_ns'])} + bytes ÷ "
        f"{m['h2d_gbs']:g} GB/s per array; device→host {_us(m['d2h_latency_ns'])} + bytes ÷ {m['d2h_gbs']:g} GB/s; "
        f"kernel {_us(m['launch_ns'])} launch + bytes ÷ {m['mem_gbs']:,.0f} GB/s; allocate {_us(m['alloc_ns'])} "
        f"per array; free not modelled; {source}"
    )


def modelled_gpu_timing(
    bytes_in: int, bytes_out: int, gpu: str, arrays_in: int = 1, arrays_out: int = 1
) -> dict:
    """A timing dict (host_steps_ns) for the same data on ``gpu`` (constants: :func:`flow_model`).

    Allocation: one device array per data array. Each copy: a latency per array plus its bytes over
    the host link. The kernel: the launch latency plus reading its inputs and writing its outputs once
    at device-memory bandwidth (a lower bound for kernels that re-read data). Free is not modelled (0).
    """
    m = flow_model(gpu)
    return {
        "host_steps_ns": {
            "allocate": (arrays_in + arrays_out) * m["alloc_ns"],
            "copy_in": arrays_in * m["h2d_latency_ns"] + bytes_in / m["h2d_gbs"],  # bytes / (GB/s) = ns
            "kernel": m["launch_ns"] + (bytes_in + bytes_out) / m["mem_gbs"],
            "copy_out": arrays_out * m["d2h_latency_ns"] + bytes_out / m["d2h_gbs"],
            "free": 0.0,
        },
        "compile_ns": 0.0,
    }
