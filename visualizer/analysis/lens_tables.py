"""The lenses' tables: how each lens's part of a reply becomes Capture tables, one entry per lens.

The engine's lens (engine/lenses/) puts its part into the reply; its entry here turns that part into
tables (``build``), says which tables they are (the bundle writes and reads ``NAME.parquet`` for each),
where their numbers come from when a bundle is read back (``source``) and what the CLI prints of them
(``describe``). analysis/capture.build_capture, tools/bundle.py and tools/capture_report.py loop over
:data:`REGISTRY`; none names a lens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _never(cap) -> list[str]:
    return []


@dataclass(frozen=True)
class LensTables:
    name: str  # the lens's name (engine/lenses/)
    tables: tuple[str, ...]  # the Capture tables it makes
    present: Callable[[dict], bool]  # reply -> whether it carries this lens's part
    build: Callable  # (cap, reply, t0) -> sets its tables on cap (Capture.set_table)
    describe: Callable = _never  # cap -> the CLI's lines about it
    source: Callable[[dict], str | None] = lambda launch: None  # launch.json -> its tables' label


REGISTRY: dict[str, LensTables] = {}


def register(entry: LensTables) -> LensTables:
    REGISTRY[entry.name] = entry
    return entry


def table_names() -> list[str]:
    return [t for entry in REGISTRY.values() for t in entry.tables]


# --- the built-in lenses -------------------------------------------------------------------------


def _build_accesses(cap, reply, t0) -> None:
    from visualizer.analysis import memory

    cap.accesses, cap.requests, cap.hazards, cap.launch["accesses"] = memory.build(reply["accesses"])


def _describe_accesses(cap) -> list[str]:
    from visualizer.analysis.memory import describe

    info = cap.launch.get("accesses")
    return describe(info) if cap.accesses is not None and info else []


def _build_simt(cap, reply, t0) -> None:
    from visualizer.analysis import branches

    cap.branches, cap.barriers, summaries = branches.from_capture(cap.launch, reply["buffers"], t0)
    cap.launch.update(summaries)


def _describe_simt(cap) -> list[str]:
    from visualizer.analysis import branches

    out = branches.describe(cap.launch["branches"]) if cap.branches is not None else []
    return out + (branches.describe_barriers(cap.launch["barriers"]) if cap.barriers is not None else [])


register(
    LensTables(
        "accesses",
        ("accesses", "requests", "hazards"),
        lambda reply: "accesses" in reply,
        _build_accesses,
        _describe_accesses,
        lambda launch: (launch.get("accesses") or {}).get("source"),
    )  # fmt: skip
)
register(LensTables("simt", ("branches", "barriers"), lambda reply: bool(reply["launch"].get("lens")),
                    _build_simt, _describe_simt))  # fmt: skip
