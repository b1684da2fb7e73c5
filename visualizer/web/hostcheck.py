"""Who may reach the app: the Host check (against DNS rebinding) and the loopback judgement.

The model is Jupyter Server's host check: a page on ``evil.example`` that resolves its own name to
127.0.0.1 (DNS rebinding) makes the visitor's browser send ``Host: evil.example:8501`` with an
``Origin`` equal to it, which passes Streamlit's same-origin check; refusing every Host that is not
a loopback name or address (or a name the operator listed) closes that door. Loopback is judged
with ``ipaddress`` (IPv4 127/8, ``::1`` and IPv4-mapped ``::ffff:127.0.0.1``, which is how a local
visitor arrives when Streamlit listens on ``::``), never by comparing strings.

With ``--allow-remote`` (a classroom) an IP address typed in the address bar is accepted as Host:
a rebinding page always has a *name*, so an address literal cannot be one. Names the classroom
uses still need ``--allow-host NAME``.

An ``Origin`` must be the request's own origin: the Host's name, the request's scheme and the same
port (the same-origin rule). Loopback is one place with many ports: a page another local program
serves on another port is another origin, and gets neither a reply nor a websocket.

``HostGuard`` is the ASGI middleware ``python -m visualizer serve`` installs in front of
Streamlit's Starlette app (web/server.py, started by tools/serve.py); ``refusal`` is also called by the app script
(visualizer/ui/guard.py) so that ``streamlit run`` users are covered too. Nothing here imports
Streamlit.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

ALLOW_REMOTE_ENV = "VISUALIZER_ALLOW_REMOTE"  # "1": visitors from other machines are served
ALLOW_HOSTS_ENV = "VISUALIZER_ALLOW_HOSTS"  # comma-separated names accepted as Host besides loopback
LOOPBACK_NAMES = frozenset({"localhost"})
SHOWN_MAX = 80  # characters of a refused Host quoted back


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def is_loopback_ip(address: str | None) -> bool:
    """127.0.0.0/8, ::1 or an IPv4-mapped IPv6 loopback address (``::ffff:127.0.0.1``)."""
    ip = _ip(address) if isinstance(address, str) else None
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def normal_name(name: str) -> str:
    return name.strip().lower().rstrip(".")


def is_loopback(address: str) -> bool:
    """A loopback address or the name ``localhost``: what a listening address or a Host may be."""
    return normal_name(address) in LOOPBACK_NAMES or is_loopback_ip(address)


def host_name(host: str | None) -> str | None:
    """The name or address in a Host header (``name[:port]``, ``[v6][:port]``); None if malformed."""
    if not isinstance(host, str) or not host or len(host) > 300 or any(c in host for c in "/\\?#@ \t"):
        return None
    try:
        parts = urlsplit(f"//{host}")
        _ = parts.port  # a port must be a number in range
    except ValueError:
        return None
    if parts.hostname is None or parts.username is not None or parts.password is not None:
        return None
    return normal_name(parts.hostname)


def valid_allow_name(name: str) -> bool:
    """A name an operator may list with --allow-host: a DNS name or an IP address, nothing else."""
    name = normal_name(name)
    if not name or len(name) > 253:
        return False
    if _ip(name) is not None:
        return True
    labels = name.split(".")
    return (
        all(
            0 < len(label) <= 63
            and label[0] != "-"
            and label[-1] != "-"
            and all(c.isalnum() or c == "-" for c in label)
            for label in labels
        )
        and name.isascii()
    )


def host_allowed(host: str | None, names: Iterable[str] = (), remote: bool = False) -> bool:
    name = host_name(host)
    if name is None:
        return False
    if name in LOOPBACK_NAMES or is_loopback_ip(name):
        return True
    if remote and _ip(name) is not None:
        return True
    return name in {normal_name(n) for n in names}


def _port(parts, scheme: str | None) -> int | None:
    """The port a URL's parts name, or its scheme's default; None when neither says."""
    if parts.port is not None:
        return parts.port
    return {"http": 80, "https": 443}.get(scheme or "")


def _same_name(a: str, b: str) -> bool:
    ip_a, ip_b = _ip(a), _ip(b)
    if ip_a is not None or ip_b is not None:
        return ip_a == ip_b  # [::1] and [0:0::1] are one address; 127.0.0.1 and localhost are not one name
    return normal_name(a) == normal_name(b)


def origin_allowed(
    origin: str | None,
    names: Iterable[str] = (),
    remote: bool = False,
    host: str | None = None,
    scheme: str | None = None,
) -> bool:
    """No Origin (not a browser's cross-site request), or this server's own origin: an http(s)
    origin whose host is allowed and, when the request's ``host`` (its Host header) is known, the
    same name, scheme and port as the request. A page on another local port, or on another loopback
    address that happens to use the same port, is another origin (and gets no websocket).
    ``scheme`` is the request's, "http" or "https", when known (HostGuard knows it; the app script
    does not)."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
        origin_port = _port(parts, parts.scheme)
    except ValueError:
        return False
    if (
        parts.scheme not in ("http", "https")
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.hostname is None
        or not host_allowed(parts.netloc, names, remote)
    ):
        return False
    if scheme is not None and parts.scheme != scheme:
        return False
    if host is None:
        return True
    name = host_name(host)
    if name is None:
        return False
    try:
        host_port = _port(urlsplit(f"//{host}"), scheme or parts.scheme)
    except ValueError:
        return False
    return _same_name(name, parts.hostname) and host_port == origin_port


def _shown(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 1] + "…")


def refusal(
    host: str | None,
    origin: str | None,
    client: str | None,
    names: Iterable[str] = (),
    remote: bool = False,
    scheme: str | None = None,
) -> str | None:
    """Why a request is refused (one line; quotes the visitor's text, so escape it before markdown),
    or None when it may be served. ``host`` None and ``client`` None mean "not known" (AppTest has no
    HTTP request; a browser always sends a Host, and HostGuard refuses a request without one).
    The one judgement for every HTTP request and every websocket, by HostGuard and by the app script
    alike: a Host that is a loopback address (any of 127.0.0.0/8, ::1, ::ffff:127.x) or localhost,
    a listed name, or (remote) any address; an Origin that is the request's own (``origin_allowed``)."""
    names = tuple(names)
    if host is not None and not host_allowed(host, names, remote):
        return (
            f"This visualizer does not answer to the host name {_shown(str(host))}: it serves localhost "
            "only (a page that points its own name at this machine is refused). Its operator can allow "
            "a name with `python -m visualizer serve --allow-host NAME`."
        )
    if not origin_allowed(origin, names, remote, host=host, scheme=scheme):
        return f"This visualizer refuses requests made by the page {_shown(str(origin))}."
    if client is not None and not remote and not is_loopback_ip(client):
        return (
            "This visualizer serves only the machine it runs on. To serve a classroom, its operator "
            "starts it with `python -m visualizer serve --address 0.0.0.0 --allow-remote`."
        )
    return None


def policy_from_env(env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], bool]:
    """(names the operator allows, remote visitors allowed) from the environment."""
    env = os.environ if env is None else env
    names = tuple(n for n in (normal_name(x) for x in env.get(ALLOW_HOSTS_ENV, "").split(",")) if n)
    return names, env.get(ALLOW_REMOTE_ENV) == "1"


class HostGuard:
    """ASGI middleware: answers 403 (HTTP) or closes the websocket handshake (which the server sends
    as 403) for a refused Host, Origin or client before any of Streamlit's routes run."""

    def __init__(self, app, names: Iterable[str] | None = None, remote: bool | None = None):
        env_names, env_remote = policy_from_env()
        self.app = app
        self.names = tuple(env_names if names is None else names)
        self.remote = env_remote if remote is None else remote

    def check(self, scope) -> str | None:
        headers: dict[bytes, list[bytes]] = {}
        for key, value in scope.get("headers") or ():
            headers.setdefault(key.lower(), []).append(value)
        hosts, origins = headers.get(b"host", []), headers.get(b"origin", [])
        if len(hosts) != 1 or len(origins) > 1:
            return "a request needs exactly one Host header (and at most one Origin)"
        host = hosts[0].decode("latin-1")
        origin = origins[0].decode("latin-1") if origins else None
        client = scope.get("client")
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        return refusal(host, origin, client[0] if client else "", self.names, self.remote, scheme)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        reason = self.check(scope)
        if reason is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            body = f"403 Forbidden: {reason}\n".encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                        (b"x-content-type-options", b"nosniff"),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
