"""Command line: ``python -m visualizer kernels | capture | occupancy | bench``.

Bad input exits with status 2 and one line on stderr. Heavy imports (numba, pandas) happen only
in the subcommands that need them, so ``occupancy`` and ``kernels`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from visualizer.tools.args import CliError, OneLineParser, count, save_error, writable_dir, writable_file  # noqa: F401

USAGE = """usage: python -m visualizer COMMAND [options]

commands:
  kernels     list the kernels, their parameters and defaults
  capture     run one kernel instrumented and write its trace bundle
              (or your own: capture --source FILE.py --kernel NAME --block X --grid X --arg NAME=SPEC ...)
  compare     two capture bundles side by side (or --pair NAME: a built-in before/after pair)
  asm         PTX/SASS of a kernel beside its source lines (ptxas registers, spills, shared memory)
  occupancy   theoretical occupancy of a launch on sm_75..sm_90
  bench       benchmarks (GPU and simulator)
  serve       start the web app with safe settings (localhost unless --address ... --allow-remote)
"""


def cmd_kernels(argv: list[str]) -> int:
    p = OneLineParser(
        prog="python -m visualizer kernels", description="List the kernels and their parameters."
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from visualizer.specs.catalog import KERNELS

    if args.json:
        print(json.dumps({k: {"title": s.title, "params": s.defaults()} for k, s in KERNELS.items()}))
        return 0
    for spec in KERNELS.values():
        print(f"{spec.name}: {spec.title}")
        print(f"    {spec.summary}")
        for prm in spec.params:
            lo, hi = prm.advertised  # what can launch, not the wider range the checks explain
            allowed = f"one of {list(prm.choices)}" if prm.choices else f"{lo}..{hi}"
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


def source_help() -> str:
    """``capture --source``'s usage and options, for ``capture --help``."""
    from visualizer.tools.capture_source import parser as source_parser

    text = source_parser().format_help()
    return "your own kernel, from a file (capture --source):\n\n" + text


def cmd_capture(argv: list[str]) -> int:
    from visualizer.tools.capture_report import (
        add_lens_flags,
        checked_out,
        launch_lines,
        lens_lines,
        lens_options,
        run_and_save,
        sass_counted_lines,
    )
    from visualizer.tools.capture_source import cmd_capture_source, wants_source  # your own kernel: --source

    if wants_source(argv):
        return cmd_capture_source(argv)
    p = OneLineParser(
        prog="python -m visualizer capture",
        description="Run one kernel instrumented; write its trace bundle. Name the kernel one of two ways:\n"
        "  a built-in kernel by name (python -m visualizer kernels lists them), or\n"
        "  your own with --source FILE.py [--kernel NAME] (its options are listed after these).",
        epilog=source_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kernel", help="a built-in kernel's name")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", required=True, help="directory for the trace bundle")
    p.add_argument("--repeats", type=count(1), default=20, help="timed launches per build on the GPU")
    p.add_argument(
        "--seed",
        type=count(0),
        default=None,
        help="seed of the inputs (default 0); with --runs also of the schedules: on the simulator run i "
        "is the seeded interleaving (seed, i), replayed bit for bit (without --seed: its fixed order)",
    )
    p.add_argument(
        "--runs",
        type=count(1),
        default=None,
        help="run the same launch N times from the same inputs; keeps every run's outputs (runs.npz) and "
        "counts the distinct outputs (launch.json runs). Costs N launches under the limits",
    )
    add_lens_flags(p)  # one flag per lens and lens option (engine/lenses/)
    args = p.parse_args(argv)
    previous = checked_out(args)
    if previous is None:
        return 2
    from visualizer.engine.run.runner import Runner
    from visualizer.specs.catalog import KERNELS, LaunchError

    def run():
        params = parse_params(args.param)
        with Runner(args.backend) as runner:
            if args.sample_blocks is not None and runner.backend == "sim":
                raise CliError(
                    "--sample-blocks chooses the warps that record on a GPU; the simulator records every thread"
                )
            return runner.capture(
                args.kernel, params, repeats=args.repeats, seed=args.seed or 0, **lens_options(args)
            )

    rc, cap, written = run_and_save(run, args.out, previous, bad_input=(CliError,))
    if rc is not None:
        return rc
    launch, check = cap.launch, cap.check
    print(f"{launch['kernel']} on {launch['device_name']} ({launch['source']})")
    print("\n".join(launch_lines(cap)))
    for name, res in check["outputs"].items():
        nonfinite = f", {res['nonfinite']} of them inf/NaN" if res.get("nonfinite") else ""
        print(
            f"  {name}: {res['mismatches']} of {res['elements']} wrong "
            f"(max abs error {res['max_abs_error']:.3g}{nonfinite})"
        )
    for text in lens_lines(cap, args.barriers):
        print(text)
    if cap.branches is not None:
        from visualizer.engine.capture import ptx

        compiled, why = None, None
        try:
            compiled = ptx.builtin_asm(launch["kernel"], launch["params"], arch="sm_90")
        except (ptx.AsmError, LaunchError) as exc:
            why = " ".join(str(exc).split())[:200]
        for text in sass_counted_lines(cap, compiled, why):
            print(text)
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


def _module_command(module: str):
    """A command that is ``main(argv)`` of ``module``, imported when the command runs, not when the CLI
    starts."""

    def command(argv: list[str]) -> int:
        return importlib.import_module(module).main(argv)

    command.__name__ = f"cmd_{module.rsplit('.', 1)[1]}"
    return command


COMMANDS = {
    "kernels": cmd_kernels,
    "capture": cmd_capture,
    "occupancy": _module_command("visualizer.analysis.occupancy"),
    "bench": _module_command("visualizer.tools.bench"),
    "compare": _module_command("visualizer.tools.compare"),
    "asm": _module_command("visualizer.tools.asm"),
    "serve": _module_command("visualizer.tools.serve"),
}


# commands that were here and are now maintainers' tools, run from a checkout (devtools/, not installed)
MOVED = {"crosscheck": "devtools.crosscheck"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None and argv[0] in MOVED:
        print(
            f"error: {argv[0]} is a maintainers' tool, not installed: from a checkout of the repository, "
            f"run python -m {MOVED[argv[0]]}",
            file=sys.stderr,
        )
        return 2
    if command is None:
        print(f"error: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return command(argv[1:])
