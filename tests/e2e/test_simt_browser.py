"""The SIMT lens page in a real browser at 1280x720: the lane strips above the fold, titles whole."""

import pytest
from playwright.sync_api import expect

from .conftest import wait_for_app

pytestmark = pytest.mark.e2e

# every plot title's text box against its plot's box: a title running past the right edge is clipped
TITLE_CUT = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((plot) => {
  const box = plot.getBoundingClientRect();
  return [...plot.querySelectorAll('.gtitle')].filter((t) => {
    const r = t.getBoundingClientRect();
    return r.right > box.right + 1 || r.left < box.left - 1;
  }).map((t) => t.textContent.slice(0, 80));
})"""


def test_simt_page_lane_strip_above_the_fold(open_app, tmp_path):
    page = open_app("simt", "?kernel=branch_lanes&backend=sim&n=512&reps=4&block=128&simt_warp=1")
    assert page.get_by_test_id("stException").count() == 0
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=120_000)
    assert "which lanes took each branch" in plot.inner_text()
    box = plot.bounding_box()
    if __import__("os").environ.get("SIMT_SHOT"):
        page.screenshot(path=__import__("os").environ["SIMT_SHOT"])
    assert box["y"] + box["height"] <= 720, box  # the whole strip chart on a projector screen
    assert page.evaluate(TITLE_CUT) == []
    if __import__("os").environ.get("SIMT_SHOT"):
        page.screenshot(path=__import__("os").environ["SIMT_SHOT"])
    # the barrier tab says why the simulator has no timeline
    page.get_by_role("tab", name="Barriers: who waited").click()
    # the tab's choice goes into the link: the script runs again, and its text is what it drew after that
    page.wait_for_timeout(300)
    wait_for_app(page)
    assert page.get_by_text("Not offered on the simulator").first.is_visible()


def test_divergence_lesson_runs_and_its_lane_strips_fit(page, app_url):
    from tests.e2e.conftest import wait_for_app
    from tests.e2e.test_browser import CLIPPED, charts, main, open_page
    from tests.e2e.test_lessons_browser import lock_in

    page = open_page(page, app_url, "?backend=sim&page=lessons&lesson=divergence")
    m = main(page)
    for value in ("50", "100", "2"):  # three predictions: two efficiencies and a slowdown
        lock_in(page, typed=value)  # types it again if it has not reached the server (stuck 120 s on CI)
    m.get_by_role("button", name="Run it").click()
    wait_for_app(page)
    assert page.get_by_test_id("stException").count() == 0
    assert m.get_by_text("Right: you said 100 %").count() == 1  # branch_warps: no warp diverges
    expect(charts(page)).to_have_count(2, timeout=60_000)  # the second may be drawn a moment later
    assert page.evaluate(CLIPPED) == [] and page.evaluate(TITLE_CUT) == []
