"""A visitor's kernel as the current kernel in a real browser: named in the sidebar and the charts,
carried by the address bar's link into a new browser context (run there only with the key)."""

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import wait_for_app

pytestmark = pytest.mark.e2e


def _shots(tmp_path) -> Path:
    """Where the screenshots go: VISUALIZER_SCREENSHOTS to look at them, else the test's tmp dir."""
    out = Path(os.environ.get("VISUALIZER_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _sidebar(page):
    return page.get_by_test_id("stSidebar")


def _choose(page, title):
    _sidebar(page).get_by_test_id("stRadio").first.get_by_text(title).click()
    wait_for_app(page)


def test_a_visitors_kernel_is_named_everywhere_and_its_link_opens_it(open_app, browser, app_token, tmp_path):
    shots = _shots(tmp_path)
    page = open_app("your_kernel", f"?backend=sim&token={app_token}")  # the operator's link
    page.get_by_label("Kernel source (Python, Numba CUDA)").wait_for(timeout=60_000)
    page.get_by_test_id("stMainBlockContainer").get_by_text("simulator", exact=True).click()
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Run your kernel", exact=True).click()
    page.get_by_text("matches the numpy reference").first.wait_for(
        timeout=400_000
    )  # a hang guard: a run on a loaded machine
    wait_for_app(page)
    page.screenshot(path=str(shots / "yours_your_kernel.png"))
    for title, name in (
        ("Grid layout", "grid"),
        ("Warp & SM scheduling", "scheduling"),
        ("Memory access", "memory"),
    ):
        _choose(page, title)
        assert page.get_by_test_id("stException").count() == 0, title
        side = _sidebar(page).inner_text()
        assert "Kernel: vector_add (yours)" in side, (title, side)
        assert _sidebar(page).get_by_role("combobox", name="Kernel").count() == 0, title  # no built-in picker
        assert (
            "Kernel: vector_add (yours), from the Your kernel page"
            in page.get_by_test_id("stMain").inner_text()
        )
        page.screenshot(path=str(shots / f"yours_{name}.png"))
    assert page.get_by_role("button", name="Record my kernel's accesses").count() == 1
    _choose(page, "Grid layout")
    page.locator(".js-plotly-plot .gtitle").first.wait_for(timeout=60_000)
    assert "vector_add (yours)" in page.locator(".js-plotly-plot .gtitle").first.text_content()
    link = page.url
    assert "yk=" in link and "page=grid" in link and "token" not in link and "kernel=" not in link, link

    # the copied link in a browser that has no key: the kernel is filled in, not run
    stranger = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        stranger.goto(link)
        wait_for_app(stranger)
        stranger.get_by_text("filled in below, not run").wait_for(timeout=60_000)
        editor = stranger.get_by_label("Kernel source (Python, Numba CUDA)")
        # the browser mounts the text area empty and fills it a moment later (seconds on a loaded
        # machine, after the script has finished): wait for the source, do not read it once
        expect(editor).to_have_value(re.compile(r"def vector_add"), timeout=60_000)
        expect(stranger.get_by_role("button", name="Run your kernel", exact=True)).to_be_disabled()
        stranger.screenshot(path=str(shots / "link_without_key.png"))
    finally:
        stranger.context.close()

    # the same link opened with the operator's key (a class given the key): it runs and shows the grid
    student = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        student.goto(f"{link}&token={app_token}")
        student.locator(".js-plotly-plot .gtitle").first.wait_for(
            timeout=400_000
        )  # a hang guard: a run on a loaded machine
        wait_for_app(student)
        assert student.get_by_test_id("stMain").locator("h1").first.inner_text() == "Grid layout"
        assert "vector_add (yours)" in _sidebar(student).inner_text()
        assert "vector_add (yours)" in student.locator(".js-plotly-plot .gtitle").first.text_content()
        assert "token" not in student.url and "yk=" in student.url
        student.screenshot(path=str(shots / "link_with_key_grid.png"))
    finally:
        student.context.close()
