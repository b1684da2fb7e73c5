"""``python -m visualizer serve``: start the app with the repository's safety settings, from any directory.

Streamlit reads ``.streamlit/config.toml`` from the directory it is started in, so ``streamlit run``
from elsewhere would bind every interface, report usage statistics and show tracebacks. This
launcher passes the settings as flags (they win over any config file) and starts Streamlit in
the repository root, so the theme in ``.streamlit/config.toml`` applies too.

It also makes the operator's key for visitor code (a ``secrets.token_urlsafe`` token, or
VISUALIZER_TOKEN if set), prints the link that carries it, and says whether visitor code is on;
Streamlit itself starts through ``python -m visualizer.tools.serve run ...`` (``boot`` below), which puts
the Host check (visualizer/hostcheck.py) in front of every HTTP request and websocket.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from visualizer import DATA_DIR
from visualizer.web.hostcheck import (
    ALLOW_HOSTS_ENV,
    ALLOW_REMOTE_ENV,
    is_loopback,
    normal_name,
    valid_allow_name,
)
from visualizer.web.uploads import UPLOAD_MAX_MB

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["ALLOW_REMOTE_ENV", "is_loopback", "main", "streamlit_command"]

# Flags that hold whatever config file or environment the server starts with.
SAFE_FLAGS = {
    "server.headless": "true",
    "server.runOnSave": "false",
    "server.fileWatcherType": "none",
    "browser.gatherUsageStats": "false",
    "client.showErrorDetails": "none",
    "client.toolbarMode": "minimal",
    "global.developmentMode": "false",
    "server.maxUploadSize": str(UPLOAD_MAX_MB),  # one .npy file; a session's budget: web/uploads.py
}
WILDCARDS = ("0.0.0.0", "::")
MAX_SIM_WORKERS = 256


def streamlit_config_file() -> Path:
    """The app's Streamlit settings (the projector theme among them): the checkout's
    .streamlit/config.toml, or the copy an installed wheel has (setup.py ships it in visualizer/_data/)."""
    checkout = ROOT / ".streamlit" / "config.toml"
    return checkout if checkout.is_file() else DATA_DIR / "streamlit_config.toml"


def config_flags() -> dict[str, str]:
    """Every setting of streamlit_config_file() as a flag, so the theme holds from any directory."""
    import tomllib

    settings = tomllib.loads(streamlit_config_file().read_text())
    return {
        f"{section}.{name}": str(value).lower() if isinstance(value, bool) else str(value)
        for section, values in settings.items()
        for name, value in values.items()
    }


def streamlit_command(address: str, port: int) -> list[str]:
    """The command that starts Streamlit through the app's bootstrap (``python -m visualizer.web.server``, web/server.py),
    which puts the Host check in front of every request before handing over to Streamlit's CLI."""
    flags = {
        **config_flags(),
        **SAFE_FLAGS,
        "server.address": address,
        "server.port": str(port),
        # set by hand, so Streamlit never asks an outside service for this machine's address
        # (streamlit/web/bootstrap.py _print_url; the boot below disables that lookup as well)
        "browser.serverAddress": "localhost" if address in WILDCARDS else address,
    }
    cmd = [sys.executable, "-m", "visualizer.web.server", "run", str(ROOT / "visualizer" / "app.py")]
    for name, value in flags.items():
        cmd += [f"--{name}", value]
    # No --server.allowedHosts: Streamlit judges the websocket's Host by comparing names, so it refused
    # 127.0.0.2 and [::ffff:7f00:1], which HostGuard serves over HTTP (a page that loads and never
    # connects). HostGuard's one judgement (hostcheck.refusal) decides every request and websocket,
    # and the app script repeats it; serve does not start without HostGuard (web/server.py boot).
    return cmd


def _link(address: str, port: int, token: str) -> str:
    host = "127.0.0.1" if address in WILDCARDS or address == "localhost" else address
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/?token={token}"


def user_code_line(env) -> str:
    """What the operator's terminal says about visitor code (the app applies the same rule)."""
    from visualizer.engine.run.user_runner import ALLOW_ENV, user_code_allowed

    on, why = user_code_allowed(False, env)
    if on:
        return f"Visitor code (Your kernel page): ON FOR EVERY VISITOR ({ALLOW_ENV}=1)."
    if str(env.get(ALLOW_ENV, "")).strip():
        return f"Visitor code (Your kernel page): {why}."
    return "Visitor code (Your kernel page): only in a browser that opened the link above (it holds the key)."


def main(argv: list[str]) -> int:
    from visualizer.engine.run.user_runner import TOKEN_ENV, TOKEN_MIN_CHARS
    from visualizer.tools.args import OneLineParser

    p = OneLineParser(
        prog="python -m visualizer serve",
        description="Serve the app with safe defaults (localhost only, no usage statistics, no tracebacks).",
    )
    p.add_argument("--address", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="needed with a non-loopback --address: serve other machines (a classroom)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name visitors may use besides localhost and loopback addresses (repeatable)",
    )
    p.add_argument(
        "--sim-workers",
        type=int,
        default=None,
        metavar="N",
        help="simulator worker processes (default: one per core but one, within the memory)",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="tcp://HOST:PORT",
        help="send captures to this Dask scheduler (pip install -r requirements-cluster.txt; "
        "default: $VISUALIZER_CLUSTER, else this machine's workers)",
    )
    from visualizer.tools.capture_report import add_sim_engine_flag

    add_sim_engine_flag(p)  # the app's simulator captures run on it ($VISUALIZER_SIM_ENGINE)
    p.add_argument("--dry-run", action="store_true", help="print the streamlit command and exit")
    args = p.parse_args(argv)
    if not 1 <= args.port <= 65535:
        print(f"error: --port {args.port} is not a TCP port (1..65535)", file=sys.stderr)
        return 2
    remote = not is_loopback(args.address)
    if remote and not args.allow_remote:
        print(
            f"error: --address {args.address} serves other machines; add --allow-remote to mean it",
            file=sys.stderr,
        )
        return 2
    if args.allow_remote and not remote:
        print(
            f"error: --allow-remote with --address {args.address} would serve no other machine (it listens "
            "on loopback only); listen on an interface too, e.g. --address 0.0.0.0 --allow-remote",
            file=sys.stderr,
        )
        return 2
    for name in args.allow_host:
        if not valid_allow_name(name):
            print(
                f"error: --allow-host {name[:80]!r} is not a host name or address (no scheme, port or '*')",
                file=sys.stderr,
            )
            return 2
    allow_hosts = tuple(dict.fromkeys(normal_name(n) for n in args.allow_host))
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token and len(token) < TOKEN_MIN_CHARS:
        print(f"error: {TOKEN_ENV} must be at least {TOKEN_MIN_CHARS} characters long", file=sys.stderr)
        return 2
    from visualizer.engine.run.runner import CLUSTER_ENV, SIM_ENGINE_ENV, SIM_WORKERS_ENV

    if args.sim_workers is not None and not 1 <= args.sim_workers <= MAX_SIM_WORKERS:
        print(f"error: --sim-workers {args.sim_workers} is not 1..{MAX_SIM_WORKERS}", file=sys.stderr)
        return 2
    cluster = (args.cluster if args.cluster is not None else os.environ.get(CLUSTER_ENV, "")).strip()
    if cluster:
        from visualizer.engine.run.cluster import check_address

        problem = check_address(cluster)
        if problem:
            print(f"error: --cluster: {problem}", file=sys.stderr)
            return 2
    cmd = streamlit_command(args.address, args.port)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    token = token or secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}  # flags decide
    env[ALLOW_REMOTE_ENV] = "1" if remote else "0"
    env[ALLOW_HOSTS_ENV] = ",".join(allow_hosts)
    env[TOKEN_ENV] = token
    env[CLUSTER_ENV] = cluster
    if args.sim_workers is not None:
        env[SIM_WORKERS_ENV] = str(args.sim_workers)
    env[SIM_ENGINE_ENV] = args.sim_engine
    where = "other machines too (--allow-remote)" if remote else "this machine only"
    print(f"Serving the GPU execution visualizer on {args.address}:{args.port}, to {where}.")
    print(f"Open: {_link(args.address, args.port, token)}")
    if cluster:
        print(f"Captures run on the Dask cluster at {cluster} (visitor code stays on this machine).")
    else:
        from visualizer.engine.run.runner import default_workers

        n = args.sim_workers or default_workers("sim")
        print(f"Captures run here: {n} simulator worker{'s' * (n != 1)}, on the {args.sim_engine} engine.")
    print(user_code_line(env))
    names = ", ".join(("localhost", "loopback addresses", *allow_hosts))
    print(f"Host names answered: {names}{'; any IP address' if remote else ''}. Others are refused.")
    sys.stdout.flush()
    os.chdir(ROOT)
    os.execve(sys.executable, cmd, env)
    return 0  # not reached
