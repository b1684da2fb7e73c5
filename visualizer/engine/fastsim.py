"""A faster, deterministic execution engine for Numba's CUDA simulator (numba-cuda 0.30.x).

Stock cudasim starts one OS thread per CUDA thread for every block and implements ``syncthreads``
with a manager thread that busy-polls every thread's flag, fighting the simulated threads for the
GIL. Here every CUDA thread of a block is a greenlet on the launching OS thread: a thread runs
until it reaches a barrier (``syncthreads*``, a grid sync), an atomic or a fence, or ends, and then
the next one runs, in linear thread order (x fastest, as warps are formed). No GIL contention, no
OS thread per CUDA thread, and the same interleaving on every run.

Kept from the stock simulator: blocks run one after another in ``np.ndindex`` order; threads that
have exited do not count at a barrier; ``syncthreads_count/and/or`` see only their own block's votes
(an exited thread's vote is 0, as in stock); an exception in one thread aborts the launch and is
re-raised with ``tid=[..] ctaid=[..]`` in its message; ``sys.exit()`` in a kernel ends that thread.

Where this engine differs on purpose (hardware is what it follows):

* shared memory is per block: every block gets fresh ``cuda.shared.array`` buffers filled with a
  poison value (``SHARED_POISON_*``: NaN for floats, the bytes ``DEADBEEF`` for integers), never
  another block's or an earlier launch's data (stock hands block 1 what block 0 left behind);
* a kernel that stops making progress (a barrier that can never release, a thread spinning) or
  that runs past a CPU-time limit is stopped with a one-line ``KernelHangError`` that says which
  threads wait at which barrier and where the others are (stock hangs for ever);
* an exception whose class cannot be rebuilt from one message argument is re-raised as its own
  class anyway (stock loses it and reports success).

Use: ``install()`` once in a process whose simulator launches should use this engine (the
simulator worker does). ``current_thread()`` is the simulated CUDA thread running now.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections import deque

import numpy as np

STALL_S = float(os.environ.get("FASTSIM_STALL_S", 10.0))  # no thread finished or passed a barrier
CPU_LIMIT_S = float(os.environ.get("FASTSIM_CPU_LIMIT_S", 300.0))  # CPU seconds for one launch
SHARED_POISON_FLOAT = np.nan
SHARED_POISON_BYTES = bytes.fromhex("efbeadde")  # little-endian 0xDEADBEEF: int32 -559038737

_real_current_thread = threading.current_thread

# Hooks for recorders (e.g. the memory-access engine):
BLOCK_START_HOOKS: list = []  # f(blockIdx) before a block's threads run, after its shared memory is fresh
SHARED_CALLER_SKIP: set[str] = set()  # files of wrappers around FakeCUDAShared.array: skipped when
# finding the kernel line that identifies an allocation (stock keys each array by file and line)


STUCK_EXIT_CODE = 70  # the worker's exit status when a stuck kernel could not be interrupted


class KernelHangError(RuntimeError):
    """A simulated launch was stopped: deadlocked, spinning or over its CPU-time limit."""


class _WatchdogInterrupt(BaseException):
    """Raised asynchronously in the launching thread by the watchdog (kernels can't catch it as
    Exception)."""


class _State:
    launch: _Launch | None = None


_state = _State()


def current_thread():
    """The simulated CUDA thread running now: ``.threadIdx``, ``.blockIdx``, ``.thread_id`` (linear
    index in its block) and a plain ``__dict__`` that recorders may keep per-thread state in.

    Call it from code a kernel runs (device functions, array wrappers); outside a launch it returns
    ``threading.current_thread()``, which has no ``threadIdx``."""
    launch = _state.launch
    if launch is not None and launch.current is not None and threading.get_ident() == launch.ident:
        return launch.current
    return _real_current_thread()


def poison_fill(arr: np.ndarray) -> np.ndarray:
    """Fill a fresh shared array with the value hardware would never promise: NaN for floats,
    the repeating bytes DE AD BE EF (little-endian) for everything else."""
    if arr.dtype.kind in "fc":
        arr.fill(SHARED_POISON_FLOAT)
    elif arr.nbytes:
        raw = arr.reshape(-1).view(np.uint8) if arr.flags.c_contiguous else None
        if raw is None:  # never happens for arrays made here; keep it total anyway
            arr[...] = 0
        else:
            pattern = np.frombuffer(SHARED_POISON_BYTES, np.uint8)
            raw[:] = np.resize(pattern, raw.size)
    return arr


# --------------------------------------------------------------------------------------- threads


RUNNING, BARRIER, YIELDED, DONE = "running", "barrier", "yielded", "done"


class SimThread:
    """One CUDA thread of one block. Duck-types the stock ``BlockThread`` for kernel code."""

    daemon = True

    def __init__(self, launch, manager, block_idx, thread_idx, thread_id):
        self._launch = launch
        self._manager = manager  # stock BlockManager of this block: block_state for the votes
        self.blockIdx = block_idx
        self.threadIdx = thread_idx
        self.thread_id = thread_id
        self.state = RUNNING
        self.exception = None
        self.abort = False
        self.debug = launch.debug
        self.glet = None

    # threading.Thread look-alikes, for code that calls threading.current_thread() in a kernel
    @property
    def name(self):
        return str(self)

    @property
    def ident(self):
        return self._launch.ident

    def is_alive(self):
        return self.state != DONE

    def __str__(self):
        return f"Thread <<<{self.blockIdx}, {self.threadIdx}>>>"

    def main(self, f, args):
        try:
            f(*args)
        except SystemExit:
            pass  # as in stock cudasim: sys.exit() ends this thread only
        except _WatchdogInterrupt:
            self._launch.stopping = True
        except BaseException as e:
            if self._launch.dead:  # greenlet torn down after the launch was aborted
                return
            self.exception = (_with_where(e, self), e.__traceback__)
        self.state = DONE

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        self.state = BARRIER
        self._launch.sched.switch()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def yield_now(self):
        self.state = YIELDED
        self._launch.sched.switch()

    def syncthreads_count(self, value):
        state = self._manager.block_state
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        count = np.count_nonzero(state)
        self.syncthreads()
        return count

    def syncthreads_and(self, value):
        state = self._manager.block_state
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        test = np.all(state)
        self.syncthreads()
        return 1 if test else 0

    def syncthreads_or(self, value):
        state = self._manager.block_state
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        test = np.any(state)
        self.syncthreads()
        return 1 if test else 0


def _with_where(e: BaseException, t: SimThread) -> BaseException:
    """The exception re-made with the stock simulator's ``tid=[..] ctaid=[..]`` prefix."""
    where = f"tid={list(t.threadIdx)} ctaid={list(t.blockIdx)}"
    cls = type(e)
    try:
        text = str(e)
    except BaseException:  # a broken __str__ must not lose the error
        text = f"<{cls.__name__} with an unprintable message>"
    msg = where if text == "" else f"{where}: {text}"
    try:
        return cls(msg)
    except BaseException:
        pass
    try:  # a constructor that wants other arguments: keep the class, skip its __init__
        new = cls.__new__(cls)
        new.args = (msg,)
        if hasattr(e, "__dict__"):
            new.__dict__.update(e.__dict__)
        if str(new) == msg:
            return new
    except BaseException:
        pass
    return RuntimeError(f"{where}: {cls.__name__}: {text}")


# ---------------------------------------------------------------------------------------- launch


class _Launch:
    """State of the launch in progress (launches never overlap: the simulator asserts it)."""

    def __init__(self, kernel_fn, block_dim, debug, args, module):
        self.fn = kernel_fn
        self.args = args
        self.debug = debug
        self.module = module
        self.ident = threading.get_ident()
        self.current: SimThread | None = None
        self.sched = None
        self.dead = False
        self.stopping = False
        self.report: str | None = None
        self.swapped: dict[int, object] = {}  # device-function modules whose `cuda` is swapped
        self.rebound: list = []  # (globals, name, dispatcher) bound to the plain function
        self.blocks_done = 0
        self.threads: list[SimThread] = []
        self.ready: deque = deque()
        self.idle: list = []  # greenlets whose thread has finished, ready to run another
        self.block_idx = None
        # x fastest, as hardware forms warps (np.ndindex would make z fastest)
        bx, by, bz = block_dim
        from numba.cuda.simulator.kernelapi import Dim3

        self.points = [Dim3(x, y, z) for z in range(bz) for y in range(by) for x in range(bx)]
        self.last_progress = time.monotonic()  # a thread finished or a barrier released
        self.yields = self.yields_at_progress = 0  # switches at atomics and fences
        self.watchdog = _Watchdog(self)

    def run_block(self, manager, grid_point):
        from greenlet import getcurrent, greenlet
        from numba.cuda.simulator.kernelapi import Dim3

        module = self.module
        block_idx = Dim3(*grid_point)
        self.block_idx = block_idx
        module.blockIdx = block_idx
        module._shared._new_block()
        for hook in BLOCK_START_HOOKS:
            hook(block_idx)
        threads = [SimThread(self, manager, block_idx, p, i) for i, p in enumerate(self.points)]
        self.threads = threads
        sched = self.sched = getcurrent()
        idle = self.idle
        ready = self.ready = deque(threads)
        waiting: list[SimThread] = []
        self.last_progress = time.monotonic()
        try:
            while ready:
                t = ready.popleft()
                self.current = t
                module.threadIdx = t.threadIdx
                module.laneid = t.thread_id & 31
                t.state = RUNNING
                g = t.glet
                if g is None:  # a thread's first run: on an idle greenlet (making one costs ~10x)
                    g = t.glet = idle.pop() if idle else greenlet(self._worker, parent=sched)
                    g.switch(t)
                else:
                    g.switch()
                self.current = None
                if self.stopping:
                    raise _WatchdogInterrupt
                state = t.state
                if state is YIELDED:
                    ready.append(t)
                    self.yields += 1
                elif state is BARRIER:
                    waiting.append(t)
                    if not ready:  # every live thread is at the barrier: release them
                        ready.extend(waiting)
                        waiting.clear()
                        self.last_progress = time.monotonic()
                        self.yields_at_progress = self.yields
                else:
                    idle.append(t.glet)
                    t.glet = None
                    if t.exception is not None:
                        for other in threads:
                            other.abort = True
                        self.dead = True
                        raise t.exception[0].with_traceback(t.exception[1])
                    self.last_progress = time.monotonic()
                    self.yields_at_progress = self.yields
                    if not ready and waiting:  # the last thread not at the barrier has exited
                        ready.extend(waiting)
                        waiting.clear()
        except _WatchdogInterrupt:
            self.dead = True
            raise KernelHangError(self.report or "the simulated launch was stopped by the watchdog") from None
        finally:
            self.current = None
        self.blocks_done += 1

    def _worker(self, t):
        """A greenlet that runs one simulated thread after another (parked between them)."""
        fn, args = self.fn, self.args
        if self.debug:  # numpy's error state is per greenlet (a context variable), as it was per thread
            np.seterr(divide="raise")
        while True:
            t.main(fn, args)
            if self.dead:
                return
            t = self.sched.switch()
            if t is None:
                return

    def enter_swap(self, fn):
        """Swap ``cuda`` for this launch's module in fn's globals until the launch ends, and bind
        the device functions those globals name straight to their Python functions (each call
        then skips the dispatcher; stock takes two locks and scans the globals at every call)."""
        from numba.cuda.simulator.kernel import FakeCUDAKernel
        from numba.cuda.simulator.kernelapi import swapped_cuda_module

        todo = [fn]
        while todo:
            f = todo.pop()
            glob = f.__globals__
            if id(glob) in self.swapped:
                continue
            ctx = swapped_cuda_module(f, self.module)
            ctx.__enter__()
            self.swapped[id(glob)] = ctx
            for name, value in list(glob.items()):
                if type(value) is FakeCUDAKernel and value._device:
                    glob[name] = value.fn
                    self.rebound.append((glob, name, value))
                    todo.append(value.fn)

    def close(self):
        self.watchdog.stop()
        self.dead = True
        for glob, name, dispatcher in reversed(self.rebound):
            if glob.get(name) is dispatcher.fn:
                glob[name] = dispatcher
        self.rebound.clear()
        for ctx in reversed(list(self.swapped.values())):
            ctx.__exit__(None, None, None)
        self.swapped.clear()
        for t in self.threads:  # an aborted block: end its suspended greenlets now, not at some GC
            if t.glet is not None and not t.glet.dead:
                try:
                    t.glet.throw()
                except BaseException:
                    pass
        for g in self.idle:
            if not g.dead:
                try:
                    g.switch(None)
                except BaseException:
                    pass
        self.idle = []
        self.threads = []
        self.ready = deque()

    # --- what the watchdog reports ------------------------------------------------------------
    def describe(self, why: str) -> str:
        """One line: which threads wait at which barrier, which still run and where."""
        running_frame = sys._current_frames().get(self.ident)
        groups: dict[tuple[int, str], list[SimThread]] = {}
        for t in self.threads:
            if t.state == DONE:
                continue
            if t is self.current:
                key = (1, f"running at {_user_line(running_frame)}")
            elif t.glet is None:
                key = (2, "not started yet")
            elif t.state == BARRIER:
                key = (0, f"at a barrier at {_user_line(t.glet.gr_frame)}")
            else:
                key = (1, f"running at {_user_line(t.glet.gr_frame)}")
            groups.setdefault(key, []).append(t)
        parts = []
        for (order, what), ts in sorted(groups.items()):
            verb = (
                ("waits " if len(ts) == 1 else "wait ") if order == 0 else ("is " if len(ts) == 1 else "are ")
            )
            parts.append(f"{_thread_span(ts)} {verb}{what}")
        if len(parts) > 4:  # one line: the first places, then how many more
            parts = [*parts[:4], f"threads at {len(parts) - 4} more places"]
        done = sum(t.state == DONE for t in self.threads)
        block = list(self.block_idx) if self.block_idx is not None else "?"
        detail = "; ".join(parts) if parts else "no live threads"
        return f"{why} in block {block}: {detail}; {done} of its threads had finished; launch stopped"


def _thread_span(ts: list[SimThread]) -> str:
    first, last = ts[0].threadIdx, ts[-1].threadIdx
    if len(ts) == 1:
        return f"thread ({first.x},{first.y},{first.z})"
    return f"{len(ts)} threads ({first.x},{first.y},{first.z})..({last.x},{last.y},{last.z})"


_ENGINE_DIRS = (os.path.dirname(os.path.abspath(__file__)),)


def _user_line(frame) -> str:
    """file:line of the innermost frame that is the kernel's (not the simulator's or ours)."""
    import numba.cuda.simulator as simpkg

    skip = (
        *_ENGINE_DIRS,
        os.path.dirname(os.path.abspath(simpkg.__file__)),
        os.path.dirname(threading.__file__),
    )
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(skip):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "an unknown line"


class _Watchdog:
    """A daemon OS thread that stops a launch making no progress or running past its CPU limit.

    It interrupts the launching thread with an asynchronous exception (the kernel may be spinning
    in plain Python and never yield). If that thread stays stuck (e.g. inside a long C call) and
    ``exit_if_stuck`` is set (the simulator worker), the process exits so its runner restarts it.
    """

    poll_s = 0.1

    def __init__(self, launch: _Launch):
        self.launch = launch
        self.stall_s = _config["stall_s"]
        self.cpu_limit_s = _config["cpu_limit_s"]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.fired_at = None
        try:
            self._clock = time.pthread_getcpuclockid(launch.ident)
            self._cpu0 = time.clock_gettime(self._clock)
        except (AttributeError, OSError):
            self._clock, self._cpu0 = None, time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="fastsim-watchdog", daemon=True)
        self._thread.start()

    def cpu_s(self) -> float:
        if self._clock is None:
            return time.monotonic() - self._cpu0
        return time.clock_gettime(self._clock) - self._cpu0

    def stop(self):
        with self._lock:
            self._stop.set()
            if self.fired_at is not None and not self.launch.dead:
                # fired as the launch ended: cancel the pending interrupt, it would hit host code
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.launch.ident), None)

    def _watch(self):
        launch = self.launch
        while not self._stop.wait(self.poll_s):
            with self._lock:
                if self._stop.is_set():
                    return
                if self.fired_at is None:
                    why = None
                    idle = time.monotonic() - launch.last_progress
                    limit = f"FASTSIM_STALL_S={self.stall_s:g}"
                    if idle > self.stall_s and any(t.state == BARRIER for t in launch.threads):
                        why = (
                            f"deadlock: no thread finished or passed a barrier for {idle:.0f} s ({limit}) while "
                            "threads wait at a barrier"
                        )
                    elif idle > self.stall_s and launch.yields == launch.yields_at_progress:
                        # one thread has run all along: no barrier, atomic, fence or end reached
                        # (many threads taking turns at atomics may be real work: the CPU limit decides)
                        why = f"a thread ran {idle:.0f} s without reaching a barrier, an atomic or its end ({limit})"
                    elif self.cpu_s() > self.cpu_limit_s:
                        why = f"CPU-time limit of {self.cpu_limit_s:g} s exceeded (FASTSIM_CPU_LIMIT_S)"
                    if why is None:
                        continue
                    launch.report = launch.describe(why)
                    launch.stopping = True
                    self.fired_at = time.monotonic()
                    self._interrupt()
                elif time.monotonic() - self.fired_at > max(1.0, self.stall_s):
                    if _config["exit_if_stuck"]:
                        print(f"fastsim: {launch.report}; the thread did not stop, exiting", file=sys.stderr)
                        sys.stderr.flush()
                        os._exit(STUCK_EXIT_CODE)
                    self._interrupt()  # kernels that catch BaseException: try again
                    self.fired_at = time.monotonic()

    def _interrupt(self):
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self.launch.ident), ctypes.py_object(_WatchdogInterrupt)
        )


_config = {"stall_s": STALL_S, "cpu_limit_s": CPU_LIMIT_S, "exit_if_stuck": False}


def configure(
    stall_s: float | None = None, cpu_limit_s: float | None = None, exit_if_stuck: bool | None = None
):
    """Watchdog limits for later launches (seconds)."""
    if stall_s is not None:
        _config["stall_s"] = float(stall_s)
    if cpu_limit_s is not None:
        _config["cpu_limit_s"] = float(cpu_limit_s)
    if exit_if_stuck is not None:
        _config["exit_if_stuck"] = bool(exit_if_stuck)


# --------------------------------------------------------------------------------------- install


def _fast_paths() -> None:
    """Same results as the stock code, fewer Python calls: the in-kernel array wrapper indexes its
    numpy array directly, and numba scalar casts like ``float32(0.0)`` skip an import per call."""
    from numba.core.types import abstract
    from numba.core.typing import signature
    from numba.cuda.simulator.cudadrv import devicearray as da

    FakeCUDAArray, Wrapper, FakeShape = da.FakeCUDAArray, da.FakeWithinKernelCUDAArray, da.FakeShape
    ndarray, void = np.ndarray, np.void

    def getitem(self, idx):
        item = self._item
        ret = item._ary[idx]
        if type(ret) is ndarray or type(ret) is void:
            return Wrapper(FakeCUDAArray(ret, stream=item.stream))
        return ret

    def setitem(self, idx, val):
        self._item._ary[idx] = val

    stock_getattr = Wrapper.__getattr__

    def getattr_(self, attrname):
        if attrname == "shape":
            return FakeShape(self._item._ary.shape)
        return stock_getattr(self, attrname)

    Wrapper.__getitem__, Wrapper.__setitem__, Wrapper.__getattr__ = getitem, setitem, getattr_

    Type = abstract.Type

    def type_call(self, *args):
        if len(args) == 1 and not isinstance(args[0], Type):
            return self.cast_python_value(args[0])
        return signature(self, *args)

    Type.__call__ = type_call


def install(**limits) -> None:
    """Patch numba-cuda's simulator in this process to run launches on this engine."""
    configure(**limits)
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    if getattr(simkernel.BlockManager, "_fastsim", False):
        return
    import greenlet  # noqa: F401  (fail here, not in the middle of a launch)

    StockModule = kernelapi.FakeCUDAModule
    StockShared = kernelapi.FakeCUDAShared

    # Shared arrays per block, poisoned, found by the calling line like stock's. Patched into the
    # stock class in place, so a later wrapper of FakeCUDAShared.array (a recorder) wraps this one.
    def shared_new_block(self):
        self._allocations = {}
        self._dyn_poisoned = False

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        dynamic = type(shape) is not tuple and shape == 0
        if not dynamic:  # this block's array for the calling line, if it made one already
            f = sys._getframe(1)
            while f.f_code.co_filename in SHARED_CALLER_SKIP:
                f = f.f_back
            caller = (f.f_code.co_filename, f.f_lineno)
            res = self._allocations.get(caller)
            if res is not None:
                return res
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        else:
            dtype = np.dtype(dtype)
        if dynamic:
            count = self._dynshared_size // dtype.itemsize
            view = np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
            if not self._dyn_poisoned:  # first request of the block decides the poison's type
                poison_fill(np.frombuffer(self._dynshared.data, dtype=np.uint8))
                if dtype.kind in "fc":
                    view.fill(SHARED_POISON_FLOAT)
                self._dyn_poisoned = True
            return view
        res = self._allocations[caller] = poison_fill(np.empty(shape, dtype))
        return res

    StockShared._dyn_poisoned = False
    StockShared._new_block = shared_new_block
    StockShared.array = shared_array

    def _yield():
        launch = _state.launch
        if launch is not None and launch.current is not None:
            launch.current.yield_now()

    class Module(StockModule):
        """The in-kernel ``cuda`` module; thread and block indices are set at every switch
        instead of being looked up through threading.current_thread() at every use."""

        threadIdx = blockIdx = laneid = None  # plain instance attributes (shadow the properties)

        def syncthreads(self):
            _state.launch.current.syncthreads()

        def syncthreads_count(self, val):
            return _state.launch.current.syncthreads_count(val)

        def syncthreads_and(self, val):
            return _state.launch.current.syncthreads_and(val)

        def syncthreads_or(self, val):
            return _state.launch.current.syncthreads_or(val)

        def threadfence(self):
            _yield()  # a fence in a spin loop lets the other threads run

        threadfence_block = threadfence_system = threadfence

    # atomics switch threads after the operation, so spin-locks built on them make progress
    Atomic = kernelapi.FakeCUDAAtomic
    for name in ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
                 "compare_and_swap", "cas"):  # fmt: skip
        op = getattr(Atomic, name)

        def atomic(self, *args, _op=op):
            old = _op(self, *args)
            _yield()
            return old

        atomic.__name__ = name
        setattr(Atomic, name, atomic)

    _fast_paths()

    def manager_run(self, grid_point, *args):
        launch = _state.launch
        if launch is None:  # first block of this launch
            launch = _Launch(self._f, self._block_dim, self._debug, args, simkernel._kernel_context)
            _state.launch = launch
            launch.enter_swap(self._f)
        launch.run_block(self, grid_point)

    original_call = simkernel.FakeCUDAKernel.__call__

    def kernel_call(self, *args):
        launch = _state.launch
        if launch is not None and (self._device or simkernel._kernel_context):
            # device function inside a running launch: swap `cuda` in its module once per launch,
            # not at every call (stock takes two locks and scans the module's globals per call)
            fn = self.fn
            if id(fn.__globals__) not in launch.swapped:
                launch.enter_swap(fn)
            return fn(*args)
        if self._device or simkernel._kernel_context:
            return original_call(self, *args)
        threading.current_thread = current_thread  # kernels that ask threading get their CUDA thread
        stopped = False
        try:
            return original_call(self, *args)
        except _WatchdogInterrupt:  # landed outside a thread's code
            stopped = True
        finally:
            launch = _state.launch
            while True:  # until the watchdog is stopped, an interrupt may still land here
                try:
                    if launch is not None:
                        launch.watchdog.stop()
                    threading.current_thread = _real_current_thread
                    _state.launch = None
                    if launch is not None:
                        launch.close()
                    break
                except _WatchdogInterrupt:
                    stopped = True
            if stopped:
                report = launch.report if launch is not None else None
                raise KernelHangError(report or "the simulated launch was stopped by the watchdog")

    simkernel.FakeCUDAModule = Module
    simkernel.BlockManager.run = manager_run
    simkernel.FakeCUDAKernel.__call__ = kernel_call
    simkernel.BlockManager._fastsim = True
