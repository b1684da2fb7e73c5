"""Record every load, store and atomic a simulated kernel makes, with no change to its source.

The recorder is a listener of the simulator (engine/sim/fastsim.py ``Listener``, ``listening``: the one
place numba's simulator is patched), for one launch at a time; it patches nothing itself. It hears:

* kernel arguments' element accesses, named by the kernel's parameter names (probe buffers such as
  ``trace`` are registered as excluded); a view the kernel makes of one with integer indices
  (``qh = q[b, h]``) records its accesses as the array's own elements (``ArrayInfo.view``);
* ``cuda.shared.array`` / ``cuda.local.array``: tagged where they are made, named by the variable they
  are assigned to (parsed from the kernel source);
* ``cuda.atomic.*``: one ``atomic`` record instead of the load and store inside the simulator;
* ``syncthreads`` (and the _count/_and/_or forms, grid sync): a per-thread barrier epoch.

Each record is one row of int64 in preallocated chunks of a numpy buffer (chunks never move, so
threads write without a lock). Which thread wrote first is never stored: rows are ordered later by
(block, thread, the thread's own sequence number), so the tables never depend on the interleaving.
"""

from __future__ import annotations

import ast
import bisect
import dis
import inspect
import itertools
import textwrap
import threading

import numpy as np

from visualizer.analysis.memory import OPS, SPACES  # noqa: F401  (the codes the tables decode)
from visualizer.engine.sim.fastsim import ATOMIC, LOAD, STORE, Listener  # noqa: F401  (the op codes, re-exported)
from visualizer.specs.launch import ACCESS_RECORD_LIMIT

RECORD_LIMIT = ACCESS_RECORD_LIMIT  # accesses one launch may record (x 112 bytes: ~220 MB at most)
CHUNK_BITS = 16
CHUNK = 1 << CHUNK_BITS
COLUMNS = (
    "block", "thread", "tseq", "array", "op", "offset", "epoch",
    "line", "pc", "code", "occurrence", "i0", "i1", "i2",
)  # fmt: skip

PROBE_CALLS = frozenset({"trace_begin", "trace_end", "trace_tile", "trace_row_state"})
PROBE_BUFFERS = frozenset({"trace", "active", "tiles", "rows"})  # spec.args roles of probe buffers


class RecordLimitError(RuntimeError):
    """More accesses than RECORD_LIMIT; one message argument (the simulator re-creates it)."""


def thread_lookup():
    """The function that returns the simulated CUDA thread running now: fastsim's
    ``current_thread`` where it provides one (it may move to greenlets), else the OS thread that the
    stock simulator runs each CUDA thread on. Resolved once per recorded launch."""
    try:
        from visualizer.engine.sim import fastsim

        return fastsim.current_thread
    except (ImportError, AttributeError):
        return threading.current_thread


class ArrayInfo:
    __slots__ = ("id", "name", "space", "itemsize", "shape", "elem_strides", "ndim", "excluded", "dtype",
                 "offset0", "prefix")  # fmt: skip

    def __init__(self, aid, name, space, ary, excluded=False):
        self.id = aid
        self.name = name
        self.space = space
        self.itemsize = ary.dtype.itemsize
        self.dtype = str(ary.dtype)
        self.shape = tuple(int(s) for s in ary.shape)
        self.elem_strides = tuple(int(s) // max(self.itemsize, 1) for s in ary.strides)
        self.ndim = ary.ndim
        self.excluded = excluded
        self.offset0 = 0  # a view's first element, in elements of the array it is a view of
        self.prefix = ()  # ... and the indices that made it (``qh = q[b, h]``: (b, h))

    def view(self, idx: tuple) -> ArrayInfo | None:
        """The info of ``array[idx]`` for a partial index of integers (a view of the same array, its
        accesses recorded as the array's own elements), or None for anything else."""
        if not 0 < len(idx) < self.ndim:
            return None
        prefix = []
        for k, i in enumerate(idx):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                return None
            i = int(i)
            prefix.append(i + self.shape[k] if i < 0 else i)
        v = object.__new__(ArrayInfo)
        for name in ("id", "name", "space", "itemsize", "dtype", "excluded"):
            setattr(v, name, getattr(self, name))
        n = len(prefix)
        v.shape, v.elem_strides, v.ndim = self.shape[n:], self.elem_strides[n:], self.ndim - n
        v.offset0 = self.offset0 + sum(i * st for i, st in zip(prefix, self.elem_strides, strict=False))
        v.prefix = self.prefix + tuple(prefix)
        return v

    def meta(self) -> dict:
        return {
            "name": self.name,
            "space": self.space,
            "itemsize": self.itemsize,
            "dtype": self.dtype,
            "shape": list(self.shape),
        }


class CodeInfo:
    """Per kernel/device-function code object: lines that call probes, shared/local array names."""

    __slots__ = ("id", "probe_lines", "names", "file", "func", "starts", "pcs")

    def __init__(self, cid, code):
        self.id = cid
        self.file = code.co_filename
        self.func = code.co_name
        self.probe_lines: set[int] = set()
        self.names: dict[int, str] = {}
        self.starts = [ins.offset for ins in dis.get_instructions(code)]
        self.pcs: dict[int, int] = {}
        try:
            lines, start = inspect.getsourcelines(code)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            return
        off = start - 1
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in PROBE_CALLS:
                    self.probe_lines.update(
                        range(node.lineno + off, (node.end_lineno or node.lineno) + off + 1)
                    )
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                self.names[node.lineno + off] = node.targets[0].id

    def instruction(self, lasti: int) -> int:
        """The offset of the instruction ``f_lasti`` is in. Python 3.11+ may report an offset inside
        a specialised instruction's inline caches, and which one depends on when the interpreter
        specialised it (i.e. on timing); the instruction's own offset does not."""
        pc = self.pcs.get(lasti)
        if pc is None:
            pc = self.starts[max(bisect.bisect_right(self.starts, lasti) - 1, 0)] if self.starts else lasti
            self.pcs[lasti] = pc
        return pc


class ThreadState:
    __slots__ = ("launch", "block_key", "block", "thread", "seq", "epoch", "lines")


class Recorder(Listener):
    """One launch's records: numpy chunks plus the arrays and code objects they refer to. A listener
    of the simulator (engine/sim/fastsim.py ``listening``): it records between ``start()`` and ``stop()``."""

    @classmethod
    def for_launch(
        cls, named_args: dict, excluded: set[str], grid, block, limit: int = RECORD_LIMIT
    ) -> Recorder:
        """A recorder of the next launch. ``named_args``: kernel parameter name -> device array."""
        rec = cls(limit)
        rec.grid = tuple(grid)
        rec.block_dim = tuple(block)
        for name, dev in named_args.items():
            ary = dev._ary if hasattr(dev, "_ary") else np.asarray(dev)
            rec.register(dev, ary, name, "global", excluded=name in excluded)
        return rec

    # --- the simulator's listener (engine/sim/fastsim.py Listener) ---------------------------------
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def _info_of(self, wrapper) -> ArrayInfo | None:
        view = wrapper.__dict__.get("_vz_view")  # (recorder, info) of a view made in the kernel
        if view is not None:
            return view[1] if view[0] is self else None
        return self.by_object.get(id(wrapper.__dict__["_item"]))

    def global_access(self, wrapper, idx, op: int, frame) -> None:
        info = self._info_of(wrapper)
        if info is not None and not info.excluded:
            self.record(info, idx, op, frame)

    def view(self, wrapper, idx, view) -> None:
        info = self._info_of(wrapper)
        if info is not None and not info.excluded:
            sub = info.view(idx if type(idx) is tuple else (idx,))
            if sub is not None:
                view.__dict__["_vz_view"] = (self, sub)

    def access(self, tag, idx, op: int, frame) -> None:
        self.record(tag, idx, op, frame)

    def array(self, ary, frame, space: str, dynamic: bool = False):
        """A shared or local array made at ``frame``'s line: its ArrayInfo (one per allocation; every
        thread's own local copy shares its site's), None for a simulator-only one."""
        code = self.code_info(frame.f_code)
        name = code.names.get(frame.f_lineno, f"{space}@{frame.f_lineno}")
        if space == "local":
            key = ("local", frame.f_code.co_filename, frame.f_lineno)
            with self._lock:
                info = self.shared_sites.get(key)
                if info is None:
                    info = self.shared_sites[key] = self.register(object(), ary, name, "local")
            return info
        if name in SIMULATOR_ONLY_SHARED:  # not recorded
            return None
        site = (frame.f_code.co_filename, frame.f_lineno)
        with self._lock:  # one record name per allocation (the simulator's own identity rule)
            known = self.shared_sites.get(site)
            if known is not None and known[0] is ary:
                return known[1]
            info = self.register(ary, ary, name, "shared")
            self.shared_sites[site] = (ary, info)
            return info

    def barrier(self) -> None:
        self.state().epoch += 1

    def __init__(self, limit: int = RECORD_LIMIT):
        self.limit = limit
        self.chunks: list[np.ndarray] = []
        self._next = itertools.count()
        self._lock = threading.RLock()  # shared_array holds it while naming (code_info)
        self.arrays: list[ArrayInfo] = []
        self.by_object: dict[int, ArrayInfo] = {}  # id(fake array or wrapper) -> info
        self._keep: list = []  # keep registered objects alive so their ids stay unique
        self.codes: dict[object, CodeInfo] = {}
        self.shared_sites: dict[tuple, tuple] = {}  # (file, line) -> (ndarray, wrapper)
        self.overflow = False
        self.generation = object()
        self.grid = (1, 1, 1)
        self.block_dim = (1, 1, 1)
        self.current_thread = thread_lookup()

    # --- registration ------------------------------------------------------------------------
    def register(self, obj, ary, name: str, space: str, excluded: bool = False) -> ArrayInfo:
        info = ArrayInfo(len(self.arrays), name, space, ary, excluded)
        self.arrays.append(info)
        self.by_object[id(obj)] = info
        self._keep.append(obj)
        return info

    def code_info(self, code) -> CodeInfo:
        info = self.codes.get(code)
        if info is None:
            with self._lock:
                info = self.codes.get(code)
                if info is None:
                    info = CodeInfo(len(self.codes), code)
                    self.codes[code] = info
        return info

    # --- per-thread state --------------------------------------------------------------------
    def state(self) -> ThreadState:
        t = self.current_thread()
        d = t.__dict__
        st = d.get("_memrec")
        bi = t.blockIdx
        if st is None or st.block_key is not bi or st.launch is not self.generation:
            st = ThreadState()
            st.launch = self.generation
            st.block_key = bi
            gx, gy, _ = self.grid
            bx, by, _ = self.block_dim
            st.block = bi.x + gx * (bi.y + gy * bi.z)
            ti = t.threadIdx
            st.thread = ti.x + bx * (ti.y + by * ti.z)
            st.seq = 0
            st.epoch = 0
            st.lines = {}
            d["_memrec"] = st
        return st

    # --- recording ---------------------------------------------------------------------------
    def record(self, info: ArrayInfo, idx, op: int, frame) -> None:
        if type(idx) is not tuple:
            idx = (idx,)
        if len(idx) != info.ndim:
            return  # a partial index (a row view) or slices: not an element access
        pre = info.prefix  # a view's indices come first: the record is of the array's own element
        dims = [pre[k] if k < len(pre) else 0 for k in range(3)]
        offset = info.offset0
        for k, i in enumerate(idx):
            if type(i) is not int:
                if not isinstance(i, (np.integer, bool, np.bool_)):
                    return
                i = int(i)
            if i < 0:
                i += info.shape[k]
            if k + len(pre) < 3:
                dims[k + len(pre)] = i
            offset += i * info.elem_strides[k]
        code = self.code_info(frame.f_code)
        line = frame.f_lineno
        if line in code.probe_lines:
            return  # an argument of a probe call: the clean build does not make this access
        pc = code.instruction(frame.f_lasti)
        st = self.state()
        key = (code.id << 24) | line
        ent = st.lines.get(key)
        if ent is None:
            ent = st.lines[key] = [pc, 0]
        elif pc <= ent[0]:  # back at (or before) an access already made on this line: a new execution
            ent[1] += 1
        ent[0] = pc
        seq = st.seq
        st.seq = seq + 1
        n = next(self._next)
        if n >= self.limit:
            self.overflow = True
            raise RecordLimitError(f"more than {self.limit} accesses to record (the recording limit)")
        c = n >> CHUNK_BITS
        if c >= len(self.chunks):
            with self._lock:
                while len(self.chunks) <= c:
                    self.chunks.append(np.empty((CHUNK, len(COLUMNS)), np.int64))
        self.chunks[c][n & (CHUNK - 1)] = (
            st.block, st.thread, seq, info.id, op, offset, st.epoch,
            line, pc, code.id, ent[1], dims[0], dims[1], dims[2],
        )  # fmt: skip

    def buffers(self) -> dict:
        """The records (one int64 row each, unsorted) and what their ids mean."""
        n = min(next(self._next), self.limit)
        rows = np.concatenate(self.chunks)[:n] if self.chunks else np.empty((0, len(COLUMNS)), np.int64)
        return {
            "records": rows.copy(),
            "columns": list(COLUMNS),
            "arrays": [a.meta() for a in self.arrays],
            "codes": [
                {"file": c.file, "func": c.func} for c in sorted(self.codes.values(), key=lambda c: c.id)
            ],
            "limit": self.limit,
            "grid": list(self.grid),
            "block": list(self.block_dim),
        }


# Shared arrays that exist only on the simulator: kernels/tensor_core.py's lane exchange stands in for
# warp registers and tensor cores (warp shuffles and mma.sync on the GPU), so its traffic is not
# memory the GPU build touches and is not recorded.
SIMULATOR_ONLY_SHARED = {"scratch"}


def start(named_args: dict, excluded: set[str], grid, block, limit: int = RECORD_LIMIT) -> Recorder:
    """Record the next launches until ``stop()`` (tests and benchmarks that launch by hand; a capture
    listens through engine/sim/fastsim.py ``listening``). ``named_args``: parameter name -> device array."""
    from visualizer.engine.sim import fastsim

    global _LISTENING
    rec = Recorder.for_launch(named_args, excluded, grid, block, limit)
    _LISTENING = fastsim.listening([rec])
    _LISTENING.__enter__()
    return rec


_LISTENING = None


def stop() -> None:
    global _LISTENING
    if _LISTENING is not None:
        _LISTENING.__exit__(None, None, None)
        _LISTENING = None
