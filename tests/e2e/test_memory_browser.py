"""The Memory access page in a real browser: the worst request drawn, the what-if re-records."""

import pytest

from tests.e2e.conftest import wait_for_app

pytestmark = pytest.mark.e2e


def test_memory_access_page_transpose_what_if(open_app):
    page = open_app("memory_access", "?kernel=transpose_naive&backend=sim&rows=32&cols=32&tile=32")
    assert page.get_by_test_id("stException").count() == 0
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=120_000)
    assert "32 sectors for 32 lanes" in plot.inner_text()
    page.get_by_text("tiled + padding", exact=True).click()
    wait_for_app(page)
    assert page.get_by_test_id("stException").count() == 0
    page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    assert "conflict-free" in page.locator(".js-plotly-plot").first.inner_text()


# The source block beside the sector chart: lines running past its right edge (cut off or scrolled)
SOURCE_CUT = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stHtml] div')]
  .filter((el) => el.style.fontFamily === 'monospace')
  .flatMap((box) => [box, ...box.children])
  .filter((el) => el.scrollWidth > el.clientWidth + 1).map((el) => el.textContent.slice(0, 60))"""


def test_the_highlighted_source_line_fits_its_column_at_1280(open_app):
    page = open_app("", "?backend=sim&page=memory_access&mem_kernel=transpose_naive")
    source = page.locator("[data-testid=stMain] [data-testid=stHtml]").filter(
        has_text="out[x, y] = inp[y, x]"
    )
    source.first.wait_for(timeout=120_000)
    assert "stores a whole row apart" in source.first.inner_text()
    assert page.evaluate(SOURCE_CUT) == []
