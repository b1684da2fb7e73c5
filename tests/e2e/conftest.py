"""A real `streamlit run` server and Debian's chromium driven by Playwright (no browser download)."""

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def pytest_collection_modifyitems(config, items):
    if Path(CHROMIUM).exists():
        return
    skip = pytest.mark.skip(reason=f"no browser at {CHROMIUM} (apt-get install -y chromium)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


APP_TOKEN = secrets.token_urlsafe(32)  # the operator's key of the app_url server (`?token=` link)


@pytest.fixture(scope="session")
def app_token() -> str:
    return APP_TOKEN


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    port = _free_port()
    log = (tmp_path_factory.mktemp("streamlit") / "server.log").open("w+")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "VISUALIZER_TOKEN": APP_TOKEN}
    env.pop("VISUALIZER_ALLOW_USER_CODE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "visualizer" / "app.py"),
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         "--global.developmentMode", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"streamlit exited early:\n{log.read()[-3000:]}")
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("streamlit did not become healthy in 90 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        print(log.read()[-3000:])


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


# Streamlit's page says "notRunning" from a widget's click until the server starts the rerun it asked
# for, so on a loaded machine a wait could end before the rerun began. This watches the app's own
# websocket: each rerun the page asks for (BackMsg.rerun_script, field 11: first byte 0x5A) and each run
# the server starts (ForwardMsg.new_session, field 4) or ends (script_finished, field 6).
TRACK_RUNS = """(() => {
  const st = (window.__st = { seq: 0, asked: 0, started: 0, running: false });
  const bytes = (d) => (d instanceof ArrayBuffer ? new Uint8Array(d)
      : ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : null);
  const varint = (b, i) => { let v = 0, m = 1;
      for (;;) { const x = b[i++]; v += (x & 127) * m; m *= 128; if (x < 128) return [v, i]; } };
  const Socket = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Socket(...args);
    const send = ws.send.bind(ws);
    ws.send = (data) => { const b = bytes(data); if (b && b[0] === 0x5a) st.asked = ++st.seq; return send(data); };
    ws.addEventListener("message", (e) => {
      const b = bytes(e.data);
      for (let i = 0; b && i < b.length;) {
        let tag, n; [tag, i] = varint(b, i);
        const field = Math.floor(tag / 8), wire = tag % 8;
        if (field === 4) { st.started = st.seq; st.running = true; return; }
        if (field === 6) { st.running = false; return; }
        if (wire === 2) { [n, i] = varint(b, i); i += n; } else if (wire === 0) { [n, i] = varint(b, i); }
        else return;
      }
    });
    return ws;
  };
  window.WebSocket.prototype = Socket.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();"""
# every rerun the page asked for has started, and the last run has ended (true where nothing is watched)
SETTLED = "() => !window.__st || (window.__st.started >= window.__st.asked && !window.__st.running)"


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 720})  # a projector
    context.add_init_script(TRACK_RUNS)
    pg = context.new_page()
    yield pg
    context.close()


def wait_for_app(page, timeout=120_000):
    """Connected, script finished, no skeletons: the page is what the user would see."""
    page.locator("[data-testid='stApp'][data-test-connection-state='CONNECTED']").wait_for(
        state="attached", timeout=timeout
    )
    page.wait_for_timeout(300)
    # every page starts with its title: once it is there the script has started, so 'notRunning'
    # below means finished, not 'not started yet'
    page.locator("[data-testid='stMain'] h1").first.wait_for(state="attached", timeout=timeout)
    page.locator("[data-testid='stApp'][data-test-script-state='notRunning']").wait_for(
        state="attached", timeout=timeout
    )
    # ...and every rerun the page asked for has run (a callback's st.rerun() ends one run and starts the
    # next: settled twice, 300 ms apart)
    for _ in range(2):
        page.wait_for_function(SETTLED, timeout=timeout)
        page.wait_for_timeout(300)


def type_and_enter(box, value: str, arrived, tries: int = 6, each_ms: int = 20_000):
    """Type `value` into `box` and press Enter, and again if `arrived(timeout_ms)` (an expect on what the
    value changes on the page) has not passed `each_ms` later: on a loaded machine a typed value once never
    reached the server (a Lock button stayed disabled 120 s). A value that never arrives still fails."""
    for _ in range(tries - 1):
        box.fill(value)
        box.press("Enter")
        try:
            arrived(each_ms)
            return
        except AssertionError:
            continue
    box.fill(value)
    box.press("Enter")
    arrived(each_ms)


@pytest.fixture
def open_app(page, app_url):
    def _open(path: str = "", query: str = ""):
        page.goto(f"{app_url}/{path}{query}")
        wait_for_app(page)
        return page

    return _open
