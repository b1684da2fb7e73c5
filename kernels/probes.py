"""Probes: device functions that record where and when a kernel ran, and what it did.

A kernel in ``kernels/`` is written as a textbook would write it and calls only the *domain*
probes a reader expects (``trace_tile`` after staging a tile, ``trace_row_state`` for a row's
running softmax state). The rest (``trace_begin`` / ``trace_end`` and every lens's probes) are
put in by the AST instrumenter (visualizer/engine/instrument/instrumenter.py), the same way for a built-in
kernel and a visitor's.

One kernel source runs on both backends:

* GPU (numba-cuda): ``smid()`` and ``globaltimer()`` read the PTX special registers
  ``%smid`` and ``%globaltimer`` (nanoseconds) through inline PTX.
* Simulator (``NUMBA_ENABLE_CUDASIM=1``): there is no PTX, no SM and no GPU clock, so
  ``smid()`` is a *modelled* placement (blocks round-robin over ``MODEL_SMS`` SMs) and
  ``globaltimer()`` is the host's monotonic clock. Both are labelled modelled downstream.

Trace buffers are plain device arrays passed as kernel arguments:

* ``trace``  int64 (3, records): rows sm, t_start, t_end. One record per thread, or one per warp
  (written by lane 0) when the host allocates fewer records than threads. Column-major on
  purpose: neighbouring warps write neighbouring words, so their partial writes can merge in L2
  (with row-major records, one 8-byte store per warp took 0.6 ms of a 1.1 ms vector add).
* ``active`` uint8 (threads,): 1 where the thread did work, 0 where it idled (e.g. i >= n).
* ``tiles``  int64 (blocks, steps, operands, 5): row0, col0, rows, cols, t of every tile a
  block staged in shared memory; written by thread 0 of the block.
* ``rows``   float32 (blocks, steps, tile_rows, 2): per-row running state (FlashAttention's
  m and l) after each step.

The clean build of a kernel is its own function with every domain probe swapped for a no-op
that the compiler removes (``without_probes``), so the cost of recording can be measured.
``with_options(fn, **jit_options)`` marks a kernel with the ``cuda.jit`` options both builds use.
"""

import os
import types

from numba import cuda, uint64

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
MODEL_SMS = 132  # the simulator models an H200's 132 SMs
NO_TIME = -1  # tiles/row slots a kernel never reached keep this value

if SIMULATOR:
    import threading
    import time

    from numba.cuda.simulator.kernel import _get_kernel_context

    def smid():
        """Modelled: the simulator runs blocks one after another on no SM at all."""
        t = threading.current_thread()  # the simulator's BlockThread
        g = _get_kernel_context().gridDim
        b = t.blockIdx
        return (b.x + g.x * (b.y + g.y * b.z)) % MODEL_SMS

    def globaltimer():
        """Host nanoseconds: gives the simulator's order, not GPU time."""
        return time.perf_counter_ns()

else:
    import numpy as np

    if not hasattr(np, "row_stack"):  # numpy>=2.5 + numba-cuda 0.30.4 (NVIDIA/numba-cuda#907)
        np.row_stack = np.vstack
    from llvmlite import ir
    from numba.cuda import types as nbtypes
    from numba.cuda.extending import intrinsic

    def _special_register(name, bits):
        lty = ir.IntType(bits)
        nty = nbtypes.uint32 if bits == 32 else nbtypes.uint64
        constraint = "=r" if bits == 32 else "=l"

        def impl(typingctx):
            def codegen(context, builder, sig, args):
                # side_effect=True keeps each read where it is written (never hoisted or merged)
                asm = ir.InlineAsm(
                    ir.FunctionType(lty, []), f"mov.u{bits} $0, %{name};", constraint, side_effect=True
                )
                return builder.call(asm, [])

            return nty(), codegen

        impl.__name__ = f"read_{name}"
        return intrinsic(impl)

    smid = _special_register("smid", 32)
    globaltimer = _special_register("globaltimer", 64)


@cuda.jit(device=True)
def linear_ids():
    """(block, thread within block, threads per block) as linear indices, x fastest."""
    tpb = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
    thread = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    block = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    return block, thread, tpb


@cuda.jit(device=True)
def record_slot(trace):
    """This thread's row in ``trace``, or -1 if its warp's lane 0 records for it (per-warp mode)."""
    block, thread, tpb = linear_ids()
    nblocks = cuda.gridDim.x * cuda.gridDim.y * cuda.gridDim.z
    if trace.shape[1] == nblocks * tpb:
        return block * tpb + thread
    if thread % 32 != 0:
        return -1
    return block * ((tpb + 31) // 32) + thread // 32


@cuda.jit(device=True)
def trace_begin(trace):
    """Timestamp at the start of the thread's work; only threads that record read the clock
    (reading %globaltimer is slow enough that 31 needless reads per warp doubled a vector add)."""
    if record_slot(trace) < 0:
        return uint64(0)
    return uint64(globaltimer())


@cuda.jit(device=True)
def trace_end(trace, active, t0, did_work):
    """Record this thread (or its warp, if trace has one slot per warp) at the end of its work."""
    block, thread, tpb = linear_ids()
    active[block * tpb + thread] = 1 if did_work else 0
    slot = record_slot(trace)
    if slot < 0:
        return
    trace[0, slot] = smid()
    trace[1, slot] = t0
    trace[2, slot] = globaltimer()


@cuda.jit(device=True)
def trace_tile(tiles, step, operand, row0, col0, rows, cols):
    """Record a shared-memory tile the block has just staged (call after syncthreads)."""
    block, thread, tpb = linear_ids()
    if thread == 0:
        tiles[block, step, operand, 0] = row0
        tiles[block, step, operand, 1] = col0
        tiles[block, step, operand, 2] = rows
        tiles[block, step, operand, 3] = cols
        tiles[block, step, operand, 4] = globaltimer()


@cuda.jit(device=True)
def trace_row_state(state, step, row, m, l):  # noqa: E741 - l is the softmax row sum's usual name
    """Record a row's running values (e.g. FlashAttention's max m and sum l) after a step.

    Only the first state.shape[0] blocks record: the host keeps this buffer small on big grids.
    """
    block, thread, tpb = linear_ids()
    if block < state.shape[0]:
        state[block, step, row, 0] = m
        state[block, step, row, 1] = l


@cuda.jit(device=True)
def race_delay(delays, site):
    """Perturb the schedule (races made visible, CUTracer's idea): before the loads, stores, atomics
    or barrier at ``site``, this thread's *warp* waits ``delays[site, warp % slots]`` nanoseconds (a
    spin on %globaltimer; 0: no wait). Every lane of a warp reads the same entry, so the warp moves
    as one relative to the others. The host draws the table from (seed, run), so a run is named by
    them (engine/instrument/delays.py)."""
    block, thread, tpb = linear_ids()
    warp = block * ((tpb + 31) // 32) + thread // 32
    ns = delays[site, warp % delays.shape[1]]
    if ns > 0:
        t0 = globaltimer()
        while globaltimer() - t0 < ns:
            pass


# --- clean builds: the same kernels with every domain probe replaced by a no-op --------------


@cuda.jit(device=True)
def _tile_off(tiles, step, operand, row0, col0, rows, cols):
    pass


@cuda.jit(device=True)
def _row_state_off(state, step, row, m, l):  # noqa: E741
    pass


_CLEAN = {
    trace_tile: _tile_off,
    trace_row_state: _row_state_off,
}


def without_probes(fn):
    """The same Python function, with its domain probe globals bound to no-ops (the trace probes are
    never in a kernel's source: only the instrumenter adds them, to the traced copy)."""
    g = dict(fn.__globals__)
    for name, value in fn.__globals__.items():
        try:
            if value in _CLEAN:
                g[name] = _CLEAN[value]
        except TypeError:  # unhashable global
            continue
    clean = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    clean.__qualname__ = fn.__qualname__ + "_clean"
    return clean


def with_options(fn, **jit_options):
    """The kernel function ``fn``, marked with the ``cuda.jit`` options its builds are compiled with."""
    fn.jit_options = jit_options
    return fn
