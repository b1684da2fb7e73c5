"""The lessons' words come from TOML files a teacher edits; a slip there fails at import, naming the lesson."""

import pytest

from visualizer.analysis.lesson_answers import Answer
from visualizer.web.lesson_file import Ask, LessonFile, Template, template_names

GOOD = """
[demo]
title = "Demo"
intro = "At {gbs:g} GB/s."
takeaway = "Done."
controls = [
    { key = "n", label = "elements n", options = [1000, 10_000], default = 1000 },
    { key = "gpu", label = "GPU model", default = "H200" },
]

[[demo.questions]]
prompt = "How many?"
explain = "{value:,} threads in {facts[blocks]} blocks for n = {v[n]:,} ({source}); {half} each."
unit = "threads"

[[demo.questions]]
prompt = "Which?"
kind = "choice"
choices = ["a", "b"]
"""


def words(tmp_path, text=GOOD):
    path = tmp_path / "lessons.toml"
    path.write_text(text)
    return LessonFile(path)


def build(f, **over):
    kwargs = {
        "runs": lambda v: {},
        "answers": (Ask(lambda caps, v: None, more={"half": lambda a, v: a.value // 2}),
                    Ask(lambda caps, v: None, explain=lambda a, v: f"It is {a.value}.")),
        "charts": lambda caps, v, answers: [],
        "options": {"gpu": ("H200", "T4")},
        "intro_facts": {"gbs": 53.5},
    }  # fmt: skip
    return f.lesson("demo", **{**kwargs, **over})


def test_a_lesson_joins_the_files_words_to_the_codes_answers(tmp_path):
    f = words(tmp_path)
    lesson = build(f)
    f.check_all_built()
    assert (lesson.title, lesson.intro, lesson.takeaway) == ("Demo", "At 53.5 GB/s.", "Done.")
    assert lesson.defaults() == {"n": 1000, "gpu": "H200"}
    assert lesson.controls[0].options == (1000, 10_000) and lesson.controls[1].options == ("H200", "T4")
    q, choice = lesson.questions
    assert (q.kind, q.unit, q.tolerance, choice.kind, choice.choices) == (
        "number",
        "threads",
        0.0,
        "choice",
        ("a", "b"),
    )
    a = Answer(4096, {"blocks": 16}, "simulated")
    assert q.explain(a, {"n": 4096}) == "4,096 threads in 16 blocks for n = 4,096 (simulated); 2048 each."
    assert choice.explain(Answer("b"), {}) == "It is b."


@pytest.mark.parametrize(
    "edit,words_said",
    [
        (("unit = \"threads\"", "unti = \"threads\""), "unknown question key(s) ['unti']"),
        (("title = \"Demo\"", "titel = \"Demo\""), "unknown lesson key(s) ['titel']"),
        (("default = 1000", "default = 100"), "default 100 is not one of its options"),
        (("{half} each", "{half each"), "its template: "),
        (("{gbs:g}", "{gsb:g}"), "the intro's template: KeyError 'gsb'"),
        (("kind = \"choice\"", "kind = \"choise\""), "kind 'choise' is neither"),
        (("prompt = \"Which?\"", "promt = \"Which?\""), "unknown question key(s) ['promt']"),
        (("    { key = \"n\", label = \"elements n\",", "    { key = \"n\","), "a control without ['label']"),
        (("controls = [", 'controls = ["n",'), "a control is a table, not 'n'"),
        (("title = \"Demo\"", "title = \"Demo"), "lessons.toml: "),
        (("{half} each", "{halve} each"), "quotes ['halve'], which nothing computes"),
        (("; {half} each", ""), "computes ['half'], which its template never quotes"),
        (("kind = \"choice\"", "kind = \"choice\"\nexplain = \"{value}\""), "a template in the file or a function"),
        (("prompt = \"Which?\"", "prompt = \"Which?\"\n[[demo.questions]]\nprompt = \"More?\""), "3 question(s)"),
        (("\n[[demo.questions]]\nprompt = \"Which?\"", "\n[[demo.questions]]\nprompt = \"Which?\"\nexplain = \"x\""),
         "a template in the file or a function"),
    ],
)  # fmt: skip
def test_a_slip_in_the_file_is_named(tmp_path, edit, words_said):
    text = GOOD.replace(*edit)
    assert text != GOOD
    with pytest.raises(ValueError) as err:
        build(words(tmp_path, text))
    assert str(err.value).startswith("lessons.toml") and words_said in str(err.value)


def test_the_code_and_the_file_must_agree(tmp_path):
    with pytest.raises(ValueError, match=r"\[other\]: no such lesson"):
        words(tmp_path).lesson("other", runs=None, answers=(), charts=None)
    no_more = (Ask(lambda caps, v: None), Ask(lambda caps, v: None, explain=str))
    with pytest.raises(ValueError, match=r"quotes \['half'\], which nothing computes"):
        build(words(tmp_path), answers=no_more)
    half = Ask(lambda caps, v: None, more={"half": lambda a, v: 1})
    beside_a_function = (half, Ask(lambda caps, v: None, explain=str, more={"x": str}))
    with pytest.raises(ValueError, match="`more` is for a template"):
        build(words(tmp_path), answers=beside_a_function)
    with pytest.raises(ValueError, match="'gpu': its options come from the file or the code, once"):
        build(words(tmp_path), options={})
    unbuilt = words(tmp_path)
    with pytest.raises(ValueError, match=r"lesson\(s\) \['demo'\] are in the file but never built"):
        unbuilt.check_all_built()


def test_template_names_are_the_top_level_names_and_bad_braces_raise():
    assert template_names("{value:,} of {facts[x]:.1f} at {v[n]} {source}{cut}") == {
        "value", "facts", "v", "source", "cut"
    }  # fmt: skip
    with pytest.raises(ValueError):
        template_names("{value")
    assert Template("{value:g} %")(Answer(12.5), {}) == "12.5 %"


def test_the_shipped_lessons_load_and_each_template_quotes_only_what_it_is_given():
    from visualizer.web.lessons import LESSONS

    templates = [q.explain for lesson in LESSONS for q in lesson.questions if isinstance(q.explain, Template)]
    assert len(LESSONS) >= 24 and len(templates) >= 20
    for t in templates:
        assert template_names(t.text) == {"value", "facts", "source", "v"} & template_names(t.text) | {
            name for name, _ in t.more
        }, t.text
