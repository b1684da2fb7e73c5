"""Simulator engines compared: the compiled engine (visualizer/engine/compiled) against fastsim, CPU time
per launch, each engine in a fresh process of its own, the pairs in one run (docs/benchmarks.md).

    python -m devtools.sim_bench [--workloads a,b] [--repeats N] [--json OUT]
    python -m devtools.sim_bench --one WORKLOAD --engine compiled|fastsim   (one child run)

Ratios, not absolute claims: the machine and its load are printed with them. No workload is asserted
to take any time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from devtools import child_env
from visualizer.engine.compiled.bench import WORKLOADS, run

FASTSIM_SKIP = {"matmul_tiled_1024"}  # 1,048,576 threads on fastsim: minutes; the compiled engine alone


def _child(workload: str, engine: str, repeats: int, ids: bool = False, cache: str = "off") -> dict:
    env = child_env({**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
                     "VISUALIZER_COMPILED_CACHE": cache})  # fmt: skip
    cmd = [sys.executable, "-m", "devtools.sim_bench", "--one", workload, "--engine", engine,
           "--repeats", str(repeats)] + (["--ids"] if ids else [])  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        return {
            "workload": workload,
            "engine": engine,
            "failed": (p.stderr.strip().splitlines() or ["?"])[-1][:200],
        }
    return json.loads(lines[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", default=None)
    ap.add_argument("--ids", action="store_true", help="(with --one) the instrumented build, ids recorded")
    ap.add_argument("--with-ids", action="store_true", help="also time the instrumented builds")
    ap.add_argument("--engine", default="compiled", choices=("compiled", "fastsim"))
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.repeats > 50:
        print("--repeats must be 1 to 50", file=sys.stderr)
        return 2
    if a.one:
        if a.one not in WORKLOADS:
            print(f"unknown workload {a.one[:40]!r} (known: {', '.join(WORKLOADS)})", file=sys.stderr)
            return 2
        print(json.dumps(run(a.one, a.engine, a.repeats, ids=a.ids)))
        return 0
    names = [w for w in a.workloads.split(",") if w]
    bad = [w for w in names if w not in WORKLOADS]
    if bad:
        print(f"unknown workload {bad[0][:40]!r} (known: {', '.join(WORKLOADS)})", file=sys.stderr)
        return 2
    rows = []
    print(
        "| workload | fastsim CPU s | compiled CPU s (launch) | ratio | compile CPU s (cold / from disk) "
        "| blocks | max error |"
    )
    print("|---|---|---|---|---|---|---|")
    cache_root = tempfile.mkdtemp(prefix="sim-bench-cache-")  # cold: a fresh disk cache per workload
    jobs = [(w, False) for w in names] + (
        [(w, True) for w in names if w not in FASTSIM_SKIP] if a.with_ids else []
    )
    for i, (w, ids) in enumerate(jobs):
        cache = os.path.join(cache_root, str(i))
        comp = _child(w, "compiled", a.repeats, ids, cache)
        warm = _child(w, "compiled", 1, ids, cache)  # a second process: the kernel from the disk cache
        fast = _child(w, "fastsim", 1, ids) if w not in FASTSIM_SKIP else None
        rows.append({"compiled": comp, "fastsim": fast, "compiled_from_disk": warm})
        w = f"{w} (ids recorded)" if ids else w
        if "failed" in comp:
            print(f"| {w} | | failed: {comp['failed']} | | | | |")
            continue
        f_s = fast["run_s"] if fast and "run_s" in fast else None
        ratio = f"{f_s / comp['run_s']:,.0f}x" if f_s and comp["run_s"] > 0 else "-"
        print(f"| {w} | {f_s if f_s is None else f'{f_s:.2f}'} | {comp['run_s']:.4f} | {ratio} | "
              f"{comp['compile_s']:.2f} / {warm.get('compile_s', float('nan')):.2f} | {comp['blocks']} | "
              f"{comp['error']:.1e} |")  # fmt: skip
    shutil.rmtree(cache_root, ignore_errors=True)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
