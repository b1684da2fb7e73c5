"""Safety settings the app enforces itself, however its server was started.

``python -m visualizer serve`` starts Streamlit with safe flags and a Host check in front of every
request (visualizer/hostcheck.py); someone running ``streamlit run`` from another directory gets
Streamlit's defaults instead (every interface, full tracebacks). So the app script checks again
before any page code runs: it hides error details, refuses a foreign Host or Origin (DNS
rebinding) and a visitor from another machine unless the operator opted in (``serve --address ...
--allow-remote``, or VISUALIZER_ALLOW_REMOTE=1; names with ``--allow-host`` or
VISUALIZER_ALLOW_HOSTS), and takes the operator's key for visitor code from a ``?token=`` link.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlsplit

import streamlit as st

from visualizer.engine.user_runner import configured_token, token_matches
from visualizer.web import upload_gate
from visualizer.web.hostcheck import ALLOW_REMOTE_ENV, policy_from_env, refusal  # noqa: F401 (re-exported)
from visualizer.web.keycheck import WRONG_KEYS
from visualizer.web.session import as_text

KEY_STATE = "_visitor_key_digest"  # a digest of the key this session presented (no widget has this key)
KEY_PARAM = "token"  # the query parameter of the operator's key (serve's link)
KEY_JUDGED = "_visitor_key_judged"  # this session has judged the key its link carried
KEY_NOTICE = "_visitor_key_notice"  # "not this server's key", said on the run after the key left


def remote_allowed() -> bool:
    return policy_from_env()[1]


def _text(value) -> str | None:
    return value if isinstance(value, str) else None  # AppTest's context is a mock: not a str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _client() -> str:
    """Who sent a key, for counting and the log: the peer address (Streamlit gives None for a
    loopback visitor), as printable text of bounded length."""
    address = _text(st.context.ip_address)
    if not address:
        return "loopback"
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in address[:64])


# Replaces the history entry that carried the key with the same address without it, before the app
# draws anything or writes the URL (each of Streamlit's URL writes pushes a new entry: the key's
# entry would stay behind them, and Back would show it), then asks for the run that draws the page.
SCRUB_JS = f"""
export default function (component) {{
  const url = new URL(window.location.href);
  if (url.searchParams.has("{KEY_PARAM}")) {{
    url.searchParams.delete("{KEY_PARAM}");
    window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
  }}
  component.setTriggerValue("scrubbed", true);
}}
"""
_scrubber = st.components.v2.component("visualizer_key_scrub", js=SCRUB_JS)


def take_token() -> None:
    """A ``?token=`` in the link: remember in this session whether it is the operator's key, and take
    it out of the browser's history before anything else is drawn (a link copied from the address
    bar, or Back on a projector, never shows it).

    The run that finds the key judges it and draws only SCRUB_JS, which replaces the history entry
    and asks for the next run; that one draws the page. A browser that runs no script (or AppTest)
    leaves the key in the URL: the next run takes it out of the address bar from the server's side.
    Wrong keys are counted per client and logged, and a client that sent several waits before its
    keys are answered (web/keycheck.py)."""
    presented = st.query_params.get(KEY_PARAM)
    if presented is None:
        notice = st.session_state.pop(KEY_NOTICE, None)
        if notice:
            st.warning(notice, icon=":material/key_off:")
        return
    if not st.session_state.get(KEY_JUDGED):
        st.session_state[KEY_JUDGED] = True
        client = _client()
        time.sleep(WRONG_KEYS.delay(client))  # this session's script thread only
        if token_matches(presented):
            WRONG_KEYS.right(client)
            st.session_state[KEY_STATE] = _digest(configured_token())
        else:
            if configured_token() is not None:  # a key to guess: count the guess
                WRONG_KEYS.wrong(client)
            st.session_state.pop(KEY_STATE, None)
            st.session_state[KEY_NOTICE] = (
                "The key (`token`) in this link is not this server's: visitor code stays off in this session."
            )
        # this run draws no page, so the next one (asked for by the script) would open the default
        # page: a link to /your_kernel?token=... keeps its page (navigate checks the name)
        linked = urlsplit(_text(st.context.url) or "").path.rstrip("/").rsplit("/", 1)[-1]
        if linked and "page" not in st.query_params and "page" not in st.session_state:
            st.session_state.page = linked[:100]
        _scrubber(key="_key_scrub", on_scrubbed_change=lambda: None)
        st.stop()
    del st.query_params[KEY_PARAM]  # the script did not run: out of the address bar at least
    notice = st.session_state.pop(KEY_NOTICE, None)
    if notice:
        st.warning(notice, icon=":material/key_off:")


def visitor_has_key() -> bool:
    """Whether this browser session presented the operator's current key."""
    token, held = configured_token(), st.session_state.get(KEY_STATE)
    return token is not None and isinstance(held, str) and hmac.compare_digest(held, _digest(token))


def guard_server() -> None:
    """Call first in the app script: hide tracebacks; stop here for a refused Host, Origin or remote
    visitor; take a ``?token=`` key."""
    st.set_option("client.showErrorDetails", "none")
    st.set_option("client.toolbarMode", "minimal")
    headers = st.context.headers
    names, remote = policy_from_env()
    why = refusal(
        _text(headers.get("Host")) if hasattr(headers, "get") else None,
        _text(headers.get("Origin")) if hasattr(headers, "get") else None,
        _text(st.context.ip_address),  # None for 127.0.0.1 and ::1; ::ffff:127.0.0.1 is judged loopback
        names,
        remote,
    )
    if why is not None:
        st.error(as_text(why, limit=400))
        st.stop()
    upload_gate.install()  # the server's upload store takes files only within a session's budget
    take_token()
