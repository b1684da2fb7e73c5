"""Turn the buffers a kernel recorded into tidy pandas tables, check its output, save a bundle.

Tables (each says where its numbers come from in a ``source`` column and in ``df.attrs``):

* ``threads``: one row per thread of the launch: block_x/y/z, thread_x/y/z, block (linear),
  thread (linear in the block), warp, lane, global_id, sm, t_start_ns, t_end_ns (relative to
  the kernel's first timestamp), active. When the kernel recorded per warp (big grids), sm and
  times are the warp's, and ``recorded_per`` says so.
* ``tiles``: block, block_x/y/z, step, operand, row0, col0, rows, cols, t_ns.
* a per-kernel row-state table (``softmax_state``: m, l; ``reduction_tree``: value):
  block, block_x/y/z, step, row, and the values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from visualizer.analysis.provenance import MEASURED_GPU, SIMULATED
from visualizer.specs import catalog

GPU_SOURCE, SIM_SOURCE = MEASURED_GPU, SIMULATED  # the labels of a capture's tables (provenance.py)


@dataclass
class Capture:
    launch: dict
    timing: dict
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    threads: pd.DataFrame
    tiles: pd.DataFrame | None = None
    row_state: pd.DataFrame | None = None
    check: dict = field(default_factory=dict)
    # memory accesses recorded on the simulator (visualizer/analysis/memory.py); None when not recorded
    accesses: pd.DataFrame | None = None
    requests: pd.DataFrame | None = None
    hazards: pd.DataFrame | None = None
    # runs > 1 (analysis/races.py): each output after every run, stacked (N, *shape); None for one run
    runs: dict[str, np.ndarray] | None = None
    # the SIMT lens (analysis/branches.py): a warp's visits of each branch, barrier waits (GPU); None
    # when not recorded
    branches: pd.DataFrame | None = None
    barriers: pd.DataFrame | None = None
    # the tables of lenses registered beside these (analysis/lens_tables.py), by name
    lens_tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        """A lens's table by name (None: not recorded)."""
        return getattr(self, name) if name in _FIELDS else self.lens_tables.get(name)

    def set_table(self, name: str, df: pd.DataFrame | None) -> None:
        if name in _FIELDS:
            setattr(self, name, df)
        elif df is not None:
            self.lens_tables[name] = df

    @property
    def measured(self) -> bool:
        return self.launch["backend"] == "gpu"

    @property
    def source(self) -> str:
        return self.launch["source"]

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"threads": self.threads}
        if self.tiles is not None:
            out["tiles"] = self.tiles
        if self.row_state is not None:
            out[self.launch["row_table"][0]] = self.row_state
        from visualizer.analysis.lens_tables import table_names

        for name in table_names():  # every lens's tables it recorded (possibly empty)
            if self.table(name) is not None:
                out[name] = self.table(name)
        return out


_FIELDS = ("accesses", "requests", "hazards", "branches", "barriers")


class ReplyError(ValueError):
    """A worker's reply that is not one, or does not answer the request that asked for it (one line)."""


@dataclass(frozen=True)
class Expected:
    """What a request asked for, to hold its reply against (a visitor's run: UserRunner makes it).

    ``arrays``: every array argument, name -> (dtype string, shape); dtype None for a record of plain
    fields (numba's RNG states), whose shape alone is known before the run."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arrays: dict[str, tuple[str | None, tuple[int, ...]]]
    user_kernel: bool = True
    runs: int = 1
    parts: frozenset[str] = frozenset()  # what the lenses asked for add: "accesses", "lens" (Lens.reply_part)


INT64_MAX = 2**63 - 1


def _quote(value) -> str:
    """A value from a reply in a message: one line (a numpy array prints on several), a few words."""
    return " ".join(str(value).split())[:40]


def _count(value, what: str, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= INT64_MAX:
        raise ReplyError(f"{what} is not a count ({_quote(value)})")
    return value


def _dims(value, what: str) -> tuple[int, int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ReplyError(f"{what} is not three dimensions")
    return tuple(_count(v, what, 1) for v in value)


def _array(value, what: str, ndim: int | None = None) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        raise ReplyError(f"{what} is not a plain array")
    if ndim is not None and value.ndim != ndim:
        raise ReplyError(f"{what} has {value.ndim} dimensions, not {ndim}")
    return value


def _finite(obj, what: str, depth: int = 0) -> None:
    """Numbers in launch.json and timing: finite, and ints within int64 (pages format and convert them)."""
    if depth > 16:
        raise ReplyError(f"{what} is nested too deep")
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, int):
        if abs(obj) > INT64_MAX:
            raise ReplyError(f"a number in {what} is out of range")
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ReplyError(f"a number in {what} is not finite ({obj})")
    elif isinstance(obj, dict):
        for v in obj.values():
            _finite(v, what, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _finite(v, what, depth + 1)


def check_reply(reply, expected: Expected | None = None) -> None:
    """Refuse (ReplyError, one line) a reply whose numbers would make anything here wrong or huge,
    before a table is made from it: the launch it claims agrees with itself (threads = blocks x threads
    per block, grid x block) and its buffers with the launch; with ``expected``, it answers that request
    (grid, block, every array's dtype and shape, user_kernel, the runs and lenses asked for)."""
    try:
        _check_reply(reply, expected)
    except ReplyError:
        raise
    except Exception as exc:  # a value of a type no check foresaw (an array where a word was): one line
        raise ReplyError(f"it is malformed ({type(exc).__name__})") from None


def _check_reply(reply, expected: Expected | None) -> None:
    if not isinstance(reply, dict):
        raise ReplyError("the reply is not a mapping")
    for key in ("launch", "timing", "buffers", "outputs", "inputs"):
        if not isinstance(reply.get(key), dict):
            raise ReplyError(f"the reply has no {key}")
    launch, bufs = reply["launch"], reply["buffers"]
    grid, block = _dims(launch.get("grid"), "grid"), _dims(launch.get("block"), "block")
    blocks, tpb = math.prod(grid), math.prod(block)
    if (
        _count(launch.get("blocks"), "blocks") != blocks
        or _count(launch.get("threads_per_block"), "threads per block") != tpb
        or _count(launch.get("threads"), "threads") != blocks * tpb
    ):
        raise ReplyError(
            f"its launch does not add up: {_quote(launch.get('threads'))} threads claimed for grid "
            f"{list(grid)} x block {list(block)}"
        )
    per = launch.get("recorded_per")
    if not isinstance(per, str) or per not in ("thread", "warp") or not isinstance(launch.get("source"), str):
        raise ReplyError("its launch says neither how it recorded nor where its numbers come from")
    records = blocks * tpb if per == "thread" else blocks * ((tpb + 31) // 32)
    trace, active = _array(bufs.get("trace"), "trace", 2), _array(bufs.get("active"), "active", 1)
    if trace.shape != (3, records) or trace.dtype.kind not in "iu" or active.shape != (blocks * tpb,):
        raise ReplyError(f"its trace buffers do not match its launch of {blocks * tpb:,} threads")
    for name, table, ndim in (("tiles", "tile_operands", 4), ("rows", "row_table", 4)):
        if name in bufs:
            _array(bufs[name], name, ndim)
            if not launch.get(table):
                raise ReplyError(f"it has {name} but no {table}")
    if expected is not None:
        _check_expected(reply, launch, grid, block, expected)


def _check_expected(reply: dict, launch: dict, grid, block, want: Expected) -> None:
    if grid != tuple(want.grid) or block != tuple(want.block):
        raise ReplyError(
            f"it claims grid {list(grid)} x block {list(block)}; the run asked for "
            f"grid {list(want.grid)} x block {list(want.block)}"
        )
    claimed = launch.get("user_kernel")
    if want.user_kernel and claimed is not True:
        raise ReplyError("it does not say it ran a visitor's kernel (user_kernel)")
    if not want.user_kernel and claimed is not None and claimed is not False:
        raise ReplyError("it claims a visitor's kernel")
    if want.user_kernel:
        if (
            launch.get("tile_operands")
            or launch.get("row_table")
            or {"tiles", "rows"} & set(reply["buffers"])
        ):
            raise ReplyError("a visitor's kernel records no tiles or row state")
        check = reply.get("check")
        if not isinstance(check, dict) or not (
            check.get("correct") is None or type(check["correct"]) is bool
        ):
            raise ReplyError("it has no reference check")
        for key in ("kernel", "kernel_name", "filename", "kernel_source"):
            if not isinstance(launch.get(key), str):
                raise ReplyError(f"its launch has no {key}")
        if not isinstance(launch.get("params"), dict) or not isinstance(launch.get("written"), list):
            raise ReplyError("its launch has no parameters")
    _finite(launch, "its launch")
    _finite(reply["timing"], "its timing")
    outputs, inputs = reply["outputs"], reply["inputs"]
    if set(outputs) & set(inputs) or set(outputs) | set(inputs) != set(want.arrays):
        raise ReplyError("its arrays are not the kernel's array arguments, each once")
    for name, got in {**outputs, **inputs}.items():
        _check_array(got, name, want.arrays[name])
    written = launch.get("written")
    if want.user_kernel and (
        not all(isinstance(w, str) for w in written) or sorted(written) != sorted(outputs)
    ):
        raise ReplyError("its written arrays are not its outputs")
    lens = launch.get("lens")
    if lens is not None and (not isinstance(lens, dict) or (lens and "lens" not in want.parts)):
        raise ReplyError("it holds a SIMT lens nobody asked for")
    if want.runs > 1 or "runs" in reply or "runs" in launch:  # runs=1 with a schedule seed has them too
        runs, info = reply.get("runs"), launch.get("runs")
        if not isinstance(runs, dict) or not isinstance(info, dict) or type(info.get("count")) is not int:
            raise ReplyError(f"it does not hold the {want.runs} run(s) asked for")
        if info["count"] != want.runs:
            raise ReplyError(f"it does not hold the {want.runs} run(s) asked for")
        for name, got in runs.items():
            if name not in want.arrays:
                raise ReplyError(f"a run of an array that is not an argument ({_quote(name)})")
            dtype, shape = want.arrays[name]
            _check_array(got, f"runs of {name}", (dtype, (want.runs, *shape)))
        correct = reply.get("runs_correct")
        if want.user_kernel and (
            not isinstance(correct, list)
            or len(correct) != want.runs
            or not all(c is None or type(c) is bool for c in correct)
        ):
            raise ReplyError("its runs are not each checked")
    if "accesses" in reply:
        if "accesses" not in want.parts:
            raise ReplyError("it holds memory accesses nobody asked for")
        _check_accesses(reply["accesses"])


def _check_array(got, name: str, want: tuple) -> None:
    dtype, shape = want
    _array(got, _quote(name))
    if got.shape != tuple(shape):
        raise ReplyError(f"{name} has shape {got.shape}, not {tuple(shape)}")
    if dtype is None:  # a record of plain fields
        if got.dtype.fields is None:
            raise ReplyError(f"{name} is not a record array")
    elif (got.dtype.kind, got.dtype.itemsize) != (np.dtype(dtype).kind, np.dtype(dtype).itemsize):
        raise ReplyError(f"{name} has dtype {got.dtype}, not {np.dtype(dtype)}")  # byte order aside


def _check_accesses(acc) -> None:
    if not isinstance(acc, dict):
        raise ReplyError("its memory accesses are not a mapping")
    records, columns, arrays = acc.get("records"), acc.get("columns"), acc.get("arrays")
    _array(records, "access records", 2)
    if (
        records.dtype.kind not in "iu"
        or not isinstance(columns, list)
        or len(columns) != records.shape[1]
        or not all(isinstance(c, str) for c in columns)
    ):
        raise ReplyError("its access records do not match their columns")
    if not isinstance(arrays, list) or not all(
        isinstance(a, dict)
        and isinstance(a.get("name"), str)
        and isinstance(a.get("space"), str)
        and type(a.get("itemsize")) is int
        and isinstance(a.get("shape"), list)
        and len(a["shape"]) <= 32
        and all(type(n) is int and 0 <= n <= INT64_MAX for n in a["shape"])
        for a in arrays
    ):
        raise ReplyError("its accessed arrays are not described")


def _label(df: pd.DataFrame, source: str) -> pd.DataFrame:
    df["source"] = pd.Categorical([source] * len(df)) if len(df) else pd.Series([], dtype="category")
    df.attrs["source"] = source
    return df


def block_coords(block: np.ndarray, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gx, gy, _ = grid
    return block % gx, (block // gx) % gy, block // (gx * gy)


def threads_table(launch: dict, trace: np.ndarray, active: np.ndarray) -> pd.DataFrame:
    """``trace``: one (sm, t_start, t_end) record per row, per thread or per warp."""
    grid, blk = launch["grid"], launch["block"]
    tpb = launch["threads_per_block"]
    g = np.arange(launch["threads"], dtype=np.int64)
    block, thread = g // tpb, g % tpb
    bx, by, bz = block_coords(block, grid)
    warp, lane = thread // 32, thread % 32
    if launch["recorded_per"] == "warp":
        slot = block * ((tpb + 31) // 32) + warp
    else:
        slot = g
    rec = trace[slot]
    t0 = trace[:, 1].min() if len(trace) else 0
    small = np.int32 if launch["threads"] < 2**31 else np.int64
    df = pd.DataFrame(
        {
            "block_x": bx.astype(np.int32),
            "block_y": by.astype(np.int32),
            "block_z": bz.astype(np.int32),
            "thread_x": (thread % blk[0]).astype(np.int16),
            "thread_y": ((thread // blk[0]) % blk[1]).astype(np.int16),
            "thread_z": (thread // (blk[0] * blk[1])).astype(np.int16),
            "block": block.astype(small),
            "thread": thread.astype(np.int16),
            "warp": warp.astype(np.int16),
            "lane": lane.astype(np.int8),
            "global_id": g.astype(small),
            "sm": rec[:, 0].astype(np.int32),
            "t_start_ns": rec[:, 1] - t0,
            "t_end_ns": rec[:, 2] - t0,
            "active": active.astype(bool),
        }
    )
    df.attrs["recorded_per"] = launch["recorded_per"]
    return _label(df, launch["source"])


def tiles_table(launch: dict, tiles: np.ndarray, t0: int) -> pd.DataFrame:
    operands = launch["tile_operands"]
    nblocks, nsteps, nops, _ = tiles.shape
    block, step, op = np.meshgrid(np.arange(nblocks), np.arange(nsteps), np.arange(nops), indexing="ij")
    flat = tiles.reshape(-1, 5)
    keep = flat[:, 4] >= 0  # slots the kernel never reached (e.g. causally skipped) stay -1
    block, step, op, flat = block.ravel()[keep], step.ravel()[keep], op.ravel()[keep], flat[keep]
    bx, by, bz = block_coords(block, launch["grid"])
    df = pd.DataFrame(
        {
            "block": block,
            "block_x": bx,
            "block_y": by,
            "block_z": bz,
            "step": step,
            "operand": pd.Categorical(np.asarray(operands)[op], categories=operands),
            "row0": flat[:, 0],
            "col0": flat[:, 1],
            "rows": flat[:, 2],
            "cols": flat[:, 3],
            "t_ns": flat[:, 4] - t0,
        }
    )
    df = df.sort_values(["block", "step", "operand"], kind="stable").reset_index(drop=True)
    return _label(df, launch["source"])


def row_state_table(launch: dict, rows: np.ndarray) -> pd.DataFrame:
    _, columns = launch["row_table"]
    nblocks, nsteps, nrows, _ = rows.shape
    block, step, row = np.meshgrid(np.arange(nblocks), np.arange(nsteps), np.arange(nrows), indexing="ij")
    flat = rows.reshape(-1, 2)
    keep = ~np.isnan(flat[:, 0])
    bx, by, bz = block_coords(block.ravel()[keep], launch["grid"])
    data = {
        "block": block.ravel()[keep],
        "block_x": bx,
        "block_y": by,
        "block_z": bz,
        "step": step.ravel()[keep],
        "row": row.ravel()[keep],
    }
    for i, name in enumerate(columns):
        data[name] = flat[keep, i]
    return _label(pd.DataFrame(data), launch["source"])


def check_outputs(spec: catalog.KernelSpec, params: dict, inputs: dict, outputs: dict) -> dict:
    """Compare every output with the numpy reference."""
    expected = spec.reference(inputs, params)
    atol = spec.atol(params) if callable(spec.atol) else spec.atol
    result = {"correct": True, "outputs": {}, "rtol": spec.rtol, "atol": atol}
    for name, want in expected.items():
        got = outputs[name]
        close = np.isclose(got, want, rtol=spec.rtol, atol=atol)
        bad = int((~close).sum())
        result["outputs"][name] = {
            "mismatches": bad,
            "elements": int(close.size),
            "max_abs_error": float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0,
            "nonfinite": int((~np.isfinite(got)).sum()) if got.dtype.kind in "fc" else 0,  # inf/NaN
        }
        result["correct"] &= bad == 0
    result["expected_wrong"] = spec.deliberately_wrong
    return result


def build_capture(reply: dict, expected: Expected | None = None) -> Capture:
    """A worker's reply (engine/capture/pipeline.py), built-in kernel or a visitor's, as tables; checked
    first (``check_reply``: against the request when ``expected`` says what it asked for), ReplyError."""
    check_reply(reply, expected)
    launch, timing, bufs = reply["launch"], reply["timing"], reply["buffers"]
    records = bufs["trace"].T  # the kernel writes (3, records); tables read one record per row
    t0 = int(records[:, 1].min()) if len(records) else 0
    threads = threads_table(launch, records, bufs["active"])
    if len(records):
        timing["kernel_span_ns"] = int(records[:, 2].max() - t0)  # from in-kernel timestamps
    tiles = tiles_table(launch, bufs["tiles"], t0) if "tiles" in bufs else None
    row_state = row_state_table(launch, bufs["rows"]) if "rows" in bufs else None
    outputs = dict(reply["outputs"])
    if launch.get("user_kernel"):  # checked in the worker against the visitor's own reference
        ins, check = dict(reply["inputs"]), reply["check"]
    else:
        spec, inputs = catalog.get(launch["kernel"]), reply["inputs"]
        ins = {a: inputs[a] for a in spec.args if a in inputs and a not in spec.outputs}
        check = check_outputs(spec, launch["params"], inputs, outputs)
    cap = Capture(launch, timing, ins, outputs, threads, tiles, row_state, check)
    from visualizer.analysis.lens_tables import REGISTRY

    for lens in REGISTRY.values():  # each lens's tables from its part of the reply
        if lens.present(reply):
            lens.build(cap, reply, t0)
    if "runs" in reply:
        from visualizer.analysis import races

        n = launch["runs"]["count"]
        if launch.get("user_kernel"):
            correct = list(reply.get("runs_correct") or [None] * n)
        else:
            params, runs = launch["params"], reply["runs"]
            each = [{**outputs, **races.run_arrays(runs, i)} for i in range(n)]
            correct = [bool(check_outputs(spec, params, inputs, run)["correct"]) for run in each]
        races.attach(cap, reply["runs"], correct)
    return cap
