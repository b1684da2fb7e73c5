import sys

from visualizer.tools.cli import main

sys.exit(main(sys.argv[1:]))
