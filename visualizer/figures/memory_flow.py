"""The host-side life of one run: allocate -> copy host->device -> kernel -> copy device->host -> free,
with each step's measured duration (``timing["host_steps_ns"]``) and the CUDA call it stands for.

JIT compile time (``timing["compile_ns"]``) is shown beside the flow, never inside it.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from visualizer.figures.common import frame_slider, frame_step, place_controls, play_pause, titled

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
VIEWS = {
    "timeline": "timeline (µs, one step after another)",
    "log": "duration (log scale)",
    "percent": "share of the flow (%)",
}
STEP_COLORS = {
    "allocate": "#9467bd",
    "copy_in": "#1f77b4",
    "kernel": "#2ca02c",
    "copy_out": "#ff7f0e",
    "free": "#8c564b",
}
PLOT_PX = 300  # height of the bars' plot area
GPU_CLOCK_LABEL = "measured (GPU): host wall time of each step, synchronised with the device"
SIM_CLOCK_LABEL = "simulator wall time on the CPU (the simulator 'copies' are numpy copies)"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def fmt_us(us: float) -> str:
    if 0 < us < 1:
        return f"{us * 1000:,.1f} ns"
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


def compile_label(launch: dict) -> str:
    if launch["backend"] == "gpu":
        return "JIT compile + warm-up launch of both builds"
    return "kernel build + setup (simulator: no machine code)"


def _tick(r: dict) -> str:
    extra = f" · {fmt_bytes(r['bytes'])}" if r["bytes"] is not None else ""
    return f"<b>{r['label']}</b><br><span style='font-size:11px'>{r['call']}{extra}</span>"


def _hover(r: dict, measured: bool) -> str:
    lines = [
        f"<b>{r['label']}</b>",
        f"CUDA: {r['call']}",
        f"here (Numba): {r['numba']}",
        f"starts {fmt_us(r['start_us'])} into the flow",
        f"takes {fmt_us(r['dur_us'])} ({r['share']:.1f} % of the flow)",
    ]
    if r["bytes"] is not None:
        lines.append(f"moves {fmt_bytes(r['bytes'])} of data arrays")
        if r["dur_us"] > 0:
            rate = r["bytes"] / (r["dur_us"] * 1e-6) / 1e9
            lines.append(f"{rate:,.2f} GB/s" + ("" if measured else " (numpy copy on the CPU)"))
    return "<br>".join(lines)


# Host-side costs measured on the project's H200 machine (docs/hostlink_h200.json, 2026-12-01), each
# step as the worker makes it: Numba's DeviceNDArray.copy_to_device / copy_to_host of a pageable numpy
# array, cuda.device_array, a kernel launch; each synchronised, median of 50. A copy costs its
# latency (the 4 kB copy's whole time: Numba's call, the driver, the PCIe round trip) plus its bytes
# at the bandwidth of the 1 MB -> 16 MB slope. Pinned host memory reached 54 GB/s of PCIe 5.0 x16's
# nominal 64 GB/s; the worker's pageable arrays go through a staging buffer, hence 11-13 GB/s.
H200_HOST = {
    "launch_ns": 23_040.0,  # empty kernel[1, 1] launch + synchronise
    "alloc_ns": 44_260.0,  # cuda.device_array of 4 kB, per array
    "h2d_latency_ns": 120_990.0,
    "h2d_gbs": 13.2,
    "d2h_latency_ns": 37_430.0,
    "d2h_gbs": 10.9,
    "pinned_gbs": 54.0,
}
H200_HBM_GBS = 4247.0  # device-to-device copy measured on the H200 (docs/benchmarks.md); 4,800 nominal

# The GPUs the modelled flow offers. The H200's host link and memory are as measured here; the others'
# are nominal peaks (vendor data sheets: PCIe x16, one direction; device memory), so their copies and
# kernels are lower bounds. Every GPU gets the H200 host's measured latencies (host software: Numba,
# the driver), which no data sheet gives.
MODEL_GPUS = {
    "H200": {"pcie_gbs": 64.0, "link": "PCIe 5.0 x16", "mem_gbs": 4800.0, "mem": "HBM3e", "measured": True},
    "A100": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 2039.0, "mem": "HBM2e"},
    "RTX 4090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 1008.0, "mem": "GDDR6X"},
    "RTX 3090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 936.0, "mem": "GDDR6X"},
    "T4": {"pcie_gbs": 16.0, "link": "PCIe 3.0 x16", "mem_gbs": 320.0, "mem": "GDDR6"},
}


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


def memory_flow_figure(
    timing: dict,
    launch: dict,
    bytes_in: int,
    bytes_out: int,
    view: str = "timeline",
    animate: bool = False,
    modelled_gpu: str | None = None,
) -> go.Figure:
    """Horizontal step bars: sequential on a linear µs axis, durations on a log axis, or shares in %.

    ``modelled_gpu``: ``timing`` is :func:`modelled_gpu_timing` for that GPU, and the figure says so.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
    measured = launch["backend"] == "gpu" and modelled_gpu is None
    rows = flow_steps(timing, launch, bytes_in, bytes_out)
    labels = [_tick(r) for r in rows]
    total = sum(r["dur_us"] for r in rows)
    if view == "timeline":
        x = [r["dur_us"] for r in rows]
        base = [r["start_us"] for r in rows]
        x_axis = {"title": "time since the first step (µs, linear)", "type": "linear",
                  "range": [0, max(total, 1e-3) * 1.02]}  # fmt: skip
    elif view == "log":
        x = [max(r["dur_us"], 1e-3) for r in rows]
        base = None
        lo = math.floor(math.log10(min(x)))  # bars start a decade below the shortest step
        hi = math.log10(max(x)) + 0.3
        x_axis = {"title": "duration (µs, log scale)", "type": "log", "range": [lo, hi]}
    else:
        x = [r["share"] for r in rows]
        base = None
        x_axis = {"title": "share of the flow's time (%)", "type": "linear", "range": [0, 105]}
    text = [
        f"{fmt_us(r['dur_us'])}" if view != "percent" else f"{r['share']:.1f} %  ({fmt_us(r['dur_us'])})"
        for r in rows
    ]
    bar = go.Bar(
        y=labels, x=x, base=base, orientation="h", text=text, textposition="auto",
        marker={"color": [STEP_COLORS[r["key"]] for r in rows]},
        hovertext=[_hover(r, measured) for r in rows], hovertemplate="%{hovertext}<extra></extra>",
        cliponaxis=False,
    )  # fmt: skip
    clock = GPU_CLOCK_LABEL if measured else SIM_CLOCK_LABEL
    if modelled_gpu is not None:
        clock = modelled_gpu_label(modelled_gpu)
        bar.hovertext = [h.replace(" (numpy copy on the CPU)", " (modelled)") for h in bar.hovertext]
    fig = go.Figure(data=[bar])
    compile_ms = float(timing.get("compile_ns", 0)) / 1e6
    title = titled(f"Memory flow of {launch['kernel']}: {fmt_us(total)} in 5 steps", clock)
    top = 66 + 22 * title["text"].count("<br>")  # room for each line of the source
    fig.update_layout(
        title={**title, "x": 0},
        height=PLOT_PX + top + (190 if animate else 60),
        margin={"l": 20, "r": 30, "t": top, "b": 190 if animate else 60},
        xaxis={**x_axis, "autorange": False, "zeroline": False},
        yaxis={
            "categoryorder": "array",
            "categoryarray": labels,
            "autorange": "reversed",
            "automargin": True,
        },
        showlegend=False,
        bargap=0.35,
        annotations=[]
        if modelled_gpu is not None
        else [
            {
                "text": f"not in the flow: {compile_label(launch)} {compile_ms:,.1f} ms",
                "xref": "paper",
                "yref": "paper",
                "x": 1,
                "y": 1.0,
                "xanchor": "right",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 12, "color": "#555"},
            }  # fmt: skip
        ],
    )
    if animate:
        _add_steps_animation(fig, rows, x, text, PLOT_PX)
    return fig


def _add_steps_animation(fig: go.Figure, rows: list[dict], x: list[float], text: list[str], plot_px: int):
    """One frame per step: the bars up to that step appear, later ones are still empty."""
    frames, steps = [], []
    for k, r in enumerate(rows):
        shown_x = [v if i <= k else 0 for i, v in enumerate(x)]
        shown_text = [t if i <= k else "" for i, t in enumerate(text)]
        frames.append(go.Frame(name=r["key"], data=[go.Bar(x=shown_x, text=shown_text)], traces=[0]))
        steps.append(frame_step(r["key"], f"{k + 1}. {r['label']}"))
    fig.frames = frames
    fig.update_layout(
        sliders=[frame_slider(steps, "step ", -60 / plot_px, active=len(steps) - 1)],  # opens on all 5 steps
        updatemenus=[play_pause(-150 / plot_px, frame_ms=900, from_current=False)],
    )
    place_controls(fig)
