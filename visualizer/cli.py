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
  occupancy   theoretical occupancy of a launch on sm_75..sm_90
  bench       benchmarks (GPU and simulator)
"""


class CliError(Exception):
    pass


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
    p = OneLineParser(
        prog="python -m visualizer capture", description="Run one kernel instrumented; write its trace."
    )
    p.add_argument("kernel")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", required=True, help="directory for the trace bundle")
    p.add_argument("--repeats", type=int, default=20, help="timed launches per build on the GPU")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from visualizer.catalog import LaunchError
    from visualizer.runner import KernelError, Runner
    from visualizer.trace import save

    try:
        params = parse_params(args.param)
        with Runner(args.backend) as runner:
            cap = runner.capture(args.kernel, params, repeats=args.repeats, seed=args.seed)
    except (LaunchError, CliError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    written = save(cap, args.out)
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
        print(
            f"  {name}: {res['mismatches']} of {res['elements']} wrong (max abs error {res['max_abs_error']:.3g})"
        )
    print(f"  wrote {', '.join(p.name for p in written)} to {args.out}")
    if check["correct"]:
        print("  output matches the numpy reference")
        return 0
    if check["expected_wrong"]:
        print("  output is WRONG, as this race demo is meant to show (the missing syncthreads)")
        return 0
    print("error: output does not match the numpy reference", file=sys.stderr)
    return 1


def cmd_occupancy(argv: list[str]) -> int:
    from visualizer.occupancy import main as occupancy_main

    return occupancy_main(argv)


def cmd_bench(argv: list[str]) -> int:
    from visualizer.bench import main as bench_main

    return bench_main(argv)


COMMANDS = {"kernels": cmd_kernels, "capture": cmd_capture, "occupancy": cmd_occupancy, "bench": cmd_bench}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"error: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return command(argv[1:])
