"""The compiled engine behind numba-cuda's simulator launch: ``kernel[grid, block](*args)`` in a simulator
process runs on the compiled engine when it takes the kernel, else on fastsim (installed first) with
one line saying why. ``install()`` once per process; ``engine("fastsim")`` turns it off for a while.

Every launch is recorded in ``LAUNCHES`` (the last ``KEEP``): which engine ran, why not the compiled one,
compile and run CPU seconds: what launch.json says about the engine.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from contextlib import contextmanager

import numpy as np

from visualizer.engine.compiled.engine import launch
from visualizer.engine.compiled.translate import NotCompiled
from visualizer.specs.launch import LaunchError

ENGINES = ("compiled", "fastsim")
KEEP = 64
LAUNCHES: list[dict] = []
_state = threading.local()
_installed = {"done": False, "default": "fastsim"}
_sequence = itertools.count(1)  # every recorded launch's number ("seq"): ``since`` reads them back
# a kernel exec'd from a rewritten tree (an instrumented build) -> (its FunctionDef, its namespace): its
# file holds another source, so the engine compiles it from the tree (engine.kernel_tree)
_trees: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_progress = {
    "blocks_done": None
}  # blocks_done(n): a compiled launch finished n blocks (the worker's progress)


def on_blocks_done(callback) -> None:
    """``callback(n)`` after each compiled launch, with its blocks (fastsim counts its own, one by one)."""
    _progress["blocks_done"] = callback


def register_tree(py_fn, tree, namespace: dict) -> None:
    """Launches of ``py_fn`` compile from ``tree`` (its FunctionDef) and ``namespace``, not its file."""
    _trees[py_fn] = (tree, namespace)


def mark() -> int:
    """The number of the last launch recorded so far (``since(mark())`` is what comes after)."""
    return LAUNCHES[-1]["seq"] if LAUNCHES else 0


def since(seq: int) -> list[dict]:
    """The launches recorded after ``seq`` (``mark``), oldest first (at most ``KEEP``)."""
    return [e for e in LAUNCHES if e["seq"] > seq]


def current_engine() -> str:
    return getattr(_state, "engine", _installed["default"])


class FallbackRefused(LaunchError):
    """A launch the compiled engine did not take, too big for fastsim (``engine(refuse_fallback=...)``)."""


@contextmanager
def engine(name: str, refuse_fallback: str | None = None):
    """Launches inside run on ``name`` ("compiled": the compiled engine, fastsim where it can't).
    ``refuse_fallback``: why fastsim may not run them instead (a launch admitted at the compiled engine's
    limits, over fastsim's): such a launch raises FallbackRefused, naming both reasons, instead."""
    if name not in ENGINES:
        raise ValueError(f"unknown simulator engine {name!r} (known: {', '.join(ENGINES)})")
    previous, previous_refusal = current_engine(), getattr(_state, "refuse_fallback", None)
    _state.engine, _state.refuse_fallback = name, refuse_fallback
    try:
        yield
    finally:
        _state.engine, _state.refuse_fallback = previous, previous_refusal


def _record(entry: dict) -> None:
    entry["seq"] = next(_sequence)
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
        return (
            value.copy() if type(arg).__name__ == "In" else value
        )  # In: the kernel's writes stay on the device
    return None


def install(default: str = "fastsim") -> None:
    """fastsim, then the compiled engine in front of it (idempotent). ``default``: the engine of launches
    outside any ``engine(...)`` block; "fastsim" leaves a process (a test session) as it was."""
    if default not in ENGINES:
        raise ValueError(f"unknown simulator engine {default!r} (known: {', '.join(ENGINES)})")
    _installed["default"] = default
    if _installed["done"]:
        return
    from visualizer.engine.sim import fastsim

    fastsim.install()

    def call(self, args, previous):  # a launch from the host (fastsim.route_launches)
        if current_engine() != "compiled" or self.grid_dim is None or self.block_dim is None:
            return previous(self, *args)  # unconfigured (kernel(...) without [grid, block]): numba's error
        why = None
        if not np.prod(self.grid_dim) or not np.prod(self.block_dim):
            why = "a launch of no threads (a zero grid or block dimension)"
        elif self.dynshared_size:
            why = "dynamic shared memory is not compiled yet"
        elif self.extensions:
            why = "kernel extensions (prepare_args) are not compiled"
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
                tree, namespace = _trees.get(self.fn, (None, None))
                report = launch(None if tree is not None else self.fn, self.grid_dim, self.block_dim, host,
                                schedule=sched, tree=tree, namespace=namespace)  # fmt: skip
                _record({"kernel": self.fn.__name__, **report.as_dict()})
                if _progress["blocks_done"] is not None:
                    g = self.grid_dim
                    _progress["blocks_done"](int(np.prod(g if isinstance(g, tuple) else (g,))))
                return None
            except NotCompiled as e:
                why = e.reason
        _record({"kernel": self.fn.__name__, "engine": "fastsim", "fallback": why})
        refusal = getattr(_state, "refuse_fallback", None)
        if refusal:
            raise FallbackRefused(f"{refusal}; the compiled engine did not take this kernel: {why}")
        return previous(self, *args)

    fastsim.route_launches(call)
    _installed["done"] = True


def last_launch() -> dict | None:
    return LAUNCHES[-1] if LAUNCHES else None
