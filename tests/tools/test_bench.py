"""Smoke test: the benchmark command runs on the simulator and reports every simulator/app target."""

import json
import subprocess
import sys


def test_bench_sim_quick_runs(tmp_path):
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, "-m", "visualizer", "bench", "--backend", "sim", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    results = json.loads(out.read_text())
    cases = results["sim"]["cases"]
    assert {c["kernel"] for c in cases} == {"vector_add", "matmul_tiled"}
    assert all(c["ours_s"] > 0 and c["stock_s"] > 0 and c["capture_s"] > 0 for c in cases)
    assert all(c["speedup"] == c["stock_s"] / c["fast_s"] for c in cases)  # the same launch, both engines
    by_target = {t["target"]: t for t in results["targets"]}
    for key in ("sim_speedup", "slider_to_figure_s", "big_grid_payload_mb"):
        assert by_target[key]["value"] is not None, by_target[key]
    assert "| target |" in res.stdout  # the Markdown table is printed
