"""Tools: the command line (``python -m visualizer ...``), benchmarks, the classroom load test,
``serve`` (the app with safe settings) and the Nsight Compute cross-check.

May import every layer except ``web`` (``serve`` starts the app as a separate process).
"""
