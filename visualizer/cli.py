"""Command line: ``python -m visualizer kernels | capture | occupancy | bench``.

Bad input exits with status 2 and one line on stderr. Heavy imports (numba, pandas) happen only
in the subcommands that need them, so ``occupancy`` and ``kernels`` start fast.
"""

from __future__ import annotations

import argparse
import json
import sys

USAGE = """usage: python -m visualizer COMMAND [options]

commands:
  kernels     list the kernels, their parameters and defaults
  capture     run one kernel instrumented and write its trace bundle
              (or your own: capture --source FILE.py --kernel NAME --block X --grid X --arg NAME=SPEC ...)
  occupancy   theoretical occupancy of a launch on sm_75..sm_90
  bench       benchmarks (GPU and simulator)
  crosscheck  memory-access engine vs Nsight Compute / compute-sanitizer (gpu, compare)
  serve       start the web app with safe settings (localhost unless --address ... --allow-remote)
"""


class CliError(Exception):
    pass


def count(minimum: int):
    """argparse type: an integer >= minimum (bad values exit 2 with one line, like any bad flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def writable_dir(path: str) -> str | None:
    """Why ``path`` cannot hold output files (None if it can): checked before any work is done."""
    from pathlib import Path

    target = Path(path)
    try:
        if target.exists() and not target.is_dir():
            return f"{path} exists and is not a directory"
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".visualizer-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot write to {path}: {exc.strerror or exc}"
    return None


def writable_file(path: str) -> str | None:
    """Why ``path`` cannot be written as a file (None if it can), without truncating an existing one."""
    from pathlib import Path

    target = Path(path)
    if target.is_dir():
        return f"{path} is a directory"
    if not target.parent.is_dir():
        return f"cannot write to {path}: the directory {target.parent} does not exist"
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
        if not existed:
            target.unlink()
    except OSError as exc:
        return f"cannot write to {path}: {exc.strerror or exc}"
    return None


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints usage too)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def cmd_kernels(argv: list[str]) -> int:
    p = OneLineParser(
        prog="python -m visualizer kernels", description="List the kernels and their parameters."
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from visualizer.catalog import KERNELS

    if args.json:
        print(json.dumps({k: {"title": s.title, "params": s.defaults()} for k, s in KERNELS.items()}))
        return 0
    for spec in KERNELS.values():
        print(f"{spec.name}: {spec.title}")
        print(f"    {spec.summary}")
        for prm in spec.params:
            allowed = f"one of {list(prm.choices)}" if prm.choices else f"{prm.lo}..{prm.hi}"
            print(f"    --param {prm.name}={prm.default:<8} {prm.help} ({allowed})")
    return 0


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--param expects NAME=VALUE, got {pair!r}")
        params[name.strip()] = value.strip()
    return params


def cmd_capture(argv: list[str]) -> int:
    from visualizer.userkernel.cli import cmd_capture_source, wants_source  # your own kernel: --source

    if wants_source(argv):
        return cmd_capture_source(argv)
    p = OneLineParser(
        prog="python -m visualizer capture", description="Run one kernel instrumented; write its trace."
    )
    p.add_argument("kernel")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", required=True, help="directory for the trace bundle")
    p.add_argument("--repeats", type=count(1), default=20, help="timed launches per build on the GPU")
    p.add_argument("--seed", type=count(0), default=0)
    p.add_argument(
        "--accesses",
        action="store_true",
        help="record every load/store (simulator only): adds accesses/requests/hazards.parquet",
    )
    args = p.parse_args(argv)
    problem = writable_dir(args.out)
    if problem:  # before the kernel runs, so no work is lost
        print(f"error: --out: {problem}", file=sys.stderr)
        return 2

    from visualizer.catalog import KERNELS, LaunchError
    from visualizer.runner import KernelError, Runner
    from visualizer.trace import save

    try:
        params = parse_params(args.param)
        if args.accesses and args.backend != "sim":
            raise CliError("--accesses records addresses on the simulator only: add --backend sim")
        with Runner(args.backend) as runner:
            cap = runner.capture(
                args.kernel,
                params,
                repeats=args.repeats,
                seed=args.seed,
                **({"accesses": True} if args.accesses else {}),
            )
    except (LaunchError, CliError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        written = save(cap, args.out)
    except OSError as exc:
        print(f"error: could not save the capture to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    launch, timing, check = cap.launch, cap.timing, cap.check
    print(f"{launch['kernel']} on {launch['device_name']} ({launch['source']})")
    print(f"  grid {tuple(launch['grid'])} x block {tuple(launch['block'])} = {launch['threads']} threads")
    sms = cap.threads["sm"].nunique()
    print(f"  SMs used: {sms} ({'measured' if cap.measured else 'modelled'})")
    clock = timing["clock"]
    line = f"  kernel: instrumented {timing['instrumented_ms']:.4f} ms"
    if "clean_ms" in timing:
        line += (
            f", clean {timing['clean_ms']:.4f} ms, overhead x{timing.get('overhead_ratio', float('nan')):.2f}"
        )
    print(f"{line}  [{clock}]")
    for name, res in check["outputs"].items():
        nonfinite = f", {res['nonfinite']} of them inf/NaN" if res.get("nonfinite") else ""
        print(
            f"  {name}: {res['mismatches']} of {res['elements']} wrong "
            f"(max abs error {res['max_abs_error']:.3g}{nonfinite})"
        )
    if cap.accesses is not None:
        from visualizer.memory.tables import describe

        for text in describe(launch["accesses"]):
            print(f"  {text}")
    print(f"  wrote {', '.join(p.name for p in written)} to {args.out}")
    if check["correct"]:
        print("  output matches the numpy reference")
        return 0
    if check["expected_wrong"]:
        spec = KERNELS[launch["kernel"]]
        print(f"  output is WRONG, as this demo is meant to show ({spec.wrong_because})")
        return 0
    print("error: output does not match the numpy reference", file=sys.stderr)
    return 1


def cmd_occupancy(argv: list[str]) -> int:
    from visualizer.occupancy import main as occupancy_main

    return occupancy_main(argv)


def cmd_bench(argv: list[str]) -> int:
    from visualizer.bench import main as bench_main

    return bench_main(argv)


def cmd_crosscheck(argv: list[str]) -> int:
    from visualizer.memory.crosscheck import main as crosscheck_main

    return crosscheck_main(argv)


def cmd_serve(argv: list[str]) -> int:
    from visualizer.serve import main as serve_main

    return serve_main(argv)


COMMANDS = {
    "kernels": cmd_kernels,
    "capture": cmd_capture,
    "occupancy": cmd_occupancy,
    "bench": cmd_bench,
    "crosscheck": cmd_crosscheck,
    "serve": cmd_serve,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"error: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return command(argv[1:])
