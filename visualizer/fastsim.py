"""A faster execution engine for Numba's CUDA simulator, installed by the simulator worker.

Stock cudasim starts one OS thread per CUDA thread for every block, and implements ``syncthreads``
with a manager thread that busy-polls every thread's flag, fighting the simulated threads for the
GIL. Here:

* one pool of threads per launch (one per thread of the block) runs every block in turn, so a
  grid of B blocks starts ``threads_per_block`` OS threads instead of ``B x threads_per_block``;
* the barrier is a condition variable: the last thread to arrive releases the others, and the
  manager sleeps until the block is done.

Semantics are the stock simulator's: blocks run one after another in the same order, threads that
have exited do not count towards a barrier, shared arrays persist across the blocks of a launch,
and an exception in one thread aborts the launch and is re-raised with its tid/ctaid.
"""

from __future__ import annotations

import sys
import threading

import numpy as np


def current_thread():
    """The simulated CUDA thread running now: ``.threadIdx``, ``.blockIdx``, ``.thread_id`` (linear
    index in its block) and a plain ``__dict__`` that recorders may keep per-thread state in.

    Call it from code a kernel runs (device functions, array wrappers); outside a launch it returns
    whatever runs the caller, which has no ``threadIdx``."""
    return threading.current_thread()


def install() -> None:
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator.kernelapi import Dim3

    if getattr(simkernel.BlockManager, "_fastsim", False):
        return
    BlockThread = simkernel.BlockThread
    pools: list[BlockPool] = []  # pools of the launch in progress (launches never overlap)

    class PoolThread(BlockThread):
        """One simulated thread index, reused for that index in every block of the launch."""

        def run(self):
            pool = self._manager
            while True:
                with pool.lock:
                    while pool.block_seq == self.seen and not pool.closing:
                        pool.start.wait()
                    if pool.closing:
                        return
                    self.seen = pool.block_seq
                    self.blockIdx = Dim3(*pool.grid_point)
                try:
                    self._target()
                except Exception as e:  # same message shape as stock cudasim
                    where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
                    msg = where if str(e) == "" else f"{where}: {e}"
                    self.exception = (type(e)(msg), sys.exc_info()[2])
                with pool.lock:
                    pool.live -= 1
                    if self.exception is not None and pool.error is None:
                        pool.error = self.exception
                        for t in pool.threads:
                            t.abort = True
                        pool.release()
                        pool.done.notify()
                    elif pool.live == 0:
                        pool.done.notify()
                    elif pool.waiting == pool.live:
                        pool.release()  # everyone still running is at the barrier
                if self.exception is not None:
                    return

        def syncthreads(self):
            pool = self._manager
            with pool.lock:
                if self.abort:
                    raise RuntimeError("abort flag set on syncthreads call")
                pool.waiting += 1
                generation = pool.generation
                if pool.waiting == pool.live:
                    pool.release()
                else:
                    while pool.generation == generation and not self.abort:
                        pool.barrier.wait()
                if self.abort:
                    raise RuntimeError("abort flag set on syncthreads clear")

    class BlockPool:
        def __init__(self, f, block_dim, debug, args):
            self._block_dim = block_dim
            self.block_state = np.zeros(block_dim, dtype=np.bool_)  # for syncthreads_count & co
            self.args = args
            # One lock, three conditions, so each event wakes only the threads waiting for it
            # (one shared condition woke every finished thread at every thread's exit: O(n^2)).
            self.lock = threading.Lock()
            self.start = threading.Condition(self.lock)  # pool threads: a new block begins
            self.barrier = threading.Condition(self.lock)  # threads parked in syncthreads
            self.done = threading.Condition(self.lock)  # the manager: the block finished
            self.generation = self.waiting = self.live = self.block_seq = 0
            self.grid_point = (0, 0, 0)
            self.error = None
            self.closing = False

            def target():
                f(*args)

            self.threads = [PoolThread(target, self, (0, 0, 0), p, debug) for p in np.ndindex(*block_dim)]
            for t in self.threads:
                t.seen = 0
                t.start()

        def release(self):
            self.generation += 1
            self.waiting = 0
            self.barrier.notify_all()

        def run_block(self, grid_point):
            with self.lock:
                self.grid_point = grid_point
                self.live = len(self.threads)
                self.waiting = 0
                self.block_seq += 1
                self.start.notify_all()
                while self.live and self.error is None:
                    self.done.wait()
            if self.error is not None:
                self.close()
                raise self.error[0].with_traceback(self.error[1])

        def close(self):
            with self.lock:
                self.closing = True
                for t in self.threads:
                    t.abort = True
                self.start.notify_all()
                self.release()

    def manager_run(self, grid_point, *args):
        if not pools:  # first block of this launch: start its threads
            pools.append(BlockPool(self._f, self._block_dim, self._debug, args))
        pools[-1].run_block(grid_point)

    original_call = simkernel.FakeCUDAKernel.__call__

    def kernel_call(self, *args):
        if self._device or simkernel._kernel_context:
            return original_call(self, *args)
        try:
            return original_call(self, *args)
        finally:
            while pools:
                pools.pop().close()

    simkernel.BlockManager.run = manager_run
    simkernel.FakeCUDAKernel.__call__ = kernel_call
    simkernel.BlockManager._fastsim = True
