"""Your own kernel: any Numba CUDA kernel source, instrumented and run like the built-in ones.

* ``spec``: launch and argument specs parsed and checked on the host (numpy only, no numba).
* ``instrument``: the AST transform that adds the trace probes (runs only in the worker).
* ``execute``: loading, compiling and launching the user's module (runs only in the worker).
* ``client``: the host side: a dedicated worker per backend, the request, the Capture.

User code is executed only in a worker process, never in the process that serves the web app.
"""
