"""Safety settings the app enforces itself, however its server was started.

``python -m visualizer serve`` starts Streamlit with safe flags; someone running ``streamlit run``
from another directory gets Streamlit's defaults instead (every interface, full tracebacks). So
the app hides error details itself, and serves a visitor from another machine only when the
operator opted in (``serve --address ... --allow-remote``, or VISUALIZER_ALLOW_REMOTE=1).
"""

from __future__ import annotations

import os

import streamlit as st

from visualizer.tools.serve import ALLOW_REMOTE_ENV


def remote_allowed() -> bool:
    return os.environ.get(ALLOW_REMOTE_ENV) == "1"


def guard_server() -> None:
    """Call first in the app script: hide tracebacks; stop here for a remote visitor unless allowed."""
    st.set_option("client.showErrorDetails", "none")
    st.set_option("client.toolbarMode", "minimal")
    ip = st.context.ip_address  # None for 127.0.0.1 and ::1 (AppTest gives a mock: not a str)
    if isinstance(ip, str) and ip and not remote_allowed():
        st.error(
            "This visualizer serves only the machine it runs on. To serve a classroom, its operator "
            "starts it with `python -m visualizer serve --address 0.0.0.0 --allow-remote`."
        )
        st.stop()
