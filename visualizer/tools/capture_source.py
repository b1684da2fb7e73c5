"""``python -m visualizer capture --source FILE.py --kernel NAME ...``: a user's kernel from a file.

Bad input (a missing argument, an unknown dtype, a syntax error, a launch too big, an ``--out`` that
cannot take the bundle) exits 2 with one line, all of it checked before the kernel runs; a kernel that
fails when it runs, or a bundle that cannot be saved (a full disk), exits 1 with one line.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from visualizer.tools.args import OneLineParser, count, plan_from_flags
from visualizer.tools.capture_report import (
    add_lens_flags,
    checked_out,
    flag_problem,
    launch_lines,
    lens_lines,
    lens_options,
    run_and_save,
    sass_counted_lines,
)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text[:40]!r}")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text[:40]!r}")
    return value


def wants_source(argv: list[str]) -> bool:
    return any(a == "--source" or a.startswith("--source=") for a in argv)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m visualizer capture",
        description="Run your own Numba CUDA kernel instrumented; write its trace bundle.",
    )
    p.add_argument("--source", required=True, metavar="FILE.py", help="a Python module with the kernel")
    p.add_argument("--kernel", help="the kernel's function name (optional if the file has one kernel)")
    p.add_argument("--grid", metavar="X[,Y[,Z]]", help="blocks per grid")
    p.add_argument("--block", required=True, metavar="X[,Y[,Z]]", help="threads per block")
    p.add_argument(
        "--threads-for",
        type=count(1),
        metavar="N",
        help="instead of --grid: one thread per element of N (1-D)",
    )
    p.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="rand|zeros|ones|arange:DTYPE:SHAPE (SHAPE like 1000 or 64x64), file:PATH.npy, a number, or "
        "rng:SEED:N (N xoroshiro128p states for numba.cuda.random)",
    )
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=EXPR|fn:NAME",
        help="numpy expression over the argument names for an array's expected value, or a function "
        "in the source taking the kernel's arguments",
    )
    p.add_argument("--rtol", type=_tolerance, default=None, help="relative tolerance of the check")
    p.add_argument("--atol", type=_tolerance, default=None, help="absolute tolerance of the check")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"))
    add_lens_flags(p)  # one flag per lens and lens option (engine/lenses/)
    p.add_argument("--out", required=True, help="directory for the trace bundle")
    p.add_argument("--repeats", type=count(1), default=20, help="timed launches per build on the GPU")
    p.add_argument(
        "--seed", type=count(0), default=None, help="inputs' seed (default 0); with --runs the schedules'"
    )
    p.add_argument("--runs", type=count(1), default=None, help="run the same launch N times (runs.npz)")
    p.add_argument("--timeout", type=_positive_seconds, default=None, help="wall-clock limit in seconds")
    return p


def cmd_capture_source(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    previous = checked_out(args)
    if previous is None:
        return 2
    from visualizer.engine.run.runner import KernelError, resolve_backend
    from visualizer.engine.run.user_runner import UserRunner, arrays_after
    from visualizer.specs import source as uspec
    from visualizer.specs.catalog import LaunchError

    path = Path(args.source)
    sass: dict = {"compiled": None, "why": None}  # the clean build's SASS, for the SASS-counted number

    def run():
        try:
            if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
                raise LaunchError(f"cannot read {args.source}: not a regular file")
            size = path.stat().st_size
            if size > uspec.MAX_SOURCE_BYTES:  # not read into memory first
                raise LaunchError(
                    f"{args.source} is {size:,} bytes; the limit for a kernel source is {uspec.MAX_SOURCE_BYTES:,}"
                )
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise LaunchError(f"cannot read {args.source}: {exc.strerror or exc}") from None
        kernel = args.kernel
        if kernel is None:
            uspec.syntax_check(source, path.name)
            found = uspec.kernel_names(source)
            if len(found) != 1:
                listed = ", ".join(found) or "none found"
                raise LaunchError(f"--kernel NAME is needed: {path.name} has kernels: {listed}")
            kernel = found[0]
        backend = resolve_backend(args.backend)
        tolerances = {k: v for k, v in (("rtol", args.rtol), ("atol", args.atol)) if v is not None}
        launch = plan_from_flags(source, kernel, args, str(path.resolve()), backend, **tolerances)
        if args.barriers and backend == "sim":  # "auto" resolved to the simulator
            raise LaunchError(flag_problem(args, backend))
        with UserRunner(backend) as runner:
            cap = runner.capture_source(
                launch, seed=args.seed or 0, repeats=args.repeats, timeout=args.timeout, **lens_options(args)
            )
            if cap.branches is not None:  # the SASS-counted number needs the clean build's SASS
                try:
                    sass["compiled"] = runner.ptx_source(launch, "sm_90", args.timeout)
                except KernelError as exc:
                    sass["why"] = " ".join(str(exc).split())[:200]
            return cap

    rc, cap, written = run_and_save(run, args.out, previous)
    if rc is not None:
        return rc
    compiled, why = sass["compiled"], sass["why"]
    info, check = cap.launch, cap.check
    print(f"{info['kernel_name']} from {path.name} on {info['device_name']} ({info['source']})")
    print("\n".join(launch_lines(cap)))
    for build in ("clean", "instrumented"):
        res = info.get(build) or {}
        if "registers_per_thread" in res:
            print(
                f"  {build} build: {res['registers_per_thread']} registers/thread, "
                f"{res['static_smem_bytes']} B static shared memory, {res['driver_blocks_per_sm']} blocks/SM"
            )
    checked = info.get("gpu_compile") or {}
    if checked.get(
        "resources"
    ):  # the simulator's run: compiled for a GPU first (engine/capture/ptx.gpu_check)
        res = checked["resources"]
        print(
            f"  compiled for a GPU before the simulator ran it: {res['registers']} registers/thread, "
            f"{res['spill_stores_bytes'] + res['spill_loads_bytes']} B spilled, {res['smem_bytes']} B static shared "
            f"memory (ptxas -v, {checked['arch']}, clean build)"
        )
    elif checked:
        print(f"  not compiled for a GPU: {checked.get('why')}")
    print(
        f"  arrays after the launch: {', '.join(arrays_after(cap))} (written: {', '.join(info['written']) or 'none'})"
    )
    for text in lens_lines(cap, args.barriers):
        print(text)
    for text in sass_counted_lines(cap, compiled, why):
        print(text)
    print(f"  wrote {', '.join(p.name for p in written)} to {args.out}")
    if check.get("correct") is None:
        print("  no --reference given: the outputs were not checked")
        return 0
    for name, res in check["outputs"].items():
        print(
            f"  {name}: {res['mismatches']} of {res['elements']} wrong (max abs error {res['max_abs_error']:.3g})"
        )
    if check["correct"]:
        print("  output matches the numpy reference")
        return 0
    print("error: output does not match the numpy reference", file=sys.stderr)
    return 1
