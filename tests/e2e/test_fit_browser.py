"""Every page at a projector's 1280x720, with a built-in kernel and with a visitor's own: the first chart
starts above the fold with room for its plot, the sidebar's Run covers no control, and a select box's
chosen label is written out, not cut. Screenshots go to VISUALIZER_SCREENSHOTS (else the test's tmp dir,
under /tmp) to be looked at."""

import os
from pathlib import Path

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.e2e

FOLD = 720
CHART_TOP_MAX = 430  # the first chart's top: below it less than ~290 px of its plot shows without scrolling
BUILT_IN = {  # page -> a launch whose page draws a chart (vector add has no shared memory to draw)
    "grid": "?kernel=vector_add&backend=sim&n=200&block=48",
    "scheduling": "?kernel=vector_add&backend=sim&n=1000&block=128",
    "simt": "?kernel=vector_add&backend=sim&n=200&block=64",
    "shared_memory": "?kernel=reduction&backend=sim&n=256&block=32",
    "memory_flow": "?kernel=vector_add&backend=sim&n=200&block=48",
    "memory_access": "?kernel=transpose_naive&backend=sim",
    "occupancy": "?kernel=vector_add&backend=sim&n=200&block=48",
    "flash_attention": "?kernel=vector_add&backend=sim&n=200&block=48",  # not FA: the recorded timings
    "compare": "?kernel=vector_add&backend=sim&n=200&block=48",
}
# the first chart's top, the Run button's overlaps with other sidebar controls, cut select labels
MEASURE = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const plots = [...main.querySelectorAll('.js-plotly-plot')].filter((e) => e.getBoundingClientRect().height > 0);
  const top = plots.length ? plots[0].getBoundingClientRect().top + window.scrollY : null;
  const side = document.querySelector('[data-testid=stSidebar]');
  const run = [...side.querySelectorAll('button')].find((b) => b.innerText.trim() === 'Run');
  const covered = [];
  if (run) {
    const r = run.getBoundingClientRect();
    for (const el of side.querySelectorAll('input, [data-baseweb=select], [data-testid=stWidgetLabel], '
        + '[data-testid=stCaptionContainer], [data-testid=stMarkdownContainer], a, [role=slider]')) {
      if (run.contains(el) || el.contains(run)) continue;
      const b = el.getBoundingClientRect();
      if (b.height && b.top < r.bottom && r.top < b.bottom && b.left < r.right && r.left < b.right)
        covered.push((el.innerText || el.value || el.tagName).slice(0, 40));
    }
  }
  const cut = [];  // a select box's chosen option is the text of an input: cut when it is wider than the box
  for (const el of document.querySelectorAll('[data-testid=stSelectbox] input, [role=combobox]')) {
    if (el.value && el.scrollWidth > el.clientWidth + 1) cut.push(el.value.slice(0, 60));
  }
  return {top, covered, cut};
}"""


def _shots(tmp_path) -> Path:
    out = Path(os.environ.get("VISUALIZER_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _measure(page, name, shots) -> dict:
    page.locator("[data-testid=stMain] .js-plotly-plot").first.wait_for(timeout=180_000)
    page.wait_for_timeout(800)  # the page's style lands a moment after the script on a loaded machine
    page.screenshot(path=str(shots / f"{name}.png"), timeout=120_000)
    return page.evaluate(MEASURE)


@pytest.mark.parametrize("name", list(BUILT_IN))
def test_every_page_fits_1280x720_with_a_built_in_kernel(page, app_url, tmp_path, name):
    page.goto(f"{app_url}/{BUILT_IN[name]}&page={name}")
    wait_for_app(page, timeout=300_000)
    assert page.get_by_test_id("stException").count() == 0
    got = _measure(page, f"builtin_{name}", _shots(tmp_path))
    assert got["top"] is not None and got["top"] < CHART_TOP_MAX, (name, got)
    assert got["covered"] == [], (name, got)  # Run covers nothing in the sidebar
    assert got["cut"] == [], (name, got)  # every chosen label written out


def test_the_kernel_with_most_parameters_keeps_run_on_screen_and_uncovering(page, app_url, tmp_path):
    page.goto(f"{app_url}/?kernel=flash_attention&backend=sim&seq_len=80&tile=16&head_dim=32&page=overview")
    wait_for_app(page, timeout=300_000)
    run = page.get_by_test_id("stSidebar").get_by_role("button", name="Run", exact=True)
    box = run.bounding_box()
    assert box is not None and box["y"] + box["height"] <= FOLD, box
    got = page.evaluate(MEASURE)
    page.screenshot(path=str(_shots(tmp_path) / "flash_sidebar.png"))
    assert got["covered"] == [] and got["cut"] == [], got


def test_select_labels_are_written_out(page, app_url, tmp_path):
    """The long titles used to be cut at 1280 px: "Matrix multiply (shared-memory", "Transpose: naive vs shar"."""
    page.goto(f"{app_url}/?kernel=matmul_tiled&backend=sim&n=20&tile=8&page=compare")
    wait_for_app(page, timeout=300_000)
    got = _measure(page, "select_labels", _shots(tmp_path))
    side = page.get_by_test_id("stSidebar").inner_text()
    assert "Matrix multiply (shared-memory tiles)" in side  # the title, written out under its box
    assert got["cut"] == [], got
    pair = page.get_by_test_id("stMain").get_by_role("combobox", name="Pair").input_value()
    assert pair == "Transpose: naive vs shared-memory tile", pair


VISITOR_PAGES = ("Grid layout", "Warp & SM scheduling", "Memory flow", "Occupancy", "Memory access")


def test_every_page_fits_1280x720_with_a_visitors_kernel(open_app, app_token, tmp_path):
    shots = _shots(tmp_path)
    page = open_app("your_kernel", f"?backend=sim&token={app_token}")
    editor = page.get_by_label("Kernel source (Python, Numba CUDA)")
    editor.wait_for(timeout=60_000)
    page.get_by_test_id("stMainBlockContainer").get_by_text("simulator", exact=True).click()
    page.get_by_text("record memory accesses").click()
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Run your kernel", exact=True).click()
    page.get_by_text("matches the numpy reference").first.wait_for(timeout=180_000)
    wait_for_app(page, timeout=300_000)
    for title in VISITOR_PAGES:
        page.get_by_test_id("stSidebar").get_by_test_id("stRadio").first.get_by_text(title).click()
        wait_for_app(page, timeout=300_000)
        assert page.get_by_test_id("stException").count() == 0, title
        got = _measure(page, "yours_" + title.split()[0].lower(), shots)
        assert got["top"] is not None and got["top"] < CHART_TOP_MAX, (title, got)
        assert got["cut"] == [], (title, got)
