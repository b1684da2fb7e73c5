"""Memory behaviour from recorded accesses: coalescing, bank conflicts, races.

* ``record``: on the simulator, every load, store and atomic of every thread into numpy buffers
  (patched simulator array classes; the kernel source is unchanged). Imported by the worker only.
* ``tables``: pure pandas: accesses, warp requests (sectors, bank ways), hazards, summaries.
* ``crosscheck``: the engine's totals against Nsight Compute and compute-sanitizer on a GPU.
"""
