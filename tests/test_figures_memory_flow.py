"""Memory-flow figures: the measured flow and the modelled GPU view of the same bytes."""

import pytest

from visualizer.figures import memory_flow as M

LAUNCH = {"kernel": "vector_add", "backend": "sim", "grid": [8, 1, 1], "block": [128, 1, 1]}


def test_modelled_gpu_moves_the_bytes_at_the_gpus_bandwidths():
    bytes_in, bytes_out = 8_000_000, 4_000_000
    t = M.modelled_gpu_timing(bytes_in, bytes_out, "H200")["host_steps_ns"]
    assert t["copy_in"] == pytest.approx(bytes_in / 64.0)  # ns at 64 GB/s
    assert t["copy_out"] == pytest.approx(bytes_out / 64.0)
    assert t["kernel"] == pytest.approx((bytes_in + bytes_out) / 4800.0)
    assert t["allocate"] == t["free"] == 0.0
    # the lesson the simulator cannot show: the copies cost far more than the kernel
    assert t["copy_in"] + t["copy_out"] > 50 * t["kernel"]
    slower = M.modelled_gpu_timing(bytes_in, bytes_out, "T4")["host_steps_ns"]
    assert slower["copy_in"] == pytest.approx(4 * t["copy_in"])  # PCIe 3 vs 5
    with pytest.raises(ValueError, match="no bandwidths"):
        M.modelled_gpu_timing(1, 1, "Voodoo2")


@pytest.mark.parametrize("view", list(M.VIEWS))
def test_modelled_figure_says_modelled(view):
    timing = M.modelled_gpu_timing(12_000, 4_000, "A100")
    fig = M.memory_flow_figure(timing, LAUNCH, 12_000, 4_000, view=view, modelled_gpu="A100")
    assert "modelled on a A100" in fig.layout.title.text and "not measured" in fig.layout.title.text
    assert "simulator" not in fig.layout.title.text
    assert not fig.layout.annotations  # no compile time: nothing was compiled in a model
    assert all("(modelled)" in h for h in fig.data[0].hovertext if "GB/s" in h)
    measured = M.memory_flow_figure({**timing, "compile_ns": 5e6}, LAUNCH, 12_000, 4_000, view=view)
    assert M.SIM_CLOCK_LABEL in measured.layout.title.text


def test_step_animation_controls_sit_below_the_axis():
    timing = M.modelled_gpu_timing(12_000, 4_000, "H200")
    fig = M.memory_flow_figure(timing, LAUNCH, 12_000, 4_000, animate=True)
    plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    menu, slider = fig.layout.updatemenus[0], fig.layout.sliders[0]
    assert menu.y * plot_px <= -60  # under the tick labels and the axis title
    assert slider.y < menu.y and slider.x == 0 and slider.len > 0.9  # its own row, under the buttons
    assert slider.active == len(slider.steps) - 1  # opens on all five steps
    assert menu.buttons[0].args[1]["fromcurrent"] is False  # Play replays from the first step
