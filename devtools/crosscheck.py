"""Cross-check the access engine against Nsight Compute and compute-sanitizer on a real GPU.

Three steps (``python -m devtools.crosscheck ...`` from a checkout):

* ``gpu --out DIR`` (on the GPU machine): launches the CLEAN build (no probe traffic) of each case
  once, under ``ncu`` for the L1TEX sector/request/bank-conflict counters, then runs
  ``compute-sanitizer --tool racecheck`` on the race demo and on correct kernels. Writes
  ``DIR/cases.json``, ``DIR/ncu.csv``, ``DIR/racecheck.json`` (+ the raw logs).
  It also profiles the FRESH kernels (kernels/access_cases.py: 8- and 16-byte shared accesses,
  divergence, atomics) and records them with the access pass on the GPU (``record``: every block,
  ``DIR/recorded_gpu.json``).
* ``compare DIR`` (anywhere): captures the same launches on the simulator with access recording
  and prints one table: Nsight Compute's counter, the engine's total, equal or not (for the fresh
  kernels also the GPU recording's: ncu / simulator / GPU).
* ``record --out DIR [--engine gpu|sim]``: the fresh kernels recorded by the access pass.
* ``launch`` (internal): the GPU launches themselves, the process ncu and the sanitizer watch.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from visualizer.specs.launch import quoted
from visualizer.tools.atomic import write_text  # every file replaced whole, never half-written

CASES: list[tuple[str, dict]] = [
    ("vector_add", {"n": 4096, "block": 128}),
    ("vector_add_x4", {"n": 4096, "block": 128}),
    ("matmul_naive", {"n": 48, "tile": 16}),
    ("matmul_tiled", {"n": 48, "tile": 16}),
    ("reduction", {"n": 1024, "block": 128}),
    ("reduction_race", {"n": 1024, "block": 128}),
    ("transpose_naive", {"rows": 64, "cols": 64, "tile": 32}),
    ("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32}),
    ("transpose_padded", {"rows": 64, "cols": 64, "tile": 32}),
    ("transpose_tiled", {"rows": 32, "cols": 32, "tile": 32}),  # the one-block reference: 992
    ("strided_copy", {"n": 1024, "stride": 1, "block": 128}),
    ("strided_copy", {"n": 1024, "stride": 8, "block": 128}),
    ("strided_copy", {"n": 1024, "stride": 32, "block": 128}),
]
RACECHECK = ["reduction_race", "reduction", "matmul_tiled", "transpose_tiled", "transpose_padded"]
# kernels written for the check (kernels/access_cases.py; devtools/crosscheck_fresh.py runs them): profiled
# after CASES, and recorded by the access pass on the GPU (every block) and on the simulator
FRESH = ["f64_rows", "f64_stride2", "f64_uneven", "c128_rows", "c128_add", "f32_column", "tree_sum", "tree_sum_race",
         "histogram", "view_rows", "matmul_tiled"]  # fmt: skip

# (Nsight Compute metric, the engine's summary key)
METRICS = [
    ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "global_ld_requests"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "global_ld_sectors"),
    ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "global_st_requests"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "global_st_sectors"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "shared_ld_bank_conflicts"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "shared_st_bank_conflicts"),
    ("smsp__sass_inst_executed_op_shared_ld.sum", "shared_ld_requests"),
    ("smsp__sass_inst_executed_op_shared_st.sum", "shared_st_requests"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared_ld_wavefronts"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "shared_st_wavefronts"),
]
NCU = "/usr/local/cuda/bin/ncu"
SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
ROOT = Path(__file__).resolve().parents[1]


def case_label(kernel: str, params: dict) -> str:
    return kernel + (" " + " ".join(f"{k}={v}" for k, v in params.items()) if params else "")


# --- on the GPU ------------------------------------------------------------------------------


def launch(indices: list[int]) -> int:
    """Launch the clean build of each case once (the process ncu / the sanitizer profiles); indices
    past CASES are the FRESH kernels."""
    import numpy as np

    from visualizer.engine.capture.backend import Backend
    from visualizer.engine.capture.builtin import build_kernels, launch_args, probe_buffers
    from visualizer.engine.run.worker import configure_backend
    from visualizer.specs import catalog

    configure_backend("gpu")
    backend = Backend("gpu")
    cuda = backend.cuda
    for i in indices:
        if i >= len(CASES):
            from devtools import crosscheck_fresh

            name = FRESH[i - len(CASES)]
            ok = crosscheck_fresh.clean_launch(name)
            print(json.dumps({"case": i, "label": name, "matches_numpy": bool(ok)}), flush=True)
            continue
        kernel, params = CASES[i]
        spec, values, plan = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        host = {**inputs, **probe_buffers(spec, plan)}
        device = {k: cuda.to_device(v) for k, v in host.items()}
        args = launch_args(spec, plan, device)[1]
        clean = build_kernels(spec, values).clean
        clean[plan.grid, plan.block](*args)
        cuda.synchronize()
        outputs = {k: device[k].copy_to_host() for k in spec.outputs}
        want = spec.reference(inputs, values)
        ok = all(np.allclose(outputs[k], want[k], rtol=spec.rtol, atol=1e-3) for k in want)
        print(
            json.dumps({"case": i, "label": case_label(kernel, params), "matches_numpy": bool(ok)}),
            flush=True,
        )
    return 0


def _self(*args: str) -> list[str]:
    return [sys.executable, "-m", "devtools.crosscheck", *args]


def gpu_problem() -> str | None:
    """Why the gpu step cannot run here (no GPU, no Nsight Compute, no compute-sanitizer), or None."""
    from visualizer.engine.run.runner import gpu_present

    if not gpu_present():
        return "crosscheck gpu needs an NVIDIA GPU, and this machine has none (run it on a GPU machine)"
    for tool in (NCU, SANITIZER):
        if not Path(tool).is_file():
            return f"crosscheck gpu needs {Path(tool).name}, not found at {tool}"
    return None


def gpu(out_dir: str) -> int:
    problem = gpu_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: --out {quoted(out_dir)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    metrics = ",".join(m for m, _ in METRICS)
    cmd = [NCU, "--csv", "--metrics", metrics, "--log-file", str(out / "ncu.csv"), *_self("launch")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=500)
    write_text(out / "launch.log", res.stdout + res.stderr)
    cases = [{"kernel": k, "params": p, "label": case_label(k, p)} for k, p in CASES]
    cases += [{"kernel": k, "params": {}, "label": k, "fresh": True} for k in FRESH]
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            cases[rec["case"]]["matches_numpy"] = rec["matches_numpy"]
    write_text(out / "cases.json", json.dumps(cases, indent=1))
    # the access pass's recording of the fresh kernels on the GPU (every block; no ncu around it)
    rec = subprocess.run(_self("record", "--out", str(out)), capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=500)  # fmt: skip
    write_text(out / "record.log", rec.stdout + rec.stderr)
    races, logs = [], []
    for kernel in RACECHECK:
        idx = next(i for i, (k, _) in enumerate(CASES) if k == kernel)
        cmd = [SANITIZER, "--tool", "racecheck", "--racecheck-report", "all", *_self("launch", str(idx))]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        text = r.stdout + r.stderr
        summary = [ln.strip("= ").strip() for ln in text.splitlines() if "RACECHECK SUMMARY" in ln]
        hazards = re.findall(r"(\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
        races.append(
            {
                "kernel": kernel,
                "label": CASES[idx][1] and case_label(*CASES[idx]),
                "summary": summary,
                "hazards": int(hazards[0][0]) if hazards else 0,
                "errors": int(hazards[0][1]) if hazards else 0,
                "warnings": int(hazards[0][2]) if hazards else 0,
                "returncode": r.returncode,
                "sample": [ln for ln in text.splitlines() if "Race reported" in ln or "hazard" in ln.lower()][
                    :6
                ],
            }
        )
        logs.append(f"##### {kernel}\n{text[-20000:]}")
    write_text(out / "racecheck.json", json.dumps(races, indent=1))
    write_text(out / "racecheck.txt", "\n".join(logs))
    print(f"wrote {out}/cases.json, ncu.csv, racecheck.json (ncu exit {res.returncode})")
    return 0 if res.returncode == 0 else 1


# --- anywhere: compare with the engine -------------------------------------------------------


def read_ncu(path: str | Path) -> dict[int, dict[str, float]]:
    """Profiled kernels in launch order -> {metric: value} from ncu's --csv log."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    kernels: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(lines[start:]):
        value = row.get("Metric Value", "").replace(",", "")
        try:
            kernels.setdefault(int(row["ID"]), {})[row["Metric Name"]] = float(value)
        except ValueError:
            continue
    return dict(enumerate(kernels[k] for k in sorted(kernels)))


def record(out_dir: str, engine: str = "gpu") -> int:
    """The FRESH kernels recorded by the access pass (every block) -> OUT/recorded_<engine>.json; on
    the simulator also the simulator recorder's tables of the same launches (simulator.json)."""
    from devtools import crosscheck_fresh

    results = crosscheck_fresh.run(engine, blocks="all", names=FRESH)
    out = Path(out_dir)
    write_text(out / f"recorded_{engine}.json", json.dumps(crosscheck_fresh.summaries(results), indent=1))
    if engine == "sim":
        write_text(
            out / "simulator.json", json.dumps(crosscheck_fresh.summaries(results, "simulator"), indent=1)
        )
    print(f"recorded {len(results)} kernels on {engine}: " + ", ".join(
        f"{k} {'ok' if r['correct'] else 'WRONG'}" for k, r in results.items()))  # fmt: skip
    ok = all(r["correct"] for r in results.values())
    if engine == "gpu":
        ok = record_catalog(out) and ok
    return 0 if ok else 1


def record_catalog(out: Path, backend: str = "gpu") -> bool:
    """The catalog CASES captured on the GPU with accesses (the access pass through the capture path,
    every block sampled) -> OUT/recorded_catalog_<backend>.json, by case label (``backend="sim"``: the
    same pass on the simulator, a check of this step without a GPU)."""
    from visualizer.engine.run.runner import Runner
    from visualizer.specs import catalog

    got = {}
    with Runner(backend) as runner:
        for kernel, params in CASES:
            label = case_label(kernel, params)
            try:
                blocks = list(range(catalog.plan_launch(kernel, params, "gpu")[2].blocks))
                cap = runner.capture(kernel, params, repeats=1, accesses=True, sample_blocks=blocks,
                                     time_clean=False, access_engine="pass", torch=False)  # fmt: skip
            except Exception as exc:  # one case's failure is reported, the others still run
                got[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            summ = {k: v for k, v in cap.launch["accesses"].items() if k != "per_line"}
            got[label] = {**summ, "correct": bool(cap.check.get("correct"))}
    write_text(out / f"recorded_catalog_{backend}.json", json.dumps(got, indent=1))
    bad = [k for k, v in got.items() if "error" in v]
    print(
        f"recorded {len(got)} catalog launches on {backend}" + (f"; failed: {', '.join(bad)}" if bad else "")
    )
    return not bad


def _fresh_engine(profile_dir: Path) -> tuple[dict, dict, dict]:
    """(simulator recorder, the access pass on the simulator, the access pass on the GPU) summaries."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
        r = subprocess.run(_self("record", "--out", tmp, "--engine", "sim"), capture_output=True, text=True,
                           env=env, cwd=ROOT, timeout=900)  # fmt: skip
        if r.returncode not in (0, 1):
            raise RuntimeError(f"recording the fresh kernels on the simulator failed: {r.stderr[-500:]}")
        sim = json.loads((Path(tmp) / "simulator.json").read_text())
        sim_pass = json.loads((Path(tmp) / "recorded_sim.json").read_text())
    gpu_path = profile_dir / "recorded_gpu.json"
    gpu = json.loads(gpu_path.read_text()) if gpu_path.exists() else {}
    return sim, sim_pass, gpu


def compare(profile_dir: str) -> list[dict]:
    """One row per (case, metric): ncu's count and the engine's, from the same launch. For the FRESH
    kernels also the access pass's recording, on the simulator (``pass_sim``) and on the GPU
    (``pass_gpu``), every block of the launch."""
    from visualizer.engine.run.runner import Runner

    ncu = read_ncu(Path(profile_dir) / "ncu.csv")
    catalog_path = Path(profile_dir) / "recorded_catalog_gpu.json"
    on_gpu = json.loads(catalog_path.read_text()) if catalog_path.exists() else {}
    rows = []
    with Runner("sim") as runner:
        for i, (kernel, params) in enumerate(CASES):
            cap = runner.capture(kernel, params, accesses=True, time_clean=False)
            summ = cap.launch["accesses"]
            for metric, key in METRICS:
                measured = ncu.get(i, {}).get(metric)
                rows.append(
                    {
                        "case": case_label(kernel, params),
                        "metric": metric,
                        "ncu": None if measured is None else int(measured),
                        "engine": int(summ[key]),
                        "equal": measured is not None and int(measured) == int(summ[key]),
                        "hazards": summ["hazards"],
                    }
                )
                pg = on_gpu.get(case_label(kernel, params), {}).get(key)
                if pg is not None:  # the access pass's recording of the same launch on the GPU
                    rows[-1].update(pass_gpu=pg, pass_equal=measured is not None and int(measured) == int(pg))
    sim, sim_pass, gpu = _fresh_engine(Path(profile_dir))
    for j, kernel in enumerate(FRESH):
        i = len(CASES) + j
        for metric, key in METRICS:
            measured = ncu.get(i, {}).get(metric)
            eng = sim.get(kernel, {}).get(key)
            ps, pg = sim_pass.get(kernel, {}).get(key), gpu.get(kernel, {}).get(key)
            rows.append(
                {
                    "case": kernel,
                    "metric": metric,
                    "ncu": None if measured is None else int(measured),
                    "engine": eng,
                    "pass_sim": ps,
                    "pass_gpu": pg,
                    "equal": measured is not None and eng is not None and int(measured) == int(eng),
                    "pass_equal": measured is not None and pg is not None and int(measured) == int(pg),
                    "hazards": sim.get(kernel, {}).get("hazards", {}),
                    "fresh": True,
                }
            )
    return rows


def markdown(rows: list[dict], races: list[dict]) -> str:
    short = {m: m.replace("l1tex__", "").replace("_pipe_lsu_mem", "").replace(".sum", "") for m, _ in METRICS}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    three = any("pass_gpu" in r for r in rows)  # with the access pass's GPU recording beside them
    cells = "ncu / simulator / GPU recording" if three else "ncu / engine"
    head = "| launch | " + " | ".join(f"`{short[m]}` {cells}" for m, _ in METRICS) + " |"
    out = [head, "|" + "---|" * (len(METRICS) + 1)]
    for case in cases:
        cells = []
        for m, _ in METRICS:
            r = next(x for x in rows if x["case"] == case and x["metric"] == m)
            mark = "" if r["equal"] and r.get("pass_equal", True) else " **≠**"
            if "pass_gpu" in r:  # ncu / simulator recorder / the access pass on the GPU
                cells.append(f"{r['ncu']} / {r['engine']} / {r['pass_gpu']}{mark}")
            else:
                cells.append(f"{r['ncu']} / {r['engine']}{mark}")
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    if races:
        out += [
            "",
            "| kernel | racecheck hazards (errors, warnings) | engine hazards RAW/WAR/WAW | UNINIT |",
            "|---|---|---|---|",
        ]
        for race in races:
            eng = next((r["hazards"] for r in rows if r["case"].startswith(race["kernel"] + " ")), {})
            out.append(
                f"| {race['kernel']} | {race['hazards']} ({race['errors']}, {race['warnings']}) | "
                f"{eng.get('RAW', 0)}/{eng.get('WAR', 0)}/{eng.get('WAW', 0)} | {eng.get('UNINIT', 0)} |"
            )
    return "\n".join(out)


COST_CASES = [
    ("vector_add", {"n": 4096, "block": 256}),
    ("matmul_tiled", {"n": 64, "tile": 16}),
    ("reduction", {"n": 4096, "block": 256}),
    ("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32}),
]


def cost(repeats: int = 3) -> list[dict]:
    """Simulator time of the instrumented launch without and with access recording, in one run."""
    import platform
    import statistics
    import time

    from visualizer.engine.run.runner import Runner

    rows = []
    with Runner("sim") as runner:
        for kernel, params in COST_CASES:
            runner.capture(kernel, params, time_clean=False)  # warm the worker
            plain, recorded, tables_s, n = [], [], [], 0
            for _ in range(repeats):
                cap = runner.capture(kernel, params, time_clean=False)
                plain.append(cap.timing["instrumented_ms"])
                t = time.perf_counter()
                cap = runner.capture(kernel, params, time_clean=False, accesses=True)
                tables_s.append(time.perf_counter() - t)
                recorded.append(cap.timing["instrumented_ms"])
                n = cap.launch["accesses"]["accesses"]
            p, r = statistics.median(plain), statistics.median(recorded)
            rows.append(
                {
                    "case": case_label(kernel, params),
                    "accesses": n,
                    "launch_ms": round(p, 1),
                    "launch_recording_ms": round(r, 1),
                    "ratio": round(r / p, 2),
                    "us_per_access": round((r - p) * 1e3 / max(n, 1), 2),
                    "capture_with_tables_s": round(statistics.median(tables_s), 2),
                }
            )
    meta = (
        f"{platform.node()} {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    for r in rows:
        r["machine"] = meta
    return rows


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m devtools.crosscheck")
    sub = p.add_subparsers(dest="step", required=True)
    g = sub.add_parser("gpu", help="on a GPU machine: ncu + compute-sanitizer racecheck")
    g.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="the engine's totals beside a gpu step's results")
    c.add_argument("dir")
    c.add_argument("--json", help="also write the rows here")
    sub.add_parser("cost", help="simulator time with and without access recording (one run)")
    rp = sub.add_parser("record", help="the fresh kernels recorded by the access pass (every block)")
    rp.add_argument("--out", required=True)
    rp.add_argument("--engine", choices=("gpu", "sim"), default="gpu")
    lp = sub.add_parser("launch", help=argparse.SUPPRESS)
    lp.add_argument("cases", nargs="*", type=int)
    args = p.parse_args(argv)
    if args.step == "launch":
        return launch(args.cases or list(range(len(CASES) + len(FRESH))))
    if args.step == "gpu":
        return gpu(args.out)
    if args.step == "record":
        try:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"error: --out {quoted(args.out)}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return record(args.out, args.engine)
    if args.step == "cost":
        rows = cost()
        print(
            "| launch | accesses | launch ms | with recording ms | ratio | µs per access | capture + tables s |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['case']} | {r['accesses']} | {r['launch_ms']} | {r['launch_recording_ms']} | "
                f"{r['ratio']} | {r['us_per_access']} | {r['capture_with_tables_s']} |"
            )
        print(f"\n{rows[0]['machine']}")
        return 0
    if not (Path(args.dir) / "ncu.csv").is_file():
        print(
            f"error: {quoted(args.dir)} has no ncu.csv: give the --out directory of a `crosscheck gpu` run",
            file=sys.stderr,
        )
        return 2
    rows = compare(args.dir)
    races_path = Path(args.dir) / "racecheck.json"
    races = json.loads(races_path.read_text()) if races_path.exists() else []
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "racecheck": races}, indent=1))
    print(markdown(rows, races))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
