"""Where a number comes from: the project's truth mechanism, in one place.

Every table a capture becomes carries one of three kinds of label, and every chart prints it:
*measured* (read off a real GPU: ``%smid``, ``%globaltimer``, device time), *simulated* (computed by
running the kernel on the CUDA simulator: values, accesses, races are exact; SM ids and times are
not the simulator's to know), *modelled* (a formula or schedule model, named in brackets).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MEASURED_GPU = "measured (GPU)"
SIMULATED = "simulated (CUDA simulator; SM ids and times modelled)"
# loads, stores and atomics recorded on the GPU by the chosen warps only (engine/instrument/accesses.py)
MEASURED_GPU_SAMPLED = "measured (GPU, sampled warps)"
# ... and the same recording made on the simulator (a launch too big to record every thread of)
SIMULATED_SAMPLED = "simulated (CUDA simulator, sampled warps recorded as a GPU records them)"


def backend_source(simulator: bool) -> str:
    """The label of everything a capture on this backend recorded."""
    return SIMULATED if simulator else MEASURED_GPU


def modelled(how: str) -> str:
    return f"modelled ({how})"


def is_measured(source: str) -> bool:
    return str(source).startswith("measured")


def source_of(df: pd.DataFrame) -> str:
    """A table's label: ``df.attrs['source']`` (set by the code that made the table), else its
    ``source`` column, else 'unknown source'."""
    if df.attrs.get("source"):
        return str(df.attrs["source"])
    if "source" in df.columns and len(df):
        return str(df["source"].iloc[0])
    return "unknown source"


def labelled(df: pd.DataFrame, source: str, column: bool = True) -> pd.DataFrame:
    """Label a table in place: ``attrs['source']`` and (``column``) a one-category ``source`` column."""
    if column:
        df["source"] = pd.Categorical.from_codes(np.zeros(len(df), np.int8), categories=[source])
    df.attrs["source"] = source
    return df
