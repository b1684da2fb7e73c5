"""End to end in a real browser: every page renders without an exception; animations advance."""

import pytest

pytestmark = pytest.mark.e2e

QUERY = "?kernel=vector_add&backend=sim&n=200&block=48"
PAGES = ["", "grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]
SLIDER_ACTIVE = (
    "(el) => el._fullLayout.sliders && el._fullLayout.sliders.length ? el._fullLayout.sliders[0].active : -1"
)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders(open_app, path):
    page = open_app(path, QUERY)
    assert page.get_by_test_id("stException").count() == 0
    assert page.get_by_test_id("stSidebar").is_visible()
    if path:
        # each page's own content is there, not just the sidebar
        assert page.locator("h1").count() >= 1


def test_bad_link_shows_error_and_app_keeps_serving(open_app):
    page = open_app("", "?kernel=vector_add&backend=sim&block=banana")
    assert page.get_by_test_id("stException").count() == 0
    assert "Bad link" in page.get_by_test_id("stAlert").first.inner_text()
    page = open_app("", QUERY)  # the server still answers
    assert page.get_by_test_id("stException").count() == 0


def test_play_advances_grid_animation(open_app):
    page = open_app("grid", QUERY)
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=60_000)
    assert plot.evaluate(SLIDER_ACTIVE) == 0
    page.locator(".updatemenu-button").filter(has_text="Play").first.click()
    page.wait_for_function(
        "() => { const el = document.querySelector('.js-plotly-plot');"
        " return el._fullLayout.sliders[0].active >= 2; }",
        timeout=20_000,
    )
    assert page.get_by_test_id("stException").count() == 0


def test_figure_downloads_as_standalone_html(open_app, tmp_path):
    page = open_app("grid", QUERY)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    with page.expect_download(timeout=60_000) as info:
        page.get_by_role("button", name="Download figure (HTML)").first.click()
    path = tmp_path / "grid.html"
    info.value.save_as(path)
    html = path.read_text()
    assert "<html>" in html[:200].lower() and "plotly" in html.lower()
    assert len(html) > 1_000_000  # plotly.js is inlined: the file works offline
