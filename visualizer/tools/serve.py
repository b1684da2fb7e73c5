"""``python -m visualizer serve``: start the app with the repository's safety settings, from any directory.

Streamlit reads ``.streamlit/config.toml`` from the directory it is started in, so ``streamlit run``
from elsewhere would bind every interface, report usage statistics and show tracebacks. This
launcher passes the settings as flags (they win over any config file) and starts Streamlit in
the repository root, so the theme in ``.streamlit/config.toml`` applies too.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOW_REMOTE_ENV = "VISUALIZER_ALLOW_REMOTE"  # read by the app (ui/guard.py) as well

# Flags that hold whatever config file or environment the server starts with.
SAFE_FLAGS = {
    "server.headless": "true",
    "server.runOnSave": "false",
    "server.fileWatcherType": "none",
    "browser.gatherUsageStats": "false",
    "client.showErrorDetails": "none",
    "client.toolbarMode": "minimal",
    "global.developmentMode": "false",
}


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def streamlit_command(address: str, port: int) -> list[str]:
    flags = {**SAFE_FLAGS, "server.address": address, "server.port": str(port)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "visualizer" / "app.py")]
    for name, value in flags.items():
        cmd += [f"--{name}", value]
    return cmd


def main(argv: list[str]) -> int:
    from visualizer.tools.cli import OneLineParser

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
    cmd = streamlit_command(args.address, args.port)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}  # flags decide
    env[ALLOW_REMOTE_ENV] = "1" if remote else "0"
    os.chdir(ROOT)
    os.execve(sys.executable, cmd, env)
    return 0  # not reached
