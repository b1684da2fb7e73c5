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


def build_capture(reply: dict) -> Capture:
    """A worker's reply (engine/capture/pipeline.py), built-in kernel or a visitor's, as tables."""
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
