"""``python -m visualizer asm KERNEL``: the PTX and SASS of a kernel beside its source lines.

``asm matmul_tiled --param n=64 [--arch sm_90] [--show ptx|sass|none] [--json]`` for a built-in kernel;
``asm --source FILE.py --kernel NAME --block X [--grid X] --arg NAME=SPEC ...`` for your own file (it
is compiled in a child process, as ``capture --source`` runs it). No GPU needed: NVVM compiles for
the arch. Bad input exits 2 with one line; a compile that fails exits 1 with one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from visualizer.tools.args import CliError, OneLineParser, plan_from_flags


def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m visualizer asm", description="PTX/SASS of a kernel, line by line.")
    p.add_argument("kernel", nargs="?", help="a built-in kernel's name (or --source FILE --kernel NAME)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--source", metavar="FILE.py", help="your own kernel's module")
    p.add_argument("--kernel", dest="source_kernel", metavar="NAME", help="with --source: the kernel")
    p.add_argument("--grid", default="1", metavar="X[,Y[,Z]]", help="with --source")
    p.add_argument("--block", default="32", metavar="X[,Y[,Z]]", help="with --source")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC", help="with --source")
    p.add_argument("--arch", default="sm_90", help="target, e.g. sm_80, sm_90 (default)")
    p.add_argument(
        "--show", default="sass", choices=("ptx", "sass", "none"), help="instructions under each line"
    )
    p.add_argument("--json", action="store_true", help="the per-line table and resources as JSON")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from visualizer.analysis import asm
    from visualizer.engine.capture import ptx
    from visualizer.specs.catalog import LaunchError

    try:
        if args.source:
            from visualizer.specs.source import MAX_SOURCE_BYTES

            path = Path(args.source)
            if not path.is_file():
                raise CliError(f"cannot read {args.source}: not a regular file")
            if path.stat().st_size > MAX_SOURCE_BYTES:
                raise CliError(f"{args.source} is larger than {MAX_SOURCE_BYTES:,} bytes")
            if not args.source_kernel:
                raise CliError("--kernel NAME is needed with --source")
            text = path.read_text()
            launch = plan_from_flags(text, args.source_kernel, args, str(path.resolve()))
            got = ptx.source_asm(launch.request("sim"), arch=args.arch)
        elif args.kernel:
            params = {}
            for pair in args.param:
                name, sep, value = pair.partition("=")
                if not sep or not name.strip():
                    raise CliError(f"--param expects NAME=VALUE, got {pair[:60]!r}")
                params[name.strip()] = value.strip()
            got = ptx.builtin_asm(args.kernel, params, arch=args.arch)
        else:
            raise CliError("name a built-in kernel, or --source FILE.py --kernel NAME")
    except ptx.AsmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (LaunchError, CliError, OSError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ptx_t = asm.ptx_table(got["ptx"])
    sass_t = asm.sass_table(got["sass"]) if got.get("sass") else None
    lines = asm.source_lines(got["source"], got["filename"], ptx_t, sass_t)
    res = asm.ptxas_resources(got["ptxas_log"]) if got.get("ptxas_log") else {}
    if args.json:
        print(json.dumps({"kernel": got["kernel"], "arch": got["arch"], "versions": got["versions"],
                          "resources": res, "missing": got["missing"],
                          "lines": json.loads(lines.to_json(orient="records"))}))  # fmt: skip
        return 0
    print(f"{got['kernel']} for {got['arch']}: " + ", ".join(f"{k} {v}" for k, v in got["versions"].items()))
    if res:
        print("ptxas -v: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in res.items()))
    for tool in got["missing"]:
        print(f"({tool} not installed: no SASS)" if tool == "nvdisasm" else f"({tool} not installed)")
    table = {"ptx": ptx_t, "sass": sass_t}.get(args.show)
    same = asm.same_file(table["file"], got["filename"]) if table is not None else None
    for r in lines.itertuples(index=False):
        sass = "" if r.sass is None or r.sass != r.sass else f"{r.sass:>4}"
        print(f"{r.line:>4} | ptx {r.ptx:>3} | sass {sass:>4} | {r.code}")
        if table is not None:
            for text in table.loc[same & (table["line"] == r.line), "text"]:
                print(f"     |          |           |     {' '.join(text.split())}")
    return 0
