"""Engine: running kernels. The runner (a queue in front of one worker process per backend), the
worker (compile, warm up, copy, launch, time, read back), the simulator engine ``fastsim``, the
access recorder, GPU timing behind a spin kernel, the AST instrumenter and the visitor-source path.

The only layer (with ``kernels/``) that imports numba. May import ``specs`` and ``analysis``.
"""
