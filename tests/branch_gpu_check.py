"""The SIMT lens on a GPU, by hand (not a test): what the branch probes record against Nsight Compute's
branch counters, what recording costs, and the barrier waits of the tiled matmul and the reduction.

    python tests/branch_gpu_check.py ours OUT_DIR      # instrumented runs: visits, summaries, barriers, timing
    ncu --clock-control none --metrics ... python tests/branch_gpu_check.py clean   # each clean kernel once
    ncu ... python tests/branch_gpu_check.py clean collatz classify   # those cases' clean kernels alone

``lens_rows(name)`` and ``sass_lines(name)`` give a case's visits on the GPU and its clean build's
jumps per line (tests/analysis/test_branches_sass_gpu.py sets them against ncu).

The cases are launched in the same order with the same inputs in both modes, so ncu's n-th kernel is
the n-th case.
"""

import inspect
import json
import os
import sys

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import branch_cases as bc  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.dirname(HERE)


def _example(name):
    with open(os.path.join(ROOT, "kernels", "examples", name)) as f:
        return f.read()


def _divergence_source():
    import visualizer.kernels.divergence as d

    src = inspect.getsource(d)
    return src.replace("\ndef branch_", "\n@cuda.jit\ndef branch_")


def case_list():
    rng = np.random.default_rng(7)
    n = 1 << 20
    x = rng.standard_normal(n).astype(np.float32)
    xs = rng.standard_normal(1 << 16).astype(np.float32)
    start = rng.integers(1, 1000, 1 << 16).astype(np.int64)
    cls = rng.integers(-5, 20, 1 << 16).astype(np.int32)
    m = 256
    A = rng.standard_normal((m, m)).astype(np.float32)
    B = rng.standard_normal((m, m)).astype(np.float32)
    div = _divergence_source()
    return [  # name, source, kernel, grid, block, args, barriers
        ("branch_lanes", div, "branch_lanes", n // 256, 256, (x, np.zeros_like(x), n, 64), False),
        ("branch_warps", div, "branch_warps", n // 256, 256, (x, np.zeros_like(x), n, 64), False),
        ("odd_even", bc.ODD_EVEN, "odd_even", n // 256, 256, (x, np.zeros_like(x)), False),
        ("mandel", bc.MANDEL, "mandel", (32, 64), (16, 8), (-2.0, 0.6, -1.2, 1.2, np.zeros((512, 512), np.int64), 100), False),
        ("collatz", bc.COLLATZ, "collatz", 256, 256, (start, np.zeros(1 << 16, np.int64)), False),
        ("classify", bc.CLASSIFY, "classify", 256, 256, (cls, np.zeros(1 << 16, np.int32)), False),
        ("partial_sums", bc.PARTIAL_SUMS, "partial_sums", 256, 256, (xs, np.zeros_like(xs)), False),
        ("lane_loop", bc.LANE_LOOP, "lane_loop", 2, 128, (xs[:256], np.zeros(256, np.float32)), False),
        ("reduction", _example("reduction.py"), "block_sum", n // 256, 256, (x, np.zeros(n // 256, np.float32)), True),
        ("matmul_tiled", _example("matmul_tiled.py"), "matmul_tiled", (16, 16), (16, 16), (A, B, np.zeros((m, m), np.float32)), True),
    ]  # fmt: skip


BUILTINS = [  # built-in kernels through the capture path (runner, lens on) and, for ncu, their clean build
    ("builtin_branch_lanes", "branch_lanes", {"n": 1 << 20, "reps": 64, "block": 256}),
    ("builtin_branch_warps", "branch_warps", {"n": 1 << 20, "reps": 64, "block": 256}),
    ("builtin_reduction", "reduction", {"n": 1 << 20, "block": 256}),
    ("builtin_matmul_tiled", "matmul_tiled", {"n": 512, "tile": 16}),
    ("builtin_vector_add", "vector_add", {"n": 1000003, "block": 256}),
    # the attention kernels at the sidebar's defaults: what their branch probes cost (for-const loops unprobed)
    ("builtin_flash_attention", "flash_attention", {}),
    ("builtin_flash_attention_fast", "flash_attention_fast", {}),
]


def builtin_clean():
    """Each built-in's clean build launched once on the capture's own inputs (for ncu)."""
    from numba import cuda

    from visualizer.engine.capture.builds import pair
    from visualizer.engine.capture.builtin import kernel_function, probe_buffers
    from visualizer.specs import catalog

    for name, kernel, params in BUILTINS:
        spec, values, launch = catalog.plan_launch(kernel, params, "gpu")
        inputs = spec.make_inputs(values, np.random.default_rng(0))
        named = {**inputs, **probe_buffers(spec, launch)}
        _, clean_k = pair(kernel_function(spec, values), spec.active_when)
        args = [cuda.to_device(named[a]) if a in named else launch.scalars[a] for a in spec.args]
        clean_k[launch.grid, launch.block](*args)
        cuda.synchronize()
        print("launched", name, flush=True)


def builtin_ours(out_dir):
    from visualizer.analysis import branches
    from visualizer.engine.run.runner import Runner

    report = {}
    with Runner("gpu") as runner:
        for name, kernel, params in BUILTINS:
            try:
                cap = runner.capture(kernel, params, branches=True)
                entry = {"summary": cap.launch["branches"], "correct": bool(cap.check["correct"])}
                entry["instrumented_ms"] = cap.timing.get("instrumented_ms")
                entry["clean_ms"] = cap.timing.get("clean_ms")
                if cap.barriers is not None and len(cap.barriers):
                    b = cap.barriers
                    one = b[b["block"] == 0]
                    seg = branches.barrier_segments(b, 0)
                    entry["barriers"] = {
                        "rows": int(len(b)),
                        "block0_waits_ns": one["wait_ns"].describe().round(1).to_dict(),
                        "block0_last_warps": one[one["last"]]["warp"].value_counts().head(4).to_dict(),
                        "block0_work_ns_median": float(
                            seg[seg["what"] == "work"].eval("end_ns - start_ns").median()
                        )
                        if (seg["what"] == "work").any()
                        else None,
                    }
                    b[b["block"] < 8].to_parquet(os.path.join(out_dir, f"{name}.barriers.parquet"))
            except Exception as exc:
                entry = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}
            report[name] = entry
            print(name, json.dumps(entry, default=str), flush=True)
    with open(os.path.join(out_dir, "builtin.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)


def _kernels(source, kernel, passes):
    from numba import cuda

    traced, info = bc.load(source, kernel, passes)
    import types

    mod = types.ModuleType("clean_" + kernel)
    exec(compile(source, kernel + ".py", "exec"), mod.__dict__)
    return traced, getattr(mod, kernel), info, cuda


def clean(names=None):
    """Each case's clean kernel launched once, in case_list's order or in the order of ``names``
    (ncu's n-th profiled kernel is the n-th launched)."""
    from numba import cuda

    cases = case_list()
    if names:
        cases = [next(c for c in cases if c[0] == name) for name in names]
    for name, src, kernel, grid, block, args, _ in cases:
        if os.environ.get("BRANCH_LINEINFO"):  # for ncu's per-line SourceCounters (same code, line table)
            src = src.replace("@cuda.jit\n", "@cuda.jit(lineinfo=True)\n")
        mod = {}
        exec(compile(src, name + ".py", "exec"), mod)
        dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
        mod[kernel][grid, block](*dev)
        cuda.synchronize()
        print("launched", name, flush=True)


def _case(ops, out_dir, name, src, kernel, grid, block, args, barriers):
    from numba import cuda
    from numba.cuda.cudadrv.driver import device_memset

    from visualizer.analysis import branches
    from visualizer.engine.instrument.branches import BarrierPass, BranchPass, branch_buffers
    from visualizer.engine.timing import gpu_timing

    g = grid if isinstance(grid, tuple) else (grid,)
    b = block if isinstance(block, tuple) else (block,)
    nb, tpb = int(np.prod(g)), int(np.prod(b))
    tb, clean_k, binfo, _ = _kernels(src, kernel, [BranchPass()])
    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    bb = [cuda.to_device(a) for a in branch_buffers(False, nb, tpb, records=1024).values()]
    tb[g, b](*dev, *bb)
    cuda.synchronize()
    log, cnt = (a.copy_to_host() for a in bb)
    rows = branches.rows(False, log, cnt, binfo["branches"]["sites"], tpb)
    rows.to_parquet(os.path.join(out_dir, f"{name}.branches.parquet"))
    entry = {"summary": branches.summary(rows), "max_records": int(cnt.max()), "log_rows": int(log.shape[1])}
    # every timed launch starts from zeroed counts (else the log is full after the first and the
    # stores stop); the clean launch zeroes a buffer of the same size, so both pay the same memset
    dummy = cuda.device_array_like(bb[1])

    def run_clean():
        device_memset(dummy, 0, dummy.nbytes)
        clean_k[g, b](*dev)

    def run_branches():
        device_memset(bb[1], 0, bb[1].nbytes)
        tb[g, b](*dev, *bb)

    t_clean = gpu_timing.measure(ops, run_clean, 20)
    t_br = gpu_timing.measure(ops, run_branches, 20)
    entry["clean_ms"] = t_clean.device_median_ms
    entry["branches_ms"] = t_br.device_median_ms
    entry["covered"] = [t_clean.queue_covered, t_br.queue_covered]
    if barriers:
        tbar, _, rinfo, _ = _kernels(src, kernel, [BarrierPass()])
        rb = [cuda.to_device(a) for a in branch_buffers(False, nb, tpb, barriers=True).values()]
        tbar[g, b](*dev, *rb)
        cuda.synchronize()
        blog, bcnt = (a.copy_to_host() for a in rb)
        bars = branches.barrier_rows(blog, bcnt, rinfo["barriers"]["sites"], tpb)
        bars[bars["block"] < 64].to_parquet(os.path.join(out_dir, f"{name}.barriers.parquet"))
        one = bars[bars["block"] == 0]
        entry["barriers"] = {
            "rows": int(len(bars)),
            "block0_wait_ns_median": float(one["wait_ns"].median()),
            "block0_wait_ns_max": float(one["wait_ns"].max()),
            "wait_ns_median_all": float(bars["wait_ns"].median()),
            "last_per_instance_ok": bool((bars.groupby(["block", "instance"])["last"].sum() >= 1).all()),
        }

        def run_barriers():
            device_memset(rb[1], 0, rb[1].nbytes)
            tbar[g, b](*dev, *rb)

        entry["barriers_ms"] = gpu_timing.measure(ops, run_barriers, 20).device_median_ms
    return entry


def ours(out_dir):
    from numba import cuda

    from visualizer.engine.timing import gpu_timing

    ops = gpu_timing.NumbaOps(cuda)
    report = {}
    for case in case_list():
        try:
            report[case[0]] = _case(ops, out_dir, *case)
        except Exception as exc:  # one case's failure must not hide the others
            report[case[0]] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}
        print(case[0], json.dumps(report[case[0]]), flush=True)
    with open(os.path.join(out_dir, "ours.json"), "w") as f:
        json.dump(report, f, indent=1)


def _by_name(name):
    return next(c for c in case_list() if c[0] == name)


def lens_rows(name, records=1024):
    """A case's warp visits on the GPU (the branch probes alone) and its branch sites."""
    from numba import cuda

    from visualizer.analysis import branches
    from visualizer.engine.instrument.branches import BranchPass, branch_buffers

    _, src, kernel, grid, block, args, _ = _by_name(name)
    g = grid if isinstance(grid, tuple) else (grid,)
    b = block if isinstance(block, tuple) else (block,)
    nb, tpb = int(np.prod(g)), int(np.prod(b))
    traced, info = bc.load(src, kernel, [BranchPass()])
    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    bb = [cuda.to_device(a) for a in branch_buffers(False, nb, tpb, records=records).values()]
    traced[g, b](*dev, *bb)
    cuda.synchronize()
    log, cnt = (a.copy_to_host() for a in bb)
    sites = info["branches"]["sites"]
    return branches.rows(False, log, cnt, sites, tpb), sites


def sass_lines(name, arch="sm_90"):
    """(jumps, conditional jumps) per source line of a case's clean build, and its loops ptxas unrolled
    with a remainder (line -> U, analysis/branches.unrolled_loops), compiled here for ``arch``
    with line info (numba -> PTX, ptxas, nvdisasm; no GPU needed), typed as a launch on the case's own
    arguments types them."""
    import types

    from numba import cuda, typeof

    from visualizer.analysis import branches
    from visualizer.engine.capture.ptx import assemble

    if not cuda.is_available():  # numba-cuda asks the device for its compute capability
        from visualizer.engine.capture.ptx_compile import _compile_for

        _compile_for((9, 0))
    _, src, kernel, _, _, args, _ = _by_name(name)
    mod = types.ModuleType("clean_" + name)
    exec(compile(src, name + ".py", "exec"), mod.__dict__)
    sig = tuple(typeof(a) for a in args)
    ptx, _ = cuda.compile_ptx(mod.__dict__[kernel].py_func, sig, cc=(9, 0), lineinfo=True)
    compiled = {"sass": assemble(ptx, arch)["sass"], "filename": name + ".py"}
    return (*branches.jumps_of(compiled), branches.unrolled_loops(compiled))


if __name__ == "__main__":
    if sys.argv[1] in ("ours", "builtin"):
        os.makedirs(sys.argv[2], exist_ok=True)
    if sys.argv[1] == "clean" and len(sys.argv) > 2:
        clean(sys.argv[2:])
    elif sys.argv[1] == "clean":
        clean()
        builtin_clean()
    elif sys.argv[1] == "builtin":
        builtin_ours(sys.argv[2])
    else:
        ours(sys.argv[2])
