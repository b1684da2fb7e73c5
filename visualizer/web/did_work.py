"""Which threads "did work", said by the rule that counted them.

A built-in kernel's spec names its rule (``active_when``, e.g. ``row < n and col < n``). A visitor's
kernel has none: the instrumenter infers one from its guards (an early ``if ...: return`` or a
whole-body ``if``), which counts every thread of a kernel without such a guard, halo loaders of a
tiled stencil included. When the visitor's accesses were all recorded, the threads that wrote global
memory are counted instead, from the recording.
"""

from __future__ import annotations

from visualizer.analysis.capture import Capture
from visualizer.analysis.memory import global_writers
from visualizer.specs import catalog


def did_work(cap: Capture) -> tuple[str, int, str]:
    """(label, threads, how they were counted) for the page's "did work" metric."""
    active = int(cap.threads["active"].sum())
    launch = cap.launch
    if not launch.get("user_kernel"):
        spec = catalog.KERNELS.get(launch["kernel"])
        spec_rule = spec.active_when if spec is not None else None
        rule = f"`{spec_rule}`" if spec_rule else "its bounds check"
        return "did work", active, f"threads for which the kernel spec's rule {rule} held"
    summ = launch.get("accesses") or {}
    if cap.accesses is not None and summ.get("sample") is None:
        return (
            "wrote global memory",
            global_writers(cap.accesses),
            "threads that stored to (or atomically updated) a global array, from the recorded accesses",
        )
    return (
        "past its guards",
        active,
        "threads not stopped by the kernel's guards (an early `if …: return`, or an `if` around the whole "
        "body); a thread that only loads a halo counts. Record its accesses to count the threads that "
        "wrote global memory.",
    )
