"""Lessons in a real browser at 1280x720: predict, lock in, run, see feedback; a teacher's link opens
one question with the answer hidden until Reveal; nothing clipped."""

import pytest
from playwright.sync_api import expect

from visualizer.web.lessons import LESSONS

from .conftest import type_and_enter, wait_for_app
from .test_browser import CLIPPED, charts, main, open_page

pytestmark = pytest.mark.e2e

# widget labels cut short with an ellipsis (teacher mode's larger type must still fit)
LABELS_CLIPPED = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stWidgetLabel] *')]
  .filter((el) => el.scrollWidth > el.clientWidth + 1).map((el) => el.textContent.slice(0, 60))"""


def lock_in(page, typed: str | None = None):
    """Lock in the first open question, and wait until it is locked. With `typed`, type that answer into the
    question's own number box first (found by its widget key, so a box being redrawn by the last rerun is never
    the one typed into), again if the Lock button is not enabled 20 s later. Without it the answer is already
    chosen. The rerun that locks may take longer than a click's own wait too."""
    m = main(page)
    locked = m.get_by_text("Your answer, locked in").count()
    key = m.locator("[class*='st-key-lesson_guess_']").first.evaluate(
        "(el) => [...el.classList].find((c) => c.startsWith('st-key-lesson_guess_'))"
    )
    button = m.locator(f"[class~='st-key-lock_{key[len('st-key-') :]}'] button")
    if typed is not None:
        enabled = lambda ms: expect(button).to_be_enabled(timeout=ms)  # noqa: E731
        type_and_enter(m.locator(f"[class~='{key}'] input"), typed, enabled)
    expect(button).to_be_enabled(timeout=120_000)
    button.click()
    expect(m.get_by_text("Your answer, locked in")).to_have_count(locked + 1, timeout=120_000)
    wait_for_app(page)


def test_a_student_predicts_runs_and_gets_feedback_from_the_run(page, app_url):
    page = open_page(page, app_url, "?backend=sim&page=lessons&lesson=threads")
    m = main(page)
    assert m.get_by_role("button", name="Run it").is_disabled()  # answer first
    for value in ("4", "7"):
        lock_in(page, typed=value)
    assert m.get_by_text("Your answer, locked in: 4 warps").count() == 1
    m.get_by_role("button", name="Run it").click()
    wait_for_app(page)
    assert m.get_by_text("Right: you said 4 warps (exactly).").count() == 1
    assert m.get_by_text("Not quite: you said 7 lanes").count() == 1  # 24 idle lanes in this run
    assert charts(page).count() == 1
    assert page.get_by_test_id("stException").count() == 0
    assert page.evaluate(CLIPPED) == []
    assert page.evaluate(LABELS_CLIPPED) == []
    # the sidebar's Lessons group shows where we are
    lessons = page.get_by_test_id("stSidebar").get_by_test_id("stRadio").nth(1)
    assert lessons.locator("input:checked").count() == 1
    # going on in the same lesson stays in it (a lesson's name in the lesson box once changed when it
    # was done, and the browser then sent the first lesson back with the next click)
    m.get_by_role("button", name="Ask again with this launch").click()
    wait_for_app(page)
    box = m.locator("input[type=number]").first
    box.fill("3")
    box.press("Enter")
    wait_for_app(page)
    assert m.locator("h2").first.inner_text() == "Threads, blocks and warps"
    assert "lesson=threads" in page.url


def test_a_teacher_link_opens_the_question_with_the_answer_hidden_until_reveal(page, app_url):
    page = open_page(page, app_url, "?backend=sim&page=lessons&lesson=coalescing&q=1&teacher=1")
    m = main(page)
    assert m.get_by_text("Q1.").count() == 1 and m.get_by_text("Q2.").count() == 0  # one question
    # the question's own paragraph (a caption or a notice drawn first would be small type anyway)
    size = m.locator("[data-testid=stMarkdownContainer] p", has_text="Q1.").first.evaluate(
        "(el) => parseFloat(getComputedStyle(el).fontSize)"
    )
    assert size >= 20  # projector type (16 px without teacher mode)
    lock_in(page, typed="4")
    m.get_by_role("button", name="Run it").click()
    wait_for_app(page)
    assert m.get_by_text("answer (from the run)").count() == 0  # hidden
    m.get_by_role("button", name="Reveal the answer to Q1").click()
    wait_for_app(page)
    assert m.get_by_text("answer (from the run)").count() == 1
    assert m.get_by_text("Right: you said 4 sectors").count() == 1  # stride 1: coalesced
    # the answer is the largest text on the projector after the page title, never smaller than its label
    px = "(el) => parseFloat(getComputedStyle(el).fontSize)"
    value = m.locator("[data-testid=stMetricValue] p").first.evaluate(px)
    label = m.locator("[data-testid=stMetricLabel] p").first.evaluate(px)
    assert value >= 36 and value > 1.5 * label
    assert charts(page).count() >= 1
    assert page.evaluate(CLIPPED) == []
    assert page.evaluate(LABELS_CLIPPED) == []


# A slider's value label meeting its rail, its handle, its own label or another control.
SLIDER_VALUE_OVERLAPS = """() => {
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1
      && b.top < a.bottom - 1;
  const glyphs = (el) => { const r = document.createRange(); r.selectNodeContents(el);
      return r.getBoundingClientRect(); };  // the text itself, not its line box
  const hits = [];
  const main = document.querySelector('[data-testid=stMain]');
  const controls = [...main.querySelectorAll('[data-testid=stSlider], [data-testid=stRadio],'
      + ' [data-testid=stSelectbox], [data-testid=stNumberInput], [data-testid=stButton]')];
  for (const slider of main.querySelectorAll('[data-testid=stSlider]')) {
    const value = slider.querySelector('[data-testid=stSliderThumbValue]');
    const text = glyphs(value.querySelector('p'));
    const rail = slider.querySelector('[role=group] > div').children[0];
    const parts = [['rail', rail.getBoundingClientRect()], ['handle', value.parentElement.getBoundingClientRect()],
        ['label', glyphs(slider.querySelector('[data-testid=stWidgetLabel] p'))]];
    for (const other of controls)
      if (other !== slider) parts.push([other.textContent.slice(0, 30), other.getBoundingClientRect()]);
    for (const [name, box] of parts) if (meet(text, box)) hits.push(`${value.textContent} / ${name}`);
  }
  return hits;
}"""


@pytest.mark.parametrize("stride", [1, 32])
def test_teacher_mode_slider_values_clear_their_track_at_1280(page, app_url, stride):
    page = open_page(
        page, app_url, f"?backend=sim&page=lessons&lesson=coalescing&teacher=1&l_stride={stride}"
    )
    m = main(page)
    assert m.locator("[data-testid=stSliderThumbValue]").first.inner_text() == str(stride)
    assert page.evaluate(SLIDER_VALUE_OVERLAPS) == []
    assert page.evaluate(LABELS_CLIPPED) == []


def test_progress_survives_a_reload_and_a_lesson_link_and_word_answers_fit(page, app_url):
    page = open_page(page, app_url, "?backend=sim&page=lessons&lesson=cpu_gpu")
    m = main(page)
    assert f"0 of {len(LESSONS)} lessons done" in m.inner_text()
    m.get_by_text("numpy (CPU)").first.click()
    wait_for_app(page)
    lock_in(page)
    m.get_by_role("button", name="Run it").click()
    wait_for_app(page)
    answer = m.get_by_test_id("stMetricValue").first.inner_text()
    assert answer in ("numpy (CPU)", "GPU kernel")
    assert page.evaluate(CLIPPED) == []  # the word answer is not cut at 1280x720
    assert f"1 of {len(LESSONS)} lessons done (✓ 1)" in m.inner_text()
    page.wait_for_timeout(500)  # the cookie's one-line frame has run
    page.reload()
    wait_for_app(page)
    assert f"1 of {len(LESSONS)} lessons done (✓ 1)" in main(page).inner_text()  # a reload keeps the progress
    with page.context.expect_page() as opened:  # a question link opens a new tab: a new session
        main(page).get_by_role("link", name="link", exact=True).first.click()
    tab = opened.value
    wait_for_app(tab)
    assert f"1 of {len(LESSONS)} lessons done (✓ 1)" in main(tab).inner_text()
    assert "backend=sim" in tab.url and "lesson=cpu_gpu" in tab.url and "q=1" in tab.url
