"""Probes of the SIMT lens: which lanes of a warp took each branch, and when each warp reached and left
each barrier. The instrumenter (visualizer/engine/instrument/branches.py) inserts the calls; a kernel
author never writes them.

GPU (numba-cuda):

* ``branch(log, count, site, cond)`` wraps the test of an ``if``/``elif``/``while`` (and of a ``for``
  over ``range`` rewritten as a ``while``) and returns ``cond`` unchanged. The lanes evaluating the
  test together are ``activemask()``; those for which it holds are ``ballot_sync(mask, cond)``. The
  lowest active lane (the warp's leader at that moment) appends one record ``(site, mask, taken)`` to
  its warp's row of ``log`` (int32, shape (warps, records, 3): the masks' 32 bits as they are);
  ``count[warp]`` (int32) counts the records the warp made, also those past the end of the row (the
  host says the log was cut).
* ``barrier_arrive()`` / ``barrier_release(bars, count, site, t_arrive)`` go around a
  ``cuda.syncthreads()``: the leader reads ``%globaltimer`` before and after the barrier and appends
  ``(site, t_arrive, t_release)`` to its warp's row of ``bars`` (int64, (warps, records, 3)).

Simulator (``NUMBA_ENABLE_CUDASIM=1``): the simulator runs each CUDA thread on its own until it blocks,
so which lanes meet at an ``activemask()`` there is not the GPU's reconvergence (a lane that leaves a
loop early runs ahead alone). ``branch`` therefore writes each thread's own decision instead,
``site * 2 + taken``, into that thread's row of ``log`` (int32, (threads, records)), and the host forms
the warp's visits from the lanes' logs (analysis/branches.py says how). The simulator has no clock:
the barrier probes record nothing there.
"""

import os

from numba import cuda, uint64

from visualizer.kernels.probes import globaltimer, linear_ids

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@cuda.jit(device=True)
def warp_slot():
    """This thread's warp as one index over the grid: block * warps per block + thread // 32."""
    block, thread, tpb = linear_ids()
    return block * ((tpb + 31) // 32) + thread // 32


if SIMULATOR:

    def branch(log, count, site, cond):
        """Simulator: this thread's own decision, in its row of ``log`` (the host forms the warps)."""
        block, thread, tpb = linear_ids()
        t = block * tpb + thread
        k = count[t]
        count[t] = k + 1
        if k < log.shape[1]:
            log[t, k] = site * 2 + (1 if cond else 0)
        return cond

    def barrier_arrive():
        return 0

    def barrier_release(bars, count, site, t_arrive):
        pass

else:

    @cuda.jit(device=True)
    def append_record(rows, count, a, b, c):
        """Appends (a, b, c) to this warp's row of ``rows``; ``count[warp]`` counts it even past the row's end."""
        w = warp_slot()
        k = cuda.atomic.add(count, w, 1)
        if k < rows.shape[1]:
            rows[w, k, 0] = a
            rows[w, k, 1] = b
            rows[w, k, 2] = c

    @cuda.jit(device=True)
    def branch(log, count, site, cond):
        mask = cuda.activemask()
        taken = cuda.ballot_sync(mask, True if cond else False)
        if (mask & cuda.lanemask_lt()) == 0:  # the lowest lane evaluating this test writes for the warp
            append_record(log, count, site, mask, taken)
        return cond

    @cuda.jit(device=True)
    def barrier_arrive():
        """%globaltimer at arrival, read by the warp's lowest active lane only (0 for the others)."""
        if (cuda.activemask() & cuda.lanemask_lt()) == 0:
            return uint64(globaltimer())
        return uint64(0)

    @cuda.jit(device=True)
    def barrier_release(bars, count, site, t_arrive):
        if (cuda.activemask() & cuda.lanemask_lt()) == 0:
            append_record(bars, count, site, t_arrive, globaltimer())
