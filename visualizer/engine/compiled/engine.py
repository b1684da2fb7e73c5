"""Compile a kernel for the CPU (translate.py, codegen.py, numba's ``@njit``) and launch it.

A kernel is compiled once per (generated source, argument types, schedule kind) in this process and
kept (a slider change that keeps the source and the types reuses it); compile time is reported apart
from run time. Anything the compiler can't take raises ``NotCompiled(reason)``, one line: the caller
runs fastsim instead. A launch's arrays are restored before that is raised where the kernel had
already started (a barrier found under a divergent condition at run time), so fastsim starts clean.

Blocks run one after another, in fastsim's order, unless the launch asks for ``parallel`` and the
result cannot depend on the blocks' order: no atomics on global memory, no global array both read and
written, no two argument arrays overlapping, no seeded schedule. The launch's report says which ran.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import itertools
import json
import os
import re
import sys
import threading
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba.core.errors import NumbaWarning

from visualizer.engine.compiled import runtime
from visualizer.engine.compiled.codegen import (
    Plan,
    block_source,
    flat_source,
    grid_source,
    plan_kernel,
    poison_globals,
    rematerialize,
    source_digest,
    unit_source,
    unrecorded_views,
)
from visualizer.engine.compiled.translate import (
    IDS,
    CudaRewriter,
    Names,
    NotCompiled,
    P,
    _refuse,
    array_decl,
    contains_barrier,
    kernel_python_function,
    local_names,
    refuse_spin_waits,
    walk_items,
)
from visualizer.engine.instrument.ast_tools import function_source_tree

# an index out of range raises, as on fastsim; x / 0.0 is inf, as on a GPU (not ZeroDivisionError)
JIT = {"cache": False, "boundscheck": True, "error_model": "numpy"}
# functions only compiled code calls: no wrapper for calls from Python (a second of compile each)
INNER = {
    **JIT,
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}  # an index out of range raises, as on fastsim

_lock = threading.RLock()
_kernels: dict = {}
# the kernel's regions check their own indexes (codegen.CheckedIndex): numba's boundscheck off there
REGION = {**INNER, "boundscheck": False}
# a kernel's own device functions (and a lens's) are called, not inlined in numba's IR: inlining them all
# made an access-pass build's compile explode (lbm_aos with --accesses: 22 -> over 60 CPU s)
DEVICE = {**INNER}
# kernels/probes.py's trace probes are inlined in numba's IR (before its reference-count pruning): called,
# each call kept the caller's NRT incref/decref of every array it holds (atomic, per thread per call) and
# kept the region out of its block function; the tiled matmul's two trace_tile calls per tile step made
# its instrumented 1M-thread launch 18x its clean one (docs/benchmarks.md). Their bodies are a few stores.
PROBE_DEVICE = {**INNER, "inline": "always"}
TRACE_PROBES = ("linear_ids", "record_slot", "trace_begin", "trace_end", "trace_tile", "trace_row_state")
_devices: dict = {}
_compiling: set = set()  # device functions being translated (recursion is refused)
_module_serial = itertools.count()  # generated modules not on disk: one name each


def namespace_of(py_fn) -> dict:
    ns = dict(py_fn.__globals__)
    for name, cell in zip(py_fn.__code__.co_freevars, py_fn.__closure__ or (), strict=True):
        ns[name] = cell.cell_contents
    return ns


WARP_HELPERS = ("warp_shfl", "warp_vote", "warp_check_all", "warp_active", "warp_uniform")


def _base_ns() -> dict:
    return {
        P + "np": np,
        P + "i32": np.int32,
        P + "prange": __import__("numba").prange,
        P + "rng_below": runtime.rng_below,
        P + "shuffled_lanes": runtime.shuffled_lanes,
        P + "Divergent": runtime.DivergentBarrier,
        P + "WarpRefused": runtime.WarpRefused,
        P + "u32": np.uint32,
        **{P + n: getattr(runtime, n) for n in WARP_HELPERS},
        P + "ix": runtime.check_index,
        P + "ixt2": runtime.check_index_tuple2,
        P + "ixt3": runtime.check_index_tuple3,
        P + "ixt4": runtime.check_index_tuple4,
    }


def _as_module(name: str, gns: dict) -> dict:
    """A generated module's globals as an importable module's: numba's disk cache rebuilds a function's
    environment by importing its module by name (a dict of globals alone reads as "<dynamic>")."""
    mod = sys.modules.get(name)
    if not isinstance(mod, types.ModuleType) or not name.startswith("visualizer_compiled_"):
        mod = types.ModuleType(name)
        sys.modules[name] = mod
    mod.__dict__.update(gns)
    return mod.__dict__


def _numba_reason(e: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    head = lines[0] if lines else type(e).__name__
    return f"numba's CPU target refused it: {head}"


def _stable(v) -> str | None:
    """What a global of generated code is, the same in every process (None: known only by identity)."""
    from numba.core import types as nbt

    if isinstance(v, types.ModuleType):
        return "module " + v.__name__
    if isinstance(v, float):
        return "float " + repr(v)
    if isinstance(v, nbt.Type):
        return "numba type " + str(v)
    if isinstance(v, type) and issubclass(v, np.generic):
        return "numpy type " + v.__name__
    if isinstance(v, np.generic):
        return f"numpy scalar {v.dtype.str} {v!r}"
    if isinstance(v, np.ndarray) and v.nbytes <= 1 << 20:  # a constant array: compiled in by value
        digest = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]
        return f"array {v.dtype.str} {v.shape} {digest}"
    for name, helper in vars(runtime).items():
        if helper is v:
            return "runtime " + name
    return None


def _object_key(ns: dict) -> tuple:
    """The non-constant globals a generated module reads (modules, arrays, helpers): by what they are
    where that is the same in every process (so the disk cache can use the key), else by identity."""
    return tuple(
        sorted((k, _stable(v) or f"id {id(v)}") for k, v in ns.items() if not k.startswith(P + "dev_"))
    )


# ----------------------------------------------------------------------------- the disk cache

CACHE_ENV = "VISUALIZER_COMPILED_CACHE"  # a directory, or "off"; default: the user's cache directory
_CACHE_MAX_ENTRIES = 400  # kernels kept on disk; the oldest go first


def cache_dir() -> Path | None:
    """The per-user directory compiled kernels are kept in across processes, or None (off). Never in a
    sandboxed worker (visitor code must not leave compiled code for other runs to load), never in a
    directory another user could write."""
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() in ("off", "0", "no", "none") or os.environ.get("VISUALIZER_SANDBOX_MODE"):
        return None
    if setting:
        base = Path(setting)
    else:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = Path(root) / "gpu-execution-visualizer" / "compiled"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = base.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return base


@functools.cache
def _engine_stamp() -> str:
    """The engine's own code and the versions it compiles with: a cached kernel of another version of
    any of them is not used."""
    import numba

    h = hashlib.sha256(f"{sys.version} numba {numba.__version__} numpy {np.__version__}".encode())
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _by_identity(objects: tuple) -> bool:
    """Whether a global in ``_object_key``'s key is known only by identity (so not across processes)."""
    return any(v.startswith("id ") for _, v in objects)


_PACKAGE = Path(__file__).resolve().parent.parent.parent  # visualizer/: the package, not the checkout


@functools.cache
def _file_stamp(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _substitute_stamp(fn) -> str | None:
    """What a substitute device function is (a lens's probe, the modelled smid/globaltimer: another
    module's njit function), the same in every process: the package file that defines it, by its bytes,
    and its name there. None for anything else (a function from outside the package)."""
    py = getattr(fn, "py_func", None)
    code = getattr(py, "__code__", None)
    if code is None:
        return None
    path = Path(code.co_filename).resolve()
    if not path.is_file() or _PACKAGE not in path.parents:
        return None
    try:
        return f"{path.name} {_file_stamp(str(path))} {py.__qualname__}"
    except OSError:
        return None


def _callee_stamps(ns: dict) -> tuple | None:
    """What the device functions in a generated namespace are, the same in every process: a device
    compiled here by its generated name (which carries its source's digest) and what it calls, a
    substitute by ``_substitute_stamp`` (numba's cache checks only the caller's file). None where one is
    known only by identity."""
    stamps: set = set()
    for name, fn in ns.items():
        if not name.startswith(P + "dev_"):
            continue
        dev = _devices.get(name)
        if dev is not None:
            if dev.stamps is None:
                return None
            stamps.update(dev.stamps)
        elif (stamp := _substitute_stamp(fn)) is None:
            return None
        else:
            stamps.add((name, stamp))
    return tuple(sorted(stamps))


def _disk_stem(key: tuple, ns: dict) -> str | None:
    """The file name of a kernel's cache entry, or None where a global is known only by identity."""
    flat, seeded, argtypes, objects = key
    stamps = None if _by_identity(objects) else _callee_stamps(ns)
    if stamps is None:
        return None
    digest = hashlib.sha256(
        repr((_engine_stamp(), flat, seeded, [str(t) for t in argtypes], objects, stamps)).encode()
    )
    return "k" + digest.hexdigest()[:32]


def _read_meta(path: Path) -> dict | None:
    """A cache entry's typing results (bounded, checked), or None."""
    try:
        if path.stat().st_size > 1 << 20:
            return None
        meta = json.loads(path.read_text())
        dtypes = {str(k): np.dtype(str(v)) for k, v in meta["dtypes"].items()}
        arrays = {str(k): int(v) for k, v in meta["array_ndims"].items()}
        return {"dtypes": dtypes, "array_ndims": arrays, "arrays": set(map(str, meta["arrays"]))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _prune(base: Path) -> None:
    entries = sorted(base.glob("k*.py"), key=lambda f: f.stat().st_mtime)
    for old in entries[: max(0, len(entries) - _CACHE_MAX_ENTRIES)]:
        for f in [old, old.with_suffix(".json"), *(base / "__pycache__").glob(old.stem + ".*")]:
            with contextlib.suppress(OSError):
                f.unlink()


# ----------------------------------------------------------------------------- device functions


@dataclass
class DeviceFn:
    name: str
    dispatcher: Any
    source: str
    # what the substitutes it calls are (``_callee_stamps``); None: a global it reads is known only by
    # identity, so a kernel calling it is not kept on disk
    stamps: tuple | None = ()


def _trace_probe_codes() -> frozenset:
    try:
        from visualizer.kernels import probes
    except ImportError:
        return frozenset()
    codes = set()
    for name in TRACE_PROBES:
        fn = getattr(probes, name, None)
        py = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
        if hasattr(py, "__code__"):
            codes.add(py.__code__)
    return frozenset(codes)


def inlined(py_fn) -> bool:
    """Whether the compiled engine inlines this device function in numba's IR: only kernels/probes.py's
    trace probes (known by their code objects, so a visitor's function of the same name is not)."""
    global _PROBE_CODES
    if _PROBE_CODES is None:
        _PROBE_CODES = _trace_probe_codes()
    return getattr(py_fn, "__code__", None) in _PROBE_CODES


_PROBE_CODES: frozenset | None = None


def compile_device(py_fn) -> DeviceFn:
    """A device function (a plain function or ``@cuda.jit(device=True)``) as an njit function taking
    the calling thread's ids first."""
    code = py_fn.__code__
    if code in _compiling:
        raise NotCompiled(f"device function {py_fn.__name__!r} calls itself (recursion is not compiled)")
    try:
        tree = function_source_tree(py_fn)
    except (OSError, TypeError, SyntaxError):
        raise NotCompiled(f"the source of device function {py_fn.__name__!r} cannot be read") from None
    fd = tree.body[0]
    if not isinstance(fd, ast.FunctionDef):
        raise NotCompiled(f"device function {py_fn.__name__!r} is not a def")
    _check_source_matches(fd, py_fn)
    names = Names(namespace_of(py_fn))
    local = local_names(fd)
    if contains_barrier(fd, names, local):
        _refuse(fd, f"a barrier inside device function {fd.name!r}")
    refuse_spin_waits(fd, names, local)
    _compiling.add(code)
    try:
        ns: dict = {}

        class Decls(ast.NodeTransformer):
            def visit_Assign(self, node):
                d = array_decl(node, names, local)
                if d is None:
                    return node
                kind, name, shape, dtype = d
                if kind == "shared":
                    _refuse(node, f"shared memory declared in device function {fd.name!r}")
                return ast.copy_location(
                    ast.parse(f"{name} = {P}np.zeros({shape!r}, {P}np.{dtype.name})").body[0], node
                )

        rewriter = CudaRewriter(names, local, ns, True, compile_device)
        body = [rewriter.visit(Decls().visit(s)) for s in fd.body]
        args = fd.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            _refuse(fd, f"device function {fd.name!r} with *args, **kwargs or keyword-only parameters")
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=P + "ctx")] + args.args, vararg=None,
                             kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=args.defaults)  # fmt: skip
        body_src = "\n".join(ast.unparse(ast.fix_missing_locations(s)) for s in body)
        unpack = f"{', '.join(P + i for i in IDS)} = {P}ctx"
        objects = _object_key(ns)
        digest = source_digest(fd.name, ast.unparse(args), body_src, repr(objects))
        name = f"{P}dev_{fd.name}_{digest}"
        with _lock:
            hit = _devices.get(name)
            if hit is not None:
                return hit
            src = f"def {name}({ast.unparse(args)}):\n" + "\n".join(
                "    " + x for x in (unpack + "\n" + body_src).splitlines()
            )
            gns = _as_module(f"visualizer_compiled_{name}", {**_base_ns(), **ns})
            exec(compile(src + "\n", f"<compiled device {fd.name}>", "exec"), gns)  # noqa: S102 - generated here
            from numba import njit

            stamps = None if _by_identity(objects) else _callee_stamps(ns)
            dev = DeviceFn(name, njit(**(PROBE_DEVICE if inlined(py_fn) else DEVICE))(gns[name]), src, stamps)
            _devices[name] = dev
            return dev
    finally:
        _compiling.discard(code)


# ----------------------------------------------------------------------------- kernels


@dataclass
class CompiledKernel:
    name: str
    plan: Plan
    argtypes: tuple
    seeded: bool
    dtypes: dict
    ns: dict
    grid: Any
    compile_s: float
    serial_reason: str | None  # why blocks may not run in parallel (None: they may)
    source: str
    parallel_grid: Any = None
    launches: int = 0
    from_disk: bool = False  # loaded from the disk cache (compile_s is then the load time)
    fields: dict = field(default_factory=dict)


def _typemap(flat_fn, argtypes) -> dict:
    from numba.core import compiler, registry, typed_passes
    from numba.core import types as nbt

    target = registry.cpu_target
    target.typing_context.refresh()
    target.target_context.refresh()
    interp = compiler.run_frontend(flat_fn)
    args = (nbt.int64,) * len(IDS) + tuple(argtypes)
    res = typed_passes.type_inference_stage(target.typing_context, target.target_context, interp, args, None)
    return res.typemap


def _is_array(var: str, typemap: dict) -> bool:
    from numba.core import types as nbt

    return isinstance(typemap.get(var), nbt.Array)


def _dtype_of(var: str, typemap: dict) -> np.dtype:
    from numba.core import types as nbt
    from numba.np.numpy_support import as_dtype

    found = [t for k, t in typemap.items() if k == var or re.fullmatch(re.escape(var) + r"\.\d+", k)]
    if not found:
        return np.dtype(np.int64)  # never assigned on any path the typer saw
    t = nbt.unliteral(found[0])
    for other in found[1:]:
        from numba.core.registry import cpu_target

        u = cpu_target.typing_context.unify_pairs(t, nbt.unliteral(other))
        if u is None:
            raise NotCompiled(f"{var!r} holds values of different types ({t}, {other}) across a barrier")
        t = u
    if isinstance(t, (nbt.Boolean, nbt.Integer, nbt.Float, nbt.Complex)):
        return np.dtype(as_dtype(t))
    raise NotCompiled(f"{var!r} ({t}) lives across a barrier; only numbers are kept per thread")


def _array_use(plan: Plan) -> tuple[set, set]:
    """(parameters read, parameters written) through subscripts, atomics and device-function calls (a
    device function may read and write any array it is given)."""
    params = set(plan.params)
    read, written = set(), set(plan.atomic_targets) & params
    for unit, _ in walk_items(plan.items):
        stmts = unit.stmts if hasattr(unit, "stmts") else [ast.Expr(value=unit.expr)]
        for s in stmts:
            for node in ast.walk(s):
                if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                    (written if isinstance(node.ctx, ast.Store) else read).add(node.value.id)
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id.startswith(P + "dev_")
                ):
                    for a in node.args:
                        if isinstance(a, ast.Name) and a.id in params:
                            read.add(a.id)
                            written.add(a.id)
    return read & params, written & params


def _serial_reason(plan: Plan) -> str | None:
    global_atomics = plan.atomic_targets - set(plan.shared)
    if global_atomics:
        return f"atomics on global memory ({', '.join(sorted(global_atomics))})"
    read, written = _array_use(plan)
    both = read & written
    if both:
        return (
            f"global array read and written ({', '.join(sorted(both))}): another block's writes could be read"
        )
    return None


def _argtypes(args) -> tuple:
    import numba

    try:
        return tuple(numba.typeof(a) for a in args)
    except (ValueError, TypeError) as e:
        raise NotCompiled(f"an argument numba cannot type: {e}") from None


def kernel_tree(kernel=None, *, tree: ast.FunctionDef | None = None, namespace: dict | None = None):
    """(FunctionDef, namespace) of a kernel given as a function/dispatcher or as an AST + namespace."""
    if tree is not None:
        fd = copy_fd(tree)
        return fd, dict(namespace or {})
    py_fn = kernel_python_function(kernel)
    try:
        mod = function_source_tree(py_fn)
    except (OSError, TypeError, SyntaxError):
        raise NotCompiled(
            f"the source of kernel {getattr(py_fn, '__name__', '?')!r} cannot be read"
        ) from None
    fd = mod.body[0]
    if not isinstance(fd, ast.FunctionDef):
        raise NotCompiled("the kernel is not a def")
    _check_source_matches(fd, py_fn)
    fd.decorator_list = []
    return fd, namespace_of(py_fn)


def _view_probes(plan: Plan) -> dict:
    """The access pass's recording index functions this kernel calls (kernels/access_probes.py ``atN``),
    by their compiled names -> their number of indices (codegen.unrecorded_views)."""
    called = [k for k in plan.ns if re.fullmatch(re.escape(P) + r"dev_at[1-4]_\w+", k)]
    if not called:
        return {}
    from visualizer.kernels.access_probes import AT

    return {
        d.name: n for n, fn in AT.items() if (d := compile_device(kernel_python_function(fn))).name in called
    }


def _check_source_matches(fd: ast.FunctionDef, py_fn) -> None:
    """The source read from the file must be this function's: a function exec'd from a rewritten tree
    (an instrumented build keeps the kernel's file and lines) would otherwise be compiled as the file's
    original. Its name and parameters tell them apart; such a kernel is passed as tree + namespace."""
    code = py_fn.__code__
    params = [a.arg for a in fd.args.args]
    if fd.name != py_fn.__name__ or params != list(code.co_varnames[: code.co_argcount]):
        raise NotCompiled(
            f"the source in {code.co_filename} is not {py_fn.__name__}'s own (a rewritten copy)"
        )


def copy_fd(fd):
    import copy

    fd = copy.deepcopy(fd)
    fd.decorator_list = []
    return fd


def compile_kernel(kernel=None, argtypes: tuple = (), *, seeded: bool = False, tree=None, namespace=None):
    """The compiled form of a kernel for these argument types (cached in this process, and on disk
    across processes: module docstring)."""
    fd, ns = kernel_tree(kernel, tree=tree, namespace=namespace)
    names = Names(ns)
    plan = plan_kernel(fd, names, compile_device, soft=seeded)
    flat = flat_source(plan)
    gns = {**_base_ns(), **plan.ns, **poison_globals(plan)}
    key = (flat, seeded, tuple(argtypes), _object_key(plan.ns))
    with _lock:
        hit = _kernels.get(key)
        if hit is not None:
            return hit
        from numba import njit
        from numba.core import types as nbt

        t0 = time.process_time()
        base = cache_dir()
        stem = _disk_stem(key, plan.ns) if base else None
        meta = _read_meta(base / f"{stem}.json") if stem else None
        if meta is None:  # type the one-thread form (this compiles its device functions)
            try:
                exec(compile(flat, f"<compiled {plan.name}>", "exec"), gns)  # noqa: S102 - generated here
                typemap = _typemap(gns[P + "flat"], argtypes)
            except NotCompiled:
                raise
            except Exception as e:  # noqa: BLE001 - numba's typing errors are many classes
                raise NotCompiled(_numba_reason(e)) from None
            arrays = {k.split(".")[0] for k, t in typemap.items() if isinstance(t, nbt.Array)}
            for k, t in typemap.items():
                if isinstance(t, nbt.Array):
                    plan.array_ndims[k.split(".")[0]] = t.ndim
            unrecorded_views(plan, plan.array_ndims, _view_probes(plan))
            rematerialize(plan, lambda v: v in arrays)
            dtypes = {v: _dtype_of(v, typemap) for v in plan.expanded}
        else:  # typed by an earlier process: its results, not numba's typing again
            plan.array_ndims.update(meta["array_ndims"])
            unrecorded_views(plan, plan.array_ndims, _view_probes(plan))
            rematerialize(plan, lambda v: v in meta["arrays"])
            dtypes = meta["dtypes"]
            if set(dtypes) != set(plan.expanded):
                raise NotCompiled("the compiled-kernel cache entry does not fit this kernel")
        parts = [unit_source(plan, r, f"{P}region_{r.index}") for r in plan.regions]
        parts += [unit_source(plan, c, f"{P}cond_{c.index}") for c in plan.conds]
        parts.append(block_source(plan, dtypes, seeded))
        parts.append(grid_source(plan, parallel=False))
        source = "\n\n".join(parts)
        filename = f"<compiled {plan.name}>"
        if stem:  # numba's cache keys a function by its file: the generated module is one on disk
            path = base / f"{stem}.py"
            text = f"# {plan.name}: generated by visualizer/engine/compiled for the CPU\n\n{source}"
            try:
                if not path.is_file() or path.read_text(encoding="utf-8") != text:
                    _write_atomic(path, text)
                    _prune(base)
                if meta is None:
                    _write_atomic(base / f"{stem}.json", json.dumps({
                        "dtypes": {k: np.dtype(v).str for k, v in dtypes.items()},
                        "array_ndims": plan.array_ndims,
                        "arrays": sorted(plan.array_ndims),
                    }))  # fmt: skip
                source, filename = text, str(path)
            except OSError:
                stem = None
        gns = _as_module(f"visualizer_compiled_{stem or f'{plan.name}_{next(_module_serial)}'}", gns)
        try:
            exec(compile(source, filename, "exec"), gns)  # noqa: S102 - generated here
        except SyntaxError as e:
            raise NotCompiled(f"generated code did not parse: {e}") from None
        for r in plan.regions:
            gns[f"{P}region_{r.index}"] = njit(**REGION)(gns[f"{P}region_{r.index}"])
        for c in plan.conds:
            gns[f"{P}cond_{c.index}"] = njit(**REGION)(gns[f"{P}cond_{c.index}"])
        gns[P + "block"] = njit(**REGION)(gns[P + "block"])  # indexes only its own arrays, in range
        grid = njit(**{**JIT, "cache": bool(stem)})(gns[P + "grid"])
        sig = (nbt.int64,) * 6 + (nbt.Array(nbt.uint64, 1, "C"),) + tuple(argtypes)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=NumbaWarning)  # a cache it cannot write: compiled
                grid.compile(sig)
        except Exception as e:  # noqa: BLE001
            raise NotCompiled(_numba_reason(e)) from None
        cached = bool(stem) and bool(grid.stats.cache_hits)
        ck = CompiledKernel(plan.name, plan, tuple(argtypes), seeded, dtypes, gns, grid,
                            time.process_time() - t0, _serial_reason(plan), source)  # fmt: skip
        ck.from_disk = cached
        _kernels[key] = ck
        return ck


def _parallel_grid(ck: CompiledKernel):
    if ck.parallel_grid is None:
        from numba import njit

        gns = dict(ck.ns)
        exec(compile(grid_source(ck.plan, parallel=True), f"<compiled {ck.name}>", "exec"), gns)  # noqa: S102
        ck.parallel_grid = njit(parallel=True, **JIT)(gns[P + "grid"])
    return ck.parallel_grid


def _dims(d) -> tuple[int, int, int]:
    if isinstance(d, (int, np.integer)):
        d = (int(d),)
    d = tuple(int(x) for x in d) + (1,) * (3 - len(tuple(d)))
    if len(d) != 3 or min(d) < 1:
        raise ValueError(f"launch dimensions must be 1 to 3 positive integers, not {d}")
    return d


def unwrap(a):
    """A kernel argument as numba's CPU target takes it: a simulator device array is its numpy array."""
    inner = getattr(a, "_ary", None)
    return inner if isinstance(inner, np.ndarray) else a


def _overlapping(arrays: list) -> bool:
    for i, a in enumerate(arrays):
        for b in arrays[i + 1 :]:
            if np.may_share_memory(a, b):
                return True
    return False


@dataclass
class LaunchReport:
    engine: str
    blocks: str  # "serial" | "parallel"
    serial_reason: str | None
    compile_s: float  # CPU seconds spent compiling in this call (0 when the kernel was cached)
    run_s: float  # CPU seconds of the launch itself
    schedule: dict | None
    regions: int
    syncs: int  # the syncthreads calls (of every kind) the kernel is split at
    shared_bytes: int = 0  # the static shared arrays' bytes per block (plan.shared)
    # where the compiled kernel came from: "compiled" (in this call), "disk" (loaded from the disk cache:
    # compile_s is the load), "memory" (compiled earlier in this process: compile_s is 0)
    compiled_from: str = "compiled"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def launch(kernel=None, griddim=1, blockdim=1, args=(), *, schedule=None, parallel=False, tree=None,
           namespace=None) -> LaunchReport:  # fmt: skip
    """Run a kernel on the compiled engine; ``schedule`` (seed, run) picks a seeded interleaving.
    Raises NotCompiled (the arrays untouched) where the engine does not take the kernel."""
    g, b = _dims(griddim), _dims(blockdim)
    args = [unwrap(a) for a in args]
    argtypes = _argtypes(args)
    seeded = schedule is not None
    fresh = time.process_time()
    ck = compile_kernel(kernel, argtypes, seeded=seeded, tree=tree, namespace=namespace)
    compile_s = ck.compile_s if ck.launches == 0 else 0.0
    origin = "memory" if ck.launches else ("disk" if ck.from_disk else "compiled")
    if ck.launches == 0 and time.process_time() - fresh < ck.compile_s * 0.5:
        compile_s = time.process_time() - fresh  # another launch compiled it first
    ck.launches += 1
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    reason = ck.serial_reason
    if reason is None and seeded:
        reason = "a seeded schedule"
    if reason is None and _overlapping(arrays):
        reason = "argument arrays overlap"
    use_parallel = bool(parallel) and reason is None
    if not parallel and reason is None:
        reason = "parallel blocks not asked for"
    grid = _parallel_grid(ck) if use_parallel else ck.grid
    rng = runtime.rng_state(*schedule) if seeded else np.zeros(1, np.uint64)
    # what the kernel may write, kept so a launch stopped half-way is undone before fastsim runs it
    # (arrays aliasing a written one are covered by its copy)
    written = _array_use(ck.plan)[1]
    saved = [(a, a.copy()) for p, a in zip(ck.plan.params, args, strict=True)
             if p in written and isinstance(a, np.ndarray) and a.flags.writeable]  # fmt: skip
    # a serial launch runs on this thread: its CPU clock is exact, where the process's can tick in 4 ms
    # steps (seen on a kernel with RLIMIT_CPU set, as the app's workers set it); prange: the process's
    clock = time.process_time if use_parallel else time.thread_time
    t0 = clock()
    try:
        grid(g[0], g[1], g[2], b[0], b[1], b[2], rng, *args)
    except Exception as e:  # noqa: BLE001 - any failure: undone, and fastsim runs it (its message)
        for a, copy_ in saved:
            a[...] = copy_
        if isinstance(e, runtime.DivergentBarrier):
            line = e.args[0] if e.args else "?"
            raise NotCompiled(
                f"a barrier under a condition that differs between the block's threads (line {line})"
            ) from None
        if isinstance(e, runtime.WarpRefused) and len(e.args) == 3:
            line, code, kind = e.args
            what = "" if code == 5 else f"cuda.{kind}: "
            raise NotCompiled(
                f"{what}{runtime.WARP_REASONS.get(code, '?')} (line {line}); fastsim runs it"
            ) from None
        raise NotCompiled(f"the kernel raised {type(e).__name__} on the compiled engine") from None
    run_s = clock() - t0
    sched = {"seed": int(schedule[0]), "run": int(schedule[1])} if seeded else None
    return LaunchReport("compiled", "parallel" if use_parallel else "serial", None if use_parallel else reason,
                        compile_s, run_s, sched, len(ck.plan.regions), ck.plan.n_syncs,
                        _shared_bytes(ck.plan), origin)  # fmt: skip


def _shared_bytes(plan: Plan) -> int:
    total = 0
    for shape, dtype in plan.shared.values():
        total += int(np.prod(shape if isinstance(shape, tuple) else (shape,))) * np.dtype(dtype).itemsize
    return total


def repeated_launch(kernel, griddim, blockdim, args, *, parallel: bool = True):
    """A launch to run again and again (a host loop of simulation steps): compiled once here (about 0.3 s
    of planning a launch() pays every time), then ``run(args)`` launches it with arguments of the same
    types. Blocks run in parallel only where launch() would let them. Raises NotCompiled here; an
    index out of range raises from ``run`` (nothing undone: the caller's state is lost)."""
    g, b = _dims(griddim), _dims(blockdim)
    args = [unwrap(a) for a in args]
    argtypes = _argtypes(args)
    ck = compile_kernel(kernel, argtypes)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    use_parallel = parallel and ck.serial_reason is None and not _overlapping(arrays)
    grid = _parallel_grid(ck) if use_parallel else ck.grid
    rng = np.zeros(1, np.uint64)

    def run(new_args) -> None:
        new_args = [unwrap(a) for a in new_args]
        if _argtypes(new_args) != argtypes:
            raise NotCompiled("a repeated launch's argument types changed")
        grid(g[0], g[1], g[2], b[0], b[1], b[2], rng, *new_args)

    return run
