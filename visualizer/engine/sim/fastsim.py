"""A faster, deterministic execution engine for Numba's CUDA simulator (numba-cuda 0.30.x).

Stock cudasim starts one OS thread per CUDA thread for every block and implements ``syncthreads``
with a manager thread that busy-polls every thread's flag, fighting the simulated threads for the
GIL. Here every CUDA thread of a block is a greenlet on the launching OS thread: a thread runs
until it reaches a barrier (``syncthreads*``, a grid sync, a warp intrinsic), an atomic or a fence,
or ends, and then the next one runs, in linear thread order (x fastest, as warps are formed). No GIL contention, no
OS thread per CUDA thread, and the same interleaving on every run.

A launch inside ``with seeded(seed, run):`` runs one seeded interleaving instead (races you can watch
happen; ``Schedule``): warps step in lockstep one memory access at a time, the warp furthest behind goes
next, with seeded stalls and lane orders; the same (seed, run) gives the same interleaving, bit for bit,
and different seeds explore different orders. Without it nothing changes.

Kept from the stock simulator: blocks run one after another in ``np.ndindex`` order; threads that
have exited do not count at a barrier; an exception in one thread aborts the launch and is re-raised
with ``tid=[..] ctaid=[..]`` in its message.

Where this engine differs on purpose (hardware is what it follows):

* shared memory is per block: every block gets fresh ``cuda.shared.array`` buffers filled with a
  poison value (``SHARED_POISON_*``: NaN for floats, the bytes ``DEADBEEF`` for integers), never
  another block's or an earlier launch's data (stock hands block 1 what block 0 left behind);
* a kernel that stops making progress (a barrier that can never release, a thread spinning) or
  that runs past a CPU-time limit is stopped with a one-line ``KernelHangError`` that says which
  threads wait at which barrier and where the others are (stock hangs for ever). A thread that
  spins through atomics, fences or warp intrinsics (a flag polled with ``atomic.add(f, i, 0)``, a
  loop around ``syncwarp``) is spinning when each such step repeats one of its last few: the same
  line, the same local values, the same arguments and results. Steps like that are no progress;
  they are compared only after ``STALL_S / 4`` without a thread finishing or a barrier releasing,
  so kernels that make progress pay nothing for it;
* an exception whose class cannot be rebuilt from one message argument is re-raised as its own
  class anyway (stock loses it and reports success);
* ``syncthreads_count/and/or`` count the votes of the threads still running only (stock also counts
  exited threads: their last vote, or false);
* a kernel that calls ``cuda.cg.this_grid()`` (itself or in a device function) is a cooperative
  launch: the threads of all its blocks are co-resident, so ``grid.sync()`` is a real grid-wide
  barrier (stock runs the blocks one after another, so its grid sync is a block barrier); a
  cooperative launch of more than ``COOP_MAX_THREADS`` threads is refused, as a GPU refuses one
  larger than ``max_cooperative_grid_blocks`` (stock's answer to that is 1 block);
* the warp intrinsics (``shfl_*sync``, ``ballot/all/any/eq_sync``, ``match_any/all_sync``,
  ``syncwarp``, ``activemask``, ``lanemask_lt``) exist: a warp is 32 consecutive linear thread ids
  of a block, and a ``*_sync`` call is a rendezvous of the live lanes its mask names (stock has none
  of them). What a GPU leaves undefined is refused in one line (``WarpError``): a mask without the
  caller's lane, a vote or match whose mask names exited lanes, a shuffle from a lane that is not
  taking part; ``activemask()`` is the set of the warp's lanes that reach the same call together;
* ``sys.exit()`` in a kernel is refused in one line (numba cannot compile it for a GPU; stock ends
  the thread silently), and so is any other ``cuda.`` device function the simulator lacks and every
  ``numba.cuda.libdevice`` function (stock: empty stubs, stored as NaN) (``NotSimulatedError``).

Use: ``install()`` once in a process whose simulator launches should use this engine (the
simulator worker does). ``current_thread()`` is the simulated CUDA thread running now.
"""

from __future__ import annotations

import ctypes
import os
import random
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager

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

# A cooperative launch (grid sync) runs every thread of the grid co-resident, as a GPU must: this many
# threads at most (an H200 holds at most 132 SMs x 2,048 = 270,336, fewer when registers or shared
# memory limit occupancy; the simulator's limit is its memory: every live thread is a greenlet, ~7 kB).
COOP_MAX_THREADS = int(os.environ.get("FASTSIM_COOP_MAX_THREADS", 65_536))


class KernelHangError(RuntimeError):
    """A simulated launch was stopped: deadlocked, spinning or over its CPU-time limit."""


class NotSimulatedError(RuntimeError):
    """The kernel uses something the simulator does not simulate (or a GPU would not run)."""


class WarpError(RuntimeError):
    """A warp intrinsic used in a way a GPU leaves undefined (the simulator refuses to invent a result)."""


class _WatchdogInterrupt(BaseException):
    """Raised asynchronously in the launching thread by the watchdog (kernels can't catch it as
    Exception)."""


class _State:
    launch: _Launch | None = None
    schedule: Schedule | None = None  # the seeded interleaving the next launches run (None: linear order)
    block_done = None  # called after each simulated block (the worker's progress)
    heard: Listener | None = None  # the launch's listeners (one, or _Heard of several)


LOAD, STORE, ATOMIC = 0, 1, 2  # what an access does (engine/sim/access_record.py's codes)


class Listener:
    """What a lens hears from one simulated launch (engine/lenses/; the one interface the simulator
    offers, installed once by ``install``): ``start()`` before the launch and ``stop()`` after it,
    whatever happens; between them every array access, barrier, atomic and thread switch. The access
    recorder (engine/sim/access_record.py) is one. Every hook is optional (these do nothing).

    Arrays: a kernel's global arrays are numba's in-kernel wrappers (``global_access`` names the wrapper);
    a shared or local array is announced once where it is made (``array``), and what that returns (a tag,
    or None: not listened to) comes back with each of its accesses (``access``)."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def array(self, ary, frame, space: str, dynamic: bool = False):
        """A shared (``space`` "shared"; ``dynamic``: the launch's dynamic buffer) or local array is
        made at ``frame``'s line: its tag, or None."""
        return None

    def access(self, tag, idx, op: int, frame) -> None:
        """An element of a tagged array is loaded, stored or updated atomically (``op``) at ``frame``."""

    def global_access(self, wrapper, idx, op: int, frame) -> None:
        """An element of a kernel argument (numba's in-kernel array ``wrapper``) is accessed."""

    def view(self, wrapper, idx, view) -> None:
        """``view = wrapper[idx]`` is a sub-array (``qh = q[b, h]``), not an element."""

    def global_tag(self, wrapper):
        """The tag of a kernel argument, for an atomic on it (None: not listened to)."""
        return None

    def barrier(self) -> None:
        """The running thread passed a barrier (syncthreads and its forms, a grid sync)."""

    def switched(self, thread) -> None:
        """The simulator switched to ``thread`` (engine/sim/fastsim.py ``current_thread``)."""


class _Heard(Listener):
    """Several listeners as one: each hears everything; the first that tags an array tags it."""

    def __init__(self, listeners):
        self.each = list(listeners)

    def array(self, ary, frame, space, dynamic=False):
        tags = [x.array(ary, frame, space, dynamic) for x in self.each]
        return next((t for t in tags if t is not None), None)

    def access(self, tag, idx, op, frame):
        for x in self.each:
            x.access(tag, idx, op, frame)

    def global_access(self, wrapper, idx, op, frame):
        for x in self.each:
            x.global_access(wrapper, idx, op, frame)

    def view(self, wrapper, idx, view):
        for x in self.each:
            x.view(wrapper, idx, view)

    def global_tag(self, wrapper):
        return next((t for x in self.each if (t := x.global_tag(wrapper)) is not None), None)

    def barrier(self):
        for x in self.each:
            x.barrier()

    def switched(self, thread):
        for x in self.each:
            x.switched(thread)


@contextmanager
def listening(listeners: list):
    """The launch run with ``listeners`` listening (started in order, stopped in reverse)."""
    install()
    started = []
    try:
        for x in listeners:
            x.start()
            started.append(x)
        _state.heard = started[0] if len(started) == 1 else _Heard(started) if started else None
        yield
    finally:
        _state.heard = None
        for x in reversed(started):
            x.stop()


def _caller(depth: int = 2):
    """The kernel's frame that made an access: past a seeded schedule's wrapper of global arrays."""
    f = sys._getframe(depth)
    return f.f_back if f.f_code in SWITCH_CODES else f


def on_block_done(callback) -> None:
    """``callback()`` after each simulated block of every later launch (None: nothing)."""
    _state.block_done = callback


# ------------------------------------------------------------------------------- seeded schedules

STALL_P = float(os.environ.get("FASTSIM_STALL_P", 0.006))  # a seeded schedule stalls a warp step this often
STALL_MAX = 48  # for 1 to this many steps of the other warps


class Schedule:
    """One seeded interleaving, a model of a GPU's warp schedulers: the lanes of a warp run in lockstep,
    one memory access per lane per step (in an order drawn for each step: which lane's store to one
    address lands last); the next warp to step is the ready one furthest behind, ties drawn, and a
    step stalls its warp with chance ``stall_p`` for 1 to ``stall_max`` steps of the others. Threads
    switch before every shared or global memory access (never inside an atomic) and at barriers.
    Named by (seed, run): the same name gives the same interleaving, bit for bit."""

    def __init__(self, seed: int, run: int = 0, stall_p: float = STALL_P, stall_max: int = STALL_MAX):
        self.seed, self.run = int(seed), int(run)
        self.stall_p, self.stall_max = float(stall_p), int(stall_max)
        self.rng = random.Random(f"fastsim-schedule:{self.seed}:{self.run}")  # str seeds are stable
        self.steps = 0  # warp steps drawn
        self.stalls = 0  # of them stalled

    @property
    def name(self) -> str:
        return f"seed {self.seed}, run {self.run}"

    def summary(self) -> dict:
        return {"seed": self.seed, "run": self.run, "steps": self.steps, "stalls": self.stalls}


class _WarpReady:
    """The ready threads of a seeded launch, by warp (the scheduler's ``ready`` for ``Schedule``)."""

    def __init__(self, sch: Schedule, threads):
        self.sch, self.rng = sch, sch.rng
        self.by_warp: dict[tuple, list] = {}
        self.clock: dict[tuple, int] = {}
        self.step: list = []
        self.n = 0
        for t in threads:
            b = t.blockIdx
            t.wkey = (b.x, b.y, b.z, t.thread_id >> 5)
        self.extend(threads)

    def append(self, t):
        self.by_warp.setdefault(t.wkey, []).append(t)
        self.n += 1

    def extend(self, ts):
        for t in ts:
            self.append(t)

    def __len__(self):
        return self.n

    def __bool__(self):
        return self.n > 0

    def pop_next(self):
        if not self.step:  # the next warp steps: the ready one furthest behind
            sch, rng, clock = self.sch, self.rng, self.clock
            keys = [k for k, lanes in self.by_warp.items() if lanes]
            low = min(clock.get(k, 0) for k in keys)
            tied = sorted(k for k in keys if clock.get(k, 0) == low)
            k = tied[rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
            lanes = self.by_warp[k]
            self.by_warp[k] = []
            rng.shuffle(lanes)
            self.step = lanes
            cost = 1
            if rng.random() < sch.stall_p:
                cost += rng.randint(1, sch.stall_max)
                sch.stalls += 1
            clock[k] = low + cost
            sch.steps += 1
        self.n -= 1
        return self.step.pop()


@contextmanager
def seeded(seed: int | None, run: int = 0, **kw):
    """Launches inside run the seeded interleaving (seed, run) (``Schedule``); seed None: the linear
    order. Yields the Schedule (or None), whose counters say how it ran."""
    previous = _state.schedule
    _state.schedule = None if seed is None else Schedule(seed, run, **kw)
    try:
        yield _state.schedule
    finally:
        _state.schedule = previous


def _maybe_switch():
    """Before a memory access in a seeded launch: the end of this lane's step."""
    launch = _state.launch
    if launch is None or launch.no_switch or launch.schedule is None:
        return
    t = launch.current
    if t is None:
        return
    t.state = PREEMPTED
    launch.sched.switch()
    if t.abort:
        raise RuntimeError("abort flag set on a switch before a memory access")


SWITCH_CODES: set = set()  # code of the seeded schedule's global-array wrappers (not a kernel's line)


class _SimArray:
    """A shared or local array of a launch that is watched: in a seeded launch every element access
    may switch threads first (``switching``); a listener's tagged array tells it of each access."""

    __slots__ = ("_ary", "_switching", "_tag", "__weakref__")

    def __init__(self, ary, switching: bool, tag):
        self._ary = ary
        self._switching = switching
        self._tag = tag

    def __getitem__(self, idx):
        if self._switching:
            _maybe_switch()
        val = self._ary[idx]
        if self._tag is not None and _state.heard is not None:
            _state.heard.access(self._tag, idx, LOAD, sys._getframe(1))
        return val

    def __setitem__(self, idx, val):
        if self._switching:
            _maybe_switch()
        self._ary[idx] = val
        if self._tag is not None and _state.heard is not None:
            _state.heard.access(self._tag, idx, STORE, sys._getframe(1))

    def __len__(self):
        return len(self._ary)

    def __getattr__(self, name):  # shape, size, dtype, ndim ...
        return getattr(self._ary, name)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)


def _watched(ary, frame, space: str, dynamic: bool = False):
    """A shared or local array as the kernel gets it: wrapped when a seeded schedule switches at its
    accesses (shared only) or a listener tags it, else the plain array."""
    launch = _state.launch
    switching = space == "shared" and launch is not None and launch.schedule is not None
    heard = _state.heard
    tag = heard.array(ary, frame, space, dynamic) if heard is not None else None
    return _SimArray(ary, switching, tag) if switching or tag is not None else ary


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
PREEMPTED = "preempted"  # switched out before a memory access by a seeded schedule
WARP, GRID = "warp", "grid"  # waiting at a warp intrinsic's rendezvous; at a grid sync
BLOCKED = (BARRIER, WARP, GRID)

_VOTES = ("ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync", "match_all_sync")


class _Block:
    """One block of a launch: its threads, its barrier, its votes, its warps and (in a cooperative
    launch, where blocks are co-resident) its own shared memory."""

    def __init__(self, launch, manager, block_idx, shared=None):
        self.idx = block_idx
        self.manager = manager
        self.threads = [SimThread(launch, self, block_idx, p, i) for i, p in enumerate(launch.points)]
        n = len(self.threads)
        self.live = n
        self.waiting: list[SimThread] = []  # at syncthreads
        self.votes = np.zeros(n, np.bool_)
        self.alive = np.ones(n, np.bool_)  # not exited: only these vote
        self.warps = [self.threads[w : w + 32] for w in range(0, n, 32)]
        # per warp: the rendezvous in progress {(intrinsic, mask): [lanes there]}, the lanes waiting at
        # activemask(), the bits of its lanes still running (missing lanes of a partial warp are 0)
        self.wgroups: list[dict] = [{} for _ in self.warps]
        self.wactive: list[list] = [[] for _ in self.warps]
        self.wlive = [(1 << len(lanes)) - 1 for lanes in self.warps]
        self.shared = shared  # [allocations, dynamic buffer, poisoned] of a co-resident block


class SimThread:
    """One CUDA thread of one block. Duck-types the stock ``BlockThread`` for kernel code."""

    daemon = True

    def __init__(self, launch, block, block_idx, thread_idx, thread_id):
        self._launch = launch
        self.block = block
        self.blockIdx = block_idx
        self.threadIdx = thread_idx
        self.thread_id = thread_id
        self.state = RUNNING
        self.exception = None
        self.abort = False
        self.debug = launch.debug
        self.glet = None
        self.wop = None  # (intrinsic, mask, value, argument) while at a warp intrinsic
        self.wresult = None
        self.steps: set = set()  # its last few atomic/fence/warp steps, while no progress is made
        self.step_count = 0  # its steps while they are compared (one in STEP_SAMPLE is)
        self.spinning = False  # its last such step repeated one of them
        self.spin_where = None  # (file, line) of that step

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
            if not self._launch.dead:
                e = NotSimulatedError(
                    "sys.exit() in a kernel is not supported: numba cannot compile it for a GPU "
                    "(end the thread with return)"
                )
                self.exception = (_with_where(e, self), None)
        except _WatchdogInterrupt:
            self._launch.stopping = True
        except BaseException as e:
            if self._launch.dead:  # greenlet torn down after the launch was aborted
                return
            self.exception = (_with_where(e, self), e.__traceback__)
        self.state = DONE

    def _wait(self, state, where):
        if self.abort:
            raise RuntimeError(f"abort flag set on {where} call")
        self.state = state
        self._launch.sched.switch()
        if self.abort:
            raise RuntimeError(f"abort flag set on {where} clear")

    def syncthreads(self):
        self._wait(BARRIER, "syncthreads")

    def yield_now(self):
        self.state = YIELDED
        self._launch.sched.switch()

    def grid_sync(self):
        launch = self._launch
        if launch.coop:
            self._wait(GRID, "grid sync")
        elif launch.nblocks == 1:
            self.syncthreads()
        else:  # a kernel that reached this_grid() in a way the launch's scan did not see
            raise NotSimulatedError(
                "grid sync in a launch the simulator did not run as cooperative (all blocks at once): call "
                "cuda.cg.this_grid() in the kernel or in a @cuda.jit device function it names"
            )

    def _vote(self, value):
        b = self.block
        b.votes[self.thread_id] = bool(value)
        self.syncthreads()
        live_votes = b.votes[b.alive]  # every live thread is at this vote; exited ones do not count
        self.syncthreads()
        return live_votes

    def syncthreads_count(self, value):
        return int(np.count_nonzero(self._vote(value)))

    def syncthreads_and(self, value):
        return 1 if self._vote(value).all() else 0

    def syncthreads_or(self, value):
        return 1 if self._vote(value).any() else 0

    def warp_op(self, kind, mask, value=None, arg=0):
        """A ``*_sync`` warp intrinsic: wait until every live lane the mask names has called the same
        one with the same mask (the scheduler computes the results)."""
        mask = int(mask) & 0xFFFFFFFF
        lane = self.thread_id & 31
        if not (mask >> lane) & 1:
            raise WarpError(
                f"cuda.{kind} called by lane {lane} with mask {mask:#010x}, which leaves out the calling lane "
                "(undefined on a GPU)"
            )
        self.wop = (kind, mask, value, arg)
        _note_step(self, lambda: ("warp", kind, mask, _plain(value), arg, _plain(self.wresult)))
        self._wait(WARP, f"cuda.{kind}")
        return self.wresult

    def activemask(self, site):
        self.wop = ("activemask", None, site, 0)
        self._wait(WARP, "cuda.activemask")
        return self.wresult


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


_PLAIN = (int, float, complex, bool, str, bytes, type(None), np.generic)
STEP_SAMPLE = 4  # one step in this many is compared (a key costs about as much as the step)
_ENGINE_CODE: dict = {}  # code object -> whether it is the simulator's or ours, not the kernel's


def _plain(v):
    """A hashable stand-in for a value in a step's key: the value itself, or an object's identity
    (arrays: a spin reads one, it does not replace it)."""
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    return ("object", id(v))


def _engine_code(code) -> bool:
    known = _ENGINE_CODE.get(code)
    if known is None:
        import numba.cuda.simulator as simpkg

        skip = (*_ENGINE_DIRS, os.path.dirname(os.path.abspath(simpkg.__file__)))
        known = _ENGINE_CODE[code] = os.path.abspath(code.co_filename).startswith(skip)
    return known


def _watching(launch) -> bool:
    """Whether steps are compared now: no thread finished and no barrier released for STALL_S / 4."""
    return launch.watching


def _note_step(t, step) -> None:
    """Mark thread t spinning when this atomic/fence/warp step repeats one of its last few: the same
    step (arguments, results) on the same kernel line with the same local values. Compared only
    while no progress is made (``_watching``); ``step()`` makes the step's key."""
    if not _watching(t._launch):
        t.spinning = False
        if t.steps:
            t.steps.clear()
        return
    t.step_count += 1
    if t.step_count % STEP_SAMPLE:  # the others keep the last verdict: a spin repeats every step
        return
    f = sys._getframe(1)
    while f is not None and _engine_code(f.f_code):
        f = f.f_back
    if f is None:
        t.spinning = False
        return
    key = (step(), f.f_code, f.f_lasti, tuple((k, _plain(v)) for k, v in f.f_locals.items()))
    try:
        seen = key in t.steps
    except TypeError:  # something unhashable inside: not compared
        t.spinning = False
        return
    if seen:
        t.spinning, t.spin_where = True, (f.f_code.co_filename, f.f_lineno)
        return
    if len(t.steps) >= 8:
        t.steps.clear()
    t.steps.add(key)
    t.spinning = False


def _shfl_source(kind: str, lane: int, b) -> int:
    """The lane a shuffle reads, as PTX's shfl.sync computes it with numba's clamp values (width 32):
    only b's low 5 bits count; a source past either end of the warp is the caller's own lane."""
    b = int(b) & 31
    if kind == "shfl_sync":
        return b
    if kind == "shfl_up_sync":
        return lane - b if lane >= b else lane
    if kind == "shfl_down_sync":
        return lane + b if lane + b <= 31 else lane
    return lane ^ b


def _lane_ranges(lanes: list[int]) -> str:
    """[8, 9, 10, 12] -> '8-10, 12'."""
    parts, i = [], 0
    while i < len(lanes):
        j = i
        while j + 1 < len(lanes) and lanes[j + 1] == lanes[j] + 1:
            j += 1
        parts.append(str(lanes[i]) if i == j else f"{lanes[i]}-{lanes[j]}")
        i = j + 1
    return ", ".join(parts)


def _match_key(v):
    """match_*_sync compares the value's bits (floats bitcast to integers)."""
    if isinstance(v, np.generic):
        return (v.dtype.itemsize, v.tobytes()) if v.dtype.kind in "fc" else int(v)
    if isinstance(v, float):
        return (8, np.float64(v).tobytes())
    return int(v)


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
        self.blocks: list[_Block] = []
        self.coop = False  # a cooperative launch: every block's threads co-resident
        self.nblocks = 1
        self.live = 0
        self.grid_waiting: list[SimThread] = []
        # x fastest, as hardware forms warps (np.ndindex would make z fastest)
        bx, by, bz = block_dim
        from numba.cuda.simulator.kernelapi import Dim3

        self.points = [Dim3(x, y, z) for z in range(bz) for y in range(by) for x in range(bx)]
        # progress counts; the watchdog times them in the launching thread's CPU seconds (every
        # simulated thread runs on it), so a loaded machine does not look like a stalled kernel
        self.progress = 0  # a thread finished, reached a barrier or passed one, or took a step (an
        # atomic, a fence, a warp intrinsic) that did not repeat an earlier one of its own
        self.hard = 0  # a thread finished, or a block or grid barrier released
        self.watching = False  # no hard progress for STALL_S / 4: steps are compared (_note_step)
        self.yields = 0  # switches at atomics and fences
        self.watchdog = _Watchdog(self)
        self.schedule = _state.schedule  # a seeded interleaving, or None: linear order
        self.no_switch = 0  # inside an atomic: a seeded schedule does not switch
        self.unpatch = None

    def patch_switching(self):
        """A seeded launch: global-array accesses may switch threads too (restored by close())."""
        from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray as W

        get, set_ = W.__getitem__, W.__setitem__

        def getitem(self, idx):
            _maybe_switch()
            return get(self, idx)

        def setitem(self, idx, val):
            _maybe_switch()
            set_(self, idx, val)

        SWITCH_CODES.update((getitem.__code__, setitem.__code__))  # recorders look past these frames
        W.__getitem__, W.__setitem__ = getitem, setitem

        def unpatch():
            W.__getitem__, W.__setitem__ = get, set_

        self.unpatch = unpatch

    def run_block(self, manager, grid_point):
        """One block, as stock runs them: alone, in the module's shared memory made fresh."""
        from numba.cuda.simulator.kernelapi import Dim3

        block_idx = Dim3(*grid_point)
        self.module._shared._new_block()
        for hook in BLOCK_START_HOOKS:
            hook(block_idx)
        self.run_blocks([_Block(self, manager, block_idx)])
        self.blocks_done += 1

    def run_cooperative(self, managers):
        """Every block of the grid at once, each with its own shared memory: grid sync is real."""
        from numba.cuda.simulator.kernelapi import Dim3

        size = self.module._shared._dynshared_size
        blocks = []
        for manager, grid_point in managers:
            block_idx = Dim3(*grid_point)
            blocks.append(_Block(self, manager, block_idx, [{}, np.zeros(size, dtype=np.byte), False]))
            for hook in BLOCK_START_HOOKS:
                hook(block_idx)
        self.run_blocks(blocks)
        self.blocks_done += len(blocks)

    def _enter_block(self, b, prev):
        module = self.module
        module.blockIdx = b.idx
        self.block_idx = b.idx
        if b.shared is not None:
            sh = module._shared
            if prev is not None and prev.shared is not None:
                prev.shared[2] = sh._dyn_poisoned
            sh._allocations, sh._dynshared, sh._dyn_poisoned = b.shared

    def _release(self, group, hard: bool = True):
        """Let a barrier's (hard) or a warp rendezvous's threads go on; progress unless they spin."""
        for t in group:
            t.state = RUNNING
        if hard or not all(t.spinning for t in group):
            self.progress += 1
            if hard:
                self.hard += 1
        self.ready.extend(group)
        group.clear()

    def _fail(self, t, exc):
        """Abort the launch with exc, reported as thread t's."""
        for b in self.blocks:
            for other in b.threads:
                other.abort = True
        self.dead = True
        raise _with_where(exc, t)

    def run_blocks(self, blocks):
        from greenlet import getcurrent, greenlet

        module = self.module
        self.blocks = blocks
        threads = self.threads = [t for b in blocks for t in b.threads]
        sched = self.sched = getcurrent()
        idle = self.idle
        sch = self.schedule
        ready = self.ready = deque(threads) if sch is None else _WarpReady(sch, threads)
        self.live = len(threads)
        grid_waiting = self.grid_waiting = []
        cur_block = None
        self.progress += 1
        self.hard += 1
        try:
            while ready:
                t = ready.popleft() if sch is None else ready.pop_next()
                b = t.block
                if b is not cur_block:
                    self._enter_block(b, cur_block)
                    cur_block = b
                self.current = t
                module.threadIdx = t.threadIdx
                module.laneid = t.thread_id & 31
                if _state.heard is not None:
                    _state.heard.switched(t)
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
                    if not t.spinning:
                        self.progress += 1
                    continue
                if state is PREEMPTED:
                    ready.append(t)
                    continue
                if state is not DONE and not (state is WARP and t.spinning):  # reached a barrier: progress
                    self.progress += 1
                if state is BARRIER:
                    b.waiting.append(t)
                    if len(b.waiting) == b.live:  # every live thread of the block is at the barrier
                        self._release(b.waiting)
                elif state is WARP:
                    self._warp_arrive(b, t)
                elif state is GRID:
                    grid_waiting.append(t)
                    if len(grid_waiting) == self.live:  # every live thread of the grid
                        self._release(grid_waiting)
                else:
                    idle.append(t.glet)
                    t.glet = None
                    if t.exception is not None:
                        for other in threads:
                            other.abort = True
                        self.dead = True
                        raise t.exception[0].with_traceback(t.exception[1])
                    b.live -= 1
                    self.live -= 1
                    b.alive[t.thread_id] = False
                    self.progress += 1
                    self.hard += 1
                    if b.waiting and len(b.waiting) == b.live:  # the last thread not at the barrier exited
                        self._release(b.waiting)
                    if grid_waiting and len(grid_waiting) == self.live:
                        self._release(grid_waiting)
                    w = t.thread_id >> 5
                    b.wlive[w] &= ~(1 << (t.thread_id & 31))
                    groups = b.wgroups[w]
                    for key in list(groups):  # a rendezvous may now be complete without this lane
                        g = groups.get(key)
                        if g is not None and len(g) == (key[1] & b.wlive[w]).bit_count():
                            self._warp_resolve(b, w, key, g)
                if b.wactive[t.thread_id >> 5]:
                    self._activemask_check(b, t.thread_id >> 5)
            if self.live:  # threads left, none of which can go on
                raise KernelHangError(self.describe("deadlock: no thread can go on"))
        except _WatchdogInterrupt:
            self.dead = True
            raise KernelHangError(self.report or "the simulated launch was stopped by the watchdog") from None
        finally:
            self.current = None

    # --- warp intrinsics -----------------------------------------------------------------------
    def _warp_arrive(self, b, t):
        w = t.thread_id >> 5
        kind, mask = t.wop[0], t.wop[1]
        if kind == "activemask":
            b.wactive[w].append(t)
            return  # resolved by the check after every state change of the warp's lanes
        key = (kind, mask)
        g = b.wgroups[w].setdefault(key, [])
        g.append(t)
        if len(g) == (mask & b.wlive[w]).bit_count():  # every live lane the mask names is here
            self._warp_resolve(b, w, key, g)

    def _activemask_check(self, b, w):
        """activemask(): the lanes that reach one call together, once no lane of the warp can run on
        (every other lane has exited or waits somewhere)."""
        for y in b.warps[w]:
            if y.state is not DONE and y.state not in BLOCKED:
                return
        waiting = b.wactive[w]
        sites: dict = {}
        for x in waiting:
            sites.setdefault(x.wop[2], []).append(x)
        waiting.clear()
        for members in sites.values():
            bits = 0
            for x in members:
                bits |= 1 << (x.thread_id & 31)
            for x in members:
                x.wresult = np.uint32(bits)
            self._warp_done(members)

    def _warp_done(self, members):
        for x in members:
            x.wop = None
        self._release(list(members), hard=False)

    def _warp_resolve(self, b, w, key, group):
        kind, mask = key
        del b.wgroups[w][key]
        parts = sorted(group, key=lambda x: x.thread_id)
        base = w * 32
        exited = [lane for lane in range(32) if (mask >> lane) & 1 and not (b.wlive[w] >> lane) & 1]
        if exited and kind in _VOTES:
            missing = [lane for lane in exited if base + lane >= len(b.threads)]
            gone = _lane_ranges([lane for lane in exited if base + lane < len(b.threads)])
            if missing:
                gone = ", ".join(
                    filter(None, (gone, f"{_lane_ranges(missing)} (no such thread: the block ends)"))
                )
            self._fail(
                parts[0],
                WarpError(
                    f"cuda.{kind} with mask {mask:#010x} names lanes that have exited: {gone} "
                    "(undefined on a GPU; pass cuda.activemask() or a mask of the live lanes)"
                ),
            )
        by_lane = {x.thread_id & 31: x for x in parts}
        if kind.startswith("shfl"):
            for x in parts:
                lane = x.thread_id & 31
                src = _shfl_source(kind, lane, x.wop[3])
                y = by_lane.get(src)
                if y is None:
                    if not (mask >> src) & 1:
                        why = "is not in the mask"
                    elif base + src >= len(b.threads):
                        why = "does not exist (the block ends before it)"
                    else:
                        why = "has exited"
                    self._fail(
                        x,
                        WarpError(
                            f"cuda.{kind} with mask {mask:#010x}: lane {lane} reads lane {src}, which {why} "
                            "(its value is undefined on a GPU)"
                        ),
                    )
                x.wresult = y.wop[2]
        elif kind == "syncwarp":
            for x in parts:
                x.wresult = None
        elif kind in ("ballot_sync", "all_sync", "any_sync", "eq_sync"):
            bits = 0
            for x in parts:
                if x.wop[2]:
                    bits |= 1 << (x.thread_id & 31)
            if kind == "ballot_sync":
                res = np.uint32(bits).view(np.int32)  # numba types it int32
            elif kind == "all_sync":
                res = bits == mask
            elif kind == "any_sync":
                res = bits != 0
            else:
                res = bits in (0, mask)
            for x in parts:
                x.wresult = res
        else:  # match_any_sync, match_all_sync: values compared bit for bit, as the hardware does
            keys = {x: _match_key(x.wop[2]) for x in parts}
            if kind == "match_any_sync":
                for x in parts:
                    bits = 0
                    for y in parts:
                        if keys[y] == keys[x]:
                            bits |= 1 << (y.thread_id & 31)
                    x.wresult = np.uint32(bits).view(np.int32)
            else:
                same = len(set(keys.values())) == 1
                res = (np.uint32(mask if same else 0).view(np.int32), same)
                for x in parts:
                    x.wresult = res
        self._warp_done(parts)

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
        if self.unpatch is not None:
            self.unpatch()
            self.unpatch = None
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
        coop = len(self.blocks) > 1
        for t in self.threads:
            if t.state == DONE:
                continue
            if t.spinning and t.spin_where is not None and t.state not in (BARRIER, GRID):
                key = (1, f"spinning at {os.path.basename(t.spin_where[0])}:{t.spin_where[1]}")
            elif t is self.current:
                key = (1, f"running at {_user_line(running_frame)}")
            elif t.glet is None:
                key = (2, "not started yet")
            elif t.state == BARRIER:
                key = (0, f"at a barrier at {_user_line(t.glet.gr_frame)}")
            elif t.state == GRID:
                key = (0, f"at a grid sync at {_user_line(t.glet.gr_frame)}")
            elif t.state == WARP and t.wop is not None:
                what = "activemask()" if t.wop[0] == "activemask" else f"{t.wop[0]}(mask {t.wop[1]:#010x})"
                key = (0, f"at {what} at {_user_line(t.glet.gr_frame)}")
            else:
                key = (1, f"running at {_user_line(t.glet.gr_frame)}")
            if coop:
                key = (key[0], f"{key[1]} in block {list(t.blockIdx)}")
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
        if coop:
            where = f"in a cooperative launch of {len(self.blocks)} blocks"
        else:
            where = f"in block {list(self.block_idx) if self.block_idx is not None else '?'}"
        detail = "; ".join(parts) if parts else "no live threads"
        hint = ""
        if self.nblocks > 1 and not self.coop and any(t.spinning for t in self.threads if t.state != DONE):
            hint = (
                " (blocks run one after another here, as CUDA allows: a wait for another block's write needs "
                "a cooperative launch)"
            )
        return f"{why} {where}: {detail}; {done} of its threads had finished; launch stopped{hint}"


def _thread_span(ts: list[SimThread]) -> str:
    first, last = ts[0].threadIdx, ts[-1].threadIdx
    if len(ts) == 1:
        return f"thread ({first.x},{first.y},{first.z})"
    return f"{len(ts)} threads ({first.x},{first.y},{first.z})..({last.x},{last.y},{last.z})"


_ENGINE_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),)  # the whole engine/


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
        # (progress count, CPU and wall time it was first seen at); (hard count, CPU time)
        self._progress_seen = (launch.progress, self._cpu0, time.monotonic())
        self._hard_seen = (launch.hard, self._cpu0)
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
                    # CPU seconds of the launching thread since progress; and a wall-clock backstop for a
                    # thread blocked in a call that uses no CPU (6 x the limit: a loaded machine is slow,
                    # but a thread that gets the CPU at all does not go that long without a step)
                    now = time.monotonic()
                    cpu = time.clock_gettime(self._clock) if self._clock is not None else now
                    if launch.progress != self._progress_seen[0]:
                        self._progress_seen = (launch.progress, cpu, now)
                    if launch.hard != self._hard_seen[0]:
                        self._hard_seen = (launch.hard, cpu)
                    launch.watching = cpu - self._hard_seen[1] > self.stall_s / 4
                    idle = cpu - self._progress_seen[1]
                    wall_idle = now - self._progress_seen[2]
                    span = f"{idle:.0f} s of CPU time"
                    if wall_idle > 6 * self.stall_s:
                        idle, span = wall_idle, f"{wall_idle:.0f} s (wall clock)"
                    limit = f"FASTSIM_STALL_S={self.stall_s:g}"
                    if idle > self.stall_s and any(t.state in BLOCKED for t in launch.threads):
                        why = (
                            f"deadlock: no thread finished or passed a barrier for {span} ({limit}) while "
                            "threads wait at a barrier"
                        )
                    elif idle > self.stall_s and any(t.spinning and t.state != DONE for t in launch.threads):
                        why = (
                            f"threads spin: for {span} no thread finished or passed a barrier, and each "
                            f"atomic, fence or warp step repeated an earlier one of its thread ({limit})"
                        )
                    elif idle > self.stall_s:
                        # one thread has run all along: no barrier, atomic, fence or end reached (threads
                        # taking turns at atomics that do not repeat themselves are progress)
                        why = (
                            f"a thread ran {span} without reaching a barrier, an atomic or its end ({limit})"
                        )
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


# device functions of numba.cuda the simulated module does not have: named in one line, not an AttributeError
NOT_SIMULATED = frozenset(("ldca", "ldcg", "ldcs", "ldlu", "ldcv", "stcg", "stcs", "stwb", "stwt"))
_MAIN_CODE = SimThread.main.__code__


def _refuse_libdevice() -> None:
    """numba.cuda.libdevice's functions are empty stubs on the simulator (a kernel would store their
    None as NaN): make each one refuse in one line instead."""
    import math
    import types

    try:
        from numba.cuda import libdevice
    except ImportError:
        return
    for name, fn in list(vars(libdevice).items()):
        if not isinstance(fn, types.FunctionType) or fn.__module__ != libdevice.__name__:
            continue
        base = name[:-1] if name.endswith("f") and hasattr(math, name[:-1]) else name
        hint = (
            f"use math.{base} or run this kernel on a GPU"
            if hasattr(math, base)
            else "run this kernel on a GPU"
        )

        def refuse(*args, _name=name, _hint=hint, **kwargs):
            raise NotSimulatedError(f"libdevice.{_name} is not simulated: {_hint}")

        refuse.__name__ = name
        setattr(libdevice, name, refuse)


def uses_grid_sync(fn) -> bool:
    """Whether a kernel names ``this_grid`` (cuda.cg.this_grid()), itself or in a device function or
    same-module Python function it names: such a kernel is launched cooperatively (numba-cuda does the
    same when it compiles a grid group for a GPU)."""
    import types

    from numba.cuda.simulator.kernel import FakeCUDAKernel

    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        names: set[str] = set()
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            if "this_grid" in code.co_names:
                return True
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        glob = f.__globals__
        for name in names:
            v = glob.get(name)
            if isinstance(v, FakeCUDAKernel):
                todo.append(v.fn)
            elif isinstance(v, types.FunctionType) and v.__globals__ is glob:
                todo.append(v)
    return False


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
            view = Wrapper(FakeCUDAArray(ret, stream=item.stream))
            if _state.heard is not None:
                _state.heard.view(self, idx, view)
            return view
        if _state.heard is not None:
            _state.heard.global_access(self, idx, LOAD, _caller())
        return ret

    def setitem(self, idx, val):
        self._item._ary[idx] = val
        if _state.heard is not None:
            _state.heard.global_access(self, idx, STORE, _caller())

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


def _barrier_heard() -> None:
    if _state.heard is not None:
        _state.heard.barrier()


def _raw(array):
    """The array an atomic updates, unwrapped (a watched array's own; numba's wrapper's device array)."""
    if type(array) is _SimArray:
        return array._ary
    item = getattr(array, "__dict__", {}).get("_item")
    return array if item is None else item


def _atomic_target(heard, array):
    """(index, frame) -> the listener told of an atomic on ``array``; None where it does not listen."""
    if type(array) is _SimArray:
        tag = array._tag
        return None if tag is None else lambda idx, frame: heard.access(tag, idx, ATOMIC, frame)
    if getattr(array, "__dict__", {}).get("_item") is not None:
        return lambda idx, frame: heard.global_access(array, idx, ATOMIC, frame)
    return None


def _block_done() -> None:
    if _state.block_done is not None:
        _state.block_done()


def _yield(step=lambda: ("yield",)):
    """The running thread lets the others run (an atomic, a fence, a sleep); ``step()`` keys the step
    for the spin check (_note_step)."""
    launch = _state.launch
    if launch is not None and launch.current is not None:
        _note_step(launch.current, step)
        launch.current.yield_now()


def _install_arrays(kernelapi) -> None:
    """Shared arrays per block, poisoned, found by the calling line like stock's (patched into the
    stock class in place); local arrays as stock makes them; a listener hears of each (_watched)."""
    StockShared = kernelapi.FakeCUDAShared

    # Shared arrays per block, poisoned, found by the calling line like stock's (patched into the stock
    # class in place); a listener hears of each where it is made (_watched)
    def shared_new_block(self):
        self._allocations = {}
        self._dyn_poisoned = False

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        dynamic = type(shape) is not tuple and shape == 0
        f = sys._getframe(1)
        while f.f_code.co_filename in SHARED_CALLER_SKIP:
            f = f.f_back
        if not dynamic:  # this block's array for the calling line, if it made one already
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
            return _watched(view, f, "shared", dynamic=True)
        res = self._allocations[caller] = _watched(poison_fill(np.empty(shape, dtype)), f, "shared")
        return res

    StockShared._dyn_poisoned = False
    StockShared._new_block = shared_new_block
    StockShared.array = shared_array

    stock_local = kernelapi.FakeCUDALocal.array

    def local_array(self, shape, dtype, alignment=None):
        ary = stock_local(self, shape, dtype, alignment)
        return ary if _state.heard is None else _watched(ary, sys._getframe(1), "local")

    kernelapi.FakeCUDALocal.array = local_array


def _module_class(StockModule):
    """The in-kernel ``cuda`` module of this engine (a subclass of numba's)."""

    class Module(StockModule):
        """The in-kernel ``cuda`` module; thread and block indices are set at every switch
        instead of being looked up through threading.current_thread() at every use."""

        threadIdx = blockIdx = laneid = None  # plain instance attributes (shadow the properties)

        def syncthreads(self):
            _state.launch.current.syncthreads()
            _barrier_heard()

        def syncthreads_count(self, val):
            out = _state.launch.current.syncthreads_count(val)
            _barrier_heard()
            return out

        def syncthreads_and(self, val):
            out = _state.launch.current.syncthreads_and(val)
            _barrier_heard()
            return out

        def syncthreads_or(self, val):
            out = _state.launch.current.syncthreads_or(val)
            _barrier_heard()
            return out

        def threadfence(self):
            _yield()  # a fence in a spin loop lets the other threads run

        threadfence_block = threadfence_system = threadfence

        def nanosleep(self, ns):
            _yield()  # a sleeping thread lets the others run; simulated time does not exist

        def syncwarp(self, mask=0xFFFFFFFF):
            _state.launch.current.warp_op("syncwarp", mask)

        def activemask(self):
            # the call site (every frame of this thread's stack) tells which lanes reach it together
            f, site = sys._getframe(1), []
            while f is not None and f.f_code is not _MAIN_CODE:
                site.append((f.f_code, f.f_lasti))
                f = f.f_back
            return _state.launch.current.activemask(tuple(site))

        def lanemask_lt(self):
            return np.uint32((1 << (_state.launch.current.thread_id & 31)) - 1)

        def __getattr__(self, name):
            if name in NOT_SIMULATED:
                raise NotSimulatedError(f"cuda.{name} is not simulated: run this kernel on a GPU")
            raise AttributeError(f"the simulated cuda module has no attribute {name!r}")

    for kind, arity in WARP_INTRINSICS.items():
        setattr(Module, kind, _warp_intrinsic(kind, arity))
    return Module


# the warp intrinsics after their mask, as numba names them (no width argument; the masks are 32-bit):
# value and source lane, delta or lane mask (shuffles), a predicate (votes), a value (matches)
WARP_INTRINSICS = {
    "shfl_sync": 2, "shfl_up_sync": 2, "shfl_down_sync": 2, "shfl_xor_sync": 2, "ballot_sync": 1,
    "all_sync": 1, "any_sync": 1, "eq_sync": 1, "match_any_sync": 1, "match_all_sync": 1,
}  # fmt: skip


def _warp_intrinsic(kind: str, arity: int):
    """``cuda.<kind>(mask, ...)`` of the in-kernel module: the running thread's rendezvous."""

    def intrinsic(self, mask, *args):
        if len(args) != arity:
            raise TypeError(f"cuda.{kind}() takes a mask and {arity} more argument(s), not {len(args)}")
        return _state.launch.current.warp_op(kind, mask, *args)

    intrinsic.__name__ = intrinsic.__qualname__ = kind
    return intrinsic


def _install_grid_sync_and_atomics(kernelapi) -> None:
    # cuda.cg.this_grid().sync(): a grid-wide barrier (patched in the stock class, so a recorder that
    # wraps GridGroup.sync later wraps this one)
    stock_grid_sync = kernelapi.GridGroup.sync

    def grid_sync(self):
        launch = _state.launch
        if launch is not None and launch.current is not None:
            launch.current.grid_sync()
        else:
            stock_grid_sync(self)
        _barrier_heard()

    kernelapi.GridGroup.sync = grid_sync

    # atomics switch threads after the operation, so spin-locks built on them make progress
    Atomic = kernelapi.FakeCUDAAtomic
    for name in ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
                 "compare_and_swap", "cas"):  # fmt: skip
        op = getattr(Atomic, name)

        def atomic(self, *args, _op=op, _indexed=name != "compare_and_swap"):
            heard = _state.heard
            if heard is not None:  # the array the listener knows: the update is one atomic access
                target, args = _atomic_target(heard, args[0]), (_raw(args[0]), *args[1:])
            launch = _state.launch
            if launch is None or launch.schedule is None:
                old = _op(self, *args)
            else:  # a seeded schedule never switches inside the atomic's read-modify-write
                launch.no_switch += 1
                try:
                    old = _op(self, *args)
                finally:
                    launch.no_switch -= 1
            if heard is not None and target is not None:
                target(args[1] if _indexed else 0, sys._getframe(1))
            _yield(lambda: ("atomic", _op, _plain(args), _plain(old)))
            return old

        atomic.__name__ = name
        setattr(Atomic, name, atomic)


def _install_launches(simkernel) -> None:
    """Launches run here: a block manager that starts the launch on its first block, the cooperative
    launch's limit, a kernel call that swaps ``cuda`` in device functions once per launch."""

    def manager_run(self, grid_point, *args):
        launch = _state.launch
        if launch is None:  # first block of this launch
            launch = _Launch(self._f, self._block_dim, self._debug, args, simkernel._kernel_context)
            _state.launch = launch
            launch.nblocks = int(np.prod(self._grid_dim))
            launch.coop = uses_grid_sync(self._f)
            launch.enter_swap(self._f)
            if launch.schedule is not None:
                launch.patch_switching()
            if launch.coop:
                threads = launch.nblocks * len(launch.points)
                if threads > COOP_MAX_THREADS:
                    raise NotSimulatedError(
                        f"a cooperative launch (the kernel calls cuda.cg.this_grid()) of {launch.nblocks:,} blocks"
                        f" = {threads:,} threads cannot be co-resident on the simulator (limit {COOP_MAX_THREADS:,}"
                        " threads, FASTSIM_COOP_MAX_THREADS); a GPU also refuses a cooperative launch larger than "
                        "max_cooperative_grid_blocks (cudaErrorCooperativeLaunchTooLarge)"
                    )
                managers = [
                    (self if gp == tuple(grid_point) else simkernel.BlockManager(
                        self._f, self._grid_dim, self._block_dim, self._debug), gp)
                    for gp in np.ndindex(*self._grid_dim)
                ]  # fmt: skip
                launch.run_cooperative(managers)
                _block_done()
                return
        if launch.coop:
            _block_done()
            return  # every block ran, co-resident, in the launch's first call
        launch.run_block(self, grid_point)
        _block_done()

    def max_cooperative_grid_blocks(self, blockdim):
        n = int(np.prod(blockdim))
        return COOP_MAX_THREADS // n if n > 0 else 0

    simkernel.FakeOverload.max_cooperative_grid_blocks = max_cooperative_grid_blocks

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
        route = _router["route"]
        if route is not None:  # another engine may take the launch (it calls run_here where it does not)
            return route(self, args, run_here)
        return run_here(self, *args)

    def run_here(self, *args):
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

    simkernel.BlockManager.run = manager_run
    simkernel.FakeCUDAKernel.__call__ = kernel_call


_router: dict = {"route": None}


def route_launches(route) -> None:
    """Every kernel launch from the host (not a device function's call) goes to ``route(kernel, args,
    run_here)`` from now on: it runs the launch another way, or calls ``run_here(kernel, *args)`` to run it
    on this engine. The one way another engine (engine/compiled/) takes launches: this module stays the
    one that patches numba's simulator."""
    _router["route"] = route


def install(**limits) -> None:
    """Patch numba-cuda's simulator in this process to run launches on this engine."""
    configure(**limits)
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    if getattr(simkernel.BlockManager, "_fastsim", False):
        return
    import greenlet  # noqa: F401  (fail here, not in the middle of a launch)

    _install_arrays(kernelapi)
    Module = _module_class(kernelapi.FakeCUDAModule)
    _refuse_libdevice()
    _install_grid_sync_and_atomics(kernelapi)
    _fast_paths()
    _install_launches(simkernel)
    simkernel.FakeCUDAModule = Module
    simkernel.BlockManager._fastsim = True
