"""What recording accesses on the GPU costs: ``python -m visualizer.tools.access_cost [--json FILE]``.

For each built-in launch, device time (engine/gpu_timing.py: queued behind a spin, median over
repeats) of four builds of the same kernel on the same device arrays:

* ``clean``: the kernel as written (every probe a no-op);
* ``traced``: the instrumenter's probes (the trace of every thread), what every capture runs;
* ``sampled``: traced plus the access pass, the default sample recording (first, middle and last
  block; analysis/gpu_accesses.plan);
* ``every_warp``: the access pass with every block's warps recording, ``EVERY_WARP_RECORDS`` lane
  accesses in all (a lane past its share counts its accesses and writes nothing more).

Every launch starts its lanes' counts from 0 itself, so every repeat records as much as the first.
The recorded / unrecorded counts are the lanes' own (kernels/access_probes.py); the decoder may
leave out a few more records of a lane whose later requests lack a lane that ran out.
"""

from __future__ import annotations

import json
import sys

CASES = [
    ("matmul_tiled", {"n": 4096, "tile": 16}),
    ("transpose_tiled", {"rows": 8192, "cols": 8192, "tile": 32}),
    ("flash_attention", {"seq_len": 4096}),
]
EVERY_WARP_RECORDS = 1 << 27  # lane accesses when every warp records (1 GiB of offsets)


def measure(cases=CASES, repeats: int = 10) -> list[dict]:
    from visualizer.engine.worker import configure_backend

    configure_backend("gpu")
    import numpy as np
    from numba import cuda

    from visualizer.analysis import gpu_accesses
    from visualizer.engine import gpu_timing, worker
    from visualizer.engine.builds import builds
    from visualizer.engine.gpu_access_job import BUFFER_OF
    from visualizer.specs import catalog

    ops = gpu_timing.NumbaOps(cuda)
    rows = []
    for kernel, params in cases:
        spec, values, launch = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        bufs = worker.probe_buffers(spec, launch)
        fn = worker.kernel_function(spec, values)
        plain = builds(fn, spec.active_when)
        rec = builds(fn, spec.active_when, (worker.builtin_access_pass(spec, fn),))
        dev = {k: cuda.to_device(v) for k, v in {**inputs, **bufs}.items()}
        own = [dev[a] if a in dev else launch.scalars[a] for a in spec.args]
        config = (launch.grid, launch.block, 0, launch.dynamic_smem) if launch.dynamic_smem else (
            launch.grid, launch.block)  # fmt: skip
        nbytes, flops = spec.work(values)
        flush = gpu_timing.wants_l2_flush(nbytes, flops)

        def timed(kern, args, config=config, flush=flush):
            k = kern[config]
            m = gpu_timing.measure(ops, lambda: k(*args), repeats, flush=flush)
            return m.device_median_ms, m.queue_covered

        row = {"case": f"{kernel} " + " ".join(f"{k}={v}" for k, v in params.items()),
               "grid": list(launch.grid), "block": list(launch.block)}  # fmt: skip
        row["clean_ms"], ok_c = timed(plain.clean, own)
        row["traced_ms"], ok_t = timed(plain.traced, own + [dev["trace"], dev["active"]])
        covered = [ok_c, ok_t]
        for name, blocks, records in (
            ("sampled", None, gpu_accesses.DEFAULT_RECORDS),
            ("every_warp", list(range(gpu_accesses.linear_blocks(launch.grid))), EVERY_WARP_RECORDS),
        ):
            p = gpu_accesses.plan(launch.grid, launch.block, blocks, records)
            accd = {k: cuda.to_device(v) for k, v in gpu_accesses.host_buffers(p).items()}
            args = own + [
                dev[BUFFER_OF[x]] if BUFFER_OF[x] in dev else accd[BUFFER_OF[x]] for x in rec.params
            ]
            row[f"{name}_ms"], ok = timed(rec.traced, args)
            covered.append(ok)
            made = accd["_vz_acc_cnt"].copy_to_host().astype(np.int64)  # each lane's accesses in all
            row[f"{name}_warps"] = len(p["slots"])
            row[f"{name}_accesses_per_lane_cap"] = int(p["cap"])
            row[f"{name}_accesses_made"] = int(made.sum())
            row[f"{name}_accesses_recorded"] = int(np.minimum(made, p["cap"]).sum())
            row[f"{name}_accesses_unrecorded"] = int(np.maximum(made - p["cap"], 0).sum())
            del accd
            cuda.current_context().deallocations.clear()
        row["queue_covered"] = all(covered)
        for name in ("traced", "sampled", "every_warp"):
            row[f"{name}_ratio"] = round(row[f"{name}_ms"] / row["clean_ms"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
        dev.clear()
        cuda.current_context().deallocations.clear()
    return rows


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m visualizer.tools.access_cost")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args(argv)
    rows = measure(repeats=max(1, args.repeats))
    if args.json:
        from visualizer.tools.atomic import write_text

        write_text(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
