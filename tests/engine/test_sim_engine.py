"""The simulator's two engines through the real capture path (issue 38): ``sim_engine="compiled"`` (the
default) and ``"fastsim"`` give every built-in kernel the same ids (block, warp, lane of each thread, who
did work), the same shared-memory tiles and the same outputs; launch.json says which engine ran and why
not the compiled one; a lens without a compiled hook runs on fastsim, saying so; the race shows on the
default engine through the CLI. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda
from tiers import every_builtin

from visualizer.specs.catalog import KERNELS, LaunchError

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/

import race_cases  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# small launches where the default is long on fastsim (each kernel at its default otherwise)
SMALL = {"branch_lanes": {"reps": 4}, "branch_warps": {"reps": 4}}
# compiled-engine fallbacks for built-in kernels, and why (docs/compiled-engine.md)
FALLS_BACK = {"flash_attention_fast": "a barrier inside device function"}
TIMES = ["t_start_ns", "t_end_ns"]  # modelled from each engine's own clock: not compared


def _pair(runner, name, **options):
    params = SMALL.get(name, {})
    fast = runner.capture(name, params, time_clean=False, sim_engine="fastsim", **options)
    comp = runner.capture(name, params, time_clean=False, **options)  # the default engine
    return fast, comp


@pytest.mark.parametrize("name", every_builtin(sorted(KERNELS)))
def test_ids_and_outputs_equal_fastsims(sim_runner, name):
    if KERNELS[name].fault_demo:  # both engines end in the out-of-bounds error (compiled hands it over)
        for engine in ("fastsim", "compiled"):
            with pytest.raises(Exception, match="out of bounds|IndexError|index"):
                sim_runner.capture(name, {}, time_clean=False, sim_engine=engine)
        return
    fast, comp = _pair(sim_runner, name)
    assert fast.launch["sim_engine"] == "fastsim"
    assert fast.launch["sim_engine_note"] == "--sim-engine fastsim was asked for"
    if name in FALLS_BACK:
        assert comp.launch["sim_engine"] == "fastsim"
        assert FALLS_BACK[name] in comp.launch["sim_engine_note"]
    else:
        assert comp.launch["sim_engine"] == "compiled", comp.launch["sim_engine_note"]
        assert comp.launch["sim_engine_note"] is None
        cpu = comp.timing["simulator_cpu_s"]
        assert cpu["clock"].startswith("simulator CPU time") and cpu["instrumented_run"] >= 0
    ft, ct = fast.threads.drop(columns=TIMES), comp.threads.drop(columns=TIMES)
    assert list(ft.columns) == list(ct.columns)
    for col in ft.columns:
        assert ft[col].tolist() == ct[col].tolist(), f"{name}: threads.{col} differs from fastsim's"
    assert sorted(fast.outputs) == sorted(comp.outputs)
    for k in fast.outputs:
        np.testing.assert_allclose(comp.outputs[k], fast.outputs[k], rtol=1e-4, atol=1e-4, err_msg=k)
    assert fast.check["correct"] == comp.check["correct"]
    if fast.tiles is not None:  # the shared-memory tiles the kernel staged (its domain probes)
        keep = [c for c in fast.tiles.columns if c != "t_ns"]
        assert fast.tiles[keep].reset_index(drop=True).equals(comp.tiles[keep].reset_index(drop=True)), name


def test_the_lenses_run_compiled_and_a_lens_without_a_compiled_hook_plans_fastsim(sim_runner):
    cap = sim_runner.capture("vector_add", {"n": 64, "block": 32}, time_clean=False, accesses=True)
    assert cap.launch["sim_engine"] == "compiled" and cap.launch["sim_engine_note"] is None
    assert cap.accesses is not None and len(cap.accesses)
    cap = sim_runner.capture("reduction", {"n": 64, "block": 32}, time_clean=False, branches=True)
    assert cap.launch["sim_engine"] == "compiled" and cap.launch["sim_engine_note"] is None
    # a lens with no compiled hook (none of the built-in ones today) still plans fastsim, saying why
    from visualizer.engine.capture.request import CaptureRequest
    from visualizer.engine.lenses import REGISTRY, Lens

    class Clockwork(Lens):
        name = "clockwork"
        backends = frozenset({"gpu", "sim"})

    REGISTRY["clockwork"] = Clockwork
    try:
        request = CaptureRequest(kernel="vector_add", lenses={"clockwork": {}})
        assert request.planned_sim_engine() == (
            "fastsim",
            "the clockwork lens is not on the compiled engine yet",
        )
    finally:
        del REGISTRY["clockwork"]


def test_an_unknown_engine_is_a_launch_error(sim_runner):
    with pytest.raises(LaunchError, match="unknown simulator engine 'turbo'"):
        sim_runner.capture("vector_add", {}, sim_engine="turbo")


def test_seeded_runs_use_the_compiled_engines_schedules(sim_runner):
    racy = sim_runner.capture("reduction_race", {"n": 1024, "block": 128}, runs=8, schedule_seed=1,
                              time_clean=False)  # fmt: skip
    runs = racy.launch["runs"]
    assert racy.launch["sim_engine"] == "compiled"
    assert [s["engine"] for s in runs["schedules"]] == ["compiled"] * 8
    assert [s["run"] for s in runs["schedules"]] == list(range(8))
    assert runs["distinct"] > 1 and not all(runs["correct"])
    again = sim_runner.capture("reduction_race", {"n": 1024, "block": 128}, runs=8, schedule_seed=1,
                               time_clean=False)  # fmt: skip
    for k in racy.runs:  # (seed, run) replays bit for bit
        np.testing.assert_array_equal(racy.runs[k], again.runs[k])


def _cli_race(tmp_path: Path, racy: bool, *extra) -> tuple[dict, str]:
    src = tmp_path / f"reverse_{int(racy)}.py"
    src.write_text(race_cases.source("reverse", racy))
    out = tmp_path / f"out_{int(racy)}_{len(extra)}"
    cmd = [sys.executable, "-m", "visualizer", "capture", "--source", str(src), "--grid", "2", "--block", "128",
           "--arg", "a=arange:float32:256", "--arg", "out=zeros:float32:256", "--reference",
           "out = a.reshape(2, 128)[:, ::-1].reshape(-1)", "--backend", "sim", "--runs", "8", "--seed", "1",
           "--out", str(out), *extra]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    return json.loads((out / "launch.json").read_text()), done.stdout


def test_the_reverse_race_shows_on_the_default_engine_through_the_cli(tmp_path):
    launch, text = _cli_race(tmp_path, racy=True)
    assert launch["sim_engine"] == "compiled"
    # wrong in most runs, and differently (fastsim's schedules had it right in 8 of 8, 1 distinct output)
    assert launch["runs"]["distinct"] > 1 and sum(launch["runs"]["correct"]) < 4
    assert "seeded schedules (seed 1" in text and "simulator engine: compiled" in text
    assert (
        launch["static_smem_bytes"] == 128 * 4
    )  # the compiled engine's count (fastsim's listener hears none)
    launch, text = _cli_race(tmp_path, racy=False)
    assert launch["sim_engine"] == "compiled"
    assert launch["runs"]["distinct"] == 1 and all(launch["runs"]["correct"])
    # --delays (and --accesses, the race panel's) run on the compiled engine too: the race still shows
    launch, text = _cli_race(tmp_path, True, "--delays", "--accesses")
    assert launch["sim_engine"] == "compiled" and "ran on fastsim" not in text
    assert launch["runs"]["distinct"] > 1 and sum(launch["runs"]["correct"]) < 4


def test_the_compiled_engines_limits_only_where_it_runs(sim_runner):
    """2^20 threads is over fastsim's cap (2^19): admitted where the compiled engine will run it (the
    accesses lens included), refused where the request asks for fastsim."""
    big = {"n": 1 << 20, "block": 256}
    cap = sim_runner.capture("vector_add", big, time_clean=False)
    assert cap.launch["sim_engine"] == "compiled" and cap.check["correct"]
    assert cap.launch["recorded_per"] == "warp"  # a record per warp above 2^16 threads: the tables stay small
    with pytest.raises(LaunchError, match="too many for the CUDA simulator"):
        sim_runner.capture("vector_add", big, time_clean=False, sim_engine="fastsim")
    # the accesses lens runs on the compiled engine too: admitted, recorded in sampled warps
    cap = sim_runner.capture("vector_add", big, time_clean=False, accesses=True)
    assert cap.launch["sim_engine"] == "compiled" and cap.check["correct"]
    assert cap.launch["accesses"]["sample"]["warps"] < big["n"] // 32
    with pytest.raises(LaunchError, match="compiled engine"):
        sim_runner.capture("vector_add", {"n": (1 << 26) + 1, "block": 256})


def test_a_compiled_kernel_is_not_compiled_again(sim_runner):
    """A slider change (another n, the same source and argument types) reuses the compiled kernel."""
    sim_runner.capture("strided_copy", {"n": 512, "stride": 1, "block": 64})
    cap = sim_runner.capture("strided_copy", {"n": 2048, "stride": 1, "block": 64})
    cpu = cap.timing["simulator_cpu_s"]
    assert cpu["instrumented_compile"] == 0 and cpu["clean_compile"] == 0
    assert cap.launch["sim_engine"] == "compiled" and cap.check["correct"]


def test_the_flows_kernel_step_leaves_the_compile_out(tmp_path):
    """Memory flow's kernel step on the compiled engine is the launch, not the build inside its first
    call (a first capture showed a 1,973 ms 'whole flow', nearly all of it numba compiling). A fresh
    process compiles, so the CLI's capture is a first launch."""
    cmd = [sys.executable, "-m", "visualizer", "capture", "vector_add", "--param", "n=1000", "--param", "block=128",
           "--backend", "sim",
           "--out", str(tmp_path / "b")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr
    launch = json.loads((tmp_path / "b" / "launch.json").read_text())
    timing = json.loads((tmp_path / "b" / "timing.json").read_text())
    built = timing["simulator_cpu_s"]["instrumented_compile"]
    assert launch["sim_engine"] == "compiled" and built > 0
    assert timing["compile_ns"] >= built * 1e9  # the build is reported apart from the kernel step


def fill(out):
    out[cuda.blockIdx.x * 32 + cuda.threadIdx.x] = 1


def test_fallback_refused_past_fastsims_limits():
    """A launch admitted at the compiled engine's limits that the engine then hands over is refused in one
    line (fastsim would take minutes), naming both reasons."""
    from visualizer.engine.compiled import simulator as router

    router.install()
    out = np.zeros(64, np.int32)
    with router.engine("compiled", refuse_fallback="2^20 threads is over fastsim's limit"):
        with pytest.raises(
            LaunchError, match="over fastsim's limit; the compiled engine did not take this kernel: dynamic"
        ):
            cuda.jit(fill)[2, 32, 0, 16](
                out
            )  # dynamic shared memory: the compiled engine hands it to fastsim
    assert not out.any()
    with router.engine("compiled"):
        cuda.jit(fill)[2, 32, 0, 16](out)
    assert (out == 1).all() and router.last_launch()["engine"] == "fastsim"


def test_the_notebook_api_takes_sim_engine():
    from visualizer.tools.notebook import capture

    nb = capture("vector_add", n=64, block=32, sim_engine="fastsim")
    assert (
        nb.launch["sim_engine"] == "fastsim"
        and nb.launch["sim_engine_note"] == "--sim-engine fastsim was asked for"
    )
    assert capture("vector_add", n=64, block=32).launch["sim_engine"] == "compiled"  # the default
