"""``python -m visualizer ...`` and the ``gpu-visualizer`` command (pyproject.toml)."""

import os
import sys

from visualizer.tools.cli import main


def run() -> None:
    try:
        code = main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (``... | head``): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # 128 + SIGPIPE
    sys.exit(code)


if __name__ == "__main__":
    run()
