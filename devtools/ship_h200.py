"""Record the measured set the app ships: every built-in kernel's default launch and each lesson's launches,
captured with the lenses the device offers, written compact and versioned (analysis/measured_set.py reads it).

    python -m devtools.ship_h200 --out DIR [--kernels a,b] [--no-lessons] [--expect-device H200]

Each launch is one capture: the timeline (every thread's SM and %globaltimer stamps), device time of the
clean build and the host's launch overhead, and the lenses: memory accesses of the sampled warps (sectors,
wavefronts, bank conflicts), branches, and on a GPU barrier waits. Its bundle keeps the tables the views
draw (no input or output arrays), each capped in rows so the set stays small; what was capped is said in
the index. The device, driver, date and versions come from the recording itself: a set recorded on the
simulator is labelled so, and ``--expect-device H200`` refuses to write anything that did not run on one.

Written atomically, launch by launch: each bundle directory is swapped in whole, then index.json (which names
only finished bundles) is replaced, so a killed run leaves a readable set; run again with ``--kernels`` to
add what is missing (a set recorded on another device is refused). Exit 2 for bad input, 1 when no launch
was recorded; a launch that fails (out_of_bounds_write faults on a GPU, as meant) is listed and left out.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import hashlib
import json
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from visualizer.analysis import measured_set as ms
from visualizer.tools.args import CliError, OneLineParser, count

TABLE_ROW_CAPS = {  # rows shipped per table (the first ones): the default launches fit whole
    "threads": 300_000,
    "accesses": 60_000,
    "requests": 60_000,
    "hazards": 5_000,
    "branches": 60_000,
    "barriers": 60_000,
}
OTHER_TABLE_CAP = 60_000


def parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m devtools.ship_h200",
        description="Record the measured set shipped with the app: each built-in kernel's default launch and "
        "each lesson's launches, with the lenses the device offers, written compact with an index.json.",
    )
    p.add_argument("--out", required=True, help="the set's directory (new, empty, or a set to add to)")
    p.add_argument("--kernels", default=None, help="comma-separated kernel names (default: every built-in)")
    p.add_argument("--no-lessons", action="store_true", help="only the kernels' default launches")
    p.add_argument(
        "--lesson-sweep",
        default=None,
        metavar="LESSON,...",
        help="these lessons also at every option of each control (one at a time): a lesson about GPU time "
        "then has a measured answer at each setting (e.g. cpu_gpu,memory_flow)",
    )
    p.add_argument(
        "--again",
        action="store_true",
        help="record again the launches the set already holds (default: keep them, record only the rest, so "
        "the same command run again finishes a set the time budget cut short)",
    )
    p.add_argument("--backend", default="auto", choices=("auto", "gpu", "sim"))
    p.add_argument(
        "--expect-device",
        default=None,
        metavar="NAME",
        help="refuse to write unless the captures ran on a GPU whose name contains NAME (e.g. H200)",
    )
    p.add_argument("--repeats", type=count(1), default=10, help="timed launches per build on the GPU")
    p.add_argument("--budget-s", type=count(1), default=290, help="start no launch after this many seconds")
    p.add_argument("--max-mb", type=count(1), default=30, help="the set's size limit in MiB (default 30)")
    return p


# --- what to record ------------------------------------------------------------------------------


def full_params(kernel: str, params: dict) -> dict:
    """A launch's parameters with the kernel's defaults filled in (a lesson names only what it changes)."""
    from visualizer.specs.catalog import KERNELS

    return {**KERNELS[kernel].defaults(), **params}


def launch_id(kernel: str, params: dict) -> str:
    """The bundle's directory name, e.g. ``vector_add.block-128.n-1000``: readable, only [a-z0-9_.-] (never a
    path, and plain enough for any copy tool), with a hash of the parameters where it would be too long."""
    text = ".".join([kernel, *(f"{k}-{v}" for k, v in sorted(params.items()))])
    text = re.sub(r"[^a-z0-9_.-]", "_", text.lower())
    if len(text) > 120:
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
        text = f"{text[:100]}.{digest}"
    return text


def planned_launches(kernels: list[str], lessons: bool, sweep: tuple[str, ...] = ()) -> list[dict]:
    """Each kernel's default launch, then each lesson's launches at its controls' defaults, and for the lessons
    named in ``sweep`` at every option of each control (the others at their defaults); one entry per distinct
    launch, with every reason it is recorded (its roles)."""
    from visualizer.specs.catalog import KERNELS

    out: dict[str, dict] = {}

    def add(kernel: str, params: dict, role: str) -> None:
        full = full_params(kernel, params)
        lid = launch_id(kernel, full)
        entry = out.setdefault(lid, {"id": lid, "kernel": kernel, "params": full, "roles": []})
        if role not in entry["roles"]:
            entry["roles"].append(role)

    for kernel in kernels:
        add(kernel, KERNELS[kernel].defaults(), "default")
    if lessons:
        from visualizer.web.lessons import LESSONS  # plain data: each lesson's runs at its controls' defaults

        for lesson in LESSONS:
            defaults = {c.key: c.default for c in lesson.controls}
            settings = [defaults]
            if lesson.name in sweep:
                settings += [
                    {**defaults, c.key: o} for c in lesson.controls for o in c.options if o != c.default
                ]
            for values in settings:
                for role, run in lesson.runs(values).items():
                    if run.kernel in kernels:
                        add(run.kernel, run.params, f"lesson {lesson.name} ({role})")
    return list(out.values())


def lesson_names() -> list[str]:
    from visualizer.web.lessons import LESSONS

    return [lesson.name for lesson in LESSONS]


# --- where it ran ----------------------------------------------------------------------------------


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version (e.g. 550.54.15), from the kernel module, else nvidia-smi."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()[:4096]
        found = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9]+(?:\.[0-9]+)+)", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        first = (res.stdout.strip().splitlines() or [""])[0].strip()
        return first[:40] if res.returncode == 0 and re.fullmatch(r"[0-9.]+", first) else None
    except (OSError, subprocess.SubprocessError):
        return None


def cuda_driver_version() -> str | None:
    """The CUDA version the driver supports (cuDriverGetVersion), asked without importing numba."""
    for lib in ("libcuda.so.1", "libcuda.so"):
        try:
            cu = ctypes.CDLL(lib)
        except OSError:
            continue
        v = ctypes.c_int(0)
        if cu.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    return None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def recording_device(launch: dict) -> dict:
    """The set's device, from the capture itself (never assumed)."""
    gpu = launch["backend"] == "gpu"
    return {
        "name": str(launch["device_name"])[: ms.TEXT_MAX],
        "backend": launch["backend"],
        "compute_capability": launch.get("compute_capability"),
        "num_sms": launch.get("num_sms"),
        "driver": nvidia_driver() if gpu else None,
        "cuda_driver": cuda_driver_version() if gpu else None,
        "cuda_runtime": None,
    }


def versions() -> dict:
    import visualizer

    return {
        "numba": package_version("numba"),
        "numba_cuda": package_version("numba-cuda"),
        "numpy": package_version("numpy"),
        "python": platform.python_version(),
        "visualizer": visualizer.__version__,
    }


# --- the compact bundle ----------------------------------------------------------------------------


def compact_tables(cap) -> tuple[dict, dict]:
    """The capture's tables, each cut to its row cap: (name -> table, name -> [rows kept, rows recorded])."""
    tables, capped = {}, {}
    for name, df in cap.tables().items():
        cap_rows = TABLE_ROW_CAPS.get(name, OTHER_TABLE_CAP)
        if len(df) > cap_rows:
            capped[name] = [cap_rows, len(df)]
            df = df.iloc[:cap_rows]
        tables[name] = df
    return tables, capped


def write_bundle(cap, directory: Path, capped: dict, tables: dict, label: dict) -> dict:
    """One launch's bundle, atomically: its tables (Parquet, zstd), launch.json with the recording's label,
    timing.json. Returns file name -> bytes."""
    from visualizer.tools import atomic
    from visualizer.tools.bundle import _jsonable

    def fill(tmp: Path) -> dict:
        sizes = {}
        for name, df in tables.items():
            df.to_parquet(tmp / f"{name}.parquet", index=False, compression="zstd")
            sizes[f"{name}.parquet"] = (tmp / f"{name}.parquet").stat().st_size
        launch = {**cap.launch, "check": cap.check, "recorded": label, "capped": capped}
        for name, obj in (("launch", launch), ("timing", cap.timing)):
            (tmp / f"{name}.json").write_text(
                json.dumps(obj, default=_jsonable, separators=(",", ":")) + "\n"
            )
            sizes[f"{name}.json"] = (tmp / f"{name}.json").stat().st_size
        return sizes

    return atomic.write_dir(directory, fill, atomic.bundle_files(directory))


def write_index(out: Path, device: dict, vers: dict, recorded_at: str, launches: list[dict]) -> None:
    from visualizer.tools import atomic

    index = {
        "format": ms.FORMAT,
        "version": ms.VERSION,
        "tool": f"devtools.ship_h200 {vers['visualizer']}",
        "recorded_at": recorded_at,
        "device": device,
        "versions": vers,
        "total_bytes": sum(sum(r["files"].values()) for r in launches),
        "launches": launches,
    }
    atomic.write_text(out / ms.INDEX, json.dumps(index, indent=1) + "\n")


def out_problem(out: Path) -> str | None:
    """None if ``out`` can take the set: new, empty (but for a README.md: visualizer/data/h200's), or a set
    already (added to)."""
    if out.exists() and not out.is_dir():
        return f"{out} exists and is not a directory"
    if out.is_dir() and any(p.name != "README.md" for p in out.iterdir()) and not (out / ms.INDEX).is_file():
        return f"{out} is neither empty nor a measured set (no {ms.INDEX}); give a new or empty directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write to {out}: {exc.strerror or exc}"
    return None


def _try(runner, entry: dict, ladder: list[list[str]], notes: list[str], **kwargs):
    """The launch with the first set of lenses of ``ladder`` it takes (fewer after each failure, said in
    ``notes``): (capture, lenses)."""
    from visualizer.engine.run.runner import KernelError
    from visualizer.specs.catalog import LaunchError

    for i, lenses in enumerate(ladder):
        try:
            cap = runner.capture(
                entry["kernel"], entry["params"], seed=0, **kwargs, **dict.fromkeys(lenses, True)
            )
            return cap, lenses
        except (LaunchError, KernelError) as exc:
            if i == len(ladder) - 1:
                raise
            notes.append(f"with {'+'.join(lenses)}: {' '.join(str(exc).split())[:120]}")


def merge_lenses(cap, other) -> None:
    """``other``'s lens tables and launch.json entries into ``cap`` where ``cap`` has none (one launch, two
    captures: the timeline and timing of one, the lenses of the other)."""
    from visualizer.analysis.lens_tables import table_names

    for name in table_names():
        if cap.table(name) is None and other.table(name) is not None:
            cap.set_table(name, other.table(name))
    for key, value in other.launch.items():
        if key not in cap.launch:
            cap.launch[key] = value
    cap.launch["lens"] = {**(other.launch.get("lens") or {}), **(cap.launch.get("lens") or {})}


def capture_one(runner, entry: dict, repeats: int):
    """One launch as the set keeps it: (capture, lenses, note or None).

    On a GPU two captures, as the SIMT lens asks (branch probes in a loop would lengthen the work timed between
    barriers; recording accesses slows the sampled warps): the timeline, device time and barrier waits from
    one, the accesses and branches from the other (not timed). On the simulator one capture with both.
    A launch that cannot take a lens (the simulator's access limits, a lens that fails) runs with fewer.
    """
    from visualizer.engine.run.runner import KernelError
    from visualizer.specs.catalog import LaunchError

    notes: list[str] = []
    if runner.backend == "gpu":
        cap, first = _try(runner, entry, [["barriers"], []], notes, repeats=repeats)
        try:
            lensed, more = _try(
                runner, entry, [["accesses", "branches"], ["branches"]], notes, repeats=1, time_clean=False
            )
            merge_lenses(cap, lensed)
        except (LaunchError, KernelError) as exc:  # the timed capture stands without its lenses, said so
            more = []
            notes.append(f"no lenses: {' '.join(str(exc).split())[:120]}")
        return cap, [*more, *first], "; ".join(notes) or None
    cap, lenses = _try(runner, entry, [["accesses", "branches"], ["branches"], []], notes, repeats=repeats)
    return cap, lenses, "; ".join(notes) or None


def record(args) -> int:
    from visualizer.engine.run.runner import KernelError, Runner
    from visualizer.specs.catalog import KERNELS, LaunchError

    names = (
        list(KERNELS) if args.kernels is None else [k.strip() for k in args.kernels.split(",") if k.strip()]
    )
    unknown = [k for k in names if k not in KERNELS]
    if unknown or not names:
        raise CliError(
            f"unknown kernel {unknown[0]!r}; see python -m visualizer kernels" if unknown else "no kernels"
        )
    out = Path(args.out)
    problem = out_problem(out)
    if problem:
        raise CliError(problem)
    previous = None
    if (out / ms.INDEX).is_file():
        try:
            previous = ms.read_index(out)
        except ms.SetError as exc:
            raise CliError(
                f"{out} holds a measured set that cannot be read ({exc}); give a new directory"
            ) from None
    sweep = tuple(n.strip() for n in (args.lesson_sweep or "").split(",") if n.strip())
    unknown_lessons = sorted(set(sweep) - set(lesson_names()))
    if unknown_lessons:
        raise CliError(
            f"--lesson-sweep: no lesson {unknown_lessons[0]!r}; lessons: {', '.join(lesson_names())}"
        )
    if sweep and args.no_lessons:
        raise CliError("--lesson-sweep records lessons' launches: drop --no-lessons")
    plan = planned_launches(names, not args.no_lessons, sweep)
    limit = args.max_mb * 2**20
    started = time.monotonic()
    kept: dict[str, dict] = {}
    if previous is not None:  # a set to add to: its launches stay unless recorded again
        for r in previous.launches:
            kept[r.id] = {"id": r.id, "kernel": r.kernel, "params": r.params, "roles": list(r.roles),
                          "lenses": list(r.lenses), "capped": r.capped, "files": r.files}  # fmt: skip
    device, vers = None, versions()
    recorded_at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    failed, skipped = [], []
    print(f"recording {len(plan)} launches of {len(names)} kernels into {out}", flush=True)
    with Runner(args.backend) as runner:
        if args.expect_device and runner.backend != "gpu":
            raise CliError(
                f"--expect-device {args.expect_device}: this run is on the {runner.backend} backend; "
                "a simulator's captures are never labelled as a GPU's"
            )
        todo = [e for e in plan if args.again or e["id"] not in kept]
        for entry in plan:  # a launch the set holds keeps its recording, and gains any new reason for it
            if entry["id"] in kept and entry not in todo:
                kept[entry["id"]]["roles"] = list(
                    dict.fromkeys([*kept[entry["id"]]["roles"], *entry["roles"]])
                )
        if len(todo) < len(plan):
            print(f"  {len(plan) - len(todo)} of them are in the set already (--again records them again)")
        for i, entry in enumerate(todo):
            if time.monotonic() - started > args.budget_s:
                skipped += [e["id"] for e in todo[i:]]
                break
            try:
                cap, lenses, note = capture_one(runner, entry, args.repeats)
            except (LaunchError, KernelError) as exc:
                failed.append(entry["id"])
                print(f"  {entry['id']}: FAILED: {' '.join(str(exc).split())[:200]}", flush=True)
                continue
            here = recording_device(cap.launch) if device is None else device
            if args.expect_device and (
                cap.launch["backend"] != "gpu" or args.expect_device.lower() not in here["name"].lower()
            ):
                raise CliError(
                    f"--expect-device {args.expect_device}: the capture ran on {cap.launch['device_name']!r} "
                    f"({cap.launch['backend']}); nothing written"
                )
            if previous is not None and (
                previous.device.get("name") != here["name"]
                or previous.device.get("backend") != here["backend"]
            ):
                raise CliError(
                    f"{out} was recorded on {previous.device.get('name')!r}; this run is on {here['name']!r}: "
                    "a set holds one device's recordings (give a new directory)"
                )
            if device is None:
                device = here
            if cap.launch["device_name"] != device["name"]:  # one set, one device
                raise CliError(
                    f"the captures ran on two devices ({device['name']!r}, {cap.launch['device_name']!r})"
                )
            tables, capped = compact_tables(cap)
            label = {"device": device["name"], "backend": device["backend"], "driver": device["driver"],
                     "recorded_at": recorded_at, "versions": vers}  # fmt: skip
            others = sum(sum(r["files"].values()) for lid, r in kept.items() if lid != entry["id"])
            files = write_bundle(cap, out / entry["id"], capped, tables, label)
            size = sum(files.values())
            if others + size > limit:  # written, then taken back out: the set never passes its limit
                import shutil

                shutil.rmtree(out / entry["id"], ignore_errors=True)
                skipped.append(entry["id"])
                print(
                    f"  {entry['id']}: {size / 1024:,.0f} KiB would pass the {args.max_mb} MiB limit; left out"
                )
                continue
            kept[entry["id"]] = {**entry, "lenses": lenses, "capped": capped, "files": files}
            write_index(out, device, vers, recorded_at, list(kept.values()))
            t = cap.timing
            timed = (
                f"device {t['clean_ms'] * 1e3:,.1f} µs, launch overhead {t['launch_overhead_us']:,.1f} µs"
                if cap.launch["backend"] == "gpu"
                and t.get("clean_ms") is not None
                and t.get("launch_overhead_us")
                else "simulated (no device time)"
            )
            cut = "".join(f"; {n} first {a:,} of {b:,} rows" for n, (a, b) in capped.items())
            print(
                f"  {entry['id']}: {size / 1024:,.1f} KiB, {len(cap.threads):,} threads, lenses "
                f"{'+'.join(lenses) or 'none'}, {timed}{cut}" + (f" ({note})" if note else ""),
                flush=True,
            )
    total = sum(sum(r["files"].values()) for r in kept.values())
    if device is None and previous is not None:  # nothing new: the set as it was
        device, vers, recorded_at = previous.device, previous.versions, previous.recorded_at
    if device is not None:
        the_set = ms.MeasuredSet(out, device, vers, recorded_at, "", ())
        print(f"set: {len(kept)} launches, {total / 2**20:.2f} MiB in {out}; label: {the_set.label()}")
        print(f"  versions: {the_set.versions_line().lstrip('; ')}")
    if skipped:
        print(
            f"not recorded ({len(skipped)}; the time budget or the size limit): {', '.join(skipped[:8])}"
            + (" ..." if len(skipped) > 8 else "")
            + "; run the same command again to add them"
        )
    if failed:  # e.g. out_of_bounds_write faults on a GPU, as it is meant to: the others are the set
        print(f"{len(failed)} launch(es) failed and are not in the set: {', '.join(failed[:8])}")
    if not kept:
        print("error: no launch was recorded", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    from visualizer.specs.catalog import LaunchError

    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return record(args)
    except (CliError, LaunchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: writing {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
