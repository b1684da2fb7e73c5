"""The compiled engine behind numba-cuda's simulator launch: ``kernel[grid, block](*args)`` in a simulator
process runs on the compiled engine when it takes the kernel, else on fastsim (installed first) with
one line saying why. ``install()`` once per process; ``engine("fastsim")`` turns it off for a while.

Every launch is recorded in ``LAUNCHES`` (the last ``KEEP``): which engine ran, why not the compiled one,
compile and run CPU seconds: what launch.json says about the engine.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from visualizer.engine.compiled.engine import launch
from visualizer.engine.compiled.translate import NotCompiled

ENGINES = ("compiled", "fastsim")
KEEP = 64
LAUNCHES: list[dict] = []
_state = threading.local()
_installed = {"done": False, "default": "fastsim"}


def current_engine() -> str:
    return getattr(_state, "engine", _installed["default"])


@contextmanager
def engine(name: str):
    """Launches inside run on ``name`` ("compiled": the compiled engine, fastsim where it can't)."""
    if name not in ENGINES:
        raise ValueError(f"unknown simulator engine {name!r} (known: {', '.join(ENGINES)})")
    previous = current_engine()
    _state.engine = name
    try:
        yield
    finally:
        _state.engine = previous


def _record(entry: dict) -> None:
    LAUNCHES.append(entry)
    del LAUNCHES[:-KEEP]


def _host_array(arg):
    """A kernel argument as the compiled engine takes it (numpy), or None if it can't."""
    if isinstance(arg, np.ndarray):
        return arg
    inner = getattr(arg, "_ary", None)  # the simulator's device array
    if isinstance(inner, np.ndarray):
        return inner
    value = getattr(arg, "value", None)  # cuda.In/Out/InOut
    if isinstance(value, np.ndarray):
        return value
    return None


def install(default: str = "fastsim") -> None:
    """fastsim, then the compiled engine in front of it (idempotent). ``default``: the engine of launches
    outside any ``engine(...)`` block; "fastsim" leaves a process (a test session) as it was."""
    if default not in ENGINES:
        raise ValueError(f"unknown simulator engine {default!r} (known: {', '.join(ENGINES)})")
    _installed["default"] = default
    if _installed["done"]:
        return
    from numba.cuda.simulator import kernel as simkernel

    from visualizer.engine.sim import fastsim

    fastsim.install()
    previous = simkernel.FakeCUDAKernel.__call__

    def call(self, *args):
        if self._device or simkernel._kernel_context or current_engine() != "compiled":
            return previous(self, *args)
        why = None
        if self.dynshared_size:
            why = "dynamic shared memory is not compiled yet"
        elif self._debug:
            why = "debug=True (fastsim checks every float operation)"
        host = []
        for a in args:
            arr = _host_array(a)
            if arr is None and not isinstance(a, (int, float, complex, bool, np.generic)):
                why = why or f"an argument of type {type(a).__name__} is not compiled"
            host.append(arr if arr is not None else a)
        schedule = fastsim._state.schedule
        if why is None:
            try:
                sched = None if schedule is None else (schedule.seed, schedule.run)
                report = launch(self.fn, self.grid_dim, self.block_dim, host, schedule=sched)
                _record({"kernel": self.fn.__name__, **report.as_dict()})
                return None
            except NotCompiled as e:
                why = e.reason
        _record({"kernel": self.fn.__name__, "engine": "fastsim", "fallback": why})
        return previous(self, *args)

    simkernel.FakeCUDAKernel.__call__ = call
    _installed["done"] = True


def last_launch() -> dict | None:
    return LAUNCHES[-1] if LAUNCHES else None
