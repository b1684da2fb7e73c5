"""``python -m visualizer compare BUNDLE_A BUNDLE_B``: two capture bundles side by side, as text or JSON.

``compare --pair NAME --backend sim|gpu|auto`` captures a built-in pair (specs/pairs.py) first, with
accesses recorded on the simulator, and can keep both bundles (``--out DIR``: DIR/a and DIR/b).
Bad input exits 2 with one line; a kernel that fails exits 1.

Beside what the captures hold, each built-in kernel's SASS is counted (its clean build compiled for an H200 by
ptxas, read back by nvdisasm; ``--no-sass`` skips it), and a simulator's capture gets the device time of the
same launch, or the nearest, from the measured set shipped with the app, labelled with its device and date.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from visualizer.tools.args import CliError, OneLineParser, save_error, writable_dir


def parser() -> OneLineParser:
    from visualizer.specs.pairs import PAIRS

    p = OneLineParser(
        prog="python -m visualizer compare",
        description="Compare two captures: device time, launch overhead, sectors per request, bank "
        "wavefronts, occupancy, bytes moved; one line per difference.",
    )
    p.add_argument("bundles", nargs="*", metavar="BUNDLE", help="two directories written by capture --out")
    p.add_argument("--pair", choices=sorted(PAIRS), help="capture a built-in pair instead of reading bundles")
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"), help="for --pair")
    p.add_argument("--repeats", type=int, default=20, help="for --pair: timed launches per build on the GPU")
    p.add_argument("--out", help="for --pair: keep the two bundles as OUT/a and OUT/b")
    p.add_argument("--json", action="store_true", help="print the table as JSON records")
    p.add_argument(
        "--no-sass", action="store_true", help="do not compile the kernels to count their SASS instructions"
    )
    return p


def _capture_pair(name: str, backend: str, repeats: int):
    from visualizer.engine.run.runner import Runner
    from visualizer.specs.pairs import PAIRS

    pair = PAIRS[name]
    caps = []
    with Runner(backend) as runner:
        for side in (pair.a, pair.b):
            opts = {"accesses": True, "branches": True} if runner.backend == "sim" else {}
            caps.append(runner.capture(side.kernel, side.params_for(runner.backend), repeats=repeats, **opts))
    return caps


def beside(caps, sass: bool = True) -> tuple[tuple, tuple]:
    """(compiled, recorded) for analysis/compare.compare: each built-in kernel's SASS count (a visitor's is
    read from its capture), and for a simulator's capture the shipped recording's device time."""
    from visualizer.analysis import measured_set as ms

    builtin = [not c.launch.get("user_kernel") for c in caps]
    compiled: tuple = (None,) * len(caps)
    if sass and any(builtin):
        from visualizer.engine.capture import ptx

        sides = [
            (c.launch["kernel"], dict(c.launch.get("params") or {}))
            for c, b in zip(caps, builtin, strict=True)
            if b
        ]
        counts = iter(ptx.sass_pair(sides))
        compiled = tuple(next(counts) if b else None for b in builtin)
    recorded = tuple(
        ms.device_time_for(str(c.launch["kernel"]), dict(c.launch.get("params") or {}))
        if b and not c.measured
        else None
        for c, b in zip(caps, builtin, strict=True)
    )
    return compiled, recorded


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from visualizer.analysis import compare as cmp
    from visualizer.tools.bundle import COMPARE_READS, BundleError, load, save

    try:
        if args.pair:
            if args.bundles:
                raise CliError("give either two bundles or --pair, not both")
            if args.out and writable_dir(args.out):
                raise CliError(f"--out: {writable_dir(args.out)}")
            if args.out:  # what each side's directory holds before the run: only that may be replaced
                from visualizer.tools.atomic import bundle_files

                previous = {side: bundle_files(Path(args.out) / side) for side in "ab"}
            from visualizer.engine.run.runner import KernelError
            from visualizer.specs.catalog import LaunchError

            try:
                a, b = _capture_pair(args.pair, args.backend, args.repeats)
            except LaunchError as exc:
                raise CliError(str(exc)) from None
            except KernelError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            if args.out:
                try:
                    Path(args.out).mkdir(parents=True, exist_ok=True)
                    save(a, Path(args.out) / "a", previous["a"])
                    save(b, Path(args.out) / "b", previous["b"])
                except OSError as exc:  # a full disk, or a file made in OUT/a meanwhile: one line
                    print(save_error(args.out, exc), file=sys.stderr)
                    return 1
        else:
            if len(args.bundles) != 2:
                raise CliError(f"expected two bundles (BUNDLE_A BUNDLE_B), got {len(args.bundles)}")
            a, b = (load(d, only=COMPARE_READS) for d in args.bundles)
        try:
            compiled, recorded = beside((a, b), sass=not args.no_sass)
            table = cmp.compare(a, b, compiled, recorded)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            # a bundle that passed the reader's checks yet does not hold together: still one line
            raise CliError(
                f"the two bundles cannot be compared ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
            ) from None
    except (CliError, BundleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        recs = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in table.to_dict("records")
        ]
        names = table.attrs["names"]
        print(
            json.dumps({"a": names[0], "b": names[1], "metrics": recs, "differences": cmp.differences(table)})
        )
    else:
        print(cmp.as_text(table))
    return 0
