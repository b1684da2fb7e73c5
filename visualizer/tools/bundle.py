"""The capture bundle on disk: one Parquet file per table, launch.json, timing.json, arrays.npz
(and runs.npz when the launch ran several times), written as a whole or not at all (``capture --out DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from visualizer.analysis.capture import Capture
from visualizer.tools import atomic


def save(cap: Capture, out_dir: str | Path) -> list[Path]:
    """Write the capture bundle: one Parquet file per table, launch.json, timing.json, arrays.npz.

    Atomically (tools/atomic.py): the files go into a temporary sibling directory that replaces
    ``out_dir`` only once all of them are written, so a killed or failed save (a full disk: OSError)
    leaves the previous bundle as it was, or none, never a mix. ``out_dir`` is replaced as a whole.
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

    names = atomic.write_dir(out_dir, fill)
    return [Path(out_dir) / name for name in names]


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


class BundleError(ValueError):
    """A directory that is not a readable capture bundle; the message is one line."""


BUNDLE_MAX_JSON_BYTES = 64 * 2**20  # launch.json / timing.json: a real bundle's are kilobytes


def _json(path: Path) -> dict:
    if not path.is_file():
        raise BundleError(
            f"{path.parent}: not a capture bundle (no {path.name}; write one with capture --out)"
        )
    if path.stat().st_size > BUNDLE_MAX_JSON_BYTES:
        raise BundleError(f"{path}: too large for a bundle's {path.name}")
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise BundleError(f"{path}: expected a JSON object")
    return obj


def load(bundle_dir: str | Path) -> Capture:
    """Read a bundle that ``save`` wrote back into a Capture (arrays.npz is not read: the tables,
    launch.json and timing.json are what comparisons and exports need). Raises BundleError."""
    import pandas as pd

    root = Path(bundle_dir)
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle directory")
    launch = _json(root / "launch.json")
    timing = _json(root / "timing.json")
    for key in ("kernel", "backend", "source", "grid", "block", "threads_per_block"):
        if key not in launch:
            raise BundleError(f"{root / 'launch.json'}: missing {key!r}; not a capture bundle")
    check = launch.pop("check", {})

    def table(name: str, required: bool = False, source: str | None = None):
        path = root / f"{name}.parquet"
        if not path.is_file():
            if required:
                raise BundleError(f"{root}: not a capture bundle (no {path.name})")
            return None
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several kinds for a damaged file
            raise BundleError(f"{path}: not a readable Parquet table ({type(exc).__name__})") from None
        df.attrs["source"] = (
            str(df["source"].iloc[0]) if "source" in df.columns and len(df) else source or launch["source"]
        )
        return df

    threads = table("threads", required=True)
    if not {"sm", "block", "warp", "t_start_ns", "t_end_ns"} <= set(threads.columns):
        raise BundleError(f"{root / 'threads.parquet'}: missing the block/warp/sm/time columns")
    row_name = (launch.get("row_table") or [None])[0]
    cap = Capture(
        launch, timing, {}, {}, threads, table("tiles"), table(row_name) if row_name else None, check
    )
    from visualizer.analysis.lens_tables import REGISTRY

    for lens in REGISTRY.values():  # each lens's tables, with their own label (a GPU's sampled warps)
        for name in lens.tables:
            cap.set_table(name, table(name, source=lens.source(launch)))
    return cap
