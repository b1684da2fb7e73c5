"""The lessons as a path through *Programming Massively Parallel Processors* (Hwu, Kirk, El Hajj, 4th ed.):
its chapters in the book's order, each lesson under the chapter it teaches, and what each needs to run.

Plain data (no Streamlit); the lessons page draws it. A lesson not named here (a new one) still shows,
under "More lessons" at the end, so adding a lesson never hides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from visualizer.web.lesson_types import Lesson


@dataclass(frozen=True)
class Chapter:
    number: str  # the book's chapter ("" for lessons beyond it)
    title: str
    lessons: tuple[str, ...]  # lesson names, in the order to take them


CHAPTERS: tuple[Chapter, ...] = (
    Chapter("2", "Heterogeneous data parallel computing", ("cpu_gpu", "memory_flow")),
    Chapter("3", "Multidimensional grids and data", ("threads",)),
    Chapter("4", "Compute architecture and scheduling", ("divergence", "scheduler", "occupancy")),
    Chapter("5", "Memory architecture and data locality", ("barriers", "race_runs")),
    Chapter("6", "Performance considerations", ("coalescing", "aos_soa", "coarsening")),
    Chapter("7", "Convolution", ("convolution",)),
    Chapter("8", "Stencil", ("stencil", "airflow")),  # the LBM step streams along a 9-point stencil
    Chapter("9", "Parallel histogram", ("histogram", "histogram_contention")),
    Chapter("10", "Reduction", ("reduction_trees", "reduction_shuffle")),
    Chapter("11", "Prefix sum (scan)", ("kogge_stone", "brent_kung")),
    Chapter("12", "Merge", ("merge",)),
    Chapter("14", "Sparse matrix computation", ("spmv_csr", "spmv_ell")),
    Chapter("16", "Deep learning: attention, the capstone", ("flash",)),
)
MORE = Chapter("", "More lessons", ())


def ordered(lessons: tuple[Lesson, ...]) -> list[Lesson]:
    """The lessons in the path's order; any the path does not name follow, in their own order."""
    by_name = {lesson.name: lesson for lesson in lessons}
    named = [by_name[n] for ch in CHAPTERS for n in ch.lessons if n in by_name]
    return named + [lesson for lesson in lessons if lesson not in named]


def chapter_of(name: str) -> Chapter:
    return next((ch for ch in CHAPTERS if name in ch.lessons), MORE)


def chapter_label(ch: Chapter) -> str:
    return f"Ch. {ch.number} · {ch.title}" if ch.number else ch.title


def needs(lesson: Lesson) -> str:
    """What the lesson's default launch needs: the backend it runs on and the lenses it records with."""
    runs = list(lesson.runs(lesson.defaults()).values())
    parts = []
    if any(r.runs > 1 for r in runs):
        parts.append("simulator (seeded schedules, run 8 times)")
    elif any(r.accesses for r in runs):
        parts.append("simulator, on a GPU machine too (every load and store recorded)")
    else:
        parts.append("simulator or GPU")
    if any(r.branches for r in runs):
        parts.append("SIMT lens")
    if any(r.accesses for r in runs):
        parts.append("memory-access lens")
    kernels = sorted({r.kernel for r in runs})
    return f"{'; '.join(parts)} · kernels: {', '.join(kernels)}"


def path_rows(lessons: tuple[Lesson, ...], done: set[str] = frozenset()) -> list[dict]:
    """One row per lesson in the path's order: number, chapter, title, what it needs, done."""
    return [
        {
            "#": i,
            "chapter": chapter_label(chapter_of(lesson.name)),
            "lesson": lesson.title,
            "needs": needs(lesson),
            "done": "✓" if lesson.name in done else "",
        }
        for i, lesson in enumerate(ordered(lessons), start=1)
    ]
