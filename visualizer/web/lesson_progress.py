"""The lessons a learner has done, kept in their browser: a reload, or a lesson link opened in a new tab
(a new session), starts from them instead of from nothing.

A first-party cookie of lesson names only (no answers): read from the session's request when the
Lessons page first asks, written by a one-line script when a lesson is done. Its text comes from a
browser, so only names of real lessons are taken from it; only names of real lessons are written.
"""

from __future__ import annotations

import streamlit as st

PROGRESS_COOKIE = "gpuviz_lessons_done"
PROGRESS_COOKIE_DAYS = 365
COOKIE_MAX_CHARS = 1000


def done_from_cookie(text: str | None, names: list[str]) -> list[str]:
    """The lessons of ``names`` that the cookie's text lists (in ``names`` order); nothing else."""
    if not text or len(text) > COOKIE_MAX_CHARS:
        return []
    listed = set(text.split("."))
    return [n for n in names if n in listed]


def cookie_script(done: list[str], names: list[str]) -> str:
    """A script that stores ``done`` in the cookie (only the entries that are lesson ``names``)."""
    value = ".".join(n for n in names if n in done)
    return (
        f"<script>document.cookie = '{PROGRESS_COOKIE}={value}; path=/; "
        f"max-age={PROGRESS_COOKIE_DAYS * 86400}; SameSite=Strict';</script>"
    )


def stored_done(names: list[str]) -> list[str]:
    """The lessons this browser's cookie says are done (none when no browser is behind the session)."""
    try:
        text = st.context.cookies.get(PROGRESS_COOKIE)
    except Exception:  # AppTest and bare runs have no request
        text = None
    return done_from_cookie(text if isinstance(text, str) else None, names)


def store_done(done: list[str], names: list[str]) -> None:
    """Write the done lessons into this browser's cookie (a zero-height frame running one line)."""
    st.iframe(cookie_script(done, names), height=1)
