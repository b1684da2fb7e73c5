"""The run configuration: sidebar widgets <-> URL query parameters <-> cached captures.

A configuration is plain data (kernel, backend, params); the URL holds it so a teacher can share
a link that reproduces the view. Nothing here executes anything a visitor typed: parameters are
integers checked against each kernel's declared ranges before any launch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import streamlit as st

from visualizer import catalog
from visualizer.catalog import LaunchError
from visualizer.runner import BACKENDS, KernelError, get_runner, gpu_present
from visualizer.trace import Capture

DEFAULT_KERNEL = "vector_add"
HIDDEN_KERNELS = ("out_of_bounds_write",)  # the fault demo is for tests and the CLI


@dataclass(frozen=True)
class RunConfig:
    kernel: str = DEFAULT_KERNEL
    backend: str = "auto"
    params: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    def to_query(self) -> dict[str, str]:
        return {"kernel": self.kernel, "backend": self.backend, **{k: str(v) for k, v in self.params}}


def visible_kernels() -> list[str]:
    return [k for k in catalog.KERNELS if k not in HIDDEN_KERNELS]


def config_from_query(query: dict[str, str]) -> tuple[RunConfig, str | None]:
    """The configuration a URL asks for, or the defaults plus a one-line error for a malformed one."""
    kernel = query.get("kernel", DEFAULT_KERNEL)
    backend = query.get("backend", "auto")
    try:
        spec = catalog.get(kernel)
        if kernel in HIDDEN_KERNELS:
            raise LaunchError(f"kernel {kernel!r} cannot be run from the app")
        if backend not in BACKENDS:
            raise LaunchError(f"unknown backend {backend!r} in the link; choose one of {', '.join(BACKENDS)}")
        given = {
            k: v for k, v in query.items() if k not in ("kernel", "backend", "page", "q_tile", "row", "sm")
        }
        values = spec.resolve(given)
        return RunConfig(kernel, backend, tuple(sorted(values.items()))), None
    except LaunchError as exc:
        spec = catalog.get(DEFAULT_KERNEL)
        return RunConfig(DEFAULT_KERNEL, "auto", tuple(sorted(spec.defaults().items()))), f"Bad link: {exc}"


@st.cache_resource(show_spinner=False)
def runner_for(backend: str):
    """One worker process per backend, shared by every browser session (launches are serialised)."""
    return get_runner(backend)


class CaptureCache:
    """Captures shared by every browser session, least recently used dropped first.

    Not st.cache_data: a miss must drive a progress bar while the simulator runs, and cache_data
    cannot replay Streamlit elements created outside the cached function. Captures are read-only.
    """

    def __init__(self, max_entries: int = 48):
        self.max_entries = max_entries
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


@st.cache_resource(show_spinner=False)
def capture_cache() -> CaptureCache:
    return CaptureCache()


def cached_capture(kernel: str, params: tuple, backend: str, seed: int = 0, progress=None) -> Capture:
    """The capture of (kernel, params, backend, seed), launched only the first time it is asked for."""
    key = (kernel, tuple(sorted(params)), backend, seed)
    cap = capture_cache().get(key)
    if cap is None:
        cap = runner_for(backend).capture(kernel, dict(params), seed=seed, progress=progress)
        capture_cache().put(key, cap)
    return cap


def backend_badge(cap: Capture) -> str:
    launch = cap.launch
    if launch["backend"] == "gpu":
        return (
            f":green-badge[GPU: {launch['device_name']} · sm_{launch['compute_capability'].replace('.', '')}]"
        )
    return ":orange-badge[CUDA simulator on CPU]\n\nSM ids and times are modelled, not measured."


def run_capture(config: RunConfig, seed: int = 0) -> tuple[Capture | None, str | None]:
    """Capture (from cache when possible), with progress for slow simulator runs; errors as one line."""
    try:
        backend = "gpu" if config.backend == "auto" and gpu_present() else config.backend
        backend = "sim" if backend == "auto" else backend
        catalog.plan_launch(config.kernel, config.param_dict, "sim" if backend == "sim" else "gpu")
        label = (
            "Running on the GPU…"
            if backend == "gpu"
            else "Running on the CUDA simulator (one CPU thread per CUDA thread)…"
        )
        with st.status(label, expanded=False) as status:
            bar = st.progress(0.0, text="starting the worker")

            def progress(done, total):
                bar.progress(min(done / total, 1.0), text=f"{done} of {total} blocks simulated")

            cap = cached_capture(config.kernel, config.params, backend, seed, progress=progress)
            status.update(label=f"Ran {config.kernel} on {cap.launch['device_name']}", state="complete")
        return cap, None
    except (LaunchError, KernelError) as exc:
        return None, str(exc)


def current_capture() -> Capture | None:
    """The capture the sidebar's Run produced for this session (pages read it, never re-run)."""
    return st.session_state.get("capture")


def require_capture() -> Capture:
    cap = current_capture()
    if cap is None:
        st.info("Pick a kernel in the sidebar and press **Run**.")
        st.stop()
    return cap
