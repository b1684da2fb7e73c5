"""Load, instrument, compile and launch a user's kernel. Runs ONLY in a worker process.

``capture_source(backend, request)`` is the counterpart of ``capture/builtin.capture`` for a
request with ``op == "source"``: allocate -> copy in -> launch instrumented -> copy out -> time
(clean beside instrumented) -> check against the user's reference, and reply with the same
payload shape (launch info, timing, trace buffers) plus every array argument after the launch.

Errors in the user's code are normal here and become one line (``UserCodeError``): a syntax
error names its line; a Numba typing error is cut down to its first message and the user's line;
an exception in one simulated thread names the thread, the block and the user's line. CUDA
errors (an illegal address on a GPU) are re-raised unchanged so the worker's loop treats them as
fatal and the runner restarts the worker.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import linecache
import math
import os
import re
import sys
import time
import traceback
import types

import numpy as np

from visualizer.engine.instrument.ast_tools import remember_rewritten
from visualizer.engine.instrument.instrumenter import ACTIVE, TRACE, instrument, probe_globals, traced_name
from visualizer.engine.sim.fastsim import Listener
from visualizer.specs.launch import ceil_div
from visualizer.specs.source import ArgSpec, make_array

# The limits of a run (CPU time, memory, processes, files) are hard rlimits the sandbox sets before
# the request arrives (visualizer/engine/run/sandbox.py), on top of the runner's wall-clock limit.
PER_WARP_ABOVE = 1 << 16
_module_ids = itertools.count()


class UserCodeError(Exception):
    """The user's code failed; the message is one line that says where."""


# --- loading ------------------------------------------------------------------------------------


def _short(text: str, limit: int = 300) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))  # numba colours its messages
    return " ".join(text.split())[:limit]


def _user_frame(tb, filename: str):
    """The innermost traceback frame in the user's file: (line number, source line) or None."""
    hit = None
    for frame in traceback.extract_tb(tb):
        if frame.filename == filename:
            hit = (frame.lineno, (frame.line or linecache.getline(filename, frame.lineno)).strip())
    return hit


def _where(filename: str, hit) -> str:
    if hit is None:
        return ""
    line, text = hit
    return f" at {os.path.basename(filename)} line {line}" + (f": {text}" if text else "")


def load_module(source: str, filename: str, kernel: str, passes: tuple = ()):
    """Execute the user's module, instrumented, in a fresh module namespace with the probes in it.
    ``passes``: the lenses' passes (engine/instrument/instrumenter.py), their info is ``module._vz_info``, the
    parameters the instrumenter added ``module._vz_params``."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        text = (exc.text or "").strip()
        raise UserCodeError(
            f"syntax error at {os.path.basename(filename)} line {exc.lineno}: {exc.msg}"
            + (f": {text[:80]}" if text else "")
        ) from None
    try:
        instrumented = instrument(tree, kernel, passes=passes)
        code = compile(instrumented, filename, "exec")
    except KeyError:
        raise UserCodeError(
            f"no function {kernel!r} at the top level of {os.path.basename(filename)}"
        ) from None
    except ValueError as exc:  # a parameter named like one the instrumenter adds
        raise UserCodeError(f"{kernel}: {exc}") from None
    # tracebacks and Numba's messages read the user's lines from here (mtime None: never re-read)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    for old in [m for m in sys.modules if m.startswith("user_kernel_")]:
        del sys.modules[old]  # earlier runs' modules: their kernels are not launched again
    name = f"user_kernel_{next(_module_ids)}"
    module = types.ModuleType(name)
    module.__file__ = filename
    module.__dict__.update(probe_globals(passes))
    module.__dict__["_vz_info"] = instrumented.vz_info
    module.__dict__["_vz_params"] = instrumented.vz_params
    from visualizer.engine.capture.builds import traced_def

    # the traced kernel's own AST: the compiled simulator engine compiles it from this, not the file
    module.__dict__["_vz_tree"] = traced_def(instrumented, traced_name(kernel))
    sys.modules[name] = module  # numba and inspect look modules up by name
    try:
        exec(code, module.__dict__)
        remember_rewritten(module.__dict__, instrumented.vz_defs)
    except Exception as exc:
        hit = _user_frame(exc.__traceback__, filename)
        raise UserCodeError(
            f"running the module failed{_where(filename, hit)}: {type(exc).__name__}: {_short(exc)}"
        ) from None
    return module


def _is_kernel_object(obj) -> bool:
    return hasattr(obj, "py_func") or type(obj).__name__ == "FakeCUDAKernel"


def _is_device_function(obj) -> bool:
    if hasattr(obj, "targetoptions"):
        return bool(obj.targetoptions.get("device"))
    return bool(getattr(obj, "_device", False))


def kernel_pair(cuda, module, kernel: str):
    """(instrumented, clean) dispatchers: ours, and the user's own (jitted here if it was a plain def)."""
    clean = module.__dict__.get(kernel)
    traced = module.__dict__.get(traced_name(kernel))
    if clean is None or traced is None:
        raise UserCodeError(f"{kernel!r} was redefined or deleted by the module after its def")
    if _is_kernel_object(clean):
        if _is_device_function(clean):
            raise UserCodeError(f"{kernel} is a device function (device=True), not a kernel to launch")
    elif callable(clean):
        clean = cuda.jit(clean)
    else:
        raise UserCodeError(f"{kernel} is a {type(clean).__name__}, not a function")
    if not _is_kernel_object(traced):
        traced = cuda.jit(traced)
    return traced, clean


# --- errors while compiling or running ------------------------------------------------------------


def describe_failure(exc: BaseException, filename: str, simulator: bool) -> UserCodeError | None:
    """A one-line UserCodeError for an exception from the user's kernel; None for CUDA faults."""
    text = f"{type(exc).__name__} {exc}"
    if any(s in text for s in ("CudaAPIError", "CUDA_ERROR", "ILLEGAL_ADDRESS", "LAUNCH_FAILED")):
        return None  # the worker's loop handles these: fatal, restart
    base = os.path.basename(filename)
    if simulator:
        msg = str(exc)
        m = re.match(r"tid=\[([\d, ]+)\] ctaid=\[([\d, ]+)\]:?\s*(.*)", msg, re.S)
        hit = _user_frame(exc.__traceback__, filename)
        if m:
            tid = "(" + m.group(1).replace(" ", "") + ")"
            ctaid = "(" + m.group(2).replace(" ", "") + ")"
            return UserCodeError(
                f"{type(exc).__name__} in thread {tid} of block {ctaid}{_where(filename, hit)}: "
                f"{_short(m.group(3)) or 'no message'}"
            )
        return UserCodeError(f"{type(exc).__name__}{_where(filename, hit)}: {_short(msg)}")
    # Numba: the first paragraph (and the signature it announces), and the user's line from the
    # error's location or its 'File "...", line N:' pointer
    msg = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    msg = re.sub(r"(?m)^\s*Failed in .*pipeline.*$", "", msg)  # which compiler pass: not the user's concern
    paragraphs = [p for p in re.split(r"\n\s*\n", msg) if p.strip()] or [msg]
    first = re.split(r"\n\s*(During:|File \")", paragraphs[0])[0]
    if first.rstrip().endswith(":") and len(paragraphs) > 1:
        first += " " + paragraphs[1]
    lines = [int(n) for f, n in re.findall(r'File "([^"]+)", line (\d+)', msg) if os.path.basename(f) == base]
    loc = getattr(exc, "loc", None)
    if loc is not None and os.path.basename(str(getattr(loc, "filename", ""))) == base:
        lines.insert(0, int(loc.line))
    if not lines:  # numba-cuda 0.30 drops the location of some typing errors: its typer's frame holds it
        lines = _loc_in_frames(exc.__traceback__, base)
    missing = re.search(r"NameError: name '(\w+)' is not defined", msg)
    if not lines and missing:  # numba names no line for an unknown global: find where it is used
        source = linecache.getlines(filename)
        used = [i + 1 for i, text in enumerate(source) if re.search(rf"\b{missing.group(1)}\b", text)]
        lines = used[:1]
    where = ""
    if lines:
        where = f" at {base} line {lines[0]}: {linecache.getline(filename, lines[0]).strip()}"
    kind = "typing error" if "TypingError" in type(exc).__name__ else type(exc).__name__
    first = re.sub(r" at 0x[0-9a-f]+>", ">", first)  # an object's address: differs each run, says nothing
    return UserCodeError(f"{kind}{where}: {_short(first, 240)}")


def _loc_in_frames(tb, base: str) -> list[int]:
    """The line of the innermost numba frame whose ``loc`` (or ``inst.loc``) is in the user's file."""
    found: list[int] = []
    while tb is not None:
        frame_locals = tb.tb_frame.f_locals
        for name in ("loc", "inst"):
            value = frame_locals.get(name)
            loc = value if name == "loc" else getattr(value, "loc", None)
            filename, line = getattr(loc, "filename", None), getattr(loc, "line", None)
            if isinstance(filename, str) and isinstance(line, int) and os.path.basename(filename) == base:
                found = [line]
        tb = tb.tb_next
    return found


class SharedAllocations(Listener):
    """A simulator listener: the bytes of the static shared arrays the kernel makes, one per line that
    makes one (its static shared memory per block)."""

    def __init__(self):
        self.sites: dict = {}

    def array(self, ary, frame, space: str, dynamic: bool = False):
        if space == "shared" and not dynamic:
            self.sites.setdefault((frame.f_code.co_filename, frame.f_lineno), int(ary.nbytes))
        return None

    @property
    def bytes(self) -> int:
        return sum(self.sites.values())


# --- the reference check ------------------------------------------------------------------------


def _numbers(module) -> dict:
    return {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _numpy_import(name, globals=None, locals=None, fromlist=(), level=0):
    """numpy imports parts of itself while it runs (``m.sum(axis=1)``), through the caller's
    ``__import__``: a reference expression may import numpy, nothing else."""
    if level == 0 and (name == "numpy" or name.startswith("numpy.")):
        return builtins.__import__(name, globals, locals, fromlist, level)
    raise ImportError(f"a reference may use np and math, not import {name}")


# what a NAME = EXPR reference may call besides np and math (it runs in the sandboxed worker)
REFERENCE_BUILTINS = {
    "__import__": _numpy_import,
    **{n: getattr(builtins, n) for n in ("abs", "all", "any", "bool", "complex", "divmod", "enumerate", "float",
                                         "int", "len", "list", "max", "min", "pow", "range", "round", "sum",
                                         "tuple", "zip")},
}  # fmt: skip


def check_reference(kernel, module, before: dict, after: dict, filename: str) -> dict:
    """Compare the arrays after the launch with numpy: NAME=EXPR lines, or fn:NAME in the source
    (``kernel``: the request's SourceKernel)."""
    rtol, atol = kernel.rtol, kernel.atol
    result = {"correct": None, "outputs": {}, "rtol": rtol, "atol": atol, "expected_wrong": False}
    refs = kernel.reference
    if not refs:
        result["reference"] = None
        return result
    expected: dict[str, np.ndarray] = {}
    for ref in refs:
        copies = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in before.items()}
        if ref.startswith("fn:"):
            fname = ref[3:]
            fn = getattr(module, fname, None)
            if not callable(fn):
                raise UserCodeError(f"reference function {fname!r} is not defined in the source")
            try:
                out = fn(*[copies[p] for p in kernel.arg_order])
            except Exception as exc:
                hit = _user_frame(exc.__traceback__, filename)
                raise UserCodeError(
                    f"reference {fname} failed{_where(filename, hit)}: {type(exc).__name__}: {_short(exc)}"
                ) from None
            if isinstance(out, dict):
                expected.update({k: np.asarray(v) for k, v in out.items()})
            else:  # it wrote its results into the arrays, like the kernel: compare every array
                expected.update({k: v for k, v in copies.items() if isinstance(v, np.ndarray)})
            continue
        name, _, expr = ref.partition("=")
        # one namespace, as globals: a comprehension's body sees the arguments only through globals
        # (with them as eval's locals, ``[x[i] for i in range(n)]`` failed: name 'x' is not defined)
        scope = {**_numbers(module), **copies, "np": np, "numpy": np, "math": math,
                 "__builtins__": REFERENCE_BUILTINS}  # fmt: skip
        try:
            value = eval(expr, scope)  # noqa: S307 - worker only
        except Exception as exc:
            raise UserCodeError(
                f"reference {name}={expr} failed: {type(exc).__name__}: {_short(exc)}"
            ) from None
        expected[name] = np.asarray(value)
    result["reference"] = refs
    correct = True
    for name, want in expected.items():
        if name not in after:
            raise UserCodeError(f"the reference names {name!r}, which is not an array argument of the kernel")
        got = after[name]
        try:
            want = np.broadcast_to(want, got.shape)
        except ValueError:
            raise UserCodeError(
                f"reference {name}: shape {want.shape} does not match the argument's {got.shape}"
            ) from None
        close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        bad = int((~close).sum())
        diff = np.abs(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64) - want)
        result["outputs"][name] = {
            "mismatches": bad,
            "elements": int(close.size),
            "max_abs_error": float(np.max(diff)) if got.size else 0.0,
        }
        correct &= bad == 0
    result["correct"] = bool(correct)
    return result


# --- the capture ---------------------------------------------------------------------------------


def rng_states(n: int, seed: int) -> np.ndarray:
    """The n xoroshiro128p states ``numba.cuda.random.create_xoroshiro128p_states(n, seed)`` makes, on
    the host (the launch copies them in like any array). numba-cuda's own initialiser runs in object
    mode under the simulator (36 s for 4,096 states); this is the same algorithm compiled for the CPU."""
    from numba.cuda.random import xoroshiro128p_dtype

    states = np.empty(n, dtype=xoroshiro128p_dtype)
    states["s0"], states["s1"] = _xoroshiro_init(n, np.uint64(seed))
    return states


def _xoroshiro_init_py(n, seed):
    # numba.cuda.random: splitmix64 of the seed, then each state 2**64 steps after the one before
    s0 = np.empty(n, np.uint64)
    s1 = np.empty(n, np.uint64)
    z = seed + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    a, b = z, z
    jump = (np.uint64(0xBEAC0467EBA5FACB), np.uint64(0xD86B048B86AA9922))
    for i in range(n):
        if i > 0:
            t0 = np.uint64(0)
            t1 = np.uint64(0)
            for j in jump:
                for bit in range(64):
                    if j & (np.uint64(1) << np.uint64(bit)):
                        t0 ^= a
                        t1 ^= b
                    # xoroshiro128p_next
                    x = b ^ a
                    a = ((a << np.uint64(55)) | (a >> np.uint64(9))) ^ x ^ (x << np.uint64(14))
                    b = (x << np.uint64(36)) | (x >> np.uint64(28))
            a, b = t0, t1
        s0[i] = a
        s1[i] = b
    return s0, s1


def _xoroshiro_init(n, seed):
    global _xoroshiro_jit
    if _xoroshiro_jit is None:
        import numba

        _xoroshiro_jit = numba.njit(cache=False)(_xoroshiro_init_py)
    return _xoroshiro_jit(n, seed)


_xoroshiro_jit = None


def argument_values(src, rng) -> dict:
    """The kernel's arguments by name, made from their specs (``src``: the request's SourceKernel)."""
    values: dict = {}
    for name in src.arg_order:
        a = src.args[name]
        if a["kind"] == "scalar":
            values[name] = a["value"]
        elif a["kind"] == "rng":
            values[name] = rng_states(int(a["shape"][0]), int(a["value"]))
        else:
            spec = ArgSpec(name, a["text"], a["kind"], a["dtype"], tuple(a["shape"]), a["value"], a["array"])
            values[name] = make_array(spec, rng)
    return values


def prepare_source(backend, request):
    """A visitor's kernel as a Job (engine/capture/pipeline.py): its module loaded and instrumented
    (instrument.py), its arguments made from their specs, the trace buffers kept apart."""
    from visualizer.engine.capture.pipeline import Job
    from visualizer.engine.lenses import KernelView, Lenses
    from visualizer.kernels.probes import SIMULATOR  # noqa: F401 - imports the probes for this backend
    from visualizer.specs import catalog

    src = request.source
    limits = catalog.limits_from_info(backend.device_info())
    kernel, filename, params = request.kernel, src.filename, list(src.arg_order)
    grid, block = tuple(src.grid), tuple(src.block)
    launch = catalog.Launch(grid=grid, block=block, scalars={})
    catalog.check_launch(launch, limits, backend.name)  # checked again here, against this device

    values = argument_values(src, np.random.default_rng(request.seed))
    arrays = {k: v for k, v in values.items() if isinstance(v, np.ndarray)}
    threads, tpb = launch.threads, launch.threads_per_block
    records = launch.blocks * ceil_div(tpb, 32) if threads > PER_WARP_ABOVE else threads
    buffers = {"trace": np.zeros((3, records), np.int64), "active": np.zeros(threads, np.uint8)}

    lenses = Lenses(backend, request, grid, block)  # the lenses asked for (engine/lenses/)
    started = time.perf_counter_ns()
    try:  # its TILE = 16 (constant loops unrolled) and its device functions (recorded too)
        tree = ast.parse(src.text)
    except SyntaxError:
        tree = None  # load_module says what is wrong
    view = KernelView(params=params, tree=tree, host_arrays={p: arrays[p] for p in params if p in arrays})
    module = load_module(src.text, filename, kernel, lenses.passes(view))
    traced, clean = kernel_pair(backend.cuda, module, kernel)
    view.namespace = module.__dict__
    lenses.built(module.__dict__["_vz_info"], view)
    buffers.update(lenses.buffers())
    added = module.__dict__["_vz_params"][2:]  # after trace and active: the lenses' parameters
    user_args = [("array", p) if p in arrays else ("value", values[p]) for p in params]

    def call(fn, args):  # a failure in the visitor's code is one line naming their line
        try:
            return fn(*args)
        except UserCodeError:
            raise
        except Exception as exc:
            described = describe_failure(exc, filename, backend.simulator)
            if described is None:
                raise
            raise described from None

    shared = SharedAllocations()
    job = Job(
        traced=traced, clean=clean, grid=grid, block=block, arrays=arrays, buffers=buffers,
        traced_args=[*user_args, ("buffer", "trace"), ("buffer", "active"), *lenses.buffer_args(added)],
        clean_args=user_args, traced_names=[*params, TRACE, ACTIVE], lenses=lenses,
        # no flops model for a visitor's kernel (its bytes only decide the L2 flush): no GB/s is claimed
        nbytes=float(sum(v.nbytes for v in arrays.values())), compile_started_ns=started, call=call,
        sim_listeners=[shared] if backend.simulator else [],
        traced_tree=module.__dict__.get("_vz_tree"), traced_namespace=module.__dict__,
    )  # fmt: skip
    return module, values, job, shared


def capture_source(backend, request) -> dict:
    """Run a visitor's kernel through the capture sequence (engine/capture/pipeline.py): the reply has the
    shape of a built-in kernel's, plus the reference check made here, inside the sandbox."""
    from visualizer.engine.capture import pipeline

    module, values, job, shared = prepare_source(backend, request)
    src = request.source
    before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in values.items()}
    runs, seed = request.runs, request.schedule_seed
    ran = pipeline.run(backend, job, request.repeats, request.time_clean, None, runs, seed)
    kernel, filename, params = request.kernel, src.filename, list(src.arg_order)
    after = ran.after
    check = check_reference(src, module, before, after, filename)
    static_smem = shared.bytes if backend.simulator else ran.instrumented.get("static_smem_bytes", 0)
    if ran.sim_engine is not None and "shared_bytes" in ran.sim_engine:  # fastsim's listener heard nothing
        static_smem = ran.sim_engine["shared_bytes"]
    changed = [
        k
        for k in job.arrays
        if not np.array_equal(before[k], after[k], equal_nan=after[k].dtype.kind in "fc")
    ]
    launch_info = pipeline.summary(
        backend, job, ran,
        # "(yours)": never mistaken for a built-in kernel of the same name by a page or the timing panel
        kernel=f"{kernel} (yours)", params={p: src.args[p]["text"] for p in params},
        static_smem_bytes=int(static_smem or 0),
        visitor={"kernel_name": kernel, "user_kernel": True, "filename": os.path.basename(filename),
                 "arg_order": params, "written": changed, "kernel_source": src.text,
                 "reference": list(src.reference)},
        runs={"count": runs, "seed": seed, "schedules": ran.schedules} if ran.runs is not None else None,
    ).to_dict()  # fmt: skip
    reply = {
        "launch": launch_info,
        "timing": ran.timing,
        "buffers": ran.buffers,
        "outputs": {k: after[k] for k in changed},
        "inputs": {k: after[k] for k in job.arrays if k not in changed},
        "check": check,
    }
    if ran.runs is not None:  # every run's written arrays, and each run checked like run 0
        stacked = ran.runs
        written = [k for k in job.arrays if k in changed or any(not _same(before[k], r) for r in stacked[k])]
        reply["runs"] = {k: stacked[k] for k in written}
        reply["runs_correct"] = [
            check_reference(src, module, before, {k: stacked[k][i] for k in job.arrays}, filename)["correct"]
            for i in range(runs)
        ]
    job.lenses.reply(reply, launch_info)  # each lens's part (engine/lenses/)
    return reply


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
