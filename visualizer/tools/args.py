"""What every command's arguments share: one-line errors (exit 2), counts, and the checks that an
output path can be written, made before any work is done."""

from __future__ import annotations

import argparse
import sys


class CliError(Exception):
    pass


def plan_from_flags(
    text: str, kernel: str, args: argparse.Namespace, filename: str, backend: str = "sim", **more
):
    """A kernel file's launch from the flags every command that takes one shares (``--grid``, ``--block``,
    ``--arg NAME=SPEC``, and where the command has them ``--threads-for`` and ``--reference``)."""
    from visualizer.specs.source import plan_source_launch

    form = {"grid": args.grid, "block": args.block, "args": list(args.arg or []),
            "threads_for_n": getattr(args, "threads_for", None), "reference": getattr(args, "reference", None)}  # fmt: skip
    return plan_source_launch(text, kernel, backend=backend, filename=filename, **form, **more)


def count(minimum: int):
    """argparse type: an integer >= minimum (bad values exit 2 with one line, like any bad flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def writable_dir(path: str) -> str | None:
    """Why ``path`` cannot receive a capture bundle (None if it can): checked before any work is done.

    The bundle replaces the directory as a whole (written beside it, then swapped in), so it must be
    new, empty or a previous bundle (visualizer/atomic.py).
    """
    from visualizer.tools.atomic import bundle_dir_problem

    return bundle_dir_problem(path)


def writable_file(path: str) -> str | None:
    """Why ``path`` cannot be written as a file (None if it can), without truncating an existing one."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    if target.is_dir():
        return f"{path} is a directory"
    if not target.parent.is_dir():
        return f"cannot write to {path}: the directory {target.parent} does not exist"
    try:  # written atomically: a temporary file beside it, then renamed over it
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.partial-", dir=target.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write to {path}: {exc.strerror or exc}"
    return None


def save_error(out: str, exc: OSError) -> str:
    """The one line for a bundle that could not be written (nothing of it is left behind)."""
    why = exc.strerror or " ".join(str(exc).split())[:160]
    return (
        f"error: could not save the capture to {out}: {why}; "
        "nothing was changed there (the previous bundle, if any, is intact)"
    )


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints usage too)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
