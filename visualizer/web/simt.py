"""The SIMT lens's captures for the pages: a launch run with branch (and, on a GPU, barrier) probes,
cached per launch like every capture (web/session.py), and a visitor's kernel run again with them."""

from __future__ import annotations

import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.engine.run.cluster import gpu_for_captures
from visualizer.engine.run.runner import KernelError, default_sim_engine
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.web.session import as_text, cached_capture, capture_cache, capture_key


def lens_backend(backend: str) -> str:
    if backend == "auto":
        return "gpu" if gpu_for_captures() else "sim"
    return backend


def lens_options(backend: str, barriers: bool = False) -> dict:
    """The runner options of a lens capture: the branch probes, or (``barriers``, GPU) the barrier
    timestamps alone, so that branch probes do not stretch the work between barriers. On the simulator
    the clean build is not timed (no GPU time to compare); on a GPU it is: the cost of recording."""
    lens = {"barriers": True} if barriers else {"branches": True}
    return {**lens, "time_clean": backend == "gpu"}


def lens_capture(
    kernel: str, params: dict, backend: str = "auto", seed: int = 0, barriers: bool = False
) -> tuple[Capture | None, str | None]:
    """(capture with branch visits, or with barrier waits, None) or (None, one-line error) of a
    built-in kernel's launch."""
    backend = lens_backend(backend)
    items = tuple(sorted(params.items()))
    options = lens_options(backend, barriers)
    cap = capture_cache().get(capture_key(kernel, items, backend, seed, **options))
    if cap is not None:
        return cap, None
    where = "the GPU" if backend == "gpu" else "the CUDA simulator"
    what = "each warp's wait at each barrier" if barriers else "which lanes take each branch"
    bar = st.progress(0.0, text=f"Recording {what} of {kernel} on {where}…")

    def progress(done, total):
        bar.progress(min(done / total, 1.0), text=f"Recording {kernel}: {done} of {total} blocks")

    try:
        engine = default_sim_engine() if backend == "sim" else "fastsim"  # the branches lens is compiled
        catalog.admit_capture(kernel, dict(items), backend, sim_engine=engine)
        cap = cached_capture(kernel, items, backend, seed, progress=progress, **options)
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc))
    finally:
        bar.empty()
    return cap, None


def visitor_lens_capture(launch, backend: str, barriers: bool = False) -> tuple[Capture | None, str | None]:
    """A visitor's kernel (its SourceLaunch from the Your kernel page) run again with the lens (branch
    probes, or the barrier timestamps alone), in a fresh sandbox of its own; the caller checks that
    this visitor may run code."""
    from visualizer.engine.run.user_runner import get_user_runner

    try:
        with st.spinner("Running your kernel again with the SIMT lens…"):
            runner = get_user_runner(backend)
            options = lens_options(backend, barriers)
            return runner.capture_source(launch, **options), None
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc), limit=1000)


def sass_jumps(
    cap: Capture, arch: str = "sm_90"
) -> tuple[dict[int, int] | None, dict[int, int] | None, dict[int, int] | None, str | None]:
    """(Jump instructions per source line of the kernel's clean build, the conditional ones among them,
    its loops ptxas unrolled with a remainder (line -> U), None): analysis/branches.jumps_of and
    unrolled_loops, or (None, None, None, one line saying why there are none to show). A
    built-in kernel is compiled here; a visitor's only in its sandbox (web/asm.capture_compiled:
    compiling runs its code)."""
    from visualizer.analysis import branches
    from visualizer.engine.capture import ptx
    from visualizer.web.asm import capture_compiled

    try:
        got, why = capture_compiled(cap, arch)
    except (ptx.AsmError, LaunchError, KernelError) as exc:
        return None, None, None, " ".join(str(exc).split())[:200]
    if got is None:
        return None, None, None, why
    if not got.get("sass"):
        return None, None, None, "ptxas or nvdisasm is not installed here"
    return (*branches.jumps_of(got), branches.unrolled_loops(got), None)
