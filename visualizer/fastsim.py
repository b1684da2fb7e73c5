"""A faster barrier for Numba's CUDA simulator, installed by the simulator worker.

Stock cudasim runs one OS thread per CUDA thread and implements ``syncthreads`` by a manager
thread that busy-polls every thread's flag, fighting the simulated threads for the GIL. Here the
barrier is a condition variable: the last thread to arrive releases the others, and the manager
sleeps until the block finishes. Semantics are the stock ones (threads that have exited do not
count towards the barrier; an exception in one thread aborts the block and is re-raised).
"""

from __future__ import annotations

import threading

import numpy as np


def install() -> None:
    from numba.cuda.simulator import kernel as simkernel

    if getattr(simkernel.BlockManager, "_fast_barrier", False):
        return
    BlockThread = simkernel.BlockThread

    def thread_run(self):
        manager = self._manager
        try:
            self._target(*self._args, **self._kwargs)
        except Exception as e:  # same message shape as stock cudasim
            import sys

            where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
            msg = where if str(e) == "" else f"{where}: {e}"
            self.exception = (type(e)(msg), sys.exc_info()[2])
        finally:
            with manager.cond:
                manager.live -= 1
                if self.exception is not None and manager.error is None:
                    manager.error = self.exception
                    for t in manager.threads:
                        t.abort = True
                elif manager.live and manager.waiting == manager.live:
                    manager.release()  # everyone still alive is at the barrier
                manager.cond.notify_all()

    def syncthreads(self):
        manager = self._manager
        with manager.cond:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            manager.waiting += 1
            generation = manager.generation
            if manager.waiting == manager.live:
                manager.release()
            else:
                while manager.generation == generation and not self.abort:
                    manager.cond.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    def release(manager):
        manager.generation += 1
        manager.waiting = 0
        manager.cond.notify_all()

    def manager_run(self, grid_point, *args):
        self.cond = threading.Condition()
        self.generation = self.waiting = 0
        self.error = None
        self.threads = []

        def target():
            self._f(*args)

        for block_point in np.ndindex(*self._block_dim):
            self.threads.append(BlockThread(target, self, grid_point, block_point, self._debug))
        self.live = len(self.threads)
        for t in self.threads:
            t.start()
        with self.cond:
            while self.live and self.error is None:
                self.cond.wait()
            if self.error is not None:
                self.release()  # wake threads parked at a barrier so they see abort
        if self.error is not None:
            raise self.error[0].with_traceback(self.error[1])

    BlockThread.run = thread_run
    BlockThread.syncthreads = syncthreads
    simkernel.BlockManager.release = release
    simkernel.BlockManager.run = manager_run
    simkernel.BlockManager._fast_barrier = True
