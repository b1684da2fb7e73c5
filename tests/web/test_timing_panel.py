"""The timing panel: on the simulator it says its numbers are CPU wall time; for a GPU capture it shows
device time, launch overhead beside it, the recorded span and torch, from the timing.json fields."""

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import open_app
from visualizer.web.timing import fmt_us, gpu_timing_notes

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")

GPU_TIMING = {  # the fields the GPU worker writes (made-up values; the GPU tests check real ones)
    "clock": "CUDA events queued behind a spin kernel: GPU device time (nvbench's method), median",
    "clean_ms": 0.0031,
    "instrumented_ms": 0.0052,
    "overhead_ratio": 0.0052 / 0.0031,
    "launch_overhead_us": 33.4,
    "one_launch_event_ms": 0.0405,
    "kernel_span_ns": 2_400,
    "queue_covered": True,
    "torch_op": "torch.add(a, b, out=c)",
    "torch_ms": 0.0029,
    "torch_launch_overhead_us": 6.2,
    "method": {
        "repeats": 20,
        "warmup": 3,
        "spin_us": 1800.0,
        "l2_flush": True,
        "l2_flush_why": "memory-bound (0.08 FLOP/byte): L2 flushed before each repeat",
    },
}


def captions(at) -> list[str]:
    return [c.value for c in at.sidebar.caption]


@pytest.fixture(scope="module")
def sim_app():
    return open_app(kernel="vector_add", backend="sim", n=100, block=32)


def test_simulator_panel_shows_no_simulated_time_as_kernel_time(sim_app):
    """The simulator's CPU time is said once, for what it is; no clean-vs-instrumented pair of metrics
    (their ratio is the simulator's noise, and was read as the probes' cost)."""
    text = " ".join(captions(sim_app))
    assert "No GPU here: no kernel time is measured" in text and "of CPU time" in text
    assert "probes' cost" not in text
    labels = {m.label for m in sim_app.sidebar.metric}
    assert not labels, labels
    assert "launch overhead (host)" not in labels and "clean kernel" not in labels
    # the default engine, compiled: its run CPU time, compile said apart (fastsim's: wall time)
    assert sim_app.session_state.capture.timing["clock"].startswith(
        "simulator CPU time of the compiled launch"
    )
    assert "of CPU time (the kernel compiled for the CPU; " in text
    assert "no GPU clock" in sim_app.session_state.capture.timing["method"]["device_time"]


def test_gpu_panel_shows_device_time_and_launch_overhead(sim_app):
    at = sim_app
    cap = at.session_state.capture
    launch = {**cap.launch, "backend": "gpu", "source": "measured (GPU)", "device_name": "NVIDIA H200"}
    launch.update(compute_capability="9.0", peak_bandwidth_gbs=4800.0)
    at.session_state.capture = dataclasses.replace(cap, launch=launch, timing={**cap.timing, **GPU_TIMING})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.sidebar.metric}
    assert metrics["clean kernel"] == "3.1 µs" and metrics["instrumented"] == "5.2 µs"
    assert metrics["launch overhead (host)"] == "33.4 µs"
    text = " ".join(captions(at))
    assert "queued behind a spin kernel" in text
    assert "recorded span (in-kernel %globaltimer, instrumented): 2.4 µs" in text
    assert "events around one launch" in text and "40.5 µs" in text
    assert "torch, torch.add(a, b, out=c): 2.9 µs on the GPU, 6.2 µs to launch" in text
    assert "median of 20 behind a 1,800 µs spin; L2 flushed before each (memory-bound)" in text
    assert not at.sidebar.warning


def test_gpu_panel_warns_when_the_queue_outran_the_spin(sim_app):
    at = sim_app
    cap = at.session_state.capture
    at.session_state.capture = dataclasses.replace(cap, timing={**cap.timing, "queue_covered": False})
    at.run()
    assert any("waited for Python" in w.value for w in at.sidebar.warning)


def test_notes_degrade_without_fields():
    assert gpu_timing_notes({}) == []
    assert gpu_timing_notes({"torch_error": "ImportError: no torch"}) == [
        "torch baseline failed: ImportError: no torch"
    ]
    assert fmt_us(None) == "–" and fmt_us(1500.0) == "1.50 ms" and fmt_us(3.25) == "3.2 µs"
