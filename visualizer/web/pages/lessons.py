"""Lessons: predict, run, compare. Answer first, then run, then the answer computed from that run.

Lesson definitions and their answer functions live in visualizer/lessons/ (no Streamlit); this page
draws them, keeps the learner's progress in st.session_state, and runs launches through the same
cached capture paths as the other pages (run_capture for plain captures, access_capture for
recorded memory accesses).
"""

from __future__ import annotations

import streamlit as st

from visualizer.analysis import lesson_answers as A
from visualizer.engine.run.runner import KernelError, gpu_present
from visualizer.specs.catalog import LaunchError
from visualizer.web.charts import chart
from visualizer.web.lesson_path import chapter_label, chapter_of, ordered, path_rows
from visualizer.web.lesson_progress import store_done, stored_done
from visualizer.web.lessons import LESSONS, Lesson, get
from visualizer.web.measured import lesson_beside
from visualizer.web.memory import access_capture
from visualizer.web.session import (
    LESSON_LINK_PREFIX,
    PAGE_QUERY_KEYS,
    RunConfig,
    as_text,
    cached_capture,
    capture_cache,
    capture_key,
    drop_link,
    from_link,
    link_value,
    question_from_link,
    run_capture,
    set_link,
    show_link_notices,
    to_link,
)

# Projector mode: our own fixed CSS (no visitor text), larger type in the main area only. A metric's
# value is text in a paragraph too: it is sized after the paragraphs, or it came out smaller than its
# label. A slider's value and end labels keep their size: at fixed offsets from the track, larger
# they cover it.
TEACHER_CSS = """<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.4rem; line-height: 1.5; }
[data-testid="stMain"] h1 { font-size: 2.9rem; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.1rem; }
[data-testid="stMain"] [data-testid="stWidgetLabel"] p { font-size: 1.25rem; }
[data-testid="stMain"] [data-testid="stMetricValue"] p { font-size: 2.6rem; line-height: 1.25; }
[data-testid="stMain"] [data-testid="stMetricLabel"] p { font-size: 1.25rem; }
[data-testid="stMain"] [data-testid="stSliderThumbValue"] p,
[data-testid="stMain"] [data-testid="stSliderTickBar"] p { font-size: inherit; line-height: inherit; }
</style>"""
NAMES = [lesson.name for lesson in ordered(LESSONS)]  # the PMPP path's order (web/lesson_path.py)


def progress() -> dict:
    """This browser session's progress: lesson name -> {"locks": {launch: {q: guess}}, "results": {...}}.

    A new session starts from the lessons the browser's progress cookie says are done."""
    if "lesson_progress" not in st.session_state:
        st.session_state.lesson_progress = {
            n: {"locks": {}, "results": {}, "done": True} for n in stored_done(NAMES)
        }
    return st.session_state.lesson_progress


def lesson_state(name: str) -> dict:
    return progress().setdefault(name, {"locks": {}, "results": {}, "done": False})


LAUNCH_LINK_KEYS = sorted(k for k in PAGE_QUERY_KEYS if k.startswith(LESSON_LINK_PREFIX))


def launch_link(lesson: Lesson, values: dict) -> dict[str, str]:
    """The launch controls a link carries: those not at their default (a default is left out)."""
    return {
        LESSON_LINK_PREFIX + c.key: str(values[c.key])
        for c in lesson.controls
        if values.get(c.key, c.default) != c.default
    }


def link(name: str, q: int | None = None, teacher: bool = False, launch: dict | None = None) -> str:
    """A link to a lesson (one question: ``q``) with the launch ``launch`` (launch_link's), the backend
    chosen (unless auto) and teacher mode only if it is on."""
    config = st.session_state.get("config")
    backend = config.backend if config is not None else "auto"
    return (
        f"?page=lessons&lesson={name}"
        + "".join(f"&{k}={v}" for k, v in (launch or {}).items())
        + (f"&q={q}" if q else "")
        + ("&teacher=1" if teacher else "")
        + (f"&backend={backend}" if backend != "auto" else "")
    )


def control_key(lesson: Lesson, c) -> str:
    return f"lesson_{lesson.name}_{c.key}"


def seed_controls(lesson: Lesson) -> list[str | None]:
    """Seed the lesson's launch controls from the link (once per widget); notices for bad values."""
    notices = []
    for c in lesson.controls:
        key = control_key(lesson, c)
        if key not in st.session_state:
            st.session_state[key], notice = link_value(LESSON_LINK_PREFIX + c.key, c.default, list(c.options))
            notices.append(notice)
    return notices


def _change_lesson() -> None:
    """Another lesson: all its questions, and none of the last lesson's launch from the link."""
    _show_all()
    drop_link(*LAUNCH_LINK_KEYS)


def launch_key(values: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def _lock(name: str, vkey: tuple, q: int, widget: str) -> None:
    guess = st.session_state.get(widget)
    if guess is not None:
        lesson_state(name)["locks"].setdefault(vkey, {})[q] = guess


def _ask_again(name: str, vkey: tuple) -> None:
    state = lesson_state(name)
    state["locks"].pop(vkey, None)
    state["results"].pop(vkey, None)


def _reveal(name: str, vkey: tuple, q: int) -> None:
    lesson_state(name)["results"][vkey]["revealed"].add(q)


def _show_all() -> None:
    st.session_state.q = 0


def captures(lesson: Lesson, values: dict) -> tuple[dict, str | None]:
    """The lesson's captures for this launch (cached: a second visit or a chart redraw costs nothing)."""
    config = st.session_state.get("config")
    backend = config.backend if config is not None else "auto"
    caps = {}
    for role, run in lesson.runs(values).items():
        if run.accesses:
            cap, error = access_capture(run.kernel, run.params)
        elif run.runs > 1:  # the same launch N times in seeded schedules (simulator): analysis/races.py
            cap, error = runs_capture(run)
        elif run.branches:  # the SIMT lens (web/simt.py)
            from visualizer.web.simt import lens_capture

            cap, error = lens_capture(run.kernel, run.params, backend)
        else:
            config = RunConfig(run.kernel, backend, tuple(sorted(run.params.items())))
            cap, error = cached_only(config), None
            if cap is None:
                cap, error = run_capture(config)
        if error:
            return {}, f"{run.kernel} did not run: {as_text(error)}"
        caps[role] = cap
    return caps, None


def runs_capture(run) -> tuple:
    """(capture of run.runs runs, None) or (None, one-line error); simulator, cached per launch."""
    try:
        with st.spinner(f"Running {run.kernel} {run.runs} times on the CUDA simulator…"):
            params = tuple(sorted(run.params.items()))
            return cached_capture(run.kernel, params, "sim", 0, time_clean=False, **run.options()), None
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc))


def cached_only(config: RunConfig):
    """The capture run_capture would return, if it is already cached (then no status box is drawn)."""
    backend = config.backend
    if backend == "auto":
        backend = "gpu" if gpu_present() else "sim"
    return capture_cache().get(capture_key(config.kernel, config.params, backend))


def control(lesson: Lesson, c) -> object:
    key = control_key(lesson, c)
    if key not in st.session_state:
        st.session_state[key] = c.default
    if all(isinstance(o, int) for o in c.options):
        return st.select_slider(
            c.label, c.options, key=key, help=c.help or None, format_func=lambda o: f"{o:,}"
        )
    return st.radio(c.label, c.options, key=key, horizontal=True, help=c.help or None)


def fmt(value, unit: str = "") -> str:
    if isinstance(value, str):
        return value
    text = f"{value:,.1f}" if isinstance(value, float) and value != int(value) else f"{int(value):,}"
    return f"{text} {unit}".strip()


# --- the page ---------------------------------------------------------------------------------

notices = [from_link("lesson", NAMES[0], NAMES), from_link("teacher", False)]
q_raw = None  # one question from the link: checked once the lesson (and so its questions) is known
if "q" not in st.session_state:
    q_raw, st.session_state.q = st.query_params.get("q"), 0
teacher = bool(st.session_state.teacher)
if teacher:
    st.html(TEACHER_CSS)

st.title("Lessons: predict, run, compare")
top1, top2 = st.columns([2, 1], vertical_alignment="bottom")
name = top1.selectbox(
    "lesson",
    NAMES,
    key="lesson",
    # fixed labels: the browser resets a box whose labels change to its first option (done lessons are
    # named in the progress line below instead)
    format_func=lambda n: (
        f"{NAMES.index(n) + 1}. {get(n).title} ({chapter_label(chapter_of(n)).split(' · ')[0]})"
    ),
    on_change=_change_lesson,
)
top2.toggle(
    "Teacher mode", key="teacher", help="Larger type for a projector; answers stay hidden until Reveal."
)
to_link("lesson", "teacher")
lesson = get(name)
if q_raw is not None:
    st.session_state.q, q_notice = question_from_link(q_raw, len(lesson.questions))
    notices.append(q_notice)
if st.session_state.q:
    set_link("q", st.session_state.q)
else:
    drop_link("q")
notices += seed_controls(lesson)
show_link_notices(*notices)
# the launch on screen (the controls below read these same values), so a link reproduces it
launch = launch_link(lesson, {c.key: st.session_state[control_key(lesson, c)] for c in lesson.controls})
progress_line = st.empty()


def path_markdown(links: dict[str, str]) -> str:
    """The path as a list: each chapter, its lessons numbered as in the lesson box, linked, what they need,
    and ✓ for the ones done in this browser."""
    lines, last = [], None
    for i, row in enumerate(
        path_rows(LESSONS, {n for n in NAMES if progress().get(n, {}).get("done")}), start=1
    ):
        if row["chapter"] != last:
            lines.append(f"\n**{row['chapter']}**\n")
            last = row["chapter"]
        name = NAMES[i - 1]
        lines.append(f"{i}. [{row['lesson']}]({links[name]}) {row['done']} — *{row['needs']}*")
    return "\n".join(lines)


def show_progress(class_link: str) -> None:
    """The progress line (drawn again when a run finishes a lesson, so it is never one run behind)."""
    done = [n for n in NAMES if progress().get(n, {}).get("done")]
    progress_line.caption(
        f"Your progress in this browser: {len(done)} of {len(LESSONS)} lessons done"
        + (f" (✓ {', '.join(str(NAMES.index(n) + 1) for n in done)}). " if done else ". ")
        + f"[Link to this lesson for a class]({class_link})"
    )


show_progress(link(name, teacher=teacher, launch=launch))
with st.expander(f"The path: {len(NAMES)} lessons in the order of the PMPP textbook's chapters"):
    st.caption(
        "Take them in order, or assign a chapter's lessons as homework (each link opens the lesson). Needs: "
        "where the lesson runs, the lens it records with, and its kernels."
    )
    st.markdown(path_markdown({n: link(n, teacher=teacher) for n in NAMES}))

st.header(lesson.title)
st.markdown(lesson.intro)

cols = st.columns(len(lesson.controls))
values = {}
for col, c in zip(cols, lesson.controls, strict=True):
    with col:
        values[c.key] = control(lesson, c)
vkey = launch_key(values)
launch = launch_link(lesson, values)
drop_link(*(k for k in LAUNCH_LINK_KEYS if k not in launch))
for k, v in launch.items():
    set_link(k, v)
state = lesson_state(name)
locks = state["locks"].get(vkey, {})
result = state["results"].get(vkey)

only = int(st.session_state.q or 0)
if only > len(lesson.questions):
    only = 0
shown = [i for i in range(1, len(lesson.questions) + 1) if not only or i == only]
if only:
    st.button("Show all questions of this lesson", on_click=_show_all, key="lesson_show_all")

st.subheader("1. Predict")
for i in shown:
    q = lesson.questions[i - 1]
    st.markdown(f"**Q{i}.** {q.prompt} [link]({link(name, i, teacher=teacher, launch=launch)})")
    widget = f"lesson_guess_{name}_{i}_" + "_".join(f"{k}{v}" for k, v in vkey)
    if i in locks:
        st.info(f"Your answer, locked in: **{fmt(locks[i], q.unit)}**", icon=":material/lock:")
        continue
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    with c1:
        if q.kind == "choice":
            st.radio(f"your answer to Q{i}", q.choices, index=None, key=widget, horizontal=True)
        elif q.tolerance:
            st.number_input(
                f"your answer to Q{i} ({q.unit})", min_value=0.0, value=None, step=1.0, key=widget
            )
        else:
            st.number_input(f"your answer to Q{i} ({q.unit})", min_value=0, value=None, step=1, key=widget)
    c2.button(
        "Lock in my answer", key=f"lock_{widget}", on_click=_lock, args=(name, vkey, i, widget),
        disabled=st.session_state.get(widget) is None, use_container_width=True,
    )  # fmt: skip

st.subheader("2. Run")
missing = [i for i in shown if i not in locks]
r1, r2 = st.columns([1, 3], vertical_alignment="center")
run = r1.button("Run it", type="primary", key="lesson_run", disabled=bool(missing), use_container_width=True)
launches = "; ".join(
    f"`{r.kernel}` (" + ", ".join(f"{k}={v}" for k, v in r.params.items()) + ")"
    for r in lesson.runs(values).values()
)
r2.caption(
    ("Lock in every answer first. " if missing else "")
    + f"Runs {launches}"
    + (
        " with every load and store recorded (simulator)."
        if any(r.accesses for r in lesson.runs(values).values())
        else "."
    )
)

if run:
    caps, error = captures(lesson, values)
    if error:
        st.error(error, icon=":material/error:")
        st.stop()
    try:
        computed = [q.answer(caps, values) for q in lesson.questions]
    except (ValueError, KeyError) as exc:
        st.error(f"Could not compute the answer from this run: {as_text(str(exc))}", icon=":material/error:")
        st.stop()
    result = state["results"][vkey] = {"answers": computed, "revealed": set()}
    if all(i in locks for i in range(1, len(lesson.questions) + 1)):
        state["done"] = True
        # kept in this browser: a reload or a lesson link in a new tab starts from it (progress())
        store_done([n for n in NAMES if progress().get(n, {}).get("done")], NAMES)
        show_progress(link(name, teacher=teacher, launch=launch))

if result is None:
    st.stop()

st.subheader("3. Compare")
caps, error = captures(lesson, values)
if error:
    st.error(error, icon=":material/error:")
    st.stop()
for i in shown:
    q, answer = lesson.questions[i - 1], result["answers"][i - 1]
    st.markdown(f"**Q{i}.** {q.prompt}")
    if teacher and i not in result["revealed"]:
        st.button(
            f"Reveal the answer to Q{i}", key=f"reveal_{name}_{i}", on_click=_reveal, args=(name, vkey, i)
        )
        continue
    guess = locks.get(i)
    right, how = (
        A.grade(guess, answer.value, q.tolerance, answer.facts.get("accepted", ()))
        if guess is not None
        else (False, "no answer locked in")
    )
    # a word answer ("numpy (CPU)", "shared_memory") needs a wider column than a number at metric size
    words = isinstance(answer.value, str)
    m1, m2 = st.columns(([1, 1] if words else [2, 3]) if teacher else ([2, 3] if words else [1, 3]))
    m1.metric("answer (from the run)", fmt(answer.value, q.unit))
    with m2:
        if right:
            said = fmt(guess, q.unit) + ("" if how == "right" else f" ({how})")  # not "numpy (CPU) (right)"
            st.success(f"Right: you said {said}.", icon=":material/check_circle:")
        else:
            st.warning(f"Not quite: you said {fmt(guess, q.unit)}; {how}.", icon=":material/cancel:")
        st.markdown(q.explain(answer, values))
        st.caption(f"Computed from: {answer.source}")

if not teacher or len(result["revealed"]) >= len(shown):
    # a GPU time the simulator can only model: the same launch, measured on the H200 (shipped)
    lesson_beside(lesson.questions, caps, values, result["answers"], fmt)
    for k, (title, fig) in enumerate(lesson.charts(caps, values, result["answers"])):
        if title:
            st.markdown(f"**{title}**")
        chart(fig, key=f"lesson_{name}_chart_{k}")
    if lesson.takeaway:
        st.info(lesson.takeaway, icon=":material/lightbulb:")
    if lesson.extra.get("animation"):  # the airflow lesson: the simulation run step after step
        from visualizer.web.flow import animation_section

        animation_section(values["obstacle"])
st.button("Ask again with this launch", on_click=_ask_again, args=(name, vkey), key="lesson_again")
st.caption("Or change the launch above: a new launch asks the questions again.")
