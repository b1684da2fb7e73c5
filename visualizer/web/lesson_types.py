"""The shapes of a lesson: its launch controls, the runs it makes, its questions (plain data, no Streamlit).

``lessons.py`` and ``lessons_pmpp.py`` build lessons from these; ``pages/lessons.py`` draws them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import plotly.graph_objects as go

from visualizer.analysis import lesson_answers as A


@dataclass(frozen=True)
class Control:
    """A launch setting the learner may change (a select slider, or a radio for words)."""

    key: str
    label: str
    options: tuple
    default: object
    help: str = ""


@dataclass(frozen=True)
class Run:
    kernel: str
    params: dict
    accesses: bool = False  # recorded loads/stores (always on the simulator)
    runs: int = 1  # the launch run this many times from the same inputs (analysis/races.py)
    schedule_seed: int | None = None  # their seeded schedules on the simulator
    branches: bool = False  # the SIMT lens: which lanes took each branch (analysis/branches.py)

    def options(self) -> dict:
        """The runner options beyond accesses (none for one run without the SIMT lens)."""
        out = {"runs": self.runs, "schedule_seed": self.schedule_seed} if self.runs > 1 else {}
        return {**out, "branches": True} if self.branches else out


def of(role: str, answer: Callable[..., A.Answer], *args) -> Callable[[dict, dict], A.Answer]:
    """A question's answer: ``answer`` applied to the capture of the run ``role`` (then ``args``)."""
    return lambda caps, v: answer(caps[role], *args)


def beside(role: str, other: str, answer: Callable[..., A.Answer], *args) -> Callable[[dict, dict], A.Answer]:
    """``of(role, answer, *args)`` with the same answer's value for the run ``other`` in its facts (under
    ``other``), for an explanation that compares the two runs."""

    def ask(caps, v):
        out = answer(caps[role], *args)
        out.facts[other] = answer(caps[other], *args).value
        return out

    return ask


@dataclass(frozen=True)
class Question:
    prompt: str
    answer: Callable[[dict, dict], A.Answer]  # (captures by role, control values) -> Answer
    explain: Callable[[A.Answer, dict], str]
    kind: str = "number"  # or "choice"
    choices: tuple = ()
    tolerance: float = 0.0  # relative, for numbers
    unit: str = ""


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    intro: str
    controls: tuple[Control, ...]
    runs: Callable[[dict], dict[str, Run]]
    questions: tuple[Question, ...]
    charts: Callable[[dict, dict, list], list[tuple[str, go.Figure]]]  # (captures, values, answers)
    takeaway: str = ""
    extra: dict = field(default_factory=dict)

    def defaults(self) -> dict:
        return {c.key: c.default for c in self.controls}
