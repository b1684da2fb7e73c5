"""The lenses on the compiled simulator engine (issue 38 item 3): accesses, branches and delays run there
(no fallback line), with the same tables and labels as fastsim's; the race panel's capture (N seeded runs
with the accesses lens) shows the race on the default engine; a kernel the engine can't take still runs
on fastsim, saying why. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from visualizer.analysis import races
from visualizer.analysis.memory import SOURCE
from visualizer.analysis.provenance import SIMULATED_SAMPLED

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/

from tests.engine.test_gpu_accesses import ACC, HAZ, REQ, norm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# built-in kernels at small launches (compile time, not run time, is what these cost)
CASES = [
    ("vector_add", {"n": 1000, "block": 128}),
    ("reduction", {"n": 512, "block": 128}),
    ("reduction_race", {"n": 1024, "block": 128}),
    ("transpose_tiled", {"rows": 64, "cols": 96, "tile": 32}),
    ("transpose_padded", {"rows": 64, "cols": 64, "tile": 32}),
    ("strided_copy", {"n": 1024, "stride": 8, "block": 128}),
    # its global atomic's value is a shared load: recorded after that load, as on fastsim
    ("histogram_shared", {}),
    ("branch_lanes", {"reps": 4}),
    # a device function the access pass rewrites (co_rank's recording copy), and binary searches whose
    # lanes take the loop's two branches in different turns (no one warp order of the lanes' requests)
    ("merge_corank", {"m": 64, "n": 64, "per_thread": 8}),
]


def _pair(runner, name, params, **lenses):
    fast = runner.capture(name, params, time_clean=False, sim_engine="fastsim", **lenses)
    comp = runner.capture(name, params, time_clean=False, **lenses)
    return fast, comp


@pytest.mark.parametrize("name,params", CASES)
def test_accesses_on_the_compiled_engine_equal_fastsims_recorder(sim_runner, name, params):
    fast, comp = _pair(sim_runner, name, params, accesses=True)
    assert comp.launch["sim_engine"] == "compiled", comp.launch["sim_engine_note"]
    assert comp.launch["sim_engine_note"] is None
    # every warp recorded: the recorder's label, no sample sentence
    assert comp.launch["accesses"]["source"] == fast.launch["accesses"]["source"] == SOURCE
    assert comp.launch["accesses"].get("sample") is None
    assert comp.launch["accesses"]["accesses"] == fast.launch["accesses"]["accesses"]
    for table, cols in (("accesses", ACC), ("requests", REQ), ("hazards", HAZ)):
        a, b = norm(getattr(fast, table), cols), norm(getattr(comp, table), cols)
        assert a.equals(b), f"{name}: {table} differ ({len(a)} rows on fastsim, {len(b)} compiled)"
    assert fast.check["correct"] == comp.check["correct"]


@pytest.mark.parametrize("name,params", [CASES[1], CASES[2], CASES[7]])
def test_branches_on_the_compiled_engine_equal_fastsims(sim_runner, name, params):
    fast, comp = _pair(sim_runner, name, params, branches=True)
    assert comp.launch["sim_engine"] == "compiled" and comp.launch["sim_engine_note"] is None
    assert len(fast.branches) and fast.branches.equals(comp.branches)
    assert fast.launch["branches"] == comp.launch["branches"]


def test_delays_on_the_compiled_engine_keep_their_tables(sim_runner):
    """--delays: run i's table drawn from (seed, i), the same on both engines; the runs are the compiled
    engine's seeded schedules (the simulator has no clock for a delay to move a warp against)."""
    kw = dict(runs=4, schedule_seed=3, delays=True)
    fast, comp = _pair(sim_runner, "reduction_race", {"n": 512, "block": 128}, **kw)
    assert comp.launch["sim_engine"] == "compiled" and comp.launch["sim_engine_note"] is None
    keys = ("delay_kinds", "delayed_sites", "delay_p", "max_delay_ns", "delayed_slots", "delay_slots")
    for f, c in zip(fast.launch["runs"]["schedules"], comp.launch["runs"]["schedules"], strict=True):
        assert c["engine"] == "compiled"
        assert {k: f[k] for k in keys} == {k: c[k] for k in keys}
    assert fast.launch["runs"]["delay_sites"] == comp.launch["runs"]["delay_sites"]


def test_the_race_panels_capture_shows_the_race_on_the_default_engine(sim_runner):
    """web/races.py on the simulator: N seeded runs with the accesses lens; it ran on fastsim (which had
    this reduction right in every run) until the lens had a compiled hook."""
    cap = sim_runner.capture("reduction_race", {"n": 1024, "block": 128}, runs=8, schedule_seed=1,
                             accesses=True, time_clean=False)  # fmt: skip
    assert cap.launch["sim_engine"] == "compiled"
    info = cap.launch["runs"]
    assert info["distinct"] > 1 and not all(info["correct"])
    cells = races.cells(cap.runs, "partial", cap.source)
    assert cells["differs"].any()
    joined = races.hazards_at(cells, cap.hazards, cap.accesses)
    assert len(joined) and (joined["space"] == "shared").any()
    fixed = sim_runner.capture("reduction", {"n": 1024, "block": 128}, runs=8, schedule_seed=1,
                               accesses=True, time_clean=False)  # fmt: skip
    # (the fixed reduction's seeded runs go to fastsim: the engine's hidden-race rule refuses its loop,
    # whose body reads shared memory after its last barrier, lenses or not)
    assert fixed.launch["runs"]["distinct"] == 1 and all(fixed.launch["runs"]["correct"])


BARRIER_IN_DEVICE_FN = """
from numba import cuda, float32

@cuda.jit(device=True)
def stage(s, a, i):
    s[cuda.threadIdx.x] = a[i]
    cuda.syncthreads()

@cuda.jit
def flip(a, out):
    s = cuda.shared.array(64, float32)
    i = cuda.grid(1)
    stage(s, a, i)
    out[i] = s[63 - cuda.threadIdx.x]
"""


def test_a_kernel_the_engine_cant_take_still_falls_back_with_its_line(tmp_path):
    src = tmp_path / "flip.py"
    src.write_text(BARRIER_IN_DEVICE_FN)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "visualizer", "capture", "--source", str(src), "--grid", "2", "--block", "64",
           "--arg", "a=arange:float32:128", "--arg", "out=zeros:float32:128", "--backend", "sim", "--accesses",
           "--branches", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr
    launch = json.loads((out / "launch.json").read_text())
    assert launch["sim_engine"] == "fastsim"
    assert launch["sim_engine_note"].startswith("the compiled engine did not take the kernel: ")
    assert "ran on fastsim: the compiled engine did not take the kernel" in done.stdout
    assert launch["accesses"]["accesses"] == 2 * 128  # a load and a store each: the pass, run on fastsim
    assert launch["accesses"]["source"] == SOURCE


def test_recorder_masks_group_each_lanes_jth_access_at_a_site():
    """Own-lane masks (the compiled engine's probe) become the lanes of each request by the recorder's
    rule; a lane that ran out of room is named in every request, so the decode leaves those out."""
    from visualizer.analysis import lane_streams
    from visualizer.engine.lenses.accesses import recorder_masks

    cap = 3
    rec = np.zeros((1, cap + 1, 64), np.int64)
    cnt = np.zeros((1, 32), np.uint64)

    def put(lane, k, site, epoch=0):
        rec[0, k, lane] = (site << 48) | 1 + 4 * lane
        rec[0, k, lane + 32] = (epoch << 32) | (1 << lane)

    # lanes 0 and 1: site 5 twice; lane 2: site 5 once, then site 6
    for lane in (0, 1):
        put(lane, 0, 5)
        put(lane, 1, 5)
    put(2, 0, 5)
    put(2, 1, 6)
    cnt[0, :3] = 2
    out = recorder_masks(rec.reshape(-1), cnt).reshape(1, cap + 1, 64)
    masks = out[0, :2, 32:35] & 0xFFFFFFFF
    assert masks.tolist() == [[0b111, 0b111, 0b111], [0b011, 0b011, 0b100]]
    warp = lane_streams.rebuild(out[0, :cap], cnt[0])
    assert not warp.inconsistent and warp.requests == 3
    cnt[0, 2] = 9  # lane 2 made more than it had room for
    out = recorder_masks(rec.reshape(-1), cnt).reshape(1, cap + 1, 64)
    assert ((out[0, :2, 32:34] >> 2) & 1).all()  # lane 2 is named in lanes 0 and 1's requests


@pytest.mark.parametrize(
    "name,params,requests_as",
    [
        # lanes whose binary searches take the loop's branches in different turns: the compiled engine forms
        # requests by the recorder's rule (recorder_masks), fastsim's pass run lane by lane splits them finer
        ("merge_corank", {"m": 64, "n": 64, "per_thread": 8}, "recorder"),
        # load_tile's and store_tile's recording copies, and the views kh = k[b, h] kept across barriers
        ("flash_attention", {"seq_len": 40}, "pass"),
    ],
)
def test_the_access_pass_with_device_function_copies_runs_compiled_and_equals_fastsims(
    sim_runner, name, params, requests_as
):
    """access_engine="pass" (sampled warps, as the Memory access page asks past the recorder's limit): the
    pass's rewritten device-function copies compile (they were handed to fastsim, whose limit refused
    flash_attention at seq_len 1024), and what they record equals fastsim's run of the same build."""
    fast, comp = _pair(sim_runner, name, params, accesses=True, access_engine="pass")
    assert fast.launch["sim_engine"] == "fastsim"
    assert comp.launch["sim_engine"] == "compiled", comp.launch["sim_engine_note"]
    assert comp.launch["sim_engine_note"] is None
    fa, ca = fast.launch["accesses"], comp.launch["accesses"]
    assert ca["source"] == fa["source"] == SIMULATED_SAMPLED and ca["sample"]["on"] == "simulator"
    assert ca["sample"] == fa["sample"] and ca["accesses"] == fa["accesses"] > 0
    for table, cols in (("accesses", ACC), ("hazards", HAZ)):
        a, b = norm(getattr(fast, table), cols), norm(getattr(comp, table), cols)
        assert a.equals(b), f"{name}: {table} differ ({len(a)} rows on fastsim, {len(b)} compiled)"
    if requests_as == "recorder":
        rec = sim_runner.capture(name, params, time_clean=False, sim_engine="fastsim", accesses=True)
        want = norm(rec.requests, REQ, ca["sample"]["blocks"])
    else:
        want = norm(fast.requests, REQ)
    assert len(want) and want.equals(norm(comp.requests, REQ)), f"{name}: requests differ"
    assert fast.check["correct"] and comp.check["correct"]
