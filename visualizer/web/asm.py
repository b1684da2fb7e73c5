"""A built-in kernel's PTX/SASS for the pages (Under the hood, Occupancy), compiled once per launch and arch."""

from __future__ import annotations

import streamlit as st

from visualizer.analysis import asm
from visualizer.engine import ptx


@st.cache_data(show_spinner=False, max_entries=64)
def compiled(kernel: str, params: tuple, arch: str) -> dict:
    """engine/ptx.builtin_asm: numba -> PTX, ptxas, nvdisasm in child processes with time limits."""
    return ptx.builtin_asm(kernel, dict(params), arch=arch)


def ptxas_registers(cap, arch: str = "sm_90") -> tuple[dict | None, str | None]:
    """(ptxas -v's resources of the capture's clean build, None) or (None, one-line reason)."""
    launch = cap.launch
    if launch.get("user_kernel"):
        return None, ptx.VISITOR_REFUSAL
    try:
        got = compiled(launch["kernel"], tuple(sorted(launch["params"].items())), arch)
    except ptx.AsmError as exc:
        return None, str(exc)
    if not got.get("ptxas_log"):
        return None, "ptxas is not installed here (pip install nvidia-cuda-nvcc)"
    return asm.ptxas_resources(got["ptxas_log"]), None
