"""``python -m visualizer.web.server run APP FLAGS...``: Streamlit's own CLI, started with the
Host check (web/hostcheck.py's HostGuard) in front of every request and no lookups of this
machine's addresses. ``python -m visualizer serve`` (tools/serve.py) execs this with safe flags.
"""

from __future__ import annotations

import sys

from visualizer.web.hostcheck import HostGuard


def install_guards() -> None:
    """Before Streamlit starts: HostGuard in front of its Starlette app, no external-IP lookup.

    Streamlit 1.67 serves through Starlette (streamlit/web/server/starlette); its app is built by
    ``starlette_app.create_starlette_app`` from ``create_streamlit_middleware()``, looked up at call
    time, so wrapping that function puts HostGuard outermost, before every route and the websocket.
    ``net_util.get_external_ip`` asks checkip.amazonaws.com and ``get_internal_ip`` opens a UDP socket
    towards 8.8.8.8 to learn its route (start-up banner, CORS fallback): both are replaced by ones that
    answer "unknown" without contacting anything.
    """
    from streamlit import net_util
    from streamlit.web.server.starlette import starlette_app

    net_util.get_external_ip = lambda: None
    net_util.get_internal_ip = lambda: None
    original = getattr(starlette_app, "create_streamlit_middleware", None)
    if original is None or getattr(original, "_host_guard", False):
        if original is None:
            raise RuntimeError("this Streamlit has no starlette_app.create_streamlit_middleware")
        return
    from starlette.middleware import Middleware

    def with_host_guard():
        return [Middleware(HostGuard), *original()]

    with_host_guard._host_guard = True
    starlette_app.create_streamlit_middleware = with_host_guard


def boot(argv: list[str]) -> int:
    """``python -m visualizer.web.server run APP FLAGS...``: Streamlit's CLI with the guards installed."""
    try:
        install_guards()
    except (ImportError, RuntimeError) as exc:
        print(
            f"error: cannot put the Host check in front of Streamlit ({exc}); not starting", file=sys.stderr
        )
        return 2
    from streamlit.web import cli as stcli

    sys.argv = ["streamlit", *argv]
    return stcli.main()


if __name__ == "__main__":
    sys.exit(boot(sys.argv[1:]))
