"""The host-side life of one run: allocate -> copy host->device -> kernel -> copy device->host -> free,
with each step's measured duration (``timing["host_steps_ns"]``) and the CUDA call it stands for.

JIT compile time (``timing["compile_ns"]``) is shown beside the flow, never inside it.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from visualizer.figures.common import frame_slider, frame_step, place_controls, play_pause

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


# Nominal peak bandwidths (vendor data sheets) of the GPUs the modelled flow can use: host link
# (PCIe x16, one direction) and device memory.
MODEL_GPUS = {
    "H200": {"pcie_gbs": 64.0, "link": "PCIe 5.0 x16", "mem_gbs": 4800.0, "mem": "HBM3e"},
    "A100": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 2039.0, "mem": "HBM2e"},
    "RTX 4090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 1008.0, "mem": "GDDR6X"},
    "RTX 3090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 936.0, "mem": "GDDR6X"},
    "T4": {"pcie_gbs": 16.0, "link": "PCIe 3.0 x16", "mem_gbs": 320.0, "mem": "GDDR6"},
}


def modelled_gpu_label(gpu: str) -> str:
    g = MODEL_GPUS[gpu]
    return (
        f"modelled (not measured): bytes ÷ nominal peak bandwidth of a {gpu}, {g['link']} "
        f"{g['pcie_gbs']:g} GB/s for copies, {g['mem']} {g['mem_gbs']:,.0f} GB/s for the kernel; "
        "call latencies, allocation and free not modelled"
    )


def modelled_gpu_timing(bytes_in: int, bytes_out: int, gpu: str) -> dict:
    """A timing dict (host_steps_ns) for the same data on ``gpu``: each copy moves its bytes over the host
    link; the kernel reads its inputs and writes its outputs once at device-memory bandwidth (a lower
    bound for kernels that re-read data). Allocation and free are not modelled (0 ns)."""
    if gpu not in MODEL_GPUS:
        raise ValueError(f"no bandwidths for {gpu!r}; choose one of {', '.join(MODEL_GPUS)}")
    g = MODEL_GPUS[gpu]
    return {
        "host_steps_ns": {
            "allocate": 0.0,
            "copy_in": bytes_in / g["pcie_gbs"],  # bytes / (GB/s) = ns
            "kernel": (bytes_in + bytes_out) / g["mem_gbs"],
            "copy_out": bytes_out / g["pcie_gbs"],
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
        clock = f"modelled on a {modelled_gpu}: bytes ÷ nominal peak bandwidth, not measured"
        bar.hovertext = [h.replace(" (numpy copy on the CPU)", " (modelled)") for h in bar.hovertext]
    fig = go.Figure(data=[bar])
    compile_ms = float(timing.get("compile_ns", 0)) / 1e6
    fig.update_layout(
        title={
            "text": f"Memory flow of {launch['kernel']}: {fmt_us(total)} in 5 steps<br><sup>{clock}</sup>",
            "x": 0,
            "xanchor": "left",
        },
        height=PLOT_PX + 80 + (190 if animate else 60),
        margin={"l": 20, "r": 30, "t": 80, "b": 190 if animate else 60},
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
