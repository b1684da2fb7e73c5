"""Reading a capture bundle back, bounded: every file of it is data from anyone (a mail, a download, the
measured set shipped with the app), checked for size, nesting and types before it is used. ``tools/bundle.py``
writes bundles (and re-exports these); the analysis layer reads them (analysis/measured_set.py)."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from visualizer.analysis.capture import Capture


class BundleError(ValueError):
    """A directory that is not a readable capture bundle; the message is one line."""


# A bundle may come from anyone (a mail, a download): everything in it is bounded before it is read.
BUNDLE_MAX_JSON_BYTES = 8 * 2**20  # launch.json / timing.json: a real bundle's are kilobytes
BUNDLE_MAX_JSON_DEPTH = 32  # a real launch.json nests 4 deep
BUNDLE_MAX_PARQUET_BYTES = 2 * 2**30  # one table's file on disk
BUNDLE_MAX_ROWS = 1 << 26  # rows of one table: a GPU capture's largest (4 GiB / 120 B per thread) is 2^25
BUNDLE_MAX_COLUMNS = 64
BUNDLE_MAX_TEXT = 1024  # characters of one text cell: a label, an array's name
BUNDLE_READ_BUDGET = 2**30  # bytes the tables of one load may take once decoded, estimated from metadata
TABLE_NAME = re.compile(
    r"[a-z][a-z0-9_]{0,63}"
)  # a table of the bundle itself: NAME.parquet beside launch.json
MAX_INT = 2**63  # any count a real capture records fits int64
# what compare reads of each table (every other table is left on disk): tools/compare.py
COMPARE_READS = {"threads": ("sm",), "requests": ("space", "op", "wavefronts", "bank_ways")}


def _one_line(exc: BaseException, limit: int = 120) -> str:
    return " ".join(str(exc).split())[:limit] or type(exc).__name__


def _own_file(root: Path, name: str) -> Path | None:
    """``root/name`` if it is a regular file of the bundle itself (None if absent). A symbolic link, a
    FIFO or a device is refused: a bundle's files are its own, read from nowhere else."""
    path = root / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise BundleError(f"{path}: a symbolic link; a bundle's files must be its own")
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"{path}: not a regular file")
    return path


def _depth(obj, limit: int) -> int:
    """The nesting depth of a parsed JSON value, walked without recursion; stops past ``limit``."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return deepest


def read_json(root: Path, name: str) -> dict:
    """A bundle's JSON object, bounded: its size, its nesting, numbers Python can hold."""
    path = _own_file(root, name)
    if path is None:
        raise BundleError(f"{root}: not a capture bundle (no {name}; write one with capture --out)")
    size = path.stat().st_size
    if size > BUNDLE_MAX_JSON_BYTES:
        raise BundleError(
            f"{path}: {size:,} bytes; a bundle's {name} is at most {BUNDLE_MAX_JSON_BYTES >> 20} MiB"
        )
    try:
        with open(path, "rb") as fh:
            text = fh.read(BUNDLE_MAX_JSON_BYTES + 1).decode("utf-8")
        obj = json.loads(text)
    except RecursionError:
        raise BundleError(f"{path}: not valid JSON (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, a 5,000-digit int
        raise BundleError(f"{path}: not valid JSON ({type(exc).__name__}: {_one_line(exc, 80)})") from None
    if not isinstance(obj, dict):
        raise BundleError(f"{path}: expected a JSON object")
    if _depth(obj, BUNDLE_MAX_JSON_DEPTH) > BUNDLE_MAX_JSON_DEPTH:
        raise BundleError(f"{path}: nests deeper than {BUNDLE_MAX_JSON_DEPTH} levels; not a capture bundle")
    return obj


def _json(path: Path) -> dict:  # kept for callers that name the file
    return read_json(path.parent, path.name)


class _Fields:
    """Type checks of the fields a reader of the bundle uses, each failure one line naming the field."""

    def __init__(self, obj: dict, where: Path):
        self.obj, self.where = obj, where

    def fail(self, key: str, want: str):
        shown = json.dumps(self.obj.get(key) if isinstance(self.obj, dict) else self.obj)[:40]
        raise BundleError(f"{self.where}: {key!r} must be {want}, got {shown}")

    def number(self, key: str, *, required=False, integer=False, lo=None, hi=None, nan=True):
        value = self.obj.get(key)
        if value is None and not required:
            return
        want = "an integer" if integer else "a number"
        if lo is not None:
            want += f" >= {lo}" if hi is None else f" in {lo}..{hi}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, want)
        if isinstance(value, float):
            if math.isnan(value):
                if integer or not nan:
                    self.fail(key, want)
                return
            if integer or math.isinf(value):
                self.fail(key, want)
        if abs(value) >= MAX_INT or (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(key, want)

    def text(self, key: str, *, required=False):
        value = self.obj.get(key)
        if (value is None and not required) or (isinstance(value, str) and len(value) <= 10_000):
            return
        self.fail(key, "a string")

    def dims(self, key: str):
        value = self.obj.get(key)
        if not (
            isinstance(value, list)
            and len(value) == 3
            and all(type(v) is int and 1 <= v < 2**31 for v in value)
        ):
            self.fail(key, "three positive integers")

    def mapping(self, key: str) -> dict:
        value = self.obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, "an object")
        return value


ACCESS_COUNTS = (
    "global_ld_requests", "global_ld_sectors", "global_st_requests", "global_st_sectors",
    "shared_ld_requests", "shared_st_requests", "shared_ld_bank_conflicts", "shared_st_bank_conflicts",
)  # fmt: skip
TIMING_NUMBERS = ("clean_ms", "instrumented_ms", "launch_overhead_us", "bytes_moved", "clean_gbs")


def check_launch(launch: dict, timing: dict, root: Path) -> None:
    """launch.json and timing.json hold what a capture writes there, of the types a reader uses."""
    f = _Fields(launch, root / "launch.json")
    for key in ("kernel", "backend", "source"):
        f.text(key, required=True)
    for key in ("sim_engine", "sim_engine_note", "sim_engine_blocks"):  # the simulator's engine (shown)
        f.text(key)
    f.dims("grid")
    f.dims("block")
    f.number("threads_per_block", required=True, integer=True, lo=1, hi=2**31)
    for key in ("threads", "blocks", "static_smem_bytes", "dynamic_smem_bytes"):
        f.number(key, integer=key in ("threads", "blocks", "dynamic_smem_bytes"), lo=0, nan=False)
    f.number("branch_efficiency", lo=0, hi=100, nan=False)
    cc = launch.get("compute_capability")
    if cc is not None and not (isinstance(cc, str) and len(cc) <= 16):
        f.fail("compute_capability", "a string like '9.0' or null")
    for key, value in f.mapping("params").items():
        if isinstance(value, (dict, list)) or (isinstance(value, int) and abs(value) >= MAX_INT):
            raise BundleError(f"{f.where}: parameter {key[:40]!r} must be a number or a string")
    for build in ("clean", "instrumented"):
        res = _Fields(f.mapping(build), f.where)
        res.number("registers_per_thread", integer=True, lo=0, hi=65_536)
        res.number("static_smem_bytes", integer=True, lo=0)
    acc = f.mapping("accesses")
    if acc:
        a = _Fields(acc, f.where)
        for key in ACCESS_COUNTS:
            a.number(key, required=not key.endswith("_requests"), integer=True, lo=0)
        a.text("source")
    row_table = launch.get("row_table")
    if row_table is not None:
        ok = (
            isinstance(row_table, list)
            and len(row_table) == 2
            and isinstance(row_table[0], str)
            and TABLE_NAME.fullmatch(row_table[0]) is not None
            and isinstance(row_table[1], list)
            and all(isinstance(c, str) and len(c) <= 64 for c in row_table[1])
        )
        if not ok:  # never a path: only the bundle's own NAME.parquet is read
            f.fail("row_table", "null or [NAME, [COLUMN, ...]] with NAME a table of the bundle (a-z, 0-9, _)")
    if acc:
        hazards = a.mapping("hazards")
        for key in ("RAW", "WAR", "WAW"):
            _Fields(hazards, f.where).number(key, integer=True, lo=0)
    branches = _Fields(f.mapping("branches"), f.where)
    branches.number("efficiency", lo=0, hi=100, nan=False)
    branches.text("source")
    check = _Fields(f.mapping("check"), f.where)  # compare says first whether an output is wrong
    correct = check.obj.get("correct")
    if correct is not None and not isinstance(correct, bool):
        check.fail("correct", "true, false or null")
    for name, res in check.mapping("outputs").items():
        if not isinstance(res, dict):
            raise BundleError(f"{f.where}: check output {name[:40]!r} must be an object")
        _Fields(res, f.where).number("mismatches", integer=True, lo=0)
    t = _Fields(timing, root / "timing.json")
    for key in TIMING_NUMBERS:
        t.number(key)


def _read_table(path: Path, columns, budget: list[int]):
    """One Parquet table, bounded before a byte of its data is decoded: the file's size, then its
    footer's rows, columns and sizes (``budget``: [the bytes this load may still decode, all it may])."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    size = path.stat().st_size
    if size > BUNDLE_MAX_PARQUET_BYTES:
        raise BundleError(
            f"{path}: {size:,} bytes; a bundle's table is at most {BUNDLE_MAX_PARQUET_BYTES >> 30} GiB"
        )
    try:
        pf = pq.ParquetFile(path, thrift_string_size_limit=1 << 20, thrift_container_size_limit=100_000)
        meta, schema = pf.metadata, pf.schema_arrow
    except Exception as exc:  # pyarrow raises several kinds for a damaged footer
        raise BundleError(f"{path}: not a readable Parquet table ({type(exc).__name__})") from None
    rows = meta.num_rows
    if not 0 <= rows <= BUNDLE_MAX_ROWS:
        raise BundleError(f"{path}: {rows:,} rows; a bundle's table holds at most {BUNDLE_MAX_ROWS:,}")
    if len(schema) > BUNDLE_MAX_COLUMNS:
        raise BundleError(f"{path}: {len(schema)} columns; at most {BUNDLE_MAX_COLUMNS}")
    names = schema.names
    wanted = names if columns is None else [c for c in columns if c in names]
    estimate = 0
    strings = []
    for name in wanted:
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            strings.append(name)  # read as a dictionary: its distinct values once, an index per row
            estimate += 4 * rows
        elif pa.types.is_null(kind):
            pass
        elif pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
            estimate += 8 * rows  # pandas may widen to float64 (a column with nulls)
        else:
            raise BundleError(
                f"{path}: column {name[:40]!r} is {str(kind)[:40]}; a bundle's tables hold numbers and text"
            )
    index = {n: i for i, n in enumerate(names)}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for name in wanted:
            if schema.field(name).type == pa.null():
                continue
            col = group.column(index[name]) if index[name] < group.num_columns else None
            if col is None or not 0 <= col.num_values <= BUNDLE_MAX_ROWS:
                raise BundleError(f"{path}: row group {g} of column {name[:40]!r} is damaged or too large")
            estimate += max(col.total_uncompressed_size, 0) if name in strings else 0
    if estimate > budget[0]:
        raise BundleError(
            f"{path}: {rows:,} rows would take about {estimate / 2**20:,.0f} MiB to read; the bundle reader's "
            f"budget is {budget[1] >> 20:,} MiB"
        )
    budget[0] -= estimate
    try:
        table = pq.read_table(
            path,
            columns=wanted,
            read_dictionary=strings,
            thrift_string_size_limit=1 << 20,
            thrift_container_size_limit=100_000,
        )
        if table.num_rows != rows:
            raise ValueError("row count differs from the footer's")
        for name in strings:  # labels and names: a megabyte "space" would cost that much per row downstream
            longest = pc.max(pc.utf8_length(table[name].combine_chunks().dictionary)).as_py() or 0
            if longest > BUNDLE_MAX_TEXT:
                raise BundleError(
                    f"{path}: column {name[:40]!r} holds a text of {longest:,} characters; at most {BUNDLE_MAX_TEXT:,}"
                )
        return table.to_pandas()
    except BundleError:
        raise
    except (MemoryError, RecursionError):
        raise BundleError(f"{path}: too large to read") from None
    except Exception as exc:  # pyarrow raises several kinds for a damaged file
        raise BundleError(f"{path}: not a readable Parquet table ({type(exc).__name__})") from None


def read_meta(root: Path) -> tuple[dict, dict, dict]:
    """launch.json (less its check), timing.json and the check, read and checked (BundleError)."""
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle directory")
    launch = read_json(root, "launch.json")
    timing = read_json(root, "timing.json")
    for key in ("kernel", "backend", "source", "grid", "block", "threads_per_block"):
        if key not in launch:
            raise BundleError(f"{root / 'launch.json'}: missing {key!r}; not a capture bundle")
    check_launch(launch, timing, root)
    return launch, timing, launch.pop("check", None) or {}


def load(
    bundle_dir: str | Path, only: dict[str, tuple[str, ...]] | None = None, budget: int = BUNDLE_READ_BUDGET
) -> Capture:
    """Read a bundle that ``save`` wrote back into a Capture (arrays.npz is not read: the tables,
    launch.json and timing.json are what comparisons and exports need). Raises BundleError.

    ``only``: the tables to read and, of each, the columns (``COMPARE_READS``: what compare needs);
    the others are left out (None); ``budget``: the bytes the tables may take once decoded. Every file
    is the bundle's own (no links, no paths out of it),
    bounded in size before it is read, and launch.json's fields are checked for the types a reader uses.
    """
    root = Path(bundle_dir)
    launch, timing, check = read_meta(root)
    budget = [budget, budget]

    def table(name: str, required: bool = False, source: str | None = None):
        if only is not None and name not in only:
            return None
        path = _own_file(root, f"{name}.parquet")
        if path is None:
            if required:
                raise BundleError(f"{root}: not a capture bundle (no {name}.parquet)")
            return None
        df = _read_table(path, None if only is None else only[name], budget)
        label = df["source"].iloc[0] if "source" in df.columns and len(df) else None
        df.attrs["source"] = str(label)[:200] if label is not None else source or launch["source"]
        return df

    threads = table("threads", required=True)
    if not {"sm", "block", "warp", "t_start_ns", "t_end_ns"} <= set(_columns(root / "threads.parquet")):
        raise BundleError(f"{root / 'threads.parquet'}: missing the block/warp/sm/time columns")
    row_name = (launch.get("row_table") or [None])[0]
    cap = Capture(
        launch, timing, {}, {}, threads, table("tiles"), table(row_name) if row_name else None, check
    )
    from visualizer.analysis.lens_tables import REGISTRY

    for lens in REGISTRY.values():  # each lens's tables, with their own label (a GPU's sampled warps)
        for name in lens.tables:
            cap.set_table(name, table(name, source=lens.source(launch)))
    req = cap.requests
    if (
        req is not None
        and len(req)
        and not ({"space", "op"} <= set(req.columns) and ({"wavefronts", "bank_ways"} & set(req.columns)))
    ):
        raise BundleError(f"{root / 'requests.parquet'}: missing the space/op/wavefronts columns")
    return cap


def _columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).schema_arrow.names  # read once already: the footer is known good
