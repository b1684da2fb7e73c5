"""Tools: the command line (``python -m visualizer ...``), benchmarks, the classroom load test,
``serve`` (the app with safe settings) and the Nsight Compute cross-check.

May import every layer; ``serve`` execs the app (web/server.py) with its Host check.
"""
