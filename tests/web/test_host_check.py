"""The Host check against DNS rebinding, the loopback judgement, the operator's key, and HostGuard
(the ASGI middleware `serve` puts in front of Streamlit) driven with real ASGI messages."""

import asyncio
import concurrent.futures

import pytest

from visualizer.engine.run.user_runner import token_matches, user_code_allowed
from visualizer.web.hostcheck import (
    HostGuard,
    host_allowed,
    host_name,
    is_loopback,
    is_loopback_ip,
    origin_allowed,
    policy_from_env,
    refusal,
    valid_allow_name,
)

TOKEN = "k" * 43


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "::ffff:127.0.0.1", "::ffff:7f00:1", "0:0:0:0:0:0:0:1"],
)
def test_loopback_addresses(address):
    assert is_loopback_ip(address) and is_loopback(address)


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.5",
        "::ffff:10.0.0.5",
        "0.0.0.0",
        "::",
        "192.168.1.10",
        "fe80::1",
        "127.0.0.1.nip.io",
        "",
        None,
        "x",
    ],
)
def test_other_addresses_are_not_loopback(address):
    assert not is_loopback_ip(address)


def test_localhost_is_a_loopback_name_and_nothing_that_merely_contains_it():
    assert is_loopback("localhost") and is_loopback("LOCALHOST.")
    assert not is_loopback("localhost.evil.example") and not is_loopback("evil-localhost")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8501",
        "localhost:8501",
        "LocalHost",
        "localhost.:8501",
        "[::1]:8501",
        "127.0.0.1",
        "[::ffff:127.0.0.1]:8501",
    ],
)
def test_loopback_hosts_are_served(host):
    assert host_allowed(host) and refusal(host, None, None) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8501",  # the rebinding page
        "evil.example",
        "localhost.evil.example:8501",
        "127.0.0.1.nip.io:8501",
        "0x7f000001:8501",  # not an address ipaddress accepts
        "user@localhost:8501",
        "localhost:85x1",
        "localhost:99999",
        "localhost/x",
        "",
        "10.0.0.5:8501",  # an address of this machine: only with --allow-remote
    ],
)
def test_foreign_or_malformed_hosts_are_refused(host):
    assert not host_allowed(host)
    why = refusal(host, None, None)
    assert why is not None and "--allow-host NAME" in why


def test_listed_names_and_remote_addresses():
    assert host_allowed("GPU-Box.lab:8501", names=("gpu-box.lab",))
    assert not host_allowed("gpu-box.lab.evil.example", names=("gpu-box.lab",))
    assert host_allowed("10.0.0.5:8501", remote=True) and host_allowed("[fe80::1]:8501", remote=True)
    assert not host_allowed("evil.example:8501", remote=True)  # a name still needs --allow-host


def test_origin_must_be_an_allowed_http_origin():
    assert (
        origin_allowed(None)
        and origin_allowed("http://127.0.0.1:8501")
        and origin_allowed("http://localhost")
    )
    for origin in (
        "http://evil.example:8501",
        "null",
        "file://",
        "ws://localhost:8501/x",
        "http://localhost/p",
    ):
        assert not origin_allowed(origin), origin
    assert refusal("127.0.0.1:8501", "http://evil.example", None) is not None


@pytest.mark.parametrize(
    "host, origin, scheme, same",
    [
        ("127.0.0.1:8501", "http://127.0.0.1:8501", "http", True),
        ("localhost", "http://localhost", "http", True),  # port 80 both ways
        ("localhost:80", "http://localhost", "http", True),
        ("[::1]:8501", "http://[0:0::1]:8501", None, True),  # one address, two spellings
        ("LocalHost:8501", "http://localhost:8501", None, True),
        ("127.0.0.1:8501", "http://127.0.0.1:9999", "http", False),  # another local port
        ("127.0.0.1:8501", "http://127.0.0.1", "http", False),
        ("127.0.0.1:8501", "https://127.0.0.1:8501", "http", False),  # another scheme
        ("127.0.0.1", "https://127.0.0.1", "http", False),  # 443 against the request's 80
        ("127.0.0.1:8501", "http://127.0.0.2:8501", "http", False),  # another loopback address
        ("127.0.0.1:8501", "http://localhost:8501", "http", False),
        ("127.0.0.1:8501", "http://127.0.0.1:8501/", "http", True),
        ("127.0.0.1:8501", "http://127.0.0.1:8501#x", "http", False),
        ("127.0.0.1:8501", "http://127.0.0.1:99999", "http", False),
    ],
)
def test_an_origin_is_served_only_when_it_is_the_requests_own(host, origin, scheme, same):
    assert origin_allowed(origin, host=host, scheme=scheme) is same, (host, origin)
    assert (refusal(host, origin, None, scheme=scheme) is None) is same


def test_a_remote_client_needs_allow_remote_and_a_mapped_local_one_does_not():
    assert refusal("127.0.0.1:8501", None, "::ffff:127.0.0.1") is None  # `streamlit run` on '::'
    assert refusal("127.0.0.1:8501", None, "127.0.0.1") is None
    why = refusal("127.0.0.1:8501", None, "10.0.0.7")
    assert why is not None and "--allow-remote" in why
    assert refusal("10.0.0.5:8501", None, "10.0.0.7", remote=True) is None


def test_quoted_host_is_short_and_printable():
    why = refusal("evil.example\x1b[31m" + "x" * 500, None, None)
    assert "\x1b" not in why and len(why) < 400


def test_policy_from_env():
    assert policy_from_env({}) == ((), False)
    env = {"VISUALIZER_ALLOW_HOSTS": " GPU-box.lab., ,10.0.0.5", "VISUALIZER_ALLOW_REMOTE": "1"}
    assert policy_from_env(env) == (("gpu-box.lab", "10.0.0.5"), True)


@pytest.mark.parametrize("name", ["gpu-box.lab", "localhost", "10.0.0.5", "fe80::1", "a-b.c"])
def test_valid_allow_names(name):
    assert valid_allow_name(name)


@pytest.mark.parametrize(
    "name", ["*", "*.lab", "http://x", "x:8501", "-x.lab", "a..b", "", "ex ample", "bü.de"]
)
def test_invalid_allow_names(name):
    assert not valid_allow_name(name)


def test_host_name_parses_ports_and_brackets():
    assert host_name("[::1]:8501") == "::1" and host_name("Example.COM.:80") == "example.com"
    assert host_name(None) is None and host_name("a b") is None


# --- the operator's key -----------------------------------------------------------------------


def test_code_needs_the_key_or_the_operators_word():
    env = {"VISUALIZER_TOKEN": TOKEN}
    assert user_code_allowed(True, env)[0]
    off, why = user_code_allowed(False, env)
    assert not off and "?token=" in why
    # no key configured (plain `streamlit run`): off, and it says how to turn it on
    off, why = user_code_allowed(True, {})
    assert not off and "python -m visualizer serve" in why and "VISUALIZER_ALLOW_USER_CODE=1" in why
    assert user_code_allowed(False, {"VISUALIZER_ALLOW_USER_CODE": "1"})[0]
    assert not user_code_allowed(True, {**env, "VISUALIZER_ALLOW_USER_CODE": "0"})[0]
    # a key too short to be a secret is no key
    assert not user_code_allowed(True, {"VISUALIZER_TOKEN": "short"})[0]


def test_token_comparison():
    env = {"VISUALIZER_TOKEN": TOKEN}
    assert token_matches(TOKEN, env)
    for wrong in (TOKEN[:-1], TOKEN + "k", "", None, ["x"], "ö" * 43):
        assert not token_matches(wrong, env), wrong
    assert not token_matches("short", {"VISUALIZER_TOKEN": "short"})
    assert not token_matches("", {})


# --- HostGuard with ASGI messages ---------------------------------------------------------------


def _call(guard_kwargs, kind, headers, client=("127.0.0.1", 5555)):
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {
        "type": kind,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": client,
        "path": "/",
    }
    # in a thread of its own: a browser test earlier in the session may leave this thread's event loop
    # running (Playwright's sync API), and asyncio.run refuses to start inside a running loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, HostGuard(app, **guard_kwargs)(scope, receive, send)).result()
    return reached, sent


def test_hostguard_refuses_a_rebinding_page_before_the_app():
    for kind in ("http", "websocket"):
        reached, sent = _call(
            {"names": (), "remote": False},
            kind,
            [("host", "evil.example:8501"), ("origin", "http://evil.example:8501")],
        )
        assert reached == [], kind
        if kind == "http":
            assert sent[0]["status"] == 403 and b"evil.example" in sent[1]["body"]
        else:
            assert sent == [{"type": "websocket.close", "code": 1008}]


def test_hostguard_refuses_a_page_on_another_local_port_for_http_and_websocket():
    other = [("host", "127.0.0.1:8501"), ("origin", "http://127.0.0.1:9999")]
    for kind in ("http", "websocket"):
        assert _call({"names": (), "remote": False}, kind, other)[0] == [], kind


def test_hostguard_passes_loopback_and_refuses_odd_requests():
    ok = [("host", "127.0.0.1:8501"), ("origin", "http://127.0.0.1:8501")]
    assert _call({"names": (), "remote": False}, "websocket", ok)[0] == ["websocket"]
    assert _call({"names": (), "remote": False}, "http", ok, client=("::ffff:127.0.0.1", 1))[0] == ["http"]
    assert _call({"names": (), "remote": False}, "http", ok, client=("10.1.2.3", 1))[0] == []
    assert _call({"names": (), "remote": True}, "http", ok, client=("10.1.2.3", 1))[0] == ["http"]
    assert _call({"names": (), "remote": False}, "http", [])[0] == []  # no Host
    twice = [("host", "127.0.0.1:8501"), ("host", "evil.example")]
    assert _call({"names": (), "remote": False}, "http", twice)[0] == []
    assert _call({"names": ("gpu-box.lab",), "remote": False}, "http", [("host", "gpu-box.lab:8501")])[0] == [
        "http"
    ]
