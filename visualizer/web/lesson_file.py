"""A lesson's words from a TOML file beside its Python (a teacher edits them there), joined to the Python's
runs, answers and charts.

The file (``lessons.toml``, ``lessons_pmpp.toml``) holds each lesson's title, intro, takeaway, controls and
questions; an explanation that only quotes numbers is a format template there. The Python gives each
lesson its runs, one answer per question (an ``Ask`` where it also explains or computes), and its charts.
Everything is checked when the module loads: a misspelt key, a lesson or question on one side only, a
template naming something it is not given, each fails at import with the file and lesson named.
"""

from __future__ import annotations

import string
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from visualizer.analysis import lesson_answers as A
from visualizer.web.lesson_types import Control, Lesson, Question

TEMPLATE_NAMES = {"value", "facts", "source", "v"}  # what every explanation template may quote
# (the keys a table must have, the keys it may have)
LESSON_KEYS = ({"title", "intro"}, {"title", "intro", "takeaway", "controls", "questions"})
CONTROL_KEYS = ({"key", "label", "default"}, {"key", "label", "options", "default", "help"})
QUESTION_KEYS = ({"prompt"}, {"prompt", "explain", "kind", "choices", "tolerance", "unit"})


@dataclass(frozen=True)
class Ask:
    """A question's Python side beyond its answer: ``explain``, a function (answer, control values) -> text,
    where the sentence branches on the numbers (the file then has no template); ``more``, the names the
    file's template quotes beyond ``TEMPLATE_NAMES``, each computed by a function (answer, control values);
    ``choices`` where the code, not the file, knows them."""

    answer: Callable[[dict, dict], A.Answer]
    explain: Callable[[A.Answer, dict], str] | None = None
    more: dict[str, Callable[[A.Answer, dict], object]] = field(default_factory=dict)
    choices: tuple = ()


@dataclass(frozen=True)
class Template:
    """An explanation declared as text: called like an explanation function, (answer, values) -> text."""

    text: str
    more: tuple[tuple[str, Callable[[A.Answer, dict], object]], ...] = ()  # (name, its function)

    def __call__(self, a: A.Answer, v: dict) -> str:
        more = {name: compute(a, v) for name, compute in self.more}
        return self.text.format(value=a.value, facts=a.facts, source=a.source, v=v, **more)


def template_names(text: str) -> set[str]:
    """The top-level names a format template quotes ({facts[x]:,} -> 'facts'); bad braces raise."""
    fields = (f for _, f, _, _ in string.Formatter().parse(text) if f is not None)
    return {f.split("[")[0].split(".")[0] for f in fields}


class LessonFile:
    """One TOML file of lesson words; ``lesson()`` builds a Lesson from it, ``check_all_built()`` at the end
    of the module says which of its lessons the Python never built."""

    def __init__(self, path: Path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.tables = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path.name}: {e}") from None
        self.built: set[str] = set()

    def _fail(self, name: str, why: str):
        raise ValueError(f"{self.path.name} [{name}]: {why}")

    def _keys(self, name: str, table, keys: tuple[set[str], set[str]], what: str):
        need, allowed = keys
        if not isinstance(table, dict):
            self._fail(name, f"a {what} is a table, not {table!r:.40}")
        if extra := set(table) - allowed:
            self._fail(name, f"unknown {what} key(s) {sorted(extra)} (allowed: {sorted(allowed)})")
        if missing := need - set(table):
            self._fail(name, f"a {what} without {sorted(missing)}")

    def lesson(
        self,
        name: str,
        *,
        runs: Callable,
        answers: tuple,
        charts: Callable,
        options: dict | None = None,
        intro_facts: dict | None = None,
        extra: dict | None = None,
    ) -> Lesson:
        """The lesson ``name``: its words from the file; ``answers`` one per question (a function or an Ask);
        ``options`` the controls' options the code knows ({key: tuple}); ``intro_facts`` numbers the
        intro's template quotes."""
        if name not in self.tables:
            self._fail(name, "no such lesson in the file")
        if name in self.built:
            self._fail(name, "built twice")
        t = self.tables[name]
        self._keys(name, t, LESSON_KEYS, "lesson")
        self.built.add(name)
        questions = t.get("questions", [])
        if len(questions) != len(answers):
            self._fail(
                name, f"{len(questions)} question(s) in the file, {len(answers)} answer(s) in the code"
            )
        try:
            intro = t["intro"].format(**intro_facts) if intro_facts else t["intro"]
        except (KeyError, ValueError, IndexError) as e:
            self._fail(name, f"the intro's template: {type(e).__name__} {e}")
        return Lesson(
            name=name,
            title=t["title"],
            intro=intro,
            controls=tuple(self._control(name, c, options or {}) for c in t.get("controls", [])),
            runs=runs,
            questions=tuple(self._question(name, q, a) for q, a in zip(questions, answers, strict=True)),
            charts=charts,
            takeaway=t.get("takeaway", ""),
            extra=extra or {},
        )

    def _control(self, name: str, c: dict, options: dict) -> Control:
        self._keys(name, c, CONTROL_KEYS, "control")
        opts = options.get(c["key"], c.get("options"))
        if not opts or ("options" in c and c["key"] in options):
            self._fail(name, f"control {c['key']!r}: its options come from the file or the code, once")
        if c["default"] not in opts:
            self._fail(name, f"control {c['key']!r}: default {c['default']!r} is not one of its options")
        return Control(c["key"], c["label"], tuple(opts), c["default"], c.get("help", ""))

    def _question(self, name: str, q: dict, ask) -> Question:
        self._keys(name, q, QUESTION_KEYS, "question")
        ask = ask if isinstance(ask, Ask) else Ask(ask)
        where = f"question {q['prompt'][:40]!r}"
        if (ask.explain is None) == ("explain" not in q):
            self._fail(name, f"{where}: explained by a template in the file or a function in the code, once")
        if q.get("kind", "number") not in ("number", "choice"):
            self._fail(name, f"{where}: kind {q['kind']!r} is neither 'number' nor 'choice'")
        if ask.explain is None:
            try:
                quoted = template_names(q["explain"])
            except ValueError as e:
                self._fail(name, f"{where}: its template: {e}")
            if unknown := quoted - TEMPLATE_NAMES - set(ask.more):
                self._fail(name, f"{where}: its template quotes {sorted(unknown)}, which nothing computes")
            if unused := set(ask.more) - quoted:
                self._fail(
                    name, f"{where}: the code computes {sorted(unused)}, which its template never quotes"
                )
        elif ask.more:
            self._fail(name, f"{where}: `more` is for a template, not beside an explain function")
        if ask.choices and "choices" in q:
            self._fail(name, f"{where}: its choices come from the file or the code, once")
        return Question(
            q["prompt"],
            ask.answer,
            ask.explain or Template(q["explain"], tuple(ask.more.items())),
            kind=q.get("kind", "number"),
            choices=tuple(ask.choices or q.get("choices", ())),
            tolerance=float(q.get("tolerance", 0.0)),
            unit=q.get("unit", ""),
        )

    def check_all_built(self):
        if missing := set(self.tables) - self.built:
            raise ValueError(f"{self.path.name}: lesson(s) {sorted(missing)} are in the file but never built")
