"""The Lessons page through the app's entrypoint on the simulator: predict, lock in, run, compare."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.conftest import open_app

ROOT = Path(__file__).resolve().parents[2]


def open_lesson(lesson: str, **query) -> AppTest:
    return open_app(backend="sim", page="lessons", lesson=lesson, **query)


def lock(at: AppTest, index: int, value) -> None:
    """Answer the index-th open question and lock it in."""
    guess_keys = [w.key for w in (*at.number_input, *at.radio) if str(w.key).startswith("lesson_guess_")]
    key = sorted(guess_keys)[index]
    widget = next(w for w in (*at.number_input, *at.radio) if w.key == key)
    widget.set_value(value).run()
    at.button(key=f"lock_{key}").click().run()
    assert not at.exception, [e.value for e in at.exception]


def test_threads_lesson_predict_run_compare_and_change_the_block():
    at = open_lesson("threads")
    run = at.button(key="lesson_run")
    assert run.disabled  # answer first
    lock(at, 0, 4)
    lock(at, 0, 24)  # the first question is locked now, so the open one is index 0
    assert not at.button(key="lesson_run").disabled
    at.button(key="lesson_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [m.value for m in at.metric if m.label == "answer (from the run)"] == ["4 warps", "24 lanes"]
    assert len(at.success) == 2 and not at.warning
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "simulated" in spec["layout"]["title"]["text"]
    assert at.session_state.lesson_progress["threads"]["done"]

    # a new launch asks again; its answer comes from its own run
    at.select_slider(key="lesson_threads_block").set_value(48).run()
    assert at.button(key="lesson_run").disabled
    lock(at, 0, 2)
    lock(at, 0, 1)
    at.button(key="lesson_run").click().run()
    assert [m.value for m in at.metric if m.label == "answer (from the run)"] == ["2 warps", "344 lanes"]
    assert len(at.success) == 1 and len(at.warning) == 1  # 2 warps right, 1 idle lane wrong


def test_teacher_link_opens_one_question_with_the_answer_hidden_until_reveal():
    at = open_lesson("histogram", q=1, teacher=1)
    assert at.toggle(key="teacher").value is True
    assert any("font-size: 1.4rem" in h.proto.body for h in at.get("html"))  # projector type
    lock(at, 0, 100)
    at.button(key="lesson_run").click().run()
    assert not at.exception
    assert not [m for m in at.metric if m.label == "answer (from the run)"]  # hidden
    assert not at.get("plotly_chart")
    at.button(key="reveal_histogram_1").click().run()
    answer = [m.value for m in at.metric if m.label == "answer (from the run)"]
    assert answer and answer[0].endswith("atomics")
    assert at.get("plotly_chart")


def test_bad_lesson_link_falls_back_to_the_first_lesson():
    at = open_lesson("no_such_lesson", q=99, teacher="maybe")
    assert at.selectbox(key="lesson").value == "cpu_gpu"
    assert at.toggle(key="teacher").value is False


def test_cpu_vs_gpu_lesson_says_its_gpu_time_is_modelled():
    at = open_lesson("cpu_gpu")
    lock(at, 0, "GPU kernel")
    at.button(key="lesson_run").click().run()
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "modelled, not measured" in captions
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert list(spec["data"][0]["y"]) == [
        "numpy on this CPU",
        "GPU: the kernel step alone",
        "GPU: allocate, copy in, kernel, copy back",
    ]  # the copies are in the GPU's time, and the kernel alone beside it
    assert "4,247 GB/s" in captions and "copy" in captions


def test_lessons_are_their_own_group_in_the_sidebar():
    at = open_lesson("threads")
    assert at.radio(key="_nav_Lessons").value == "lessons"
    assert at.radio(key="_nav_pages").value is None
    at.radio(key="_nav_pages").set_value("grid").run()
    assert not at.exception
    assert at.session_state.page == "grid"


def test_a_student_can_go_through_every_lesson_on_the_simulator():
    at = open_lesson("cpu_gpu")
    for name in [o for o in at.selectbox(key="lesson").options]:
        at.selectbox(key="lesson").set_value(name).run()
        assert not at.exception, (name, [e.value for e in at.exception])
        while True:
            keys = sorted(
                w.key for w in (*at.number_input, *at.radio) if str(w.key).startswith("lesson_guess_")
            )
            if not keys:
                break
            widget = next(w for w in (*at.number_input, *at.radio) if w.key == keys[0])
            widget.set_value(widget.options[0] if hasattr(widget, "options") else 1).run()
            at.button(key=f"lock_{keys[0]}").click().run()
        at.button(key="lesson_run").click().run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert not at.error, (name, [e.value for e in at.error])
        answers = [m for m in at.metric if m.label == "answer (from the run)"]
        assert answers and at.get("plotly_chart"), name
    from visualizer.web.lessons import LESSONS

    done = at.session_state.lesson_progress
    assert all(done[n]["done"] for n in done) and len(done) == len(LESSONS) >= 24


def launch_widgets(at: AppTest, lesson: str) -> dict:
    prefix = f"lesson_{lesson}_"
    return {
        str(w.key)[len(prefix) :]: w.value
        for w in (*at.select_slider, *at.radio)
        if str(w.key).startswith(prefix)
    }


def test_every_lesson_control_has_a_link_key():
    from visualizer.web.lessons import LESSONS
    from visualizer.web.session import LESSON_LINK_PREFIX, PAGE_QUERY_KEYS

    keys = {LESSON_LINK_PREFIX + c.key for lesson in LESSONS for c in lesson.controls}
    assert keys <= PAGE_QUERY_KEYS
    assert {k for k in PAGE_QUERY_KEYS if k.startswith(LESSON_LINK_PREFIX)} == keys


def test_a_teachers_link_reproduces_the_lessons_launch():
    at = open_lesson("coalescing", q=1, teacher=1)
    at.select_slider(key="lesson_coalescing_stride").set_value(8).run()
    at.radio(key="lesson_coalescing_kernel").set_value("transpose_naive").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = launch_widgets(at, "coalescing")
    assert shown == {"kernel": "transpose_naive", "stride": 8}
    link = {k: at.query_params[k] for k in at.query_params}
    assert link["l_stride"] == "8" and link["l_kernel"] == "transpose_naive"
    # the links the page offers carry the launch too
    text = " ".join(m.value for m in (*at.markdown, *at.caption))
    assert "lesson=coalescing&l_kernel=transpose_naive&l_stride=8&q=1&teacher=1" in text
    assert "lesson=coalescing&l_kernel=transpose_naive&l_stride=8&teacher=1" in text
    runs = [c.value for c in at.main.caption if "Runs `" in c.value]
    assert runs and "`transpose_naive`" in runs[0]

    again = open_app(**link)
    assert launch_widgets(again, "coalescing") == shown
    assert [c.value for c in again.main.caption if "Runs `" in c.value] == runs  # the same launch
    assert not again.warning


def test_a_bad_launch_in_a_lesson_link_falls_back_with_a_notice():
    at = open_lesson("threads", l_block=2048, l_n="many", l_stride=4)
    assert not at.exception, [e.value for e in at.exception]
    assert launch_widgets(at, "threads") == {"n": 1000, "block": 128}  # the defaults
    notices = [w.value.replace("\\", "").replace("\u200b", "") for w in at.warning]
    assert len(notices) == 2 and any("l_block=2048" in n for n in notices), notices
    assert "l_stride" not in at.query_params  # not a control of this lesson


def test_another_lesson_starts_from_its_own_defaults():
    at = open_lesson("threads", l_block=32)  # barriers has 32 too, but starts from its default, 64
    assert launch_widgets(at, "threads")["block"] == 32
    at.selectbox(key="lesson").set_value("barriers").run()
    assert not at.exception, [e.value for e in at.exception]
    assert launch_widgets(at, "barriers") == {"kernel": "reduction_race", "block": 64}
    assert "l_block" not in at.query_params  # the default is left out of the link


def test_a_question_link_out_of_range_names_the_questions_it_has():
    at = open_lesson("threads", q=7)  # the threads lesson has 2 questions
    notices = [w.value.replace("\\", "") for w in at.warning if "q\\=7" in w.value]  # shown escaped
    assert len(notices) == 1 and "questions are 1 to 2" in notices[0], [w.value for w in at.warning]
    assert "0 to 9" not in notices[0]
    assert len([m for m in at.markdown if m.value.startswith("**Q")]) == 2  # every question shown
    one = open_lesson("threads", q=2)
    assert not [w for w in one.warning if "ignored" in w.value]
    assert [m.value[:7] for m in one.markdown if m.value.startswith("**Q")] == ["**Q2.**"]


def test_class_link_keeps_the_launch_and_the_backend_and_teacher_mode_as_shown():
    at = open_lesson("threads")
    at.select_slider(key="lesson_threads_block").set_value(48).run()
    (caption,) = [c.value for c in at.caption if "Link to this lesson for a class" in c.value]
    assert "lesson=threads&l_block=48&backend=sim)" in caption and "teacher" not in caption, caption
    at.toggle(key="teacher").set_value(True).run()
    (caption,) = [c.value for c in at.caption if "Link to this lesson for a class" in c.value]
    assert "lesson=threads&l_block=48&teacher=1&backend=sim)" in caption, caption


def test_a_done_lesson_is_stored_in_the_browser_and_read_back():
    from visualizer.web.lesson_progress import cookie_script, done_from_cookie
    from visualizer.web.lessons import LESSONS

    names = [lesson.name for lesson in LESSONS]
    at = open_lesson("cpu_gpu")
    lock(at, 0, "GPU kernel")
    assert not [e for e in at.get("iframe")]  # nothing written before the lesson is done
    at.button(key="lesson_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state.lesson_progress["cpu_gpu"]["done"]
    scripts = [str(e.proto) for e in at.get("iframe")]
    assert any("gpuviz_lessons_done=cpu_gpu;" in s for s in scripts), scripts
    # what a browser sends back is checked against the lessons: nothing else gets in
    assert done_from_cookie("threads.cpu_gpu.<script>.x", names) == ["cpu_gpu", "threads"]
    assert done_from_cookie("a" * 5000, names) == [] and done_from_cookie(None, names) == []
    assert "alert" not in cookie_script(["cpu_gpu", "</script><script>alert(1)"], names)


def test_airflow_lesson_answers_from_both_layouts_and_animates_the_flow():
    at = open_lesson("airflow")
    assert not at.exception, [e.value for e in at.exception]
    lock(at, 0, 36)
    lock(at, 0, 5)
    at.button(key="lesson_run").click().run(timeout=600)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    answers = [
        float(m.value.split()[0].replace(",", "")) for m in at.metric if m.label == "answer (from the run)"
    ]
    assert len(answers) == 2 and answers[0] >= 4 * answers[1]  # AoS many sectors, SoA about 4
    at.selectbox(key="lbm_size").set_value("160 x 40").run()
    at.selectbox(key="lbm_steps").set_value(200).run()
    at.button(key="lbm_run").click().run(timeout=600)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    anim = [f for f in figs if f.get("frames")]
    assert anim, "no animated chart"
    title = anim[-1]["layout"]["title"]["text"]
    assert "simulated" in title and "Vorticity" in title
    assert len(anim[-1]["frames"]) == 41 and anim[-1]["layout"]["sliders"]
    assert any("steps took" in c.value for c in at.caption)
