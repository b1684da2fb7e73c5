"""What ``capture`` says, the same for a built-in kernel and a visitor's (``capture NAME`` and
``capture --source FILE`` are one command): the lens flags' checks, the bundle written atomically,
and the summary lines every capture shares (launch, SMs, kernel time, each lens, the runs)."""

from __future__ import annotations

import sys


def flag_problem(args, backend: str) -> str | None:
    """A one-line reason the lens flags cannot go together, checked before anything runs (each lens
    says its own: engine/lenses/ ``Lens.problem``)."""
    from visualizer.engine.lenses import REGISTRY, all_options

    given = {o.key: getattr(args, o.key, None) for _, o in all_options()}
    given.update(runs=getattr(args, "runs", None), seed=getattr(args, "seed", None))
    return next((p for lens in REGISTRY.values() if (p := lens.problem(given, backend))), None)


def add_lens_flags(p) -> None:
    """A flag per lens and per lens option (engine/lenses/ registry): ``--accesses``, ``--sample-blocks``..."""
    from visualizer.engine.lenses import all_options

    for _, option in all_options():
        flag = "--" + option.key.replace("_", "-")
        if option.type is bool:
            p.add_argument(flag, action="store_true", help=option.help)
        else:
            p.add_argument(flag, default=None, metavar=option.key.upper(), help=option.help)
    add_sim_engine_flag(p)


def add_sim_engine_flag(p) -> None:
    """``--sim-engine NAME``: the simulator's engine (docs/simulator.md)."""
    from visualizer.engine.capture.request import DEFAULT_SIM_ENGINE, SIM_ENGINES

    p.add_argument(
        "--sim-engine",
        choices=SIM_ENGINES,
        default=DEFAULT_SIM_ENGINE,
        help="the simulator's engine: 'compiled' (the kernel compiled for the CPU; fastsim where it or a "
        "lens asked for is not taken, saying why) or 'fastsim' (default: %(default)s; a GPU ignores it)",
    )


def lens_options(args) -> dict:
    """The capture request's options the flags ask for: the runs, and each lens's (engine/lenses/)."""
    from visualizer.engine.lenses import all_options

    out: dict = {}
    for _, option in all_options():
        value = getattr(args, option.key, None)
        if value not in (None, False):
            out[option.key] = value
    if args.runs is not None:
        out.update(runs=args.runs, schedule_seed=args.seed)
    else:
        out.pop("delays", None)
    if getattr(args, "sim_engine", None) is not None:
        out["sim_engine"] = args.sim_engine
    return out


def checked_out(args) -> dict | None:
    """Before the kernel runs, so no work is lost: None after one line saying why the lens flags cannot go
    together or ``--out`` cannot take the bundle (the command exits 2); else the bundle files in ``--out``
    now, the only ones the capture may replace (``atomic.bundle_files``)."""
    from visualizer.tools.args import writable_dir
    from visualizer.tools.atomic import bundle_files

    problem = flag_problem(args, args.backend)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return None
    problem = writable_dir(args.out)
    if problem:
        print(f"error: --out: {problem}", file=sys.stderr)
        return None
    return bundle_files(args.out)


def run_and_save(run, out: str, replaceable: dict, bad_input: tuple = ()):
    """``run()`` -> a capture, then its bundle saved in ``out``: (exit code, the capture, the files
    written). Exit 2 after one line for bad input (LaunchError, ``bad_input``), 1 for a kernel that failed
    or a bundle that could not be saved; None where the command goes on."""
    from visualizer.engine.run.runner import KernelError
    from visualizer.specs.catalog import LaunchError

    try:
        cap = run()
    except (LaunchError, *bad_input) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, None, None
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1, None, None
    written = save_bundle(cap, out, replaceable)
    return (1 if written is None else None), cap, written


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
    out = [
        f"  grid {tuple(info['grid'])} x block {tuple(info['block'])} = {info['threads']} threads",
        f"  SMs used: {cap.threads['sm'].nunique()} ({'measured' if cap.measured else 'modelled'})",
        f"{line}  [{timing['clock']}]",
    ]
    engine = sim_engine_line(info, timing)
    return out + ([f"  {engine}"] if engine else [])


def sim_engine_line(info: dict, timing: dict | None = None) -> str | None:
    """Which simulator engine ran the capture, and why not the compiled one (None: a GPU capture)."""
    engine = info.get("sim_engine")
    if engine is None:
        return None
    if engine == "compiled":
        cpu = (timing or {}).get("simulator_cpu_s") or {}
        took = (
            f" (compile {cpu['instrumented_compile']:.2f} s, run {cpu['instrumented_run']:.3f} s of simulator CPU time)"
            if "instrumented_compile" in cpu
            else ""
        )
        return f"simulator engine: compiled{took}"
    note = info.get("sim_engine_note")
    return f"simulator engine: ran on fastsim: {note}" if note else "simulator engine: fastsim"


def lens_lines(cap, asked_barriers: bool = False) -> list[str]:
    """What each lens recorded: memory accesses, branches and barriers, the N runs."""
    from visualizer.analysis.lens_tables import REGISTRY

    info = cap.launch
    out: list[str] = []
    for lens in REGISTRY.values():  # a GPU recording's sampled warps included
        out += lens.describe(cap)
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
    sites = cap.launch.get("lens", {}).get("branches", {}).get("sites", [])
    got = branches.as_ncu_counts(cap.branches, cond, branches.unrolled_loops(compiled), sites)
    if got["efficiency"] is None:
        return ["  as Nsight Compute counts it (sm_90 SASS): no branch line compiled to a conditional jump"]
    out = got["left_out"]
    left = (
        f"; line{'s' * (len(out) > 1)} {', '.join(map(str, out))} compiled to none (predicated)"
        if out
        else ""
    )
    unrolled = "".join(
        f"; line {line}'s loop counted as ptxas unrolled it (by {u}, with a remainder loop: its jumps from "
        "each lane's trip count)"
        for line, u in got["modelled"].items()
    )
    return [
        f"  as Nsight Compute counts it (sm_90 SASS branches): {got['efficiency']:.1f}% over the "
        f"{got['visits']:,} conditional jumps of line{'s' * (len(got['lines']) > 1)} "
        f"{', '.join(map(str, got['lines']))}, {got['divergent_visits']:,} divergent{left}{unrolled}"
    ]
