"""The measured set shipped with the app: launches recorded on a GPU (the H200) and read on a machine without
one, beside the visitor's simulated run.

A set is a directory: ``index.json`` (what was recorded, where, on which device, driver and versions, when,
each bundle's files and sizes) and one compact capture bundle per launch (``devtools/ship_h200.py`` writes
them; ``bundle_read`` reads each back, bounded). Everything in it is data: a damaged or foreign index, or
a bundle that does not match its index, is *absent*, with one line saying why, never a traceback.

A launch is found by kernel and parameters. A launch that was not recorded gets the nearest recorded
launch of the same kernel, said as such (``Match.line``: "nearest recorded: n=1000 (yours n=4096)"),
never shown as the same launch. The label comes from the recording's own device: a set recorded on the
simulator says so and is never called measured.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "gpu-visualizer-measured-set"
VERSION = 1
INDEX = "index.json"
SET_ENV = "VISUALIZER_MEASURED_SET"  # another set's directory (the operator's; tests use a recorded fixture)
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "h200"  # in the package: setup.py ships it
SET_MAX_BYTES = 30 * 2**20  # the whole set, as shipped (issue 40: <= 30 MB)
INDEX_MAX_BYTES = 2 * 2**20
MAX_LAUNCHES = 2000
MAX_PARAMS = 32
TEXT_MAX = 200
LAUNCH_ID = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,159}")  # a bundle's directory name: never a path
KERNEL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
FILE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}\.(parquet|json)")
SET_READ_BUDGET = 256 * 2**20  # bytes one shipped bundle's tables may take once decoded
DEVICE_KEYS = ("name", "backend", "compute_capability", "num_sms", "driver", "cuda_driver", "cuda_runtime")
VERSION_KEYS = ("numba", "numba_cuda", "numpy", "python", "visualizer")


class SetError(ValueError):
    """A measured set or bundle that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Recorded:
    """One recorded launch of the index."""

    id: str
    kernel: str
    params: dict
    files: dict  # file name -> bytes
    lenses: tuple[str, ...] = ()
    capped: dict = field(default_factory=dict)  # table -> [rows shipped, rows recorded]
    roles: tuple[str, ...] = ()  # why it was recorded: "default", "lesson NAME"

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


@dataclass(frozen=True)
class MeasuredSet:
    root: Path
    device: dict
    versions: dict
    recorded_at: str  # ISO date-time, UTC
    tool: str
    launches: tuple[Recorded, ...]

    @property
    def measured(self) -> bool:
        """Recorded on a GPU: only then may anything say *measured*."""
        return self.device.get("backend") == "gpu"

    @property
    def date(self) -> str:
        return self.recorded_at[:10]

    def device_words(self) -> str:
        """'an NVIDIA H200' (the device's own name, with its article)."""
        name = str(self.device.get("name") or "unknown device")
        return f"{'an' if name[:1].lower() in 'aeiou' or name.startswith(('NVIDIA', 'RTX')) else 'a'} {name}"

    def label(self) -> str:
        """What a chart of this set says it is: measured on the device, the date, the driver; or, for a set
        recorded on the simulator, that it was simulated."""
        if not self.measured:
            return f"recorded on the {self.device.get('name') or 'simulator'}, {self.date}: simulated, not measured"
        driver = self.device.get("driver")
        return f"measured on {self.device_words()}, {self.date}" + (f", driver {driver}" if driver else "")

    def versions_line(self) -> str:
        d, v = self.device, self.versions
        parts = [f"{k} {d[k]}" for k in ("compute_capability", "cuda_driver") if d.get(k) is not None]
        parts += [f"{k.replace('_', '-')} {v[k]}" for k in VERSION_KEYS if v.get(k) is not None]
        return f"{self.tool}; " + ", ".join(parts) if parts else self.tool

    def of_kernel(self, kernel: str) -> list[Recorded]:
        return [r for r in self.launches if r.kernel == kernel]


@dataclass(frozen=True)
class Match:
    """The recorded launch answering a visitor's (kernel, params): the same launch, or the nearest."""

    set: MeasuredSet
    launch: Recorded
    exact: bool
    yours: dict

    def line(self) -> str:
        """One line: the same launch, or which recorded launch is nearest and how yours differs."""
        if self.exact:
            return f"the same launch ({params_text(self.launch.params)})"
        differ = [
            k
            for k in sorted(set(self.launch.params) | set(self.yours))
            if not _same(self.launch.params.get(k), self.yours.get(k))
        ]
        return (
            f"nearest recorded: {params_text(self.launch.params, differ)} "
            f"(yours {params_text(self.yours, differ)}); not your launch"
        )

    def heading(self) -> str:
        """'The same launch, measured on an NVIDIA H200' or 'The nearest recorded launch, measured on ...'."""
        what = "The same launch" if self.exact else "The nearest recorded launch"
        if not self.set.measured:
            return f"{what}, recorded on the simulator (simulated)"
        return f"{what}, measured on {self.set.device_words()}"

    def capture(self):
        """The recorded capture (raises SetError, one line): its bundle read back bounded, and checked to
        be what the index says (the kernel, its parameters, the set's device and backend)."""
        return _load_bundle(self.set, self.launch)


def params_text(params: dict, names: list[str] | None = None) -> str:
    keys = sorted(params) if names is None else names
    return ", ".join(f"{k}={params.get(k, '–')}" for k in keys) or "no parameters"


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def distance(recorded: dict, yours: dict) -> float:
    """How far two launches of one kernel are apart: per parameter, log2 of the ratio of positive
    numbers (n=1000 vs 2000 is 1), 1 for any other difference (a choice, a sign, a missing one)."""
    total = 0.0
    for key in set(recorded) | set(yours):
        a, b = recorded.get(key), yours.get(key)
        if _same(a, b):
            continue
        num = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
        if num and a > 0 and b > 0:
            total += abs(math.log2(float(a) / float(b)))
        else:
            total += 1.0 + (abs(float(a) - float(b)) / (abs(float(a)) + abs(float(b))) if num else 0.0)
    return total


def nearest(the_set: MeasuredSet, kernel: str, params: dict) -> Match | None:
    """The recorded launch of ``kernel`` with these parameters, else the nearest one (None: the kernel was
    not recorded). Ties go to the first recorded (the kernel's default launch comes first)."""
    candidates = the_set.of_kernel(kernel)
    if not candidates:
        return None
    yours = dict(params)
    best = min(candidates, key=lambda r: distance(r.params, yours))
    return Match(the_set, best, distance(best.params, yours) == 0, yours)


def set_dir() -> Path:
    """The set the app reads: ``VISUALIZER_MEASURED_SET`` when set, else the one shipped in the package."""
    env = os.environ.get(SET_ENV)
    return Path(env) if env else SHIPPED_DIR


def load_set(root: str | Path | None = None) -> tuple[MeasuredSet | None, str | None]:
    """(the set, None), or (None, one line why there is none): no set shipped, or one that is damaged."""
    root = Path(root) if root is not None else set_dir()
    try:
        if not (root / INDEX).exists():
            return (
                None,
                f"no measured set at {root.name or root} (record one with python -m devtools.ship_h200 from a checkout)",
            )
        return read_index(root), None
    except SetError as exc:
        return None, f"measured set not shown: {exc}"


def find(kernel: str, params: dict, root: str | Path | None = None) -> tuple[Match | None, str | None]:
    """(the match, None), or (None, one line why there is none)."""
    the_set, why = load_set(root)
    if the_set is None:
        return None, why
    match = nearest(the_set, kernel, params)
    return (match, None) if match is not None else (None, not_recorded(kernel, the_set))


def device_time(match: Match, recorded) -> dict:
    """What Compare reads of a recorded launch (analysis/compare.py ``recorded``): the clean build's device
    time in ms (None where the set was recorded on the simulator, or the recording holds none), the set's
    label, whether it is the launch asked for and the line that says which, the device and date."""
    ms = recorded.timing.get("clean_ms") if recorded is not None and match.set.measured else None
    ok = isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms) and ms > 0
    why = None if match.set.measured else "the set was recorded on the simulator: no device time"
    return {
        "ms": float(ms) if ok else None,
        "source": match.set.label(),
        "exact": match.exact,
        "line": match.line(),
        "short": f"{match.set.device.get('name') or 'the recording device'}, {match.set.date}",
        "why": why or (None if ok else "no device time in the recording"),
    }


def device_time_for(kernel: str, params: dict, root: str | Path | None = None) -> dict | str | None:
    """``device_time`` of the recorded launch nearest (kernel, params), read from the set; a one-line reason
    where there is none, or None where no set is shipped at all."""
    root = Path(root) if root is not None else set_dir()
    if not (root / INDEX).exists():
        return None
    the_set, why = load_set(root)
    if the_set is None:
        return why
    match = nearest(the_set, kernel, params)
    if match is None:
        return not_recorded(kernel, the_set)
    try:
        return device_time(match, match.capture())
    except SetError as exc:
        return f"the recorded launch could not be read: {exc}"


def not_recorded(kernel: str, the_set: MeasuredSet) -> str:
    return f"{kernel} was not recorded in the shipped set ({the_set.label()})"


# --- reading, bounded ----------------------------------------------------------------------------


def _regular_file(path: Path) -> Path:
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SetError(f"{path.name}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SetError(f"{path.name}: not a regular file")
    return path


def _text(value, what: str, pattern: re.Pattern | None = None, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= TEXT_MAX or any(ord(c) < 32 for c in value):
        raise SetError(f"index.json: {what} must be a short line of text")
    if pattern is not None and not pattern.fullmatch(value):
        raise SetError(f"index.json: {what} {value[:40]!r} is not a valid name")
    return value


def _count(value, what: str, hi: int = 2**62) -> int:
    if type(value) is not int or not 0 <= value <= hi:
        raise SetError(f"index.json: {what} must be a count")
    return value


def _scalar_dict(value, what: str) -> dict:
    if not isinstance(value, dict) or len(value) > MAX_PARAMS:
        raise SetError(f"index.json: {what} must be an object of at most {MAX_PARAMS} values")
    out = {}
    for k, v in value.items():
        _text(k, f"{what} name", KERNEL_NAME)
        if isinstance(v, bool) or not isinstance(v, (int, float, str, type(None))):
            raise SetError(f"index.json: {what} {k!r} must be a number or text")
        if isinstance(v, float) and not math.isfinite(v):
            raise SetError(f"index.json: {what} {k!r} must be finite")
        if isinstance(v, int) and abs(v) >= 2**63:
            raise SetError(f"index.json: {what} {k!r} is out of range")
        if isinstance(v, str):
            _text(v, f"{what} {k!r}")
        out[k] = v
    return out


def read_index(root: Path) -> MeasuredSet:
    """index.json read and checked (SetError): its format and version, the device, every launch."""
    path = _regular_file(root / INDEX)
    if path.stat().st_size > INDEX_MAX_BYTES:
        raise SetError(f"index.json: over {INDEX_MAX_BYTES >> 20} MiB; not a measured set's index")
    try:
        with open(path, "rb") as fh:
            obj = json.loads(fh.read(INDEX_MAX_BYTES + 1).decode("utf-8"))
    except RecursionError:
        raise SetError("index.json: not valid JSON (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SetError(f"index.json: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise SetError(f"index.json: not a measured set (format is not {FORMAT!r})")
    if obj.get("version") != VERSION:
        raise SetError(
            f"index.json: set version {str(obj.get('version'))[:10]}; this app reads version {VERSION}"
        )
    device = obj.get("device")
    if not isinstance(device, dict):
        raise SetError("index.json: no device")
    device = _scalar_dict({k: device.get(k) for k in DEVICE_KEYS}, "device")
    _text(device.get("name"), "device name")
    if device.get("backend") not in ("gpu", "sim"):
        raise SetError("index.json: device backend must be 'gpu' or 'sim'")
    versions = _scalar_dict({k: (obj.get("versions") or {}).get(k) for k in VERSION_KEYS}, "versions")
    recorded_at = _text(obj.get("recorded_at"), "recorded_at")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d[T ][0-9:.]+Z?", recorded_at):
        raise SetError("index.json: recorded_at must be an ISO date-time")
    tool = _text(obj.get("tool"), "tool")
    launches = obj.get("launches")
    if not isinstance(launches, list) or len(launches) > MAX_LAUNCHES:
        raise SetError(f"index.json: launches must be a list of at most {MAX_LAUNCHES}")
    out, ids, total = [], set(), 0
    for i, item in enumerate(launches):
        if not isinstance(item, dict):
            raise SetError(f"index.json: launch {i} must be an object")
        lid = _text(item.get("id"), f"launch {i} id", LAUNCH_ID)
        if lid in ids:
            raise SetError(f"index.json: launch id {lid!r} twice")
        ids.add(lid)
        files = item.get("files")
        if not isinstance(files, dict) or not 0 < len(files) <= 32:
            raise SetError(f"index.json: launch {lid!r} must list its files")
        for name, size in files.items():
            _text(name, f"launch {lid!r} file", FILE_NAME)
            total += _count(size, f"launch {lid!r} file size", SET_MAX_BYTES)
        capped = item.get("capped") or {}
        if not isinstance(capped, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(type(x) is int and x >= 0 for x in v)
            for v in capped.values()
        ):
            raise SetError(f"index.json: launch {lid!r} capped must map tables to [shipped, recorded]")
        lenses = item.get("lenses") or []
        roles = item.get("roles") or []
        for what, seq in (("lenses", lenses), ("roles", roles)):
            if not isinstance(seq, list) or len(seq) > 64:
                raise SetError(f"index.json: launch {lid!r} {what} must be a short list")
            for s in seq:
                _text(s, f"launch {lid!r} {what}")
        out.append(
            Recorded(
                lid,
                _text(item.get("kernel"), f"launch {lid!r} kernel", KERNEL_NAME),
                _scalar_dict(item.get("params") or {}, f"launch {lid!r} params"),
                dict(files),
                tuple(lenses),
                {k: list(v) for k, v in capped.items()},
                tuple(roles),
            )
        )
    if total > SET_MAX_BYTES:
        raise SetError(f"index.json: its files add up to {total / 2**20:.1f} MiB; a set is at most 30 MiB")
    return MeasuredSet(root, device, versions, recorded_at, tool, tuple(out))


def _load_bundle(the_set: MeasuredSet, rec: Recorded):
    from visualizer.analysis.bundle_read import BundleError, load

    bundle = the_set.root / rec.id
    try:
        if stat.S_ISLNK(os.lstat(bundle).st_mode) or not bundle.is_dir():
            raise SetError(f"{rec.id}: not a directory of the set")
    except OSError:
        raise SetError(f"{rec.id}: missing from the set") from None
    for name, size in rec.files.items():  # what the index promised, byte for byte in size
        path = _regular_file(bundle / name)
        if path.stat().st_size != size:
            raise SetError(f"{rec.id}/{name}: {path.stat().st_size:,} bytes, the index says {size:,}")
    try:
        cap = load(bundle, budget=SET_READ_BUDGET)
    except BundleError as exc:
        raise SetError(f"{rec.id}: {' '.join(str(exc).split())[-160:]}") from None
    launch = cap.launch
    if (
        launch.get("kernel") != rec.kernel
        or {k: launch.get("params", {}).get(k) for k in rec.params} != rec.params
    ):
        raise SetError(f"{rec.id}: its launch.json is not the launch the index names")
    if launch.get("backend") != the_set.device.get("backend") or launch.get(
        "device_name"
    ) != the_set.device.get("name"):
        raise SetError(f"{rec.id}: recorded on {str(launch.get('device_name'))[:40]!r}, not the set's device")
    return cap
