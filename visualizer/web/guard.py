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

import streamlit as st

from visualizer.engine.user_runner import configured_token, token_matches
from visualizer.web import upload_gate
from visualizer.web.hostcheck import ALLOW_REMOTE_ENV, policy_from_env, refusal  # noqa: F401 (re-exported)
from visualizer.web.session import as_text

KEY_STATE = "_visitor_key_digest"  # a digest of the key this session presented (no widget has this key)


def remote_allowed() -> bool:
    return policy_from_env()[1]


def _text(value) -> str | None:
    return value if isinstance(value, str) else None  # AppTest's context is a mock: not a str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def take_token() -> None:
    """A ``?token=`` in the link: remember in this session whether it is the operator's key, and take
    it out of the visible URL so that a link copied from the address bar does not carry it."""
    presented = st.query_params.get("token")
    if presented is None:
        return
    del st.query_params["token"]
    if token_matches(presented):
        st.session_state[KEY_STATE] = _digest(configured_token())
    else:
        st.session_state.pop(KEY_STATE, None)
        st.warning(
            "The key (`token`) in this link is not this server's: visitor code stays off in this session.",
            icon=":material/key_off:",
        )


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
