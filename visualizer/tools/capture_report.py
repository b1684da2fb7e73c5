"""What ``capture`` says, the same for a built-in kernel and a visitor's (``capture NAME`` and
``capture --source FILE`` are one command): the lens flags' checks, the bundle written atomically,
and the summary lines every capture shares (launch, SMs, kernel time, each lens, the runs)."""

from __future__ import annotations

import sys


def flag_problem(args, backend: str) -> str | None:
    """A one-line reason the lens flags cannot go together, checked before anything runs."""
    if getattr(args, "delays", False) and (args.runs is None or args.seed is None):
        return "--delays needs --runs N and --seed S (the delays are drawn from the seed)"
    if getattr(args, "barriers", False) and backend == "sim":
        return "--barriers reads the GPU's clock: the simulator has none (use --backend gpu)"
    if getattr(args, "sample_blocks", None) is not None and not args.accesses:
        return "--sample-blocks chooses which warps record accesses: add --accesses"
    return None


def lens_options(args) -> dict:
    """The capture request's lens options the flags ask for (runs, delays, accesses, SIMT lens)."""
    out: dict = {}
    if args.accesses:
        out["accesses"] = True
    if getattr(args, "sample_blocks", None) is not None:
        out["sample_blocks"] = args.sample_blocks
    if args.branches:
        out["branches"] = True
    if args.barriers:
        out["barriers"] = True
    if args.runs is not None:
        out.update(runs=args.runs, schedule_seed=args.seed)
        if args.delays:
            out["delays"] = True
    return out


def save_bundle(cap, out: str, replaceable: dict | None):
    """The bundle written (tools/bundle.py, atomically), or None after saying why it was not.
    ``replaceable``: ``atomic.bundle_files(out)`` taken before the kernel ran (what may be replaced)."""
    from visualizer.tools.args import save_error
    from visualizer.tools.bundle import save

    try:
        return save(cap, out, replaceable)
    except OSError as exc:  # a full disk: the previous bundle (if any) is left as it was
        print(save_error(out, exc), file=sys.stderr)
        return None


def launch_lines(cap) -> list[str]:
    """The launch, where it ran and how long it took."""
    info, timing = cap.launch, cap.timing
    line = f"  kernel: instrumented {timing['instrumented_ms']:.4f} ms"
    if "clean_ms" in timing:
        line += (
            f", clean {timing['clean_ms']:.4f} ms, overhead x{timing.get('overhead_ratio', float('nan')):.2f}"
        )
    return [
        f"  grid {tuple(info['grid'])} x block {tuple(info['block'])} = {info['threads']} threads",
        f"  SMs used: {cap.threads['sm'].nunique()} ({'measured' if cap.measured else 'modelled'})",
        f"{line}  [{timing['clock']}]",
    ]


def lens_lines(cap, asked_barriers: bool = False) -> list[str]:
    """What each lens recorded: memory accesses, branches and barriers, the N runs."""
    info = cap.launch
    out: list[str] = []
    if cap.accesses is not None and info.get("accesses"):
        from visualizer.analysis.memory import describe

        out += describe(info["accesses"])  # a GPU recording's sampled warps included
    if cap.branches is not None or cap.barriers is not None:
        from visualizer.analysis import branches as lens

        out += lens.describe(info["branches"]) if cap.branches is not None else []
        out += lens.describe_barriers(info["barriers"]) if cap.barriers is not None else []
    if asked_barriers and cap.barriers is None:
        out.append("barriers: not recorded (this capture ran on the simulator, which has no clock)")
    if cap.runs is not None:
        from visualizer.analysis.races import describe as describe_runs

        out += describe_runs(info["runs"])
    return [f"  {text}" for text in out]


def sass_counted_lines(cap, compiled: dict | None, why: str | None = None) -> list[str]:
    """With --branches: the lens's efficiency as Nsight Compute counts it (analysis/branches.as_ncu_counts
    over the conditional jumps of the clean build's sm_90 SASS, ``compiled``: engine/ptx's reply)."""
    if cap.branches is None or not cap.launch.get("branches", {}).get("visits"):
        return []
    if compiled is None or not compiled.get("sass"):
        return [
            f"  as Nsight Compute counts it: not computed ({why or 'ptxas or nvdisasm is not installed here'})"
        ]
    from visualizer.analysis import branches

    _, cond = branches.jumps_of(compiled)
    got = branches.as_ncu_counts(cap.branches, cond)
    if got["efficiency"] is None:
        return ["  as Nsight Compute counts it (sm_90 SASS): no branch line compiled to a conditional jump"]
    out = got["left_out"]
    left = (
        f"; line{'s' * (len(out) > 1)} {', '.join(map(str, out))} compiled to none (predicated)"
        if out
        else ""
    )
    return [
        f"  as Nsight Compute counts it (sm_90 SASS branches): {got['efficiency']:.1f}% over the "
        f"{got['visits']:,} visits of line{'s' * (len(got['lines']) > 1)} {', '.join(map(str, got['lines']))}, "
        f"{got['divergent_visits']:,} divergent{left}"
    ]
