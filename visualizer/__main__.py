"""``python -m visualizer ...`` and the ``gpu-visualizer`` command (pyproject.toml)."""

import os
import sys

from visualizer.tools.cli import main


def run() -> None:
    try:
        code = main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`gpu-visualizer kernels | head`): stop, without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    run()
