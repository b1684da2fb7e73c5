"""Your kernel in a real browser: edit the example, run it on the simulator, then see it on the grid page."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_paste_run_and_see_the_grid(open_app, app_token, tmp_path):
    page = open_app("your_kernel", f"?backend=sim&token={app_token}")  # the operator's link
    assert page.get_by_test_id("stException").count() == 0
    editor = page.get_by_label("Kernel source (Python, Numba CUDA)")
    editor.wait_for(timeout=60_000)
    expect(editor).to_have_value(re.compile(r"def vector_add"), timeout=60_000)  # mounted empty, then filled
    # the user's edit: a scaled add, with the reference to match
    editor.fill(editor.input_value().replace("c[i] = a[i] + b[i]", "c[i] = 2 * a[i] + b[i]"))
    editor.blur()
    page.wait_for_timeout(500)
    reference = page.get_by_label("numpy reference", exact=False)
    reference.fill("c = 2 * a + b")
    reference.blur()
    page.get_by_test_id("stMainBlockContainer").get_by_text("simulator", exact=True).click()
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Run your kernel", exact=True).click()
    page.get_by_text("matches the numpy reference").first.wait_for(timeout=120_000)
    assert page.get_by_test_id("stException").count() == 0
    page.screenshot(path=str(tmp_path / "your_kernel.png"), full_page=False)
    page.get_by_role("link", name="Grid layout").first.click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert page.get_by_test_id("stException").count() == 0
    assert "vector_add (yours)" in page.content(), "the grid page shows the user's capture, not a re-run"
