"""In a real browser: a link's text is shown as text, never rendered; a tab closed mid-run never
hands its capture to the next visitor."""

import re
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.e2e

INJECTIONS = ["![x](http://example.invalid/a.png)", "[link](http://x) **bold** <b>tag</b>"]


@pytest.mark.parametrize("value", INJECTIONS)
def test_a_link_cannot_inject_markup(open_app, value):
    page = open_app("", f"?kernel=vector_add&backend=sim&n={quote(value)}")
    alert = page.get_by_test_id("stAlert").filter(has_text="Bad link").first
    text = alert.inner_text().replace("\u200b", "")
    assert value in text, text  # shown literally, character for character...
    # ...and nothing of it became an image, a link or styled text
    assert alert.locator("img, a, strong, b, em").count() == 0
    assert page.locator("img[src*='example.invalid'], a[href='http://x']").count() == 0


def test_a_huge_value_is_cut(open_app):
    page = open_app("", f"?kernel=vector_add&backend=sim&n={'9' * 10_000}")
    text = page.get_by_test_id("stAlert").filter(has_text="Bad link").first.inner_text()
    assert len(text) < 400 and "10,000 characters" in text, len(text)


def test_a_tab_closed_mid_run_never_shows_up_in_another(browser, app_url, open_app):
    first = browser.new_context(viewport={"width": 1280, "height": 720})
    tab = first.new_page()
    tab.goto(f"{app_url}/?kernel=matmul_naive&backend=sim&n=61&tile=8")
    progress = tab.get_by_text(re.compile(r"\d+ of \d+ blocks simulated")).first
    progress.wait_for(state="attached", timeout=120_000)  # inside the collapsed status box
    first.close()  # the visitor leaves while the kernel runs
    page = open_app("", "?kernel=vector_add&backend=sim&n=77&block=32")  # the next visitor
    sidebar = page.get_by_test_id("stSidebar").inner_text()
    assert "showing: vector_add (n=77, block=32)" in sidebar, sidebar
