"""A visitor's kernel run again for a page (Shared memory's and Memory access's N runs, Compare's edited
copy): always in a fresh sandbox of its own (engine/run/user_runner.py), only for a visitor who may run code,
and kept in the browser session so a page's rerun does not run their code again."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.engine.run.runner import KernelError
from visualizer.engine.run.user_runner import user_code_allowed
from visualizer.specs import source as uspec
from visualizer.web.guard import visitor_has_key

KEPT_RUNS = 4  # captures of re-runs kept per browser session (each holds N copies of the outputs)
MAX_VERSIONS = 6  # versions of the visitor's kernel Compare offers (the latest runs on Your kernel)


def may_run() -> tuple[bool, str]:
    """Whether this browser session may run the visitor's code, and why not."""
    return user_code_allowed(visitor_has_key())


def current_launch(cap: Capture) -> uspec.SourceLaunch | None:
    """The SourceLaunch the current visitor capture came from (Your kernel keeps it), if it matches."""
    launch = st.session_state.get("uk_launch")
    if (
        launch is None
        or launch.source != cap.launch.get("kernel_source")
        or launch.kernel != cap.launch.get("kernel_name")
    ):
        return None
    return launch


def _kept() -> dict:
    return st.session_state.setdefault("_visitor_reruns", {})


def rerun(launch: uspec.SourceLaunch, backend: str, key: tuple, **options) -> Capture:
    """The visitor's launch run again with ``options`` (runs, schedule_seed, accesses, ...), in a fresh
    sandbox; the same ``key`` in this session returns the kept capture. LaunchError or KernelError."""
    allowed, why = may_run()
    if not allowed:
        raise KernelError(f"running your own code is {why}")
    kept = _kept()
    if key in kept:
        return kept[key]
    from visualizer.engine.run.user_runner import get_user_runner

    cap = get_user_runner(backend).capture_source(launch, **options)
    while len(kept) >= KEPT_RUNS:
        kept.pop(next(iter(kept)))
    kept[key] = cap
    return cap


def runs_of(cap: Capture):
    """``run_many`` for web/races.runs_panel: the visitor's launch N times where it ran (the simulator
    records accesses, so the differing cells can be joined to their hazards)."""
    launch = current_launch(cap)
    if launch is None:
        return None
    backend = cap.launch["backend"]

    def run_many(n: int, schedule_seed: int | None, delays: bool) -> Capture:
        options = {"runs": n, "schedule_seed": schedule_seed, "time_clean": False, "delays": delays}
        if backend != "gpu":
            options["accesses"] = True
        return rerun(launch, backend, ("runs", id(cap), n, schedule_seed, delays), **options)

    return run_many


@dataclass(frozen=True)
class Version:
    """A run of the visitor's kernel this session: its capture and the launch that made it."""

    cap: Capture
    launch: uspec.SourceLaunch | None
    number: int

    @property
    def label(self) -> str:
        launch = self.cap.launch
        grid = "×".join(str(g) for g in launch["grid"] if g > 1) or "1"
        block = "×".join(str(b) for b in launch["block"] if b > 1) or "1"
        return f"version {self.number}: {launch['kernel_name']}, grid {grid} × block {block}, {launch['backend']}"


def keep_version(cap: Capture) -> None:
    """Remember a visitor capture as a version Compare can offer (newest last, MAX_VERSIONS kept)."""
    if not cap.launch.get("user_kernel"):
        return
    kept: list = st.session_state.setdefault("uk_versions", [])
    if any(v.cap is cap for v in kept):
        return
    number = kept[-1].number + 1 if kept else 1
    kept.append(Version(cap, current_launch(cap), number))
    del kept[:-MAX_VERSIONS]


def versions() -> list[Version]:
    return list(st.session_state.get("uk_versions") or [])


def plan_visitor_launch(
    source: str, kernel: str, backend: str, uploads: dict, filename: str = "your_kernel.py", **form
) -> uspec.SourceLaunch:
    """A visitor's launch through every check of the Your kernel page: ``form`` is its grid, block, args,
    threads_for_n and reference. One place for the page's rule: the arguments come from the visitor's
    uploads, never from a file of the server (``allow_files=False``), and the source is cut at the limit."""
    src = str(source)[: uspec.MAX_SOURCE_BYTES + 1]
    return uspec.plan_source_launch(
        src, kernel, backend=backend, filename=filename, allow_files=False, uploads=dict(uploads), **form
    )


def edited_copy(base: uspec.SourceLaunch, backend: str, source: str) -> uspec.SourceLaunch:
    """A visitor launch with another source (same kernel name, launch, arguments, reference), through
    every check of the Your kernel page again; LaunchError (one line) if the copy cannot run."""
    store = st.session_state.get("uk_kept_uploads") or {}
    grid, block = tuple(base.launch.grid), tuple(base.launch.block)
    args = {name: spec.text for name, spec in base.args.items()}
    form = {"grid": grid, "block": block, "args": args, "reference": list(base.reference)}
    return plan_visitor_launch(source, base.kernel, backend, store, base.filename, **form)
