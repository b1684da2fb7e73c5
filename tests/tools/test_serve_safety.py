"""`python -m visualizer serve` for real: its flag errors, the link with the operator's key, the Host
check in front of every request, and a server on every interface that contacts nothing off the
machine (checked with Python's audit hooks, inside a network namespace of its own)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BWRAP = shutil.which("bwrap")


def _netns_works() -> bool:
    """bubblewrap is there and may make a network namespace (some containers forbid user namespaces)."""
    if BWRAP is None:
        return False
    probe = subprocess.run([BWRAP, "--unshare-net", "--dev-bind", "/", "/", "true"], capture_output=True)
    return probe.returncode == 0


def run(*args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def one_line_error(res, words):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--allow-remote"], "would serve no other machine"),  # 127.0.0.1 is the default address
        (["--address", "localhost", "--allow-remote"], "would serve no other machine"),
        (["--address", "::1", "--allow-remote"], "would serve no other machine"),
        (["--allow-host", "*"], "not a host name"),
        (["--allow-host", "http://gpu-box.lab"], "not a host name"),
        (["--allow-host", "gpu-box.lab:8501"], "not a host name"),
        (["--allow-host", ""], "not a host name"),
    ],
)
def test_serve_flag_errors_are_one_line(flags, words):
    one_line_error(run("serve", *flags, "--dry-run"), words)


def test_a_key_too_short_to_be_secret_is_refused():
    one_line_error(run("serve", "--dry-run", env={"VISUALIZER_TOKEN": "abc"}), "VISUALIZER_TOKEN")


def test_dry_run_starts_streamlit_through_the_guard():
    res = run("serve", "--allow-host", "GPU-box.lab", "--dry-run")
    assert res.returncode == 0, res.stderr
    cmd = res.stdout.split()
    assert cmd[1:4] == ["-m", "visualizer.web.server", "run"]  # the bootstrap that installs HostGuard
    # HostGuard alone judges Hosts, for HTTP and websocket alike: Streamlit's own name list disagreed
    assert "--server.allowedHosts" not in cmd
    assert cmd[cmd.index("--browser.serverAddress") + 1] == "127.0.0.1"
    res = run("serve", "--address", "0.0.0.0", "--allow-remote", "--dry-run")
    cmd = res.stdout.split()
    assert cmd[cmd.index("--browser.serverAddress") + 1] == "localhost" and "--server.allowedHosts" not in cmd


def test_uploads_are_capped_by_serve_and_by_the_config_file():
    """server.maxUploadSize is the per-session budget's file size, wherever the server is started from."""
    import tomllib

    from visualizer.web.uploads import SESSION_UPLOAD_BYTES, UPLOAD_MAX_MB

    cmd = run("serve", "--dry-run").stdout.split()
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == str(UPLOAD_MAX_MB)
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == UPLOAD_MAX_MB
    assert UPLOAD_MAX_MB << 20 <= SESSION_UPLOAD_BYTES  # one file fits the session's budget


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def _get(url, host=None, origin=None):
    req = urllib.request.Request(url, headers={k: v for k, v in (("Host", host), ("Origin", origin)) if v})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_healthy(url, proc, log, seconds=90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if _get(f"{url}/_stcore/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"serve did not become healthy:\n{log.read_text()[-3000:]}")


def test_serve_prints_the_key_link_and_refuses_foreign_hosts_on_every_route(tmp_path):
    port, log = _free_port(), tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("VISUALIZER_TOKEN", "VISUALIZER_ALLOW_USER_CODE")}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "visualizer", "serve", "--port", str(port)],
            cwd=tmp_path,  # from another directory
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        text = log.read_text()
        (token,) = re.findall(rf"Open: {re.escape(url)}/\?token=([A-Za-z0-9_-]{{40,}})\n", text)
        assert "Visitor code (Your kernel page): only in a browser that opened the link above" in text
        for path in ("/", "/_stcore/health", "/your_kernel", "/static/nothing", "/_stcore/host-config"):
            status, body = _get(url + path, host=f"evil.example:{port}")
            assert status == 403 and "does not answer to the host name" in body, (path, status)
            status, _ = _get(url + path, host=f"127.0.0.1:{port}", origin=f"http://evil.example:{port}")
            assert status == 403, path
        assert _get(url + "/", host=f"localhost:{port}")[0] == 200
        assert _get(url + "/", host=f"[::1]:{port}")[0] == 200
        assert token not in _get(url + "/")[1]
    finally:
        _stop(proc)


def _handshake(port: int, host: str, origin: str | None) -> int:
    """The HTTP status of a websocket handshake on Streamlit's stream, as a browser sends it."""
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: streamlit\r\n" + (f"Origin: {origin}\r\n" if origin else "") + "\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0


@pytest.fixture(scope="module")
def served_port(tmp_path_factory):
    """`python -m visualizer serve` bound to 127.0.0.1, for every Host/Origin case below."""
    port, log = _free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("VISUALIZER_TOKEN", "VISUALIZER_ALLOW_USER_CODE")}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "visualizer", "serve", "--port", str(port)],
            cwd=log.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONPATH": str(ROOT), "NUMBA_ENABLE_CUDASIM": "1"},
            start_new_session=True,
        )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        yield port
    finally:
        _stop(proc)


# (Host, Origin) -> served? The server listens on 127.0.0.1; a client may name it by any loopback
# address or localhost (issue 36: HTTP served 127.0.0.2 and [::ffff:7f00:1], the websocket refused
# them), and an Origin must be the request's own: same name, scheme and port.
HOST_ORIGIN_CASES = [
    ("127.0.0.1:{p}", None, True),
    ("127.0.0.1:{p}", "http://127.0.0.1:{p}", True),
    ("localhost:{p}", "http://localhost:{p}", True),
    ("[::1]:{p}", "http://[::1]:{p}", True),
    ("[::ffff:7f00:1]:{p}", None, True),
    ("[::ffff:7f00:1]:{p}", "http://[::ffff:7f00:1]:{p}", True),
    ("[::ffff:127.0.0.1]:{p}", "http://[::ffff:127.0.0.1]:{p}", True),
    ("127.0.0.2:{p}", "http://127.0.0.2:{p}", True),
    ("127.255.255.254:{p}", None, True),
    ("127.0.0.1:{p}", "http://127.0.0.1:{other}", False),  # a page on another local port
    ("localhost:{p}", "http://localhost:{other}", False),
    ("127.0.0.1:{p}", "https://127.0.0.1:{p}", False),  # another scheme is another origin
    ("127.0.0.1:{p}", "http://127.0.0.2:{p}", False),  # another loopback address, the same port
    ("127.0.0.1:{p}", "http://localhost:{p}", False),
    ("127.0.0.1:{p}", "http://evil.example:{p}", False),
    ("evil.example:{p}", "http://evil.example:{p}", False),  # DNS rebinding
    ("127.0.0.1.nip.io:{p}", None, False),
    ("10.0.0.5:{p}", None, False),  # an address of this machine, without --allow-remote
]


@pytest.mark.parametrize("host, origin, served", HOST_ORIGIN_CASES)
def test_http_and_websocket_agree_on_every_host_and_origin(served_port, host, origin, served):
    port, other = served_port, served_port + 1 if served_port < 65535 else served_port - 1
    host, origin = host.format(p=port, other=other), origin and origin.format(p=port, other=other)
    status, body = _get(f"http://127.0.0.1:{port}/", host=host, origin=origin)
    ws = _handshake(port, host, origin)
    assert (status, ws) == ((200, 101) if served else (403, 403)), (host, origin, status, ws, body[:200])


AUDIT = """
import os, sys
_log = open(os.environ["AUDIT_LOG"], "a", buffering=1)
def _hook(event, args):
    if event in ("socket.getaddrinfo", "socket.connect", "socket.sendto", "socket.bind"):
        _log.write(f"{os.getpid()} {event} {args[0] if event == 'socket.getaddrinfo' else args[1]!r}\\n")
sys.addaudithook(_hook)
"""
LOCAL = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "None", ""}


def _outside_contacts(log: Path) -> list[str]:
    """Lines of the audit log that name an address or host off this machine."""
    bad = []
    for line in log.read_text().splitlines():
        _, event, what = line.split(" ", 2)
        host = what.strip("()'\"").split("'")[0] if event != "socket.getaddrinfo" else what
        if what.startswith("'/") or what.startswith("b'") or host in LOCAL or host.startswith("127."):
            continue
        bad.append(line)
    return bad


def _start_in_netns(cmd, tmp_path, name):
    """Start cmd in a network namespace of its own (only loopback), with the audit hook; wait for
    Streamlit's banner, which it prints after every start-up lookup."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(AUDIT)
    log, out = tmp_path / f"{name}.audit", tmp_path / f"{name}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(PYTHONPATH=f"{hook}{os.pathsep}{ROOT}", AUDIT_LOG=str(log), NUMBA_ENABLE_CUDASIM="1")
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [BWRAP, "--unshare-net", "--dev-bind", "/", "/", *cmd],
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "You can now view" not in out.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(2)
    finally:
        _stop(proc)
    return log, out.read_text()


@pytest.mark.skipif(not _netns_works(), reason="needs bubblewrap and a network namespace (bubblewrap)")
def test_serve_on_every_interface_contacts_nothing_off_the_machine(tmp_path):
    """0.0.0.0 is bound only inside a namespace whose one interface is loopback (tests bind no real
    interface). Plain `streamlit run` there asks an outside service for the external IP; serve does not."""
    port = str(_free_port())
    log, out = _start_in_netns(
        [
            sys.executable,
            "-m",
            "visualizer",
            "serve",
            "--address",
            "0.0.0.0",
            "--allow-remote",
            "--port",
            port,
        ],
        tmp_path,
        "serve",
    )
    assert "Serving the GPU execution visualizer on 0.0.0.0" in out
    assert log.read_text(), "the audit hook recorded nothing: it did not load"
    assert _outside_contacts(log) == [], out
    # the same start without serve's guards: what the test would catch
    control, _ = _start_in_netns(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "visualizer" / "app.py"), "--server.address",
         "0.0.0.0", "--server.port", port, "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        tmp_path,
        "control",
    )  # fmt: skip
    assert any("checkip.amazonaws.com" in line for line in _outside_contacts(control)), control.read_text()
