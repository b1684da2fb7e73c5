"""The lenses: what a capture records inside the kernel besides its trace, each one object.

A lens is a subclass of :class:`Lens` in one module of this folder, listed in :data:`REGISTRY`
(``register``). It says its name and options (request keys, CLI flags), and has one hook per backend:

* **the instrumenter** (a GPU): ``passes(kernel)``, the instrumenter passes it adds to the traced
  build (engine/instrument/instrumenter.py), and ``buffers()``, the zeroed device buffers those
  passes' parameters take, by parameter name;
* **the simulator**: ``listener(arrays, excluded)``, an object the simulator calls at every array
  access, barrier, atomic and thread switch of the instrumented launch (engine/sim/fastsim.py
  ``Listener``); where a lens has none, its passes run on the simulator as on a GPU;
* **the compiled simulator** (engine/compiled/, a backend named "compiled" whose ``listens`` is
  False): it runs the instrumented build itself, so it takes the instrumenter's hook, the same passes
  and buffers as a GPU; a lens records there when "compiled" is in its ``backends``;
* per run: ``before_run(run, buffers)`` (a run's own table, the delays');

and ``reply(reply, launch)`` turns what came back into its part of the reply. The front ends
(capture/builtin.prepare_builtin, capture/source.prepare_source), the capture sequence
(capture/pipeline.py), the runners, the CLI and the notebook loop over :class:`Lenses` and the
registry; none names a lens. The analysis side (tables, bundle, report) has its own registry:
analysis/lens_tables.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from visualizer.specs.launch import Launch


@dataclass(frozen=True)
class Option:
    """A request key a lens reads beside its own name, and the CLI flag that sets it."""

    key: str
    help: str
    type: type = str


@dataclass
class KernelView:
    """What a lens may know of the kernel being captured, whichever front end made the Job."""

    params: list[str]  # the kernel's own parameter names, in order
    probe_params: frozenset[str] = frozenset()  # those that are probe buffers, not its data
    tree: Any = None  # a visitor's module AST (None: a built-in kernel's function, see namespace)
    namespace: dict = field(default_factory=dict)  # where its constants and shared shapes are looked up
    host_arrays: dict[str, np.ndarray] = field(default_factory=dict)  # parameter name -> host array
    estimates: dict = field(default_factory=dict)  # a built-in spec's extra: name -> fn(values) estimate
    values: dict = field(default_factory=dict)  # the launch's parameter values (for the estimates)


@dataclass
class Context:
    """One capture as a lens sees it."""

    backend: Any  # engine/capture/backend.py Backend
    request: Any  # engine/capture/request.py CaptureRequest
    launch: Launch  # its grid and block (and blocks, threads_per_block)


class Lens:
    """One lens on one capture (module docstring). Subclasses set the class attributes and override
    the hooks they need; an instance lives for one capture and keeps what its hooks need after."""

    name: ClassVar[str]
    help: ClassVar[str] = ""  # the CLI flag's help
    options: ClassVar[tuple[Option, ...]] = ()
    # the backends it records on: "gpu", "sim" (the Python simulator), "compiled" (engine/compiled/)
    # (a lens without "compiled" runs its capture on fastsim, which says so: capture/pipeline.py)
    backends: ClassVar[frozenset[str]] = frozenset({"gpu", "sim", "compiled"})
    # the part of a reply it adds that analysis/capture.check_reply holds against the request: "accesses"
    # (reply["accesses"]), "lens" (launch.json's "lens"), None (none checked there)
    reply_part: ClassVar[str | None] = None

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.options_given = ctx.request.lenses.get(self.name, {})
        self.info: dict = {}  # what its passes recorded about the kernel (sites), by pass name
        self.made: tuple = ()  # the passes it gave this capture's build

    @classmethod
    def wanted(cls, request, backend_name: str) -> bool:
        return cls.name in request.lenses and backend_name in cls.backends

    @classmethod
    def problem(cls, given: dict, backend_name: str) -> str | None:
        """A one-line reason the options ``given`` (every lens option's value by key, and ``runs``,
        ``seed``) cannot go together on this backend ("auto": not known yet); None where they can."""
        return None

    @classmethod
    def reply_bytes(cls, simulator: bool, blocks: int, threads_per_block: int, threads: int) -> int:
        """The most bytes this lens adds to a reply (the sandbox's reply limit)."""
        return 0

    # --- the instrumenter ------------------------------------------------------------------
    def passes(self, kernel: KernelView) -> tuple:
        return ()

    def built(self, infos: dict, kernel: KernelView) -> None:
        """The build is made: ``infos`` holds each pass's info by pass name."""
        self.info = {p.name: infos[p.name] for p in self.made}

    def buffers(self) -> dict[str, np.ndarray]:
        return {}

    # --- the simulator ---------------------------------------------------------------------
    def listener(self, arrays: dict, excluded: set[str]):
        """The simulator's listener for the instrumented launch (None: none). ``arrays``: kernel
        parameter name -> device array; ``excluded``: those that are probe buffers."""
        return None

    def error(self, exc: BaseException) -> Exception | None:
        """The error to raise instead of ``exc`` from the instrumented launch (None: ``exc``)."""
        return None

    # --- runs and the reply ----------------------------------------------------------------
    def before_run(self, run: int, buffers: dict) -> None:
        pass

    def reply(self, reply: dict, launch: dict) -> None:
        pass


REGISTRY: dict[str, type[Lens]] = {}


def register(lens: type[Lens]) -> type[Lens]:
    """Add a lens to the registry (a decorator); the order is the order passes are applied in."""
    REGISTRY[lens.name] = lens
    return lens


def all_options() -> list[tuple[str, Option]]:
    """(lens name, option) of every registered lens, its own flag first."""
    out = []
    for name, lens in REGISTRY.items():
        out.append((name, Option(name, lens.help, bool)))
        out += [(name, o) for o in lens.options]
    return out


class Lenses:
    """The lenses one capture asked for, in registry order, used by both front ends and the pipeline."""

    def __init__(self, backend, request, grid, block):
        ctx = Context(backend, request, Launch(tuple(grid), tuple(block), {}))
        self.ctx = ctx
        self.active: list[Lens] = [cls(ctx) for cls in REGISTRY.values() if cls.wanted(request, backend.name)]
        self._listeners: list = []

    def __iter__(self):
        return iter(self.active)

    def not_on(self, backend_name: str) -> str | None:
        """The first lens this capture records with that has no hook on ``backend_name`` (None: all have)."""
        return next((lens.name for lens in self.active if backend_name not in lens.backends), None)

    def passes(self, kernel: KernelView) -> tuple:
        """Every pass to build the traced kernel with, in registry order."""
        out: tuple = ()
        for lens in self.active:
            lens.made = lens.passes(kernel)
            out += lens.made
        return out

    def built(self, infos: dict, kernel: KernelView) -> None:
        for lens in self.active:
            lens.built(infos, kernel)

    def buffers(self) -> dict[str, np.ndarray]:
        out: dict = {}
        for lens in self.active:
            out.update(lens.buffers())
        return out

    @staticmethod
    def buffer_args(added) -> list[tuple[str, str]]:
        """The traced build's trailing ("buffer", name) arguments for the parameters the passes
        appended after the trace buffers: a lens's buffers are named by its parameters."""
        return [("buffer", name) for name in added]

    def listeners(self, arrays: dict, excluded: set[str]) -> list:
        self._listeners = [x for lens in self.active if (x := lens.listener(arrays, excluded)) is not None]
        return self._listeners

    def error(self, exc: BaseException) -> Exception | None:
        for lens in self.active:
            err = lens.error(exc)
            if err is not None:
                return err
        return None

    def before_run(self, run: int, buffers: dict) -> None:
        for lens in self.active:
            lens.before_run(run, buffers)

    def reply(self, reply: dict, launch: dict) -> None:
        """Each lens's part of the reply, from what came back (``reply["buffers"]``, its listener)."""
        for lens in self.active:
            lens.reply(reply, launch)


def reply_parts(names) -> frozenset[str]:
    """The reply parts (``Lens.reply_part``) the lenses named add."""
    return frozenset(p for n in names if n in REGISTRY and (p := REGISTRY[n].reply_part) is not None)


def reply_bytes(request, simulator: bool, blocks: int, threads_per_block: int) -> int:
    """The most bytes the lenses a request asks for add to its reply."""
    threads = blocks * threads_per_block
    backend = "sim" if simulator else "gpu"
    return sum(
        lens.reply_bytes(simulator, blocks, threads_per_block, threads)
        for lens in REGISTRY.values()
        if lens.wanted(request, backend)
    )


# the built-in lenses' modules, in the order their passes apply (the traced build's parameters follow it)
BUILTIN = ("branches", "accesses", "delays")


def _load_builtin_lenses() -> None:
    import importlib

    for module in BUILTIN:  # each registers its lenses
        importlib.import_module(f"{__name__}.{module}")


_load_builtin_lenses()
