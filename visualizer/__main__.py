"""``python -m visualizer ...`` and the ``gpu-visualizer`` command (pyproject.toml)."""

import sys

from visualizer.tools.cli import main


def run() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    run()
