"""Memory-flow figures: the measured flow and the modelled GPU view of the same bytes."""

import pytest

from visualizer.analysis import transfers as T
from visualizer.figures import memory_flow as M

LAUNCH = {"kernel": "vector_add", "backend": "sim", "grid": [8, 1, 1], "block": [128, 1, 1]}


def test_modelled_gpu_pays_latencies_and_moves_the_bytes_at_the_gpus_bandwidths():
    bytes_in, bytes_out = 8_000_000, 4_000_000
    h = T.H200_HOST
    t = T.modelled_gpu_timing(bytes_in, bytes_out, "H200", arrays_in=2, arrays_out=1)["host_steps_ns"]
    assert t["copy_in"] == pytest.approx(2 * h["h2d_latency_ns"] + bytes_in / 13.2)  # ns at 13.2 GB/s
    assert t["copy_out"] == pytest.approx(h["d2h_latency_ns"] + bytes_out / 10.9)
    assert t["kernel"] == pytest.approx(h["launch_ns"] + (bytes_in + bytes_out) / T.H200_HBM_GBS)
    assert t["allocate"] == pytest.approx(3 * h["alloc_ns"]) and t["free"] == 0.0
    # the lesson the simulator cannot show: the copies cost far more than the kernel
    assert t["copy_in"] + t["copy_out"] > 20 * t["kernel"]
    # a 4 kB copy is mostly latency (the "62.5 ns" was bytes ÷ peak with none), and a kernel
    # is never faster than its launch
    tiny = T.modelled_gpu_timing(4_000, 4_000, "H200")["host_steps_ns"]
    assert tiny["copy_in"] > 100_000 and tiny["copy_out"] > 30_000 and tiny["kernel"] > 20_000
    slower = T.modelled_gpu_timing(bytes_in, bytes_out, "T4")["host_steps_ns"]  # nominal PCIe 3
    assert slower["copy_in"] == pytest.approx(h["h2d_latency_ns"] + bytes_in / 16.0)
    with pytest.raises(ValueError, match="no bandwidths"):
        T.modelled_gpu_timing(1, 1, "Voodoo2")


def test_model_label_states_every_constant_and_its_source():
    label = T.modelled_gpu_label("H200")
    for text in (
        "121 µs",
        "13.2 GB/s",
        "37 µs",
        "10.9 GB/s",
        "23 µs launch",
        "4,247 GB/s",
        "44 µs per array",
    ):
        assert text in label
    assert "as measured on the H200" in label and "free not modelled" in label
    nominal = T.modelled_gpu_label("A100")
    assert "nominal peaks of a A100" in nominal and "32 GB/s" in nominal and "lower bounds" in nominal
    assert "latencies measured on the H200 host" in nominal


@pytest.mark.parametrize("view", list(M.VIEWS))
def test_modelled_figure_says_modelled(view):
    timing = T.modelled_gpu_timing(12_000, 4_000, "A100")
    fig = M.memory_flow_figure(timing, LAUNCH, 12_000, 4_000, view=view, modelled_gpu="A100")
    assert "modelled (not measured) for a A100" in fig.layout.title.text
    assert "simulator" not in fig.layout.title.text
    assert not fig.layout.annotations  # no compile time: nothing was compiled in a model
    assert all("(modelled)" in h for h in fig.data[0].hovertext if "GB/s" in h)
    measured = M.memory_flow_figure({**timing, "compile_ns": 5e6}, LAUNCH, 12_000, 4_000, view=view)
    assert M.SIM_CLOCK_LABEL in measured.layout.title.text


def test_step_animation_controls_sit_below_the_axis():
    timing = T.modelled_gpu_timing(12_000, 4_000, "H200")
    fig = M.memory_flow_figure(timing, LAUNCH, 12_000, 4_000, animate=True)
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    menu, slider = fig.layout.updatemenus[0], fig.layout.sliders[0]
    assert menu.y * plot_px <= -60  # under the tick labels and the axis title
    assert slider.y < menu.y and slider.x == 0 and slider.len > 0.9  # its own row, under the buttons
    assert slider.active == len(slider.steps) - 1  # opens on all five steps
    assert menu.buttons[0].args[1]["fromcurrent"] is False  # Play replays from the first step


def test_durations_past_a_thousand_ms_are_said_in_seconds():
    """A first simulator capture's compile (~2 s) as '1,973.65 ms' did not fit its metric's column."""
    from visualizer.analysis.transfers import fmt_us

    assert fmt_us(1_973_650.0) == "1.97 s" and fmt_us(1_500.0) == "1.50 ms" and fmt_us(0.5) == "500.0 ns"
