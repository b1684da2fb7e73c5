"""Compare and Under the hood in Chromium at 1280x720: the chart on screen without scrolling, titles whole."""

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# a title whose text runs past its chart's right edge, or a heading wider than its box
CLIPPED = """() => {
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    for (const t of plot.querySelectorAll('.gtitle, .annotation-text')) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < box.left - 1 || r.right > box.right + 1)) out.push(t.textContent.slice(0, 60));
    }
  }
  for (const h of document.querySelectorAll('[data-testid=stMain] h1')) {
    if (h.scrollWidth > h.clientWidth + 1) out.push(h.textContent);
  }
  return out;
}"""


def _shot(page, name: str, tmp_path) -> None:
    out = Path(os.environ.get("SCREENSHOT_DIR", tmp_path))  # never into the tree
    page.screenshot(path=str(out / f"{name}.png"))


def test_compare_page_at_1280(open_app, tmp_path):
    page = open_app("", "?page=compare&cmp_pair=transpose&cmp_backend=sim&kernel=vector_add&backend=sim")
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=120_000)
    assert page.get_by_test_id("stException").count() == 0
    box = plot.bounding_box()
    assert box["y"] + box["height"] <= 720, box  # the whole chart without scrolling
    assert "sectors" in plot.inner_text()
    _shot(page, "compare", tmp_path)
    assert page.evaluate(CLIPPED) == []
    main = page.get_by_test_id("stMain").inner_text().replace("\u200b", "")
    assert "transpose_tiled: 32 → 4 sectors per global store request" in main, main[:2000]


def test_under_the_hood_page_at_1280(open_app, tmp_path):
    page = open_app("", "?page=under_the_hood&kernel=transpose_tiled&backend=sim&rows=64&cols=64&tile=32")
    page.get_by_text("registers", exact=True).first.wait_for(timeout=120_000)
    assert page.get_by_test_id("stException").count() == 0
    table = page.get_by_test_id("stDataFrame").first
    table.wait_for(timeout=60_000)
    _shot(page, "under_the_hood", tmp_path)
    box = table.bounding_box()
    assert box["y"] + box["height"] <= 720, box
    code = page.get_by_test_id("stCode").first
    assert code.bounding_box()["y"] < 720
    assert page.evaluate(CLIPPED) == []
