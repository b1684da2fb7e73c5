import sys

from visualizer.cli import main

sys.exit(main(sys.argv[1:]))
