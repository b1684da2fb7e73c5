"""The SIMT lens on the H200 against Nsight Compute, and on the attention kernels.

* The lens's branch efficiency "as ncu counts it" (analysis/branches.as_ncu_counts: the GPU's warp
  visits of the source lines whose clean build has a conditional jump, and the jumps of a loop ptxas
  unrolled with a remainder from each lane's trip count) against ncu's
  smsp__sass_average_branch_targets_threads_uniform.pct and its divergent-branch count, on the clean
  builds of the same launches (tests/branch_gpu_check.py's cases, the same inputs).
* The divergence pair at the lesson's largest size: the log is not cut.
* flash_attention and flash_attention_fast through the capture path with the branch probes: right
  output, visits as the simulator models them, and what the probes cost.

``SIMT_GPU_REPORT=FILE`` writes what each test saw to FILE (JSON lines) for docs/benchmarks.md.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.gpu

NCU = "/usr/local/cuda/bin/ncu"
METRICS = (
    "smsp__sass_average_branch_targets_threads_uniform.pct,smsp__sass_branch_targets.sum,"
    "smsp__sass_branch_targets_threads_divergent.sum"
)
# every line with a jump runs one jump per source test, or is a loop ptxas unrolled with a remainder that
# as_ncu_counts counts as its SASS runs (lane_loop: issue 39, ncu 15.38 %): ncu's number, to the branch
AGREE = ("collatz", "classify", "reduction", "lane_loop")
# loops over a uniform trip count that ptxas unrolled (counted as their SASS runs): within 1 point, the
# same divergent branches; ncu also counts an unconditional jump (branch_lanes: one per warp), left out
NEAR = ("branch_lanes", "branch_warps")
# where they part, reported: a `break` folded into the trip count (partial_sums), jumps of a division's
# slow path on lines with no branch (mandel)
PART = ("partial_sums", "mandel")


def _report(entry: dict) -> None:
    path = os.environ.get("SIMT_GPU_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")


@pytest.fixture(scope="module")
def ncu_counts(tmp_path_factory):
    if not os.path.exists(NCU):
        pytest.skip("no Nsight Compute here")
    log = tmp_path_factory.mktemp("ncu") / "ncu.csv"
    names = AGREE + NEAR + PART
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    cmd = [NCU, "--clock-control", "none", "--csv", "--metrics", METRICS, "--log-file", str(log),
           sys.executable, str(HERE / "branch_gpu_check.py"), "clean", *names]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=HERE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    from devtools.crosscheck import read_ncu

    got = read_ncu(log)
    assert len(got) == len(names), done.stdout[-2000:]
    return dict(zip(names, got.values(), strict=True))


@pytest.mark.parametrize("name", AGREE + NEAR + PART)
def test_the_sass_counted_efficiency_against_ncu(ncu_counts, name):
    import branch_gpu_check as g

    from visualizer.analysis import branches

    rows, sites = g.lens_rows(name)
    _, cond, unrolled = g.sass_lines(name)
    mine = branches.as_ncu_counts(rows, cond, unrolled, sites)
    ncu = ncu_counts[name]
    entry = {
        "case": name, "lens": branches.efficiency(rows), "lens_divergent": int(branches.divergent(rows).sum()),
        "as_ncu": mine, "ncu_pct": ncu.get("smsp__sass_average_branch_targets_threads_uniform.pct"),
        "ncu_targets": ncu.get("smsp__sass_branch_targets.sum"),
        "ncu_divergent": ncu.get("smsp__sass_branch_targets_threads_divergent.sum"),
    }  # fmt: skip
    _report(entry)
    assert rows.attrs["truncated"] == 0
    if name in AGREE:  # the same branch executions, the same divergent ones
        assert mine["visits"] == entry["ncu_targets"] and mine["divergent_visits"] == entry["ncu_divergent"]
        assert mine["efficiency"] == pytest.approx(entry["ncu_pct"], abs=0.05), entry
    if name == "lane_loop":  # ptxas unrolled `for k in range(threadIdx.x % 32)` by 4: counted so
        assert mine["modelled"] == {sites[0]["line"]: 4}
    if name in NEAR:  # unrolled by 4, counted as the SASS runs: the one divergent test per warp each
        assert mine["modelled"] and mine["divergent_visits"] == entry["ncu_divergent"]
        assert mine["efficiency"] == pytest.approx(entry["ncu_pct"], abs=1.0), entry


def test_the_divergence_pair_at_the_lessons_largest_size_is_not_cut(gpu_runner):
    params = {"n": 1 << 20, "reps": 128, "block": 256}
    cap = gpu_runner.capture("branch_lanes", params, branches=True)
    s = cap.launch["branches"]
    _report({"case": "branch_lanes n=2^20 reps=128", "summary": s, "timing": cap.timing})
    assert cap.check["correct"] and s["truncated"] == 0
    assert (
        s["visits"] == cap.launch["blocks"] * 8 * (2 + 2 * (128 + 1)) and s["divergent_visits"] == s["warps"]
    )


@pytest.mark.parametrize(("kernel", "params"), [
    ("flash_attention", {}),  # the sidebar's defaults
    ("flash_attention_fast", {}),
])  # fmt: skip
def test_the_lens_on_the_attention_kernels(gpu_runner, sim_runner, kernel, params):
    """The GPU's visits are the simulator's model of the same launch, visit for visit."""
    from tests.engine.test_branches import visits

    cap = gpu_runner.capture(kernel, params, branches=True)
    model = sim_runner.capture(kernel, params, branches=True, time_clean=False)
    s = cap.launch["branches"]
    t = cap.timing
    _report({
        "case": kernel, "params": cap.launch["params"], "summary": s, "sim_summary": model.launch["branches"],
        "instrumented_ms": t.get("instrumented_ms"), "clean_ms": t.get("clean_ms"),
    })  # fmt: skip
    assert cap.check["correct"] and model.check["correct"]
    assert s["truncated"] == 0 and s["visits"] > 0
    assert visits(cap.branches) == visits(model.branches)
