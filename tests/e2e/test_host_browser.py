"""In a real browser: a DNS-rebinding page is refused before any page code runs (by serve's Host
check, and by the app itself under plain `streamlit run`); a visitor behind a loopback TCP forward
reaches the app but runs code only with the operator's key; visitor text never becomes a link; a
local visitor arriving as ::ffff:127.0.0.1 is served."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from urllib.parse import quote

import pytest

from .conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, _free_port, wait_for_app

pytestmark = pytest.mark.e2e
REBINDING = "--host-resolver-rules=MAP evil.example 127.0.0.1"  # what the attacker's DNS answers


def _healthy(url, proc, log, seconds=90):
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"server did not start:\n{log.read_text()[-3000:]}")
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            pass
        time.sleep(0.5)


def _stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("VISUALIZER_TOKEN", "VISUALIZER_ALLOW_USER_CODE")}
    return {**env, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`python -m visualizer serve` as an operator starts it: (url, port, the key from its link)."""
    port, log = _free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "visualizer", "serve", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            cwd=log.parent,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _healthy(url, proc, log)
        (token,) = re.findall(r"Open: \S+/\?token=(\S+)", log.read_text())
        yield url, port, token
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def rebinding_browser(browser):
    """A second Chromium (of the same Playwright) whose resolver points evil.example at 127.0.0.1."""
    b = browser.browser_type.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, REBINDING], headless=True)
    yield b
    b.close()


class Forwarder:
    """What `ssh -L` or socat does: accept on 127.0.0.1:port and copy bytes to the server and back."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def _new_page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    return context, context.new_page()


def test_a_rebinding_page_is_refused_by_serve_before_the_app(served, rebinding_browser):
    _, port, token = served
    context, page = _new_page(rebinding_browser)
    try:
        # even a link with the right key: the Host is refused before anything reads it
        response = page.goto(f"http://evil.example:{port}/your_kernel?backend=sim&token={token}")
        assert response.status == 403
        assert "does not answer to the host name 'evil.example:" in page.inner_text("body")
        page.wait_for_timeout(1000)
        assert page.locator("[data-testid='stApp'], textarea").count() == 0
    finally:
        context.close()


def test_a_rebinding_page_is_refused_by_the_app_under_plain_streamlit_run(
    app_url, app_token, rebinding_browser
):
    """The app_url server is a plain `streamlit run` (no HostGuard): Streamlit serves its page and
    accepts the websocket (same origin), and the app script refuses before any page code runs."""
    port = app_url.rsplit(":", 1)[1]
    context, page = _new_page(rebinding_browser)
    try:
        page.goto(f"http://evil.example:{port}/your_kernel?backend=sim&token={app_token}")
        alert = page.get_by_test_id("stAlert").filter(has_text="does not answer to the host name")
        alert.wait_for(timeout=120_000)
        page.locator("[data-testid='stApp'][data-test-script-state='notRunning']").wait_for(
            state="attached", timeout=60_000
        )
        main = page.get_by_test_id("stMain")
        assert main.locator("h1, textarea, button").count() == 0, main.inner_text()
        assert "Your kernel" not in main.inner_text()
    finally:
        context.close()


def _run_button(page):
    return page.get_by_role("button", name="Run your kernel", exact=True)


def test_a_forwarded_visitor_reaches_the_app_but_runs_code_only_with_the_key(served, browser):
    _, port, token = served
    forward = Forwarder(port)
    base = f"http://127.0.0.1:{forward.port}"
    context, page = _new_page(browser)
    try:
        page.goto(f"{base}/your_kernel?backend=sim")
        wait_for_app(page)
        main = page.get_by_test_id("stMain")
        assert "off for this browser session" in main.inner_text()
        assert _run_button(page).is_disabled()
        # the operator's link, through the same forward
        page.goto(f"{base}/your_kernel?backend=sim&token={quote(token)}")
        wait_for_app(page)
        assert "token" not in page.url, page.url  # taken out of the address bar
        assert "off for this browser session" not in main.inner_text()
        page.get_by_test_id("stMainBlockContainer").get_by_text("simulator", exact=True).click()
        page.wait_for_timeout(500)
        _run_button(page).click()
        page.get_by_text("matches the numpy reference").first.wait_for(timeout=120_000)
        # another browser (no key) through the forward: still off
        other_context, other = _new_page(browser)
        other.goto(f"{base}/your_kernel?backend=sim")
        wait_for_app(other)
        assert _run_button(other).is_disabled()
        other_context.close()
    finally:
        context.close()
        forward.close()


@pytest.mark.parametrize("value", ["www.evil.example", "someone@evil.example", "http://evil.example/x"])
def test_visitor_text_never_becomes_a_link(open_app, value):
    page = open_app("", f"?kernel={quote(value)}")
    alert = page.get_by_test_id("stAlert").filter(has_text="Bad link").first
    assert value in alert.inner_text().replace("\u200b", "")  # shown, character for character
    assert alert.locator("a").count() == 0
    assert page.locator("a[href*='evil.example']").count() == 0


def test_streamlit_run_from_elsewhere_serves_a_local_visitor_arriving_ipv4_mapped(browser, tmp_path):
    """`streamlit run /path/to/app.py` from another directory listens on '::', where a local visitor
    arrives as ::ffff:127.0.0.1; listening on ::ffff:127.0.0.1 gives the same peer address on loopback only."""
    port, log = _free_port(), tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "visualizer" / "app.py"),
             "--server.address", "::ffff:127.0.0.1", "--server.port", str(port), "--server.headless", "true",
             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _healthy(url, proc, log)
        context, page = _new_page(browser)
        page.goto(f"{url}/?kernel=vector_add&backend=sim&n=64")
        wait_for_app(page)
        text = page.get_by_test_id("stMain").inner_text()
        assert "serves only the machine it runs on" not in text and page.locator("h1").count() >= 1, text
        context.close()
    finally:
        _stop(proc)
