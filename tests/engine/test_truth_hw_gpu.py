"""Issue 39's hardware items on a GPU against Nsight Compute (``-m gpu``; ncu with ``--clock-control none``).

* 16-byte global accesses: ``c128_add`` (kernels/access_cases.py, 2 blocks of 128 threads, complex128
  a + b) under ncu, its global load/store requests and sectors against the access pass's recording on
  the GPU (every block) and against the numbers derived in tests/engine/test_gpu_accesses.py (the simulator's
  recorder and the pass give them there): 32 load requests, 512 sectors; 16 store requests, 256 sectors.
* Branch efficiency as ncu counts it, on the lane-dependent loop and the unrolled loops: in
  tests/analysis/test_branches_sass_gpu.py (``lane_loop``, ``branch_lanes``, ``branch_warps``).

``python tests/engine/test_truth_hw_gpu.py record OUT.json`` (internal): the pass's recording of c128_add on
the GPU, its memory summary as JSON (a process of its own: the engine is chosen before numba loads).
``TRUTH_HW_REPORT=FILE`` writes what the test saw to FILE (JSON lines).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
ROOT = HERE.parent
NCU = "/usr/local/cuda/bin/ncu"
GLOBAL_METRICS = 4  # crosscheck.METRICS' first four: global load/store requests and sectors


def _report(entry: dict) -> None:
    path = os.environ.get("TRUTH_HW_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")


def _record(out: str) -> int:
    from devtools import crosscheck_fresh

    res = crosscheck_fresh.run("gpu", blocks="all", names=["c128_add"])
    Path(out).write_text(json.dumps(crosscheck_fresh.summaries(res)["c128_add"]))
    return 0


@pytest.mark.gpu
def test_16_byte_global_requests_and_sectors_equal_ncu(tmp_path):
    if not os.path.exists(NCU):
        pytest.skip("no Nsight Compute here")
    from devtools import crosscheck

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    metrics = crosscheck.METRICS[:GLOBAL_METRICS]
    index = len(crosscheck.CASES) + crosscheck.FRESH.index("c128_add")
    log = tmp_path / "ncu.csv"
    cmd = [NCU, "--clock-control", "none", "--csv", "--metrics", ",".join(m for m, _ in metrics),
           "--log-file", str(log), sys.executable, "-m", "devtools.crosscheck", "launch", str(index)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"matches_numpy": true' in done.stdout, done.stdout[-2000:]
    ncu = crosscheck.read_ncu(log)[0]
    out = tmp_path / "recorded.json"
    rec = subprocess.run([sys.executable, __file__, "record", str(out)], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert rec.returncode == 0, rec.stderr[-2000:]
    summ = json.loads(out.read_text())
    got = {key: summ[key] for _, key in metrics}
    want = {key: ncu[metric] for metric, key in metrics}
    _report({"case": "c128_add 2x128", "ncu": want, "gpu_recording": got, "correct": summ["correct"]})
    assert summ["correct"]
    assert got == want
    assert want == {"global_ld_requests": 32, "global_ld_sectors": 512, "global_st_requests": 16,
                    "global_st_sectors": 256}  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1] == "record":
        sys.path.insert(0, str(ROOT))
        sys.exit(_record(sys.argv[2]))
