"""What recording accesses on the GPU costs: ``python -m devtools.access_cost [--json FILE]``.

For each built-in launch, device time (engine/timing/gpu_timing.py: queued behind a spin, median over
repeats) of four builds of the same kernel on the same device arrays:

* ``clean``: the kernel as written (every probe a no-op);
* ``traced``: the instrumenter's probes (the trace of every thread), what every capture runs;
* ``sampled``: traced plus the access pass, the default sample recording (first, middle and last
  block, each lane's first ``LANE_RECORDS`` accesses at most; analysis/gpu_accesses.plan);
* ``every_warp``: the access pass with every block's warps recording, ``EVERY_WARP_RECORDS`` lane
  accesses in all (a lane past its share only counts its accesses).

Every launch starts its lanes' counts from 0 itself, so every repeat records as much as the first.
The recorded / unrecorded counts are the lanes' own (kernels/access_probes.py); the decoder may
leave out a few more records of a lane whose later requests lack a lane that ran out.
"""

from __future__ import annotations

import json
import sys
import time

CASES = [
    ("matmul_tiled", {"n": 4096, "tile": 16}),
    ("transpose_tiled", {"rows": 8192, "cols": 8192, "tile": 32}),
    ("flash_attention", {"seq_len": 4096}),
    ("flash_attention_fast", {"seq_len": 4096}),
]
EVERY_WARP_RECORDS = 1 << 27  # lane accesses when every warp records (1 GiB of offsets)


def _regs(kern) -> int:
    """Registers per thread of a dispatcher's compiled build (the most, if it has several)."""
    got = kern.get_regs_per_thread()
    return int(max(got.values()) if isinstance(got, dict) else got)


def measure(cases=CASES, repeats: int = 10, variants: bool = False, more_records: tuple = ()) -> list[dict]:
    """The rows above; ``variants`` adds two what-ifs: ``sampled_first_wave`` (blocks 0, 1, 2, all in the
    launch's first wave, so none starts last) and ``sampled_capped`` (the default sample with the
    recording build held to the traced build's registers per thread, ``max_registers``). ``more_records``:
    more runs of the default sample, ``sampled_<n>`` with buffers for n lane accesses in all (what a
    recorded access costs, against what a counted one does)."""
    from visualizer.engine.run.worker import configure_backend

    configure_backend("gpu")
    import numpy as np
    from numba import cuda

    from visualizer.analysis import gpu_accesses
    from visualizer.engine.capture import builtin
    from visualizer.engine.capture.builds import builds
    from visualizer.engine.instrument import accesses as ia
    from visualizer.engine.instrument.instrumenter import function_namespace
    from visualizer.engine.lenses.accesses import BUFFER_OF, access_pass
    from visualizer.engine.timing import gpu_timing
    from visualizer.specs import catalog

    ops = gpu_timing.NumbaOps(cuda)
    rows = []
    for kernel, params in cases:
        spec, values, launch = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        bufs = builtin.probe_buffers(spec, launch)
        fn = builtin.kernel_function(spec, values)
        plain = builds(fn, spec.active_when)
        rec = builds(fn, spec.active_when, (access_pass(builtin.builtin_view(spec, fn, {}, {})),))
        dev = {k: cuda.to_device(v) for k, v in {**inputs, **bufs}.items()}
        own = [dev[a] if a in dev else launch.scalars[a] for a in spec.args]
        config = (launch.grid, launch.block, 0, launch.dynamic_smem) if launch.dynamic_smem else (
            launch.grid, launch.block)  # fmt: skip
        nbytes, flops = spec.work(values)
        flush = gpu_timing.wants_l2_flush(nbytes, flops)
        host_in = {**inputs, **bufs}
        named = {
            n: host_in[r] for r, n in zip(spec.args, builtin._param_names(fn), strict=False) if r in host_in
        }
        arrays = ia.resolve_arrays(rec.info["accesses"], named, function_namespace(fn))

        def timed(kern, args, config=config, flush=flush):
            k = kern[config]
            m = gpu_timing.measure(ops, lambda: k(*args), repeats, flush=flush)
            return m.device_median_ms, m.queue_covered

        row = {"case": f"{kernel} " + " ".join(f"{k}={v}" for k, v in params.items()),
               "grid": list(launch.grid), "block": list(launch.block)}  # fmt: skip
        row["clean_ms"], ok_c = timed(plain.clean, own)
        row["traced_ms"], ok_t = timed(plain.traced, own + [dev["trace"], dev["active"]])
        row["clean_regs"], row["traced_regs"] = _regs(plain.clean), _regs(plain.traced)
        covered = [ok_c, ok_t]
        runs = [
            ("sampled", rec, None, gpu_accesses.DEFAULT_RECORDS),
            ("every_warp", rec, list(range(gpu_accesses.linear_blocks(launch.grid))), EVERY_WARP_RECORDS),
        ]
        if variants:
            capped = builds(fn, spec.active_when, (access_pass(builtin.builtin_view(spec, fn, {}, {})),),
                            max_registers=row["traced_regs"])  # fmt: skip
            runs += [("sampled_first_wave", rec, [0, 1, 2], gpu_accesses.DEFAULT_RECORDS),
                     ("sampled_capped", capped, None, gpu_accesses.DEFAULT_RECORDS)]  # fmt: skip
        runs += [(f"sampled_{n}", rec, None, n) for n in more_records]
        for name, build, blocks, records in runs:
            # as the app plans them (each lane's share capped, LANE_RECORDS); ``sampled_<n>``: n in all,
            # however many that makes per lane
            lane = records if name.removeprefix("sampled_").isdigit() else gpu_accesses.LANE_RECORDS
            p = gpu_accesses.plan(launch.grid, launch.block, blocks, records, lane_records=lane)
            accd = {k: cuda.to_device(v) for k, v in gpu_accesses.host_buffers(p).items()}
            args = own + [
                dev[BUFFER_OF[x]] if BUFFER_OF[x] in dev else accd[BUFFER_OF[x]] for x in rec.params
            ]
            row[f"{name}_ms"], ok = timed(build.traced, args)
            row[f"{name}_regs"] = _regs(build.traced)
            covered.append(ok)
            made = accd["_vz_acc_cnt"].copy_to_host().astype(np.int64)  # each lane's accesses in all
            row[f"{name}_warps"] = len(p["slots"])
            row[f"{name}_accesses_per_lane_cap"] = int(p["cap"])
            row[f"{name}_accesses_made"] = int(made.sum())
            row[f"{name}_accesses_recorded"] = int(np.minimum(made, p["cap"]).sum())
            row[f"{name}_accesses_unrecorded"] = int(np.maximum(made - p["cap"], 0).sum())
            if name == "sampled":  # the tables at this size: rebuilt from the lanes' streams, on the host
                host = {k: v.copy_to_host() for k, v in accd.items()}
                t0 = time.perf_counter()
                decoded = gpu_accesses.decode(host, p, rec.info["accesses"]["sites"], arrays, launch.grid,
                                              launch.block)  # fmt: skip
                row["sampled_decode_s"] = round(time.perf_counter() - t0, 3)
                row["sampled_decoded"] = {
                    k: decoded["sample"][k]
                    for k in ("unrecorded_accesses", "overflowed_warps", "inconsistent_warps")
                }
                row["sampled_decoded"]["records"] = len(decoded["records"])
                row["sampled_decoded"]["inconsistent"] = decoded["sample"]["inconsistent"][:2]
            del accd
            cuda.current_context().deallocations.clear()
        row["queue_covered"] = all(covered)
        for name in ("traced", *[r[0] for r in runs]):
            row[f"{name}_ratio"] = round(row[f"{name}_ms"] / row["clean_ms"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
        dev.clear()
        cuda.current_context().deallocations.clear()
    return rows


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m devtools.access_cost")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--variants", action="store_true", help="also: first-wave blocks; registers held down")
    p.add_argument("--only", action="append", help="this kernel's case only (again for more)")
    p.add_argument(
        "--records",
        type=int,
        action="append",
        default=[],
        help="also the default sample with buffers for this many lane accesses (again for more)",
    )
    args = p.parse_args(argv)
    cases = [c for c in CASES if not args.only or c[0] in args.only]
    if not cases:
        print(
            f"access_cost: no case named {args.only}; the cases: {', '.join(c[0] for c in CASES)}",
            file=sys.stderr,
        )
        return 2
    rows = measure(
        cases, repeats=max(1, args.repeats), variants=args.variants, more_records=tuple(args.records)
    )
    if args.json:
        from visualizer.tools.atomic import write_text

        write_text(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
