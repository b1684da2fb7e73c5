"""The lattice-Boltzmann example (kernels/lbm.py, specs/flow.py): both layouts against numpy per step,
mass conserved in a closed box, vortex shedding behind a cylinder, the host loop, the lesson's answers."""

import numpy as np
import pytest

from visualizer.engine.capture.steps import plan_steps
from visualizer.engine.compiled.engine import launch, repeated_launch
from visualizer.kernels import lbm
from visualizer.specs import flow
from visualizer.specs.catalog import LaunchError


def _args(spec, x, launch_):
    return [x[a] if a in x else launch_.scalars[a] for a in spec.args]


@pytest.mark.parametrize("spec", flow.SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", [0, 1, 2])
def test_one_step_matches_numpy_in_both_layouts(spec, shape):
    p = spec.resolve({"shape": shape, "nx": 48, "ny": 24, "angle": 15})
    lp = spec.plan(p)
    x = spec.make_inputs(p, np.random.default_rng(1))
    ref = spec.reference({k: v.copy() for k, v in x.items()}, p)["f_out"]
    launch(getattr(lbm, spec.build[1]), lp.grid, lp.block, _args(spec, x, lp), parallel=True)
    np.testing.assert_allclose(x["f_out"], ref, rtol=spec.rtol, atol=spec.atol)
    assert np.abs(x["f_out"] - ref).max() < 1e-6  # float32 rounding only


def test_the_obstacles_are_there():
    cyl = flow.obstacle({"nx": 200, "ny": 50, "shape": 0, "angle": 0})
    wing = flow.obstacle({"nx": 200, "ny": 50, "shape": 1, "angle": 12})
    assert 60 < cyl.sum() < 100  # a disc of radius 5: ~ 78 cells
    assert wing.sum() > 20 and wing[:, :30].sum() == 0 and wing[:, 80:].sum() == 0
    tilted = np.nonzero(wing)
    # nose up: the trailing edge (largest x) sits lower (smaller y) than the leading edge
    assert tilted[0][tilted[1].argmax()] < tilted[0][tilted[1].argmin()]


@pytest.mark.parametrize("kernel", ["lbm_aos", "lbm_soa"])
def test_mass_is_conserved_in_a_closed_box_with_a_cylinder(kernel):
    """Periodic both ways, bounce-back on a cylinder: nothing enters or leaves, so the fluid's mass stays
    (bounce-back and BGK both conserve it exactly; float32 rounding only)."""
    spec = flow.LBM_AOS if kernel == "lbm_aos" else flow.LBM_SOA
    p = spec.resolve({"shape": 0, "nx": 64, "ny": 32})
    lp = spec.plan(p)
    lp.scalars["periodic"] = 1
    x = spec.make_inputs(p, np.random.default_rng(2))
    fluid = x["solid"] == 0
    assert (~fluid).sum() > 20

    def mass():
        f = flow.to_soa(x["f_in"]) if kernel == "lbm_aos" else x["f_in"]
        return f.astype(np.float64).sum(axis=0)[fluid].sum()

    m0 = mass()
    run = repeated_launch(getattr(lbm, spec.build[1]), lp.grid, lp.block, _args(spec, x, lp))
    for _ in range(200):
        run(_args(spec, x, lp))
        x["f_in"], x["f_out"] = x["f_out"], x["f_in"]
    assert abs(mass() - m0) / m0 < 1e-5
    f = flow.to_soa(x["f_in"]) if kernel == "lbm_aos" else x["f_in"]
    assert np.isfinite(f).all() and not np.allclose(f, flow.initial_soa(p, np.random.default_rng(2)))


def test_the_cylinder_leaves_a_slow_wake_and_bends_the_flow_around_it():
    """A known drag behaviour, qualitatively: behind the cylinder the air is slowed (a wake), beside it the
    air goes faster than the inflow (it squeezes past). Vortex shedding needs thousands of steps at
    400 x 100: the GPU test checks that (test_gpu_vortex_shedding_behind_a_cylinder)."""
    spec = flow.LBM_SOA
    p = spec.resolve({"shape": 0, "nx": 160, "ny": 40})
    lp = spec.plan(p)
    x = spec.make_inputs(p, np.random.default_rng(0))
    run = repeated_launch(lbm.lbm_step_soa, lp.grid, lp.block, _args(spec, x, lp))
    for _ in range(400):
        run(_args(spec, x, lp))
        x["f_in"], x["f_out"] = x["f_out"], x["f_in"]
    speed = flow.fields_soa(x["f_in"], x["solid"])["speed"]
    cx, cy, r = 40, 21, flow.cylinder_radius(p)
    assert np.isfinite(speed).all()
    assert speed[cy, int(cx + r + 3)] < 0.5 * 0.1  # the wake just behind it
    assert speed[int(cy + r + 2), cx] > 0.1  # beside it: faster than the inflow


def test_host_loop_refuses_bad_counts_in_one_line():
    with pytest.raises(LaunchError, match="frames"):
        plan_steps("lbm_soa", {}, 100_000, 1, "sim")
    with pytest.raises(LaunchError, match="not a step"):
        plan_steps("vector_add", {}, 10, 1, "sim")
    with pytest.raises(LaunchError, match="thread-steps"):
        plan_steps("lbm_soa", {"nx": 1024, "ny": 512}, 1000, 10, "sim")
    with pytest.raises(LaunchError, match="at least 1"):
        plan_steps("lbm_soa", {}, 0, 1, "sim")


def test_host_loop_in_a_worker_runs_steps_and_samples_frames(sim_runner):
    run = sim_runner.steps("lbm_soa", {"nx": 64, "ny": 16, "shape": 1}, steps=30, every=10)
    assert run["at"] == [0, 10, 20, 30]
    assert run["vorticity"].shape == (4, 16, 64) and run["speed"].shape == (4, 16, 64)
    # the same 30 steps in this process, launched one by one, give the same last frame
    spec = flow.LBM_SOA
    p = spec.resolve({"nx": 64, "ny": 16, "shape": 1})
    lp = spec.plan(p)
    x = spec.make_inputs(p, np.random.default_rng(0))
    for _ in range(30):
        launch(lbm.lbm_step_soa, lp.grid, lp.block, _args(spec, x, lp), parallel=True)
        x["f_in"], x["f_out"] = x["f_out"], x["f_in"]
    np.testing.assert_array_equal(run["speed"][-1], flow.fields_soa(x["f_in"], x["solid"])["speed"])
    assert run["speed"][-1].max() > 0.05


def test_lesson_answers_aos_uncoalesced_and_soa_coalesced(sim_runner):
    from visualizer.analysis import lesson_answers as A

    p = {"nx": 64, "ny": 16, "shape": 1}
    aos = A.worst_sectors_per_request(sim_runner.capture("lbm_aos", p, accesses=True), "load")
    soa = A.worst_sectors_per_request(sim_runner.capture("lbm_soa", p, accesses=True), "load")
    assert aos.value >= 4 * soa.value
    assert soa.value <= 6


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["lbm_aos", "lbm_soa"])
def test_gpu_step_matches_numpy_at_full_size(gpu_runner, kernel):
    cap = gpu_runner.capture(kernel, {"nx": 400, "ny": 100, "shape": 1})
    assert cap.check["correct"] is True, cap.check


@pytest.mark.gpu
def test_gpu_vortex_shedding_behind_a_cylinder(gpu_runner):
    """Re = 0.1 x 20 / ((0.54 - 0.5) / 3) = 150: after a few thousand steps the wake's transverse
    velocity swings + and - (vortices shed from alternate sides)."""
    params = {"nx": 400, "ny": 100, "shape": 0, "tau_milli": 540}
    run = gpu_runner.steps("lbm_soa", params, steps=12000, every=100)
    assert np.isfinite(run["speed"]).all()
    late = np.asarray(run["uy_probe"][-40:])
    swings = np.sum(np.diff(np.sign(late - late.mean())) != 0)
    assert late.std() > 2e-3 and swings >= 4, (late.std(), swings)
