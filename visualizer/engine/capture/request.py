"""The capture request, typed: what the runners send a worker and the front ends read.

On the wire (the runner's pipe, the sandbox's, the cluster) a request stays a plain dict of plain
values (engine/run/wire.py checks a visitor's); :meth:`CaptureRequest.from_wire` reads it once, at the
worker's door, and everything below reads attributes. A lens's options are the keys its registry
entry names (engine/lenses/): ``lenses`` maps each lens asked for to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from visualizer.specs.launch import MAX_RUNS, LaunchError

SIM_ENGINES = ("compiled", "fastsim")  # the simulator's engines (--sim-engine), the default first
DEFAULT_SIM_ENGINE = SIM_ENGINES[0]


class RequestError(LaunchError):
    """A request that cannot be run as it is; one line."""


@dataclass(frozen=True)
class SourceKernel:
    """A visitor's kernel: its module's text and the launch parsed from their form (specs/source.py)."""

    text: str
    filename: str
    arg_order: list[str]  # the kernel's parameters, in order
    args: dict[str, dict]  # parameter -> its argument spec (text, kind, dtype, shape, value, array)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    reference: list[str] = field(default_factory=list)
    rtol: float = 1e-4
    atol: float = 1e-5


@dataclass(frozen=True)
class CaptureRequest:
    kernel: str  # a built-in kernel's name, or the visitor's kernel function's name
    params: dict = field(default_factory=dict)  # a built-in kernel's parameters
    source: SourceKernel | None = None  # a visitor's kernel (op "source")
    seed: int = 0  # the inputs' seed
    repeats: int = 20  # timed launches per build (GPU)
    time_clean: bool = True  # time the builds (False: the instrumented build launches once)
    torch: bool = True  # time torch's op beside a built-in kernel (GPU)
    runs: int = 1  # the launch run this many times from the same inputs
    schedule_seed: int | None = None  # the seeded schedules (and delays) those runs take
    lenses: dict[str, dict] = field(default_factory=dict)  # each lens asked for -> its options
    id: Any = None  # the runner's request id, echoed on every message
    cpu_limit_s: float | None = None  # the worker's CPU limit for this request (engine/run/worker.limit_cpu)
    # the simulator's engine: "compiled" (engine/compiled/, where it takes the kernel and the lenses) or
    # "fastsim"; a GPU capture ignores it
    sim_engine: str = DEFAULT_SIM_ENGINE

    def __post_init__(self):
        if not 1 <= int(self.runs) <= MAX_RUNS:
            raise RequestError(f"runs must be 1 to {MAX_RUNS}, not {self.runs}")
        if self.sim_engine not in SIM_ENGINES:
            raise RequestError(
                f"unknown simulator engine {str(self.sim_engine)[:40]!r} (known: {', '.join(SIM_ENGINES)})"
            )

    @property
    def op(self) -> str:
        return "source" if self.source is not None else "capture"

    def wants(self, lens: str) -> bool:
        return lens in self.lenses

    def planned_sim_engine(self) -> tuple[str, str | None]:
        """(the engine a simulator capture of this request asks for, why not the compiled one): its
        ``sim_engine``, and fastsim where a lens it asks for has no compiled hook (engine/lenses/ a lens's
        ``backends``). The compiled engine may still hand the launch to fastsim (a kernel it can't take)."""
        from visualizer.engine.lenses import REGISTRY

        if self.sim_engine == "fastsim":
            return "fastsim", "--sim-engine fastsim was asked for"
        for name in self.lenses:
            lens = REGISTRY.get(name)
            if lens is not None and lens.wanted(self, "sim") and "compiled" not in lens.backends:
                return "fastsim", f"the {name} lens is not on the compiled engine yet"
        return "compiled", None

    @classmethod
    def from_wire(cls, d: dict) -> CaptureRequest:
        """The request a runner sent (a dict of plain values)."""
        from visualizer.engine.lenses import REGISTRY

        lenses = {}
        for name, lens in REGISTRY.items():
            if d.get(name):
                lenses[name] = {o.key: d[o.key] for o in lens.options if d.get(o.key) is not None}
        source = None
        if d.get("op") in ("source", "ptx_source"):
            source = SourceKernel(
                text=d["source"], filename=d["filename"], arg_order=list(d["params"]), args=d["args"],
                grid=tuple(d["grid"]), block=tuple(d["block"]), reference=list(d.get("reference") or []),
                rtol=float(d.get("rtol", 1e-4)), atol=float(d.get("atol", 1e-5)),
            )  # fmt: skip
        return cls(
            kernel=d["kernel"],
            params={} if source is not None else dict(d.get("params") or {}),
            source=source,
            seed=int(d.get("seed", 0)),
            repeats=int(d.get("repeats", 20)),
            time_clean=bool(d.get("time_clean", True)),
            torch=bool(d.get("torch", True)),
            runs=int(d.get("runs", 1)),
            schedule_seed=d.get("schedule_seed"),
            lenses=lenses,
            id=d.get("id"),
            cpu_limit_s=d.get("cpu_limit_s"),
            sim_engine=str(d.get("sim_engine") or DEFAULT_SIM_ENGINE),
        )

    @classmethod
    def of(cls, fields: dict, lenses: dict) -> CaptureRequest:
        """A request from a runner's arguments: ``fields`` (kernel, params, seed...; a visitor's
        SourceLaunch.request()) and ``lenses``, each lens asked for and its options by their request
        keys (``accesses=True, sample_blocks="0,5"``); an unknown key is a RequestError."""
        from visualizer.engine.lenses import REGISTRY

        known = {k for name, lens in REGISTRY.items() for k in (name, *(o.key for o in lens.options))}
        unknown = sorted(set(lenses) - known)
        if unknown:
            raise RequestError(
                f"unknown capture option {unknown[0]!r}; the lenses' are: {', '.join(sorted(known))}"
            )
        return cls.from_wire({**fields, **{k: v for k, v in lenses.items() if v is not None}})

    def to_wire(self) -> dict:
        """The plain dict a runner sends (what ``from_wire`` reads back)."""
        out: dict = {"kernel": self.kernel, "seed": self.seed, "repeats": self.repeats,
                     "time_clean": self.time_clean, "torch": self.torch, "runs": self.runs,
                     "schedule_seed": self.schedule_seed, "sim_engine": self.sim_engine}  # fmt: skip
        if self.source is not None:
            s = self.source
            out.update(op="source", source=s.text, filename=s.filename, params=list(s.arg_order), args=s.args,
                       grid=list(s.grid), block=list(s.block), reference=list(s.reference), rtol=s.rtol,
                       atol=s.atol)  # fmt: skip
        else:
            out["params"] = dict(self.params)
        for name, options in self.lenses.items():
            out[name] = True
            out.update(options)
        if self.id is not None:
            out["id"] = self.id
        if self.cpu_limit_s is not None:
            out["cpu_limit_s"] = self.cpu_limit_s
        return out


@dataclass(frozen=True)
class AsmRequest:
    """A request for a kernel's PTX/SASS (engine/capture/ptx_compile.py): the kernel as a capture names it,
    the architecture, and whether SASS is wanted."""

    kernel: CaptureRequest
    arch: str = "sm_90"
    sass: bool = True

    @classmethod
    def from_wire(cls, d: dict) -> AsmRequest:
        return cls(CaptureRequest.from_wire(d), str(d.get("arch", "sm_90")), bool(d.get("sass", True)))
