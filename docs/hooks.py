"""MkDocs hook: the command line's reference, generated from its own argparse parsers at build time.

``<!-- cli-reference -->`` in a page becomes each command's ``--help``, so the reference cannot
drift from the code (mkdocs.yml's ``hooks``; the page is docs/cli.md).
"""

from __future__ import annotations

import contextlib
import io
import os

MARKER = "<!-- cli-reference -->"
WIDTH = "88"  # argparse wraps at $COLUMNS: a fixed width keeps the page the same on every machine


def command_help(argv: list[str]) -> str:
    """What ``python -m visualizer ARGV`` prints (help exits through SystemExit)."""
    from visualizer.tools.cli import main

    out = io.StringIO()
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main(argv)
            except SystemExit:
                pass
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return out.getvalue().rstrip()


def cli_reference() -> str:
    from visualizer.tools.cli import COMMANDS

    parts = ["```text", command_help(["--help"]), "```"]
    for name in COMMANDS:
        parts += ["", f"### `{name}`", "", "```text", command_help([name, "--help"]), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
