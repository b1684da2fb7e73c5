"""The built documentation site in Chromium: every request a page makes (its scripts, styles, fonts,
images, the search worker and its index) stays on 127.0.0.1. Served by a plain static file server, as
`mkdocs serve` or any web server would."""

import os
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

import pytest

from .conftest import ROOT, _free_port

pytestmark = pytest.mark.e2e
PAGES = ("", "teachers/", "guide/grid/", "cli/", "notebook/", "benchmarks/", "contributing/")


@pytest.fixture(scope="module")
def docs_url(tmp_path_factory):
    site = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(site)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the static file server did not start")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_docs_pages_fetch_nothing_off_the_machine(browser, docs_url):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    requested, refused = [], []

    def only_local(route):
        host = urlparse(route.request.url).hostname
        if urlparse(route.request.url).scheme in ("http", "https") and host != "127.0.0.1":
            refused.append(route.request.url)
            return route.abort()
        return route.continue_()

    context.route("**/*", only_local)  # also what the search worker fetches
    context.on("request", lambda request: requested.append(request.url))
    page = context.new_page()
    try:
        for path in PAGES:
            response = page.goto(docs_url + path, wait_until="networkidle")
            assert response is not None and response.ok, path
            assert page.locator("article h1").first.is_visible(), path
        # the search box loads the search worker and its index
        page.locator("input[data-md-component='search-query']").click()
        page.keyboard.type("teacher", delay=20)  # the theme searches on key events, not on fill()
        page.locator(".md-search-result__item").first.wait_for(timeout=30_000)
        page.wait_for_load_state("networkidle")
    finally:
        context.close()
    assert refused == []
    off = [u for u in requested if urlparse(u).scheme not in ("http", "https", "data", "blob", "about", "file")
           or (urlparse(u).scheme in ("http", "https") and urlparse(u).hostname != "127.0.0.1")]  # fmt: skip
    assert off == []
    assert any("search_index.json" in u for u in requested)  # the search really ran, from this machine
    assert len(requested) > len(PAGES)
