"""A built-in kernel's PTX/SASS for the pages (Under the hood, Occupancy), compiled once per launch and arch."""

from __future__ import annotations

import streamlit as st

from visualizer.analysis import asm
from visualizer.engine.capture import ptx


@st.cache_data(show_spinner=False, max_entries=64)
def compiled(kernel: str, params: tuple, arch: str) -> dict:
    """engine/ptx.builtin_asm: numba -> PTX, ptxas, nvdisasm in child processes with time limits."""
    return ptx.builtin_asm(kernel, dict(params), arch=arch)


@st.cache_data(show_spinner=False, max_entries=64)
def sass_pair(sides: tuple, arch: str = "sm_90") -> tuple:
    """Compare's SASS counts: each built-in (kernel, sorted params) side's clean build compiled for ``arch``
    (engine/ptx.sass_pair, side by side), a dict or the one line why none."""
    return ptx.sass_pair(sides, arch)


def visitor_compiled(cap, arch: str) -> tuple[dict | None, str | None]:
    """(A visitor's kernel compiled in a sandbox of its own, None) or (None, one-line reason).

    Compiling runs the visitor's module (numba compiles Python by running it), so it needs the same
    permission as running it, and happens only in the visitor-code sandbox (engine/run/user_runner.py).
    Kept in this browser session, by source and arch."""
    from visualizer.engine.run.runner import KernelError
    from visualizer.engine.run.user_runner import get_user_runner, user_code_allowed
    from visualizer.web.guard import visitor_has_key

    allowed, why = user_code_allowed(visitor_has_key())
    if not allowed:
        return None, f"compiling your kernel runs its code, and running your own code is {why}"
    launch = st.session_state.get("uk_launch")
    if launch is None or launch.source != cap.launch.get("kernel_source"):
        return None, "run your kernel on the Your kernel page in this session first"
    key = (hash(launch.source), launch.kernel, arch)
    done = st.session_state.setdefault("uk_asm", {})
    if key not in done:
        try:
            done.clear()  # one kernel's PTX at a time per session
            done[key] = get_user_runner("sim").ptx_source(launch, arch)
        except KernelError as exc:
            return None, str(exc)
    return done[key], None


def capture_compiled(cap, arch: str) -> tuple[dict | None, str | None]:
    """(The capture's clean build compiled for ``arch``: engine/ptx's reply, None) or (None, one-line
    reason). A built-in kernel is compiled here (cached); a visitor's only in its sandbox. Compile
    errors of a built-in raise (ptx.AsmError, LaunchError): each caller words them."""
    launch = cap.launch
    if launch.get("user_kernel"):
        return visitor_compiled(cap, arch)
    return compiled(launch["kernel"], tuple(sorted(launch["params"].items())), arch), None


def ptxas_registers(cap, arch: str = "sm_90") -> tuple[dict | None, str | None]:
    """(ptxas -v's resources of the capture's clean build, None) or (None, one-line reason)."""
    try:
        got, why = capture_compiled(cap, arch)
    except ptx.AsmError as exc:
        return None, str(exc)
    if got is None:
        return None, why
    if not got.get("ptxas_log"):
        return None, "ptxas is not installed here (pip install nvidia-cuda-nvcc)"
    resources = asm.ptxas_resources(got["ptxas_log"])
    remember_count(cap, arch, resources)
    return resources, None


COUNT_KEYS = {  # what the pages read of ptxas's count
    "registers",
    "spill_stores_bytes",
    "spill_loads_bytes",
    "smem_bytes",
}


def _count_key(cap, arch: str) -> tuple:
    launch = cap.launch
    if launch.get("user_kernel"):
        return ("yours", hash(launch.get("kernel_source")), launch.get("kernel_name"), arch)
    return (launch["kernel"], tuple(sorted(launch["params"].items())), arch)


def remember_count(cap, arch: str, resources: dict) -> None:
    """ptxas has counted the capture's clean build for ``arch`` (Under the hood, Occupancy's button):
    every page of this session uses the count from now on (``ptxas_count``)."""
    if resources.get("registers") is not None:
        st.session_state.setdefault("ptxas_counts", {})[_count_key(cap, arch)] = dict(resources)


def ptxas_count(cap, arch: str = "sm_90") -> dict | None:
    """ptxas -v's resources of the capture's clean build for ``arch`` where ptxas has counted them,
    else None (the pages then say what they assume). A visitor's kernel on the simulator is compiled
    for a GPU before it runs (engine/capture/ptx.gpu_check), so its capture carries the count."""
    if cap is None:
        return None
    known = cap.launch.get("gpu_compile") if cap.launch.get("backend") == "sim" else None
    res = known.get("resources") if isinstance(known, dict) and known.get("arch") == arch else None
    # a loaded bundle's too: held to its form before a page computes with it
    numbers = isinstance(res, dict) and all(isinstance(v, int) and 0 <= v < 1 << 20 for v in res.values())
    if numbers and set(res) >= COUNT_KEYS and 1 <= res["registers"] <= 255:
        return res
    return (st.session_state.get("ptxas_counts") or {}).get(_count_key(cap, arch))


def count_words(arch: str = "sm_90") -> str:
    """Where a register count from ptxas_count came from, for a caption."""
    return f"counted by ptxas -v for {arch}, clean build"
