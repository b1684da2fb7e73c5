"""The capture bundle on disk: one Parquet file per table, launch.json, timing.json, arrays.npz
(and runs.npz when the launch ran several times), written as a whole or not at all (``capture --out DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from visualizer.analysis import bundle_read
from visualizer.analysis.bundle_read import (  # noqa: F401  (the reader's names, re-exported)
    ACCESS_COUNTS,
    BUNDLE_MAX_COLUMNS,
    BUNDLE_MAX_JSON_BYTES,
    BUNDLE_MAX_JSON_DEPTH,
    BUNDLE_MAX_PARQUET_BYTES,
    BUNDLE_MAX_ROWS,
    BUNDLE_MAX_TEXT,
    BUNDLE_READ_BUDGET,
    COMPARE_READS,
    TIMING_NUMBERS,
    BundleError,
    check_launch,
    read_json,
    read_meta,
)
from visualizer.analysis.capture import Capture
from visualizer.tools import atomic


def save(cap: Capture, out_dir: str | Path, replaceable: dict | None = None) -> list[Path]:
    """Write the capture bundle: one Parquet file per table, launch.json, timing.json, arrays.npz.

    Atomically (tools/atomic.py): the files go into a temporary sibling directory that replaces
    ``out_dir`` only once all of them are written, so a killed or failed save (a full disk: OSError)
    leaves the previous bundle as it was, or none, never a mix. ``replaceable``: the previous bundle's
    files when ``out_dir`` was checked (``atomic.bundle_files``, before the kernel ran); only they are
    deleted, and a file made there meanwhile is kept (atomic.write_dir).
    """

    def fill(out: Path) -> list[str]:
        names = []
        for name, df in cap.tables().items():  # the capture's and every lens's (analysis/lens_tables.py)
            df.to_parquet(out / f"{name}.parquet", index=False)
            names.append(f"{name}.parquet")
        for name, obj in (("launch", {**cap.launch, "check": cap.check}), ("timing", cap.timing)):
            (out / f"{name}.json").write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")
            names.append(f"{name}.json")
        np.savez_compressed(out / "arrays.npz", **cap.inputs, **cap.outputs)
        names.append("arrays.npz")
        if cap.runs is not None:  # each output stacked over the runs (analysis/races.py)
            np.savez_compressed(out / "runs.npz", **cap.runs)
            names.append("runs.npz")
        return names

    names = atomic.write_dir(out_dir, fill, replaceable)
    return [Path(out_dir) / name for name in names]


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def load(bundle_dir: str | Path, only: dict[str, tuple[str, ...]] | None = None) -> Capture:
    """``analysis/bundle_read.load`` within this module's ``BUNDLE_READ_BUDGET``."""
    return bundle_read.load(bundle_dir, only, budget=BUNDLE_READ_BUDGET)
