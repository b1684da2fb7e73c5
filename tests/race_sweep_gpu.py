"""GPU experiment, not a test (issue 25): the races of tests/race_cases.py under many designs of the
seeded delays (engine/instrument/delays.py), 8 runs each, in one process, so that one call to the
GPU compares them. docs/benchmarks.md ("Races run again and again") has what the H200 showed.

    NUMBA_ENABLE_CUDASIM=0 PYTHONPATH=. python tests/race_sweep_gpu.py OUT.json

Variants: the instrumented build without delay code; the delay build with an all-zero table (what
the probe itself costs the schedule); last session's table (a quarter of the slots, 1-20,000 ns)
with one wait per thread and per warp; today's tables (delay_table) per warp and per thread; per
warp with the share and longest wait fixed; per warp before one kind of site only."""

import importlib.metadata
import json
import sys
import time

import numpy as np

sys.path.insert(0, "tests")
from numba import cuda  # noqa: E402
from race_cases import source  # noqa: E402

from visualizer.engine.capture.source import kernel_pair, load_module  # noqa: E402
from visualizer.engine.instrument import delays as D  # noqa: E402
from visualizer.kernels.probes import globaltimer, linear_ids  # noqa: E402


@cuda.jit(device=True)
def race_delay_thread(delays, site):  # the old granularity: every thread its own wait
    block, thread, tpb = linear_ids()
    ns = delays[site, ((block * tpb + thread) * 104729) % delays.shape[1]]
    if ns > 0:
        t0 = globaltimer()
        while globaltimer() - t0 < ns:
            pass


rng = np.random.default_rng(0)
A, B = rng.random((64, 64), dtype=np.float32), rng.random((64, 64), dtype=np.float32)
CASES = {
    "reverse": ((64,), (128,), lambda: {"a": np.arange(8192, dtype=np.float32), "out": np.zeros(8192, np.float32)},
                lambda v: {"out": v["a"].reshape(64, 128)[:, ::-1].reshape(-1)}),
    "histogram": ((256,), (256,), lambda: {"x": np.arange(65536, dtype=np.int32), "bins": np.zeros(16, np.int32)},
                  lambda v: {"bins": np.bincount(v["x"] % 16, minlength=16).astype(np.int32)}),
    "histogram_small": ((2,), (128,), lambda: {"x": np.arange(256, dtype=np.int32), "bins": np.zeros(4, np.int32)},
                        lambda v: {"bins": np.bincount(v["x"] % 4, minlength=4).astype(np.int32)}),
    "matmul": ((8, 8), (8, 8), lambda: {"A": A.copy(), "B": B.copy(), "C": np.zeros((64, 64), np.float32)},
               lambda v: {"C": v["A"] @ v["B"]}),
}  # fmt: skip


def fixed_table(seed, run, sites, p, max_ns, kinds=None):
    r = np.random.default_rng([seed, run, 99])
    n = max(1, len(sites))
    on = np.array([kinds is None or bool(set(w.split("+")) & set(kinds)) for _, w in sites] or [False])
    wait = r.random((n, D.DELAY_SLOTS)) < p
    ns = np.exp(r.uniform(np.log(D.DELAY_MIN_NS), np.log(max_ns), (n, D.DELAY_SLOTS)))
    return np.where(wait & on[:, None], np.rint(ns), 0).astype(np.uint32)


def old_table(seed, run, sites):  # last session's: a quarter of the slots 1-20,000 ns, uniform
    r = np.random.default_rng([seed, run])
    n = max(1, len(sites))
    wait = r.random((n, D.DELAY_SLOTS)) < 0.25
    return np.where(wait, r.integers(1, 20_001, (n, D.DELAY_SLOTS)), 0).astype(np.uint32)


def build(name, racy, delays, fn=None):
    src = source(name.replace("_small", ""), racy)
    kname = name.replace("_small", "")
    module = load_module(src, f"{kname}.py", kname, (D.DelayPass(),) if delays else ())
    if fn is not None:
        module.__dict__[D.DELAY_FN] = fn
    traced, _ = kernel_pair(cuda, module, kname)
    return traced, module.__dict__["_vz_info"]["delays"]["sites"]


def runs(name, traced, tables, n=8):
    grid, block, make, ref = CASES[name]
    host = make()
    expect = ref(host)
    out_name = next(iter(expect))
    dev = {k: cuda.to_device(v) for k, v in host.items()}
    threads = int(np.prod(grid)) * int(np.prod(block))
    trace = cuda.to_device(np.zeros((3, threads), np.int64))
    active = cuda.to_device(np.zeros(threads, np.uint8))
    outs, wrong, t_ms = [], 0, []
    sample = []
    for i in range(-1, n):  # -1: warm-up (compiles)
        for k, v in host.items():
            dev[k].copy_to_device(v)
        args = [dev[k] for k in host] + [trace, active]
        if tables is not None:
            args.append(cuda.to_device(tables(max(i, 0))))
        cuda.synchronize()
        t = time.perf_counter()
        traced[grid, block](*args)
        cuda.synchronize()
        if i < 0:
            continue
        t_ms.append(1e3 * (time.perf_counter() - t))
        got = dev[out_name].copy_to_host()
        outs.append(got.tobytes())
        ok = np.allclose(got, expect[out_name], rtol=1e-4, atol=1e-4)
        wrong += not ok
        if i == 0:
            sample = got.ravel()[:16].tolist()
    return {"wrong": wrong, "n": n, "distinct": len(set(outs)), "ms_median": float(np.median(t_ms)),
            "sample0": sample}  # fmt: skip


results = []


def rec(name, racy, variant, r):
    r.update(case=name, racy=racy, variant=variant)
    results.append(r)
    print(f"{name:16s} {'racy' if racy else 'fixed':5s} {variant:34s} wrong {r['wrong']}/{r['n']} "
          f"distinct {r['distinct']} {r['ms_median']:.3f} ms", flush=True)  # fmt: skip


t_start = time.time()
for name in CASES:
    for racy in (True, False):
        plain, _ = build(name, racy, False)
        rec(name, racy, "plain (no delay code)", runs(name, plain, None))
        warp, sites = build(name, racy, True)
        thread, _ = build(name, racy, True, race_delay_thread)
        print("   sites", sites)
        rec(name, racy, "zero table", runs(name, warp, lambda i, s=sites: fixed_table(1, i, s, 0.0, 64)))
        rec(name, racy, "old table, per thread", runs(name, thread, lambda i, s=sites: old_table(1, i, s)))
        rec(name, racy, "old table, per warp", runs(name, warp, lambda i, s=sites: old_table(1, i, s)))
        for seed in (1, 2, 3):
            rec(
                name,
                racy,
                f"NEW per warp seed {seed}",
                runs(name, warp, lambda i, s=sites, q=seed: D.delay_table(q, i, s)[0]),
            )
        rec(
            name,
            racy,
            "NEW per thread seed 1",
            runs(name, thread, lambda i, s=sites: D.delay_table(1, i, s)[0]),
        )
        if not racy:
            continue
        for p in (0.25, 0.5, 0.75):
            for mx in (1000, 4000, 16000):
                rec(
                    name,
                    racy,
                    f"warp p{p} max{mx}",
                    runs(name, warp, lambda i, s=sites, p=p, m=mx: fixed_table(1, i, s, p, m)),
                )
        for kinds in (["load"], ["store"], ["barrier"], ["atomic"]):
            if any(k in w for _, w in sites for k in kinds):
                rec(
                    name,
                    racy,
                    f"warp p0.5 max4000 only {kinds[0]}",
                    runs(name, warp, lambda i, s=sites, k=kinds: fixed_table(1, i, s, 0.5, 4000, k)),
                )
print(f"total {time.time() - t_start:.1f} s")
meta = {
    "device": str(cuda.get_current_device().name),
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "numba_cuda": importlib.metadata.version("numba-cuda"),
    "numpy": np.__version__,
}
with open(sys.argv[1], "w") as f:
    json.dump({**meta, "results": results}, f, indent=1)
