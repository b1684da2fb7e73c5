"""End to end in a real browser at a projector's 1280x720: every page renders without an exception,
links reproduce views across page switches, errors show where the chart would be, nothing is clipped
or covered, and nothing is fetched from outside the machine."""

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from visualizer.engine.run.runner import gpu_present

from .conftest import type_and_enter, wait_for_app

pytestmark = pytest.mark.e2e

QUERY = "?kernel=vector_add&backend=sim&n=200&block=48"
PAGES = ["overview", "grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]
PAGE_TITLES = {"scheduling": "Warp & SM scheduling", "grid": "Grid layout", "shared_memory": "Shared memory"}
SLIDER_ACTIVE = (
    "(el) => el._fullLayout.sliders && el._fullLayout.sliders.length ? el._fullLayout.sliders[0].active : -1"
)
# Views with an animation, each as a teacher would open it (small launches: the suite runs on 2 cores)
ANIMATED = {
    "grid": "?kernel=vector_add&backend=sim&n=200&block=48&page=grid",
    "waves": "?kernel=vector_add&backend=sim&n=15360&block=256&page=scheduling&sched_gpu=T4&sched_regs=255",
    "tiles": "?kernel=matmul_tiled&backend=sim&n=20&tile=8&page=shared_memory",
    "tree": "?kernel=reduction&backend=sim&n=256&block=32&page=shared_memory",
    "flow": "?kernel=vector_add&backend=sim&n=200&block=48&page=memory_flow&flow_animate=1",
    "flash": "?kernel=flash_attention&backend=sim&batch=1&causal=1&head_dim=32&heads=1&seq_len=80&tile=16"
    "&page=flash_attention",
}

# Bounding boxes of a chart's Play/Pause buttons and slider, and of everything they must not cover.
OVERLAPS = """(plot) => {
  const boxes = (sel) => [...plot.querySelectorAll(sel)].map((e) => ({el: e.textContent.slice(0, 40),
      r: e.getBoundingClientRect()})).filter((b) => b.r.width > 0 && b.r.height > 0);
  const buttons = boxes('.updatemenu-button');
  const sliders = boxes('.slider-container');
  const labels = boxes('.g-xtitle text, .g-x2title text, .g-x3title text, .g-ytitle text, .g-y2title text,'
      + ' .xaxislayer-above text, .x2y2-axislayer text, .legend .traces, .annotation');
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1
      && b.top < a.bottom - 1;
  const hits = [];
  for (const [mine, others] of [[buttons, [...labels, ...sliders]], [sliders, labels]])
    for (const c of mine) for (const l of others) if (meet(c.r, l.r)) hits.push(`${c.el} / ${l.el}`);
  return {controls: buttons.length + sliders.length, labels: labels.length, hits};
}"""

# Text that does not fit its box: metric values and headings (ellipsis), chart titles past the chart.
CLIPPED = """() => {
  const out = [];
  for (const el of document.querySelectorAll(
      '[data-testid=stMetricValue], [data-testid=stMetricValue] *, [data-testid=stMetricLabel] *,'
      + ' h1, h2, h3, [data-testid=stMain] button [data-testid=stMarkdownContainer]')) {
    if (el.scrollWidth > el.clientWidth + 1) out.push(`${el.tagName}: ${el.textContent.slice(0, 60)}`);
  }
  for (const svg of document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type')) {
    const edge = svg.getBoundingClientRect().right;
    for (const t of svg.parentElement.querySelectorAll('.gtitle, .g-gtitle text, .annotation-text')) {
      if (t.getBoundingClientRect().right > edge + 1) out.push(`chart title: ${t.textContent.slice(0, 60)}`);
    }
  }
  return out;
}"""


def open_page(page, app_url, query):
    page.goto(f"{app_url}/{query}")
    wait_for_app(page)
    return page


def sidebar_page(page, title):
    """Choose a page in the sidebar's page list, as a visitor does."""
    page.get_by_test_id("stSidebar").get_by_test_id("stRadio").first.get_by_text(title).click()
    wait_for_app(page)


def main(page):
    return page.get_by_test_id("stMain")


def kernel_box(page) -> str:
    """The kernel the sidebar's kernel box shows."""
    return page.get_by_test_id("stSidebar").get_by_role("combobox", name="Kernel").input_value()


def shown_metrics(page) -> list[str]:
    """The metric values on the page, once the page has drawn them."""
    values = main(page).get_by_test_id("stMetricValue")
    values.first.wait_for(timeout=60_000)
    return values.all_inner_texts()


def charts(page):
    """The charts on screen (not those inside a closed expander), once drawn."""
    plots = main(page).locator(".js-plotly-plot >> visible=true")
    plots.first.wait_for(timeout=60_000)
    page.wait_for_timeout(300)
    return plots


def settled_count(page, locator, seconds: int = 60) -> int:
    """How many of `locator` there are once the count has held for a second (charts are drawn one by one,
    some after the script has finished)."""
    seen = -1
    for _ in range(seconds):
        if locator.count() == seen:
            break
        seen = locator.count()
        page.wait_for_timeout(1000)
    return seen


@pytest.fixture
def requests_seen(page):
    """Every request the browser makes, and every answer of 400 or more."""
    seen = {"urls": [], "failed": []}
    page.on("request", lambda r: seen["urls"].append(r.url))
    page.on("response", lambda r: r.status >= 400 and seen["failed"].append(f"{r.status} {r.url}"))
    return seen


def run_on_screen(page, wait_ms: int = 5000) -> bool:
    """Whether the sidebar's Run button ends up inside the 720-px viewport (its sticky style is
    injected with the page, a moment after the button on a loaded machine: give it a few seconds)."""
    run = page.get_by_test_id("stSidebar").get_by_role("button", name="Run", exact=True)
    for _ in range(wait_ms // 250):
        box = run.bounding_box()
        if box is not None and box["y"] + box["height"] <= 720:
            return True
        page.wait_for_timeout(250)
    return False


@pytest.mark.parametrize("name", PAGES)
def test_every_page_renders_fits_1280_and_fetches_nothing_from_outside(page, app_url, requests_seen, name):
    page = open_page(page, app_url, f"{QUERY}&page={name}")
    assert page.get_by_test_id("stException").count() == 0
    assert main(page).locator("h1").count() >= 1
    assert page.evaluate(CLIPPED) == []
    assert run_on_screen(page)  # Run is on screen without scrolling
    assert requests_seen["failed"] == []  # no 404s for /<page>/_stcore/health or host-config
    host = app_url.split("//")[1]
    assert [u for u in requests_seen["urls"] if host not in u and not u.startswith("data:")] == []


def test_memory_access_counters_of_a_shared_memory_kernel_are_not_cut(page, app_url):
    """The tiled transpose fills all eight counters (global and shared, wavefronts and conflicts): at
    1280 px none may lose its value or label to an ellipsis."""
    page = open_page(page, app_url, "?kernel=transpose_tiled&backend=sim&page=memory_access")
    # every counter drawn (a busy machine draws the page in parts): fails if fewer than eight ever come
    expect(main(page).get_by_test_id("stMetric")).to_have_count(8, timeout=120_000)
    assert page.evaluate(CLIPPED) == []


def test_run_stays_on_screen_for_the_kernel_with_most_parameters(page, app_url):
    page = open_page(page, app_url, ANIMATED["flash"])  # six parameters fill the sidebar past 720 px
    run = page.get_by_test_id("stSidebar").get_by_role("button", name="Run", exact=True)
    box = run.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 720
    assert run.evaluate(
        "(el) => { const r = el.getBoundingClientRect();"
        " return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2)"
        ".closest('button') === el; }"
    )  # on top, not under another widget


def test_load_example_sets_the_whole_configuration(page, app_url):
    page = open_page(page, app_url, f"{QUERY}&page=shared_memory")
    main(page).get_by_role("button", name="Load reduction example").click()
    wait_for_app(page)
    assert kernel_box(page) == "reduction"  # its title is longer than the box: its name, whole
    assert "kernel=reduction" in page.url and "page=shared_memory" in page.url
    assert main(page).get_by_text("The tree of one block").count() == 1
    # the first touch of another control keeps the example (it used to fall back to vector add)
    sidebar_page(page, "Grid layout")
    assert kernel_box(page) == "reduction"  # its title is longer than the box: its name, whole
    assert "kernel=reduction" in page.url


def test_link_copied_after_page_switches_reproduces_the_view(page, app_url, browser):
    page = open_page(page, app_url, "?kernel=vector_add&backend=sim&n=2000&block=64")
    sidebar_page(page, "Grid layout")
    main(page).get_by_text("lane", exact=True).click()
    wait_for_app(page)
    sidebar_page(page, "Warp & SM scheduling")
    assert "kernel=vector_add" in page.url and "n=2000" in page.url  # page switches keep the query
    main(page).get_by_role("combobox", name="GPU model (modelled)").click()
    page.get_by_role("option", name="T4: 40 SMs (sm_75)").click()
    wait_for_app(page)
    link = page.url
    assert "page=scheduling" in link and "sched_gpu=T4" in link
    metrics = shown_metrics(page)
    assert "32 of 40" in metrics  # the T4 view: 32 blocks on 40 SMs

    fresh = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        fresh.goto(link)
        wait_for_app(fresh)
        assert main(fresh).locator("h1").first.inner_text() == "Warp & SM scheduling"
        assert "T4" in main(fresh).get_by_role("combobox", name="GPU model (modelled)").input_value()
        for _ in range(40):  # on a loaded machine the metrics row can still be drawing: let it settle
            if shown_metrics(fresh) == metrics:
                break
            fresh.wait_for_timeout(250)
        assert shown_metrics(fresh) == metrics
        assert "grid_color_by" not in link  # the link carries the shown page's choices, not every page's
    finally:
        fresh.context.close()
    sidebar_page(page, "Grid layout")  # the session remembers the grid's colouring, and the link gets it back
    checked = main(page).locator("[data-testid=stRadio] input:checked")
    assert checked.first.evaluate("(el) => el.closest('label').innerText").strip() == "lane"
    assert "grid_color_by=lane" in page.url


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("?kernel=vector_add&backend=sim&n=100&block=0&page=grid", "at least 1"),
        ("?kernel=vector_add&backend=sim&n=70000000&block=256&page=scheduling", "simulator"),
        pytest.param(
            "?kernel=vector_add&backend=gpu&n=100&block=32&page=memory_flow",
            "no CUDA GPU",
            marks=pytest.mark.skipif(gpu_present(), reason="this machine has a GPU"),
        ),
    ],
)
def test_a_failed_run_is_explained_where_the_chart_would_be(page, app_url, query, words):
    page = open_page(page, app_url, query)
    alert = main(page).get_by_test_id("stAlert").first
    assert "did not run" in alert.inner_text() and words in alert.inner_text()
    assert main(page).locator(".js-plotly-plot").count() == 0  # no chart of another run under it
    assert page.get_by_test_id("stException").count() == 0


def test_a_failed_run_after_a_good_one_replaces_its_charts(page, app_url):
    page = open_page(page, app_url, f"{QUERY}&page=grid")
    assert charts(page).count() == 1
    named = main(page).get_by_text("still the previous run")  # un-run parameters are named
    box = page.get_by_test_id("stSidebar").get_by_role("spinbutton").first
    type_and_enter(box, "70000000", lambda ms: expect(named).to_have_count(1, timeout=ms))
    wait_for_app(page)
    main(page).get_by_role("button", name="Run", exact=True).click()  # Run where the reader looks
    wait_for_app(page)
    assert "did not run" in main(page).get_by_test_id("stAlert").first.inner_text()
    assert main(page).locator(".js-plotly-plot").count() == 0


def test_bad_link_shows_error_and_app_keeps_serving(page, app_url):
    page = open_page(page, app_url, "?kernel=vector_add&backend=sim&block=banana")
    assert page.get_by_test_id("stException").count() == 0
    assert "Bad link" in main(page).get_by_test_id("stAlert").first.inner_text()
    page = open_page(page, app_url, QUERY)  # the server still answers
    assert page.get_by_test_id("stException").count() == 0


@pytest.mark.parametrize("view", list(ANIMATED))
def test_play_controls_cover_no_axis_label(page, app_url, view):
    page = open_page(page, app_url, ANIMATED[view])
    animated = (
        "(el) => !!(el.layout && ((el.layout.sliders || []).length || (el.layout.updatemenus || []).length))"
    )
    plots = charts(page)
    # under load the animated chart can be drawn after the page's first chart: wait for it before taking the list
    page.wait_for_function(
        f"() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].some({animated})",
        timeout=60_000,
    )
    checked = 0
    for plot in plots.all():
        plot.scroll_into_view_if_needed()
        # under load a chart's element is there before plotly.js has drawn it (no layout yet): wait for the drawing
        plot.page.wait_for_function("(el) => !!el._fullLayout", arg=plot.element_handle(), timeout=60_000)
        found = plot.evaluate(OVERLAPS)
        for _ in range(
            50
        ):  # a chart scrolled into view draws its controls a moment later (slower under load)
            if found["controls"] or not plot.evaluate(animated):
                break
            page.wait_for_timeout(200)
            found = plot.evaluate(OVERLAPS)
        assert found["hits"] == [], view
        if found["controls"]:
            assert found["labels"] > 0  # the selectors found the axis labels they guard
            checked += 1
    assert checked >= 1  # the view has an animation and it was checked
    assert page.evaluate(CLIPPED) == []


def test_grid_opens_complete_and_play_replays(page, app_url):
    page = open_page(page, app_url, ANIMATED["grid"])
    plot = page.locator(".js-plotly-plot").first
    plot.wait_for(timeout=60_000)
    last = plot.evaluate("(el) => el._fullLayout.sliders[0].steps.length - 1")
    assert last >= 2 and plot.evaluate(SLIDER_ACTIVE) == last  # opens on the complete picture
    page.locator(".updatemenu-button").filter(has_text="Play").first.click()
    page.wait_for_function(
        "() => { const el = document.querySelector('.js-plotly-plot');"
        f" return el._fullLayout.sliders[0].active >= 2 && el._fullLayout.sliders[0].active < {last}; }}",
        timeout=20_000,
    )  # replaying from the start
    main(page).get_by_text("block", exact=True).click()  # a new colouring keeps the complete picture
    wait_for_app(page)
    assert page.locator(".js-plotly-plot").first.evaluate(SLIDER_ACTIVE) == last
    assert page.get_by_test_id("stException").count() == 0


def test_figure_downloads_as_standalone_html(page, app_url, tmp_path):
    page = open_page(page, app_url, ANIMATED["grid"])
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    with page.expect_download(timeout=60_000) as info:
        page.get_by_role("button", name="Download figure (HTML)").first.click()
    path = tmp_path / "grid.html"
    info.value.save_as(path)
    html = path.read_text()
    assert "<html>" in html[:200].lower() and "plotly" in html.lower()
    assert len(html) > 1_000_000  # plotly.js is inlined: the file works offline


def test_projector_fit_title_near_the_top_chart_in_view_and_sidebar_boxes_uncovered(page, app_url):
    page = open_page(page, app_url, "?kernel=vector_add&backend=sim&n=200&block=48&page=grid")
    chart = charts(page).first.bounding_box()
    try:  # on a loaded machine the page's style may land a moment after the script ends
        page.wait_for_function(
            "() => document.querySelector(\"[data-testid='stMain'] h1\").getBoundingClientRect().top < 90",
            timeout=5_000,
        )
    except PlaywrightTimeout:
        pass  # the assertion below says where it stayed
    title = main(page).locator("h1").first.bounding_box()
    assert title["y"] < 90, title  # Streamlit's default left ~130 px blank above it
    chart = charts(page).first.bounding_box()
    assert chart["y"] < 450, chart  # the grid starts on a 720-px screen, its plot above the fold
    side = page.get_by_test_id("stSidebar")
    n_box = side.get_by_role("spinbutton", name="n").bounding_box()
    run = side.get_by_role("button", name="Run", exact=True).bounding_box()
    apart = n_box["y"] >= run["y"] + run["height"] or n_box["y"] + n_box["height"] <= run["y"]
    assert apart, (n_box, run)  # Run does not cover the n box
    assert "showing: vector_add (n=200, block=48)" in side.inner_text()


def test_a_long_kernel_name_is_written_out_in_the_sidebar(page, app_url):
    page = open_page(page, app_url, "?kernel=flash_attention_fast&backend=sim&page=overview")
    side = page.get_by_test_id("stSidebar")
    assert side.get_by_text(
        "FlashAttention forward, fast (tensor cores, fp32 accuracy)", exact=True
    ).is_visible()


@pytest.mark.parametrize(
    "query",
    [
        ANIMATED["flash"],
        "?kernel=flash_attention_fast&backend=sim&page=flash_attention",
        "?kernel=transpose_naive&backend=sim&page=memory_access",
    ],
    ids=["flash-teaching", "flash-fast", "memory-access"],
)
def test_first_chart_starts_above_the_fold(page, app_url, query):
    """The page's first chart (one block's K/V loop; one warp request) must start high enough on a 720-px
    projector that its plot, not only its title, shows without scrolling (a launch caption, and the
    memory page's two rows of counters, used to sit above it)."""
    page = open_page(page, app_url, query)
    plots = charts(page)
    settled_count(page, plots)  # every chart drawn: on a busy machine a lower chart can come before the first
    chart = plots.first.bounding_box()
    assert chart["y"] < 520, chart
