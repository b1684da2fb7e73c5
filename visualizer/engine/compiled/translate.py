"""A kernel's Python AST rewritten for the CPU: the ``cuda.*`` names it reads become plain names and
helper calls, and its body is split into regions at every barrier (MCUDA / POCL work-item loops).

Pure ``ast`` work plus the lookups of the names a kernel reads; nothing is compiled here (codegen.py
writes the functions, engine.py compiles and runs them).

A kernel body becomes a tree of *items*:

* ``Region``: statements without a barrier, run by each live thread in turn (one function per region,
  called with the thread's linear id);
* ``Barrier``: every live thread has finished the regions before it; ``syncthreads_count/and/or`` also
  reduce a per-thread value;
* ``BlockIf`` / ``BlockWhile``: an ``if`` or a loop with a barrier inside. Its condition is evaluated by
  every live thread and must be the same for all of them (a GPU's barrier in divergent code is
  undefined): checked at run time, refused otherwise. A ``for`` over ``range()`` with a barrier inside is
  first rewritten into such a ``while``;
* ``WarpOp``: a warp-level operation (shuffle, vote, match, activemask, syncwarp): every live thread has
  stored its arguments in the regions before; the warp step computes each lane's results from its warp's
  32 lanes in lockstep. An ``if`` or loop with warp-level operations and no barrier inside is a
  ``BlockIf`` / ``BlockWhile`` with ``warp`` set: its condition need only agree within each warp.

A value that lives from one region into another (or round a loop with a barrier) is kept per thread in
an array (scalar expansion): codegen.py loads it at a region's start and stores it at its end.
"""

from __future__ import annotations

import ast
import copy
import math
import types
from dataclasses import dataclass, field

import numpy as np

P = "__cc_"  # every name this engine adds starts so; a kernel's own names may not
IDS = ("t", "tx", "ty", "tz", "bx", "by", "bz", "bdx", "bdy", "bdz", "gdx", "gdy", "gdz")
_ID_PREFIX = {"threadIdx": "t", "blockIdx": "b", "blockDim": "bd", "gridDim": "gd"}
# ("threadIdx", "x") -> "tx", ... ("gridDim", "z") -> "gdz"
ID_ATTRS = {(name, axis): pre + axis for name, pre in _ID_PREFIX.items() for axis in "xyz"}
SYNC_CALLS = {
    "syncthreads": "sync",
    "syncthreads_count": "count",
    "syncthreads_and": "and",
    "syncthreads_or": "or",
}
NO_OPS = {"threadfence", "threadfence_block", "threadfence_system"}  # blocks run one at a time: no reordering
WARP_OPS = {
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "ballot_sync", "all_sync", "any_sync",
    "eq_sync", "activemask", "match_any_sync", "match_all_sync", "syncwarp", "lanemask_lt",
}  # fmt: skip
# the warp-level operations that need the warp's other lanes (a split point, like a barrier), with the
# arguments numba takes after the mask: lanemask_lt is the lane's own (rewritten in place)
WARP_ARITY = {
    "shfl_sync": 3, "shfl_up_sync": 3, "shfl_down_sync": 3, "shfl_xor_sync": 3, "ballot_sync": 2,
    "all_sync": 2, "any_sync": 2, "eq_sync": 2, "match_any_sync": 2, "match_all_sync": 2,
    "syncwarp": (0, 1), "activemask": 0,
}  # fmt: skip
ATOMIC_NAMES = {"add", "sub", "max", "min", "nanmax", "nanmin", "and_", "or_", "xor", "exch", "inc", "dec",
                "cas", "compare_and_swap"}  # fmt: skip
SAFE_MODULES = {"math", "cmath", "numpy", "numba"}


class NotCompiled(Exception):
    """The compiled engine does not take this kernel; the one-line reason says why (run fastsim)."""

    def __init__(self, reason: str):
        super().__init__(" ".join(str(reason).split())[:300])
        self.reason = str(self)


def _refuse(node: ast.AST | None, what: str):
    line = getattr(node, "lineno", None)
    raise NotCompiled(f"{what} (line {line})" if line else what)


def is_cuda_module(obj) -> bool:
    return isinstance(obj, types.ModuleType) and (
        obj.__name__ in ("numba.cuda", "numba.cuda.simulator") or obj.__name__.startswith("numba.cuda")
    )


def kernel_python_function(kernel):
    """The plain Python function of a kernel given as a numba-cuda dispatcher, the simulator's
    FakeCUDAKernel, or the function itself."""
    for attr in ("py_func", "fn"):
        fn = getattr(kernel, attr, None)
        if isinstance(fn, types.FunctionType):
            return fn
    if isinstance(kernel, types.FunctionType):
        return kernel
    raise NotCompiled(f"{type(kernel).__name__} is not a kernel function")


# ----------------------------------------------------------------------------- name resolution


@dataclass
class Names:
    """What the names a function reads are: its namespace (module globals + closure constants)."""

    namespace: dict

    def lookup(self, name: str):
        if name in self.namespace:
            return True, self.namespace[name]
        import builtins

        if hasattr(builtins, name):
            return False, getattr(builtins, name)
        return False, None

    def attr_root(self, node: ast.AST):
        """For ``a.b.c`` the object ``a`` names (None if it is no global)."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name):
            found, value = self.lookup(node.id)
            if found:
                return value
        return None


def cuda_attr_path(node: ast.AST, names: Names, local: set[str]) -> list[str] | None:
    """``cuda.atomic.add`` -> ["atomic", "add"] when the root names numba.cuda; else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id in local:
        return None
    found, value = names.lookup(node.id)
    if not found:
        return None
    if is_cuda_module(value):
        return parts[::-1]
    if isinstance(value, types.ModuleType) and value.__name__ == "numba" and parts and parts[-1] == "cuda":
        return parts[::-1][1:]
    return None


def const_eval(node: ast.AST, names: Names):
    """A compile-time constant expression (a shared array's shape or dtype) evaluated in the kernel's
    namespace."""
    try:
        code = compile(ast.Expression(body=copy.deepcopy(node)), "<const>", "eval")
        return eval(code, {"__builtins__": {}}, dict(names.namespace))  # noqa: S307 - the kernel's own names
    except Exception as e:  # noqa: BLE001 - any failure: not a constant we can take
        _refuse(node, f"cannot evaluate {ast.unparse(node)!r} when compiling ({type(e).__name__})")


def as_numpy_dtype(value, node) -> np.dtype:
    try:
        from numba.core import types as nbt
        from numba.np.numpy_support import as_dtype

        if isinstance(value, nbt.Type):
            return np.dtype(as_dtype(value))
        return np.dtype(value)
    except Exception:  # noqa: BLE001
        _refuse(node, f"dtype {ast.unparse(node)!r} is not one the compiled engine takes")


def as_shape(value, node) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    if not (isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) for v in value)):
        _refuse(node, f"array shape {ast.unparse(node)!r} is not a constant")
    return tuple(int(v) for v in value)


# ----------------------------------------------------------------------------- the cuda rewriter


@dataclass
class Usage:
    """What a rewritten function does that the engine must know (parallel blocks, fallbacks)."""

    shared: dict = field(default_factory=dict)  # name -> (shape, dtype)
    local: dict = field(default_factory=dict)  # name -> (shape, dtype)
    atomic_targets: set = field(default_factory=set)  # names of arrays atomics touch
    device_calls: list = field(default_factory=list)  # (name, function object)
    uses_ctx: bool = False


class CudaRewriter(ast.NodeTransformer):
    """``cuda.*`` reads -> plain names and helper calls. Device functions are called with the thread's
    ids as a first argument (``__cc_ctx``); a device function reads them from there."""

    def __init__(self, names: Names, local: set[str], device_ns: dict, in_device: bool, compile_device):
        self.names, self.local, self.in_device = names, local, in_device
        self.device_ns = device_ns  # generated name -> object, the generated module's globals
        self.compile_device = compile_device
        self.usage = Usage()

    def id_name(self, which: str) -> ast.Name:
        return ast.Name(id=P + which, ctx=ast.Load())

    def visit_Attribute(self, node):
        path = cuda_attr_path(node, self.names, self.local)
        if path is None:
            via_module = self.visit_Attribute_module(node)
            return via_module if via_module is not None else self.generic_visit(node)
        if len(path) == 2 and tuple(path) in ID_ATTRS:
            return ast.copy_location(self.id_name(ID_ATTRS[tuple(path)]), node)
        if path == ["laneid"]:
            return ast.copy_location(ast.parse(f"({P}t % 32)", mode="eval").body, node)
        if path == ["warpsize"]:
            return ast.copy_location(ast.Constant(32), node)
        _refuse(node, f"cuda.{'.'.join(path)} is not compiled for the CPU")

    def visit_Attribute_module(self, node):
        """``module.name`` where module is a kernel helper module (kernels.flat): the object it names."""
        if isinstance(node.value, ast.Name) and node.value.id not in self.local:
            found, mod = self.names.lookup(node.value.id)
            if found and isinstance(mod, types.ModuleType) and not is_cuda_module(mod):
                if mod.__name__.split(".")[0] in SAFE_MODULES:
                    self.device_ns[node.value.id] = mod
                    return node
                if not hasattr(mod, node.attr):
                    _refuse(node, f"{mod.__name__} has no {node.attr!r}")
                ref = self.global_ref(f"{node.value.id}_{node.attr}", getattr(mod, node.attr), node)
                return ast.copy_location(ref, node)
        return None

    def visit_Name(self, node):
        if node.id.startswith(P):
            return node  # added by the splitter (kernels' own such names are refused in local_names)
        if isinstance(node.ctx, ast.Load) and node.id not in self.local:
            found, value = self.names.lookup(node.id)
            if found:
                return ast.copy_location(self.global_ref(node.id, value, node), node)
        return node

    def global_ref(self, name: str, value, node) -> ast.expr:
        """A global the kernel reads: constants inline (they are part of the cache key that way),
        everything else through the generated module's globals."""
        if isinstance(value, bool) or value is None:
            return ast.Constant(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                self.device_ns[P + "g_" + name] = value
                return ast.Name(id=P + "g_" + name, ctx=ast.Load())
            return ast.Constant(value)
        if isinstance(value, tuple) and all(isinstance(v, (int, float, bool)) for v in value):
            return ast.Constant(value)
        if isinstance(value, types.ModuleType):
            if is_cuda_module(value):
                _refuse(node, f"'{name}' (numba.cuda) used other than as cuda.<name>")
            if value.__name__.split(".")[0] in SAFE_MODULES:
                self.device_ns[name] = value
                return ast.Name(id=name, ctx=ast.Load())
            _refuse(node, f"module {value.__name__!r} is not available to compiled kernels")
        from numba.core import types as nbt
        from numba.core.dispatcher import Dispatcher

        if isinstance(value, (nbt.Type, np.ndarray, np.generic)) or (
            isinstance(value, type) and issubclass(value, np.generic)
        ):
            self.device_ns[name] = value
            return ast.Name(id=name, ctx=ast.Load())
        if isinstance(value, Dispatcher):  # an njit function: callable as it is
            self.device_ns[name] = value
            return ast.Name(id=name, ctx=ast.Load())
        sub = _probe_substitute(value)
        if sub is not None:  # the ids lens's clock and SM: this engine's own (runtime.py)
            self.device_ns[sub[0]] = sub[1]
            return ast.Name(id=sub[0], ctx=ast.Load())
        fn = None
        if isinstance(value, types.FunctionType):
            fn = value
        elif callable(value):
            for attr in ("py_func", "fn"):
                inner = getattr(value, attr, None)
                if isinstance(inner, types.FunctionType):
                    fn = inner
        if fn is not None:
            gen = self.compile_device(fn)
            self.device_ns[gen.name] = gen.dispatcher
            self.usage.device_calls.append((name, fn, gen))
            return ast.Name(id=gen.name, ctx=ast.Load())
        _refuse(node, f"global {name!r} ({type(value).__name__}) is not available to compiled kernels")

    def visit_Call(self, node):
        path = cuda_attr_path(node.func, self.names, self.local)
        if (
            path is None
            and isinstance(node.func, ast.Name)
            and node.func.id == "round"
            and len(node.args) > 1
        ):
            # numba's CPU round(x, ndigits) rounds a float32 differently from CUDA's (and fastsim's)
            _refuse(node, "round(x, ndigits) (numba's CPU target rounds it differently)")
        if path is None:
            node = self.generic_visit(node)
            # a device function: pass this thread's ids first
            if isinstance(node.func, ast.Name) and node.func.id.startswith(P + "dev_"):
                node.args.insert(0, ast.Name(id=P + "ctx", ctx=ast.Load()))
                self.usage.uses_ctx = True
            return node
        name = ".".join(path)
        if node.keywords:
            _refuse(node, f"keyword arguments to cuda.{name}")
        args = [self.visit(a) for a in node.args]
        if path[0] == "grid" or path[0] == "gridsize":
            if len(args) != 1 or not isinstance(args[0], ast.Constant) or args[0].value not in (1, 2, 3):
                _refuse(node, f"cuda.{name} takes a constant 1, 2 or 3")
            dims = ("x", "y", "z")[: args[0].value]
            if path[0] == "grid":
                parts = [f"({P}b{d} * {P}bd{d} + {P}t{d})" for d in dims]
            else:
                parts = [f"({P}bd{d} * {P}gd{d})" for d in dims]
            text = parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"
            return ast.copy_location(ast.parse(text, mode="eval").body, node)
        if len(path) == 2 and path[0] == "atomic" and path[1] in ATOMIC_NAMES:
            target = node.args[0]
            while isinstance(target, ast.Subscript):
                target = target.value
            self.usage.atomic_targets.add(target.id if isinstance(target, ast.Name) else "?")
            helper = P + "atomic_" + path[1]
            from visualizer.engine.compiled.runtime import ATOMICS

            self.device_ns[helper] = ATOMICS[path[1]]
            return ast.copy_location(
                ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=args, keywords=[]), node
            )
        if path == ["const", "array_like"] and len(args) == 1:
            return args[0]
        if path[-1] in NO_OPS or path == ["nanosleep"]:
            return ast.copy_location(ast.Constant(None), node)
        if path[0] in SYNC_CALLS:
            _refuse(node, f"cuda.{name} where the compiled engine takes barriers only as statements")
        if path == ["lanemask_lt"] and not args:
            return ast.copy_location(ast.parse(f"{P}u32((1 << ({P}t % 32)) - 1)", mode="eval").body, node)
        if path[0] in WARP_OPS and self.in_device:
            _refuse(node, f"warp-level cuda.{name} inside a device function (fastsim runs it)")
        if path[0] in WARP_OPS:
            _refuse(node, f"warp-level cuda.{name} where the compiled engine cannot split the kernel at it")
        if path[0] in ("shared", "local"):
            _refuse(node, f"cuda.{name} other than as 'name = cuda.{name}(shape, dtype)'")
        _refuse(node, f"cuda.{name} is not compiled for the CPU")

    def visit_Lambda(self, node):
        _refuse(node, "a lambda inside a kernel")

    def visit_FunctionDef(self, node):
        _refuse(node, "a function defined inside a kernel")

    visit_ClassDef = visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Global(self, node):
        _refuse(node, "global/nonlocal statements in a kernel")

    visit_Nonlocal = visit_Global

    def visit_Try(self, node):
        _refuse(node, "try/except in a kernel")

    visit_With = visit_TryStar = visit_Try


# a device function -> (generated name, njit function taking this thread's ids first): what this engine
# calls instead (a lens's probe whose simulator form needs what this engine does not model, registered by
# the lens's compiled hook: engine/lenses/)
SUBSTITUTES: dict = {}


def substitute(fn, name: str, njit_fn) -> None:
    """Launches compiled from now on call ``njit_fn(ids, *args)`` where a kernel calls ``fn``."""
    SUBSTITUTES[fn] = (P + "dev_sub_" + name, njit_fn)


def _probe_substitute(value):
    """(generated name, njit function) for a registered substitute (``substitute``) or kernels/probes.py's
    simulator smid/globaltimer, else None."""
    try:
        registered = SUBSTITUTES.get(value)
    except TypeError:  # not hashable: no substitute
        registered = None
    if registered is not None:
        return registered
    try:
        from visualizer.kernels import probes
    except ImportError:
        return None
    from visualizer.engine.compiled import runtime

    if value is getattr(probes, "smid", None):
        return P + "dev_model_smid", runtime.model_smid
    if value is getattr(probes, "globaltimer", None):
        return P + "dev_model_globaltimer", runtime.model_globaltimer
    return None


def local_names(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id.startswith(P):
            _refuse(node, f"the name {node.id!r} is reserved by the compiled engine")
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def array_decl(stmt: ast.stmt, names: Names, local: set[str]):
    """``x = cuda.shared.array(shape, dtype)`` / ``cuda.local.array`` -> (kind, name, shape, dtype)."""
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)):
        return None
    path = cuda_attr_path(stmt.value.func, names, local)
    if path not in (["shared", "array"], ["local", "array"]):
        return None
    if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        _refuse(stmt, f"cuda.{'.'.join(path)} assigned to something other than one name")
    call = stmt.value
    args = list(call.args)
    kw = {k.arg: k.value for k in call.keywords}
    shape_node = args[0] if args else kw.get("shape")
    dtype_node = args[1] if len(args) > 1 else kw.get("dtype")
    if shape_node is None or dtype_node is None:
        _refuse(stmt, f"cuda.{'.'.join(path)} needs a shape and a dtype")
    shape = as_shape(const_eval(shape_node, names), shape_node)
    dtype = as_numpy_dtype(const_eval(dtype_node, names), dtype_node)
    if path[0] == "shared" and (0 in shape):
        _refuse(stmt, "dynamic shared memory (a shape of 0) is not compiled yet")
    return path[0], stmt.targets[0].id, shape, dtype


class FoldConstantIfs(ast.NodeTransformer):
    """``if FLAG:`` on a compile-time constant keeps only the branch taken, as numba-cuda does when it
    compiles (a barrier in the branch not taken is no barrier: reduction_race's ``if BARRIER:``)."""

    def __init__(self, names: Names, local: set[str]):
        self.names, self.local = names, local

    def constant(self, test: ast.expr):
        for sub in ast.walk(test):
            if isinstance(sub, ast.Name):
                found, value = self.names.lookup(sub.id)
                if sub.id in self.local or not found or not isinstance(value, (bool, int, float)):
                    return None
            elif isinstance(sub, (ast.Call, ast.Attribute, ast.Subscript)):
                return None
        try:
            return bool(const_eval(test, self.names))
        except NotCompiled:
            return None

    def visit_If(self, node):
        self.generic_visit(node)
        value = self.constant(node.test)
        if value is None:
            return node
        kept = node.body if value else node.orelse
        return kept or [ast.copy_location(ast.Pass(), node)]


# ----------------------------------------------------------------------------- region splitting


@dataclass
class Region:
    stmts: list
    index: int = -1


@dataclass
class Cond:
    expr: ast.expr
    line: int
    index: int = -1


@dataclass
class Barrier:
    kind: str  # sync | count | and | or
    line: int
    pred: str | None = None  # the per-thread variable holding the vote
    target: str | None = None  # the variable the result goes to


@dataclass
class WarpOp:
    """A warp-level operation: every live thread has stored its arguments (``args``: the mask first, then
    the value, predicate or lane, per thread); the warp step computes each lane's results (``targets``)
    from its warp's lanes, the 32 in lockstep (runtime.py)."""

    kind: str  # shfl_sync, ballot_sync, ..., syncwarp, activemask
    line: int
    args: list
    targets: list


@dataclass
class BlockIf:
    cond: Cond
    body: list
    orelse: list
    warp: bool = False  # warp-level operations and no barrier inside: the condition must agree per warp


@dataclass
class BlockWhile:
    cond: Cond
    body: list
    warp: bool = False


def barrier_of(stmt: ast.stmt, names: Names, local: set[str]):
    """(kind, target name or None, vote expression or None) if ``stmt`` is a barrier statement."""
    call, target = None, None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
    elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target = stmt.targets[0].id
        else:
            target = "?"
    if call is None:
        return None
    path = cuda_attr_path(call.func, names, local)
    if not path or len(path) != 1 or path[0] not in SYNC_CALLS:
        return None
    kind = SYNC_CALLS[path[0]]
    if target == "?":
        _refuse(stmt, f"cuda.{path[0]} assigned to something other than one name")
    if kind == "sync":
        if call.args:
            _refuse(stmt, "cuda.syncthreads takes no arguments")
        return kind, None, None
    if len(call.args) != 1:
        _refuse(stmt, f"cuda.{path[0]} takes one argument")
    return kind, target, call.args[0]


def contains_barrier(node: ast.AST, names: Names, local: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            path = cuda_attr_path(sub.func, names, local)
            if path and (path[0] in SYNC_CALLS or path[:2] == ["cg", "this_grid"]):
                return True
    return False


def warp_kind(node: ast.AST, names: Names, local: set[str]) -> str | None:
    """The warp-level operation ``node`` calls (one that needs the warp's other lanes), else None."""
    if isinstance(node, ast.Call):
        path = cuda_attr_path(node.func, names, local)
        if path and len(path) == 1 and path[0] in WARP_ARITY:
            return path[0]
    return None


def contains_warp_op(node: ast.AST, names: Names, local: set[str]) -> bool:
    return any(warp_kind(sub, names, local) for sub in ast.walk(node))


class HoistWarpOps(ast.NodeTransformer):
    """A statement's warp-level calls, innermost first: each call's arguments go to fresh per-thread
    variables (``steps``: the assignments, then the ``WarpOp``), the call becomes its result's name."""

    def __init__(self, splitter):
        self.sp = splitter
        self.steps: list = []

    def _warp_in(self, nodes) -> bool:
        return any(contains_warp_op(n, self.sp.names, self.sp.local) for n in nodes)

    def visit_IfExp(self, node):
        if self._warp_in([node.body, node.orelse]):
            _refuse(node, "a warp-level operation in one branch of a conditional expression")
        return self.generic_visit(node)

    def visit_BoolOp(self, node):
        if self._warp_in(node.values[1:]):
            _refuse(node, "a warp-level operation after the first operand of and/or")
        return self.generic_visit(node)

    def visit_ListComp(self, node):
        if self._warp_in([node]):
            _refuse(node, "a warp-level operation inside a comprehension")
        return node

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda = visit_ListComp

    def visit_Call(self, node):
        kind = warp_kind(node, self.sp.names, self.sp.local)
        node = self.generic_visit(node)
        if kind is None:
            return node
        arity = WARP_ARITY[kind]
        if node.keywords or len(node.args) not in (arity if isinstance(arity, tuple) else (arity,)):
            _refuse(node, f"cuda.{kind} with {len(node.args)} argument(s) or keyword arguments")
        args = list(node.args) or ([ast.Constant(0xFFFFFFFF)] if kind == "syncwarp" else [])
        names, assigns = [], []
        for a in args:
            v = self.sp.fresh("wa")
            self.sp.warp_vars.add(v)
            names.append(v)
            assigns.append(located(ast.Assign(targets=[ast.Name(id=v, ctx=ast.Store())], value=a), node))
        n_out = {"syncwarp": 0, "match_all_sync": 2}.get(kind, 1)
        targets = [self.sp.fresh("wr") for _ in range(n_out)]
        self.sp.warp_vars.update(targets)
        self.steps.append((assigns, WarpOp(kind, node.lineno, names, targets)))
        if n_out == 0:
            return ast.copy_location(ast.Constant(None), node)
        outs = [ast.Name(id=t, ctx=ast.Load()) for t in targets]
        return ast.copy_location(outs[0] if n_out == 1 else ast.Tuple(elts=outs, ctx=ast.Load()), node)


def refuse_spin_waits(fn: ast.AST, names: Names, local: set[str]) -> None:
    """A loop that waits on memory (``while flag[0] == 0``, ``while atomic.cas(...)``) waits for another
    thread; here threads run one after another between barriers, so it could wait for ever: fastsim,
    whose watchdog stops a stuck kernel, runs it."""
    for node in ast.walk(fn):
        if isinstance(node, ast.While):
            for sub in ast.walk(node.test):
                if isinstance(sub, ast.Subscript) or (
                    isinstance(sub, ast.Call)
                    and (cuda_attr_path(sub.func, names, local) or [""])[0] == "atomic"
                ):
                    _refuse(node, "a loop that waits on memory (a spin-wait) is run by fastsim")
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    path = cuda_attr_path(sub.func, names, local) or [""]
                    if path[0] in NO_OPS or path[0] == "nanosleep":
                        _refuse(node, "a loop with a fence or sleep (a spin-wait) is run by fastsim")


def _check_no_break(stmts: list, loop: ast.stmt):
    for s in stmts:
        if isinstance(s, (ast.Break, ast.Continue)):
            _refuse(s, "break/continue in a loop with a barrier or warp-level operation inside")
        if isinstance(s, (ast.For, ast.While)):
            continue
        for field_name in ("body", "orelse"):
            _check_no_break(getattr(s, field_name, []) or [], loop)


class Splitter:
    def __init__(self, names: Names, local: set[str], soft: bool):
        self.names, self.local, self.soft = names, local, soft
        self.regions: list[Region] = []
        self.conds: list[Cond] = []
        self.counter = 0
        self.extra_vars: set[str] = set()  # names the splitter introduces (range bounds, votes)
        self.barrier_targets: set[str] = set()
        self.loop_vars: set[str] = set()  # every name a region inside a block loop touches
        self.warp_vars: set[str] = set()  # a warp-level operation's arguments and results: per thread

    def fresh(self, what: str) -> str:
        self.counter += 1
        name = f"{P}{what}{self.counter}"
        self.extra_vars.add(name)
        return name

    def region(self, stmts: list) -> Region:
        r = Region(stmts, len(self.regions))
        self.regions.append(r)
        return r

    def cond(self, expr: ast.expr, line: int) -> Cond:
        c = Cond(expr, line, len(self.conds))
        self.conds.append(c)
        return c

    def flush(self, cur: list, items: list):
        if not cur:
            return
        if self.soft:  # seeded schedules: each statement its own region, so warps can interleave
            items.append([self.region([s]) for s in cur])
        else:
            items.append([self.region(list(cur))])
        cur.clear()

    def split(self, stmts: list) -> list:
        items, cur = [], []
        for s in stmts:
            has_barrier = contains_barrier(s, self.names, self.local)
            has_warp = contains_warp_op(s, self.names, self.local)
            if not has_barrier and not has_warp:
                cur.append(s)
                continue
            if has_warp and self.soft:
                _refuse(s, "a seeded schedule of a kernel with warp-level operations is run by fastsim")
            if has_warp and not isinstance(s, (ast.If, ast.While, ast.For)):
                self.split_warp_stmt(s, cur, items)
                continue
            for sub in ast.walk(s) if has_barrier else ():
                if isinstance(sub, ast.Call) and (cuda_attr_path(sub.func, self.names, self.local) or [])[:2] == [
                    "cg", "this_grid"]:  # fmt: skip
                    _refuse(sub, "grid sync (cuda.cg.this_grid) is not compiled: fastsim runs it")
            b = barrier_of(s, self.names, self.local)
            if b is not None:
                kind, target, vote = b
                pred = None
                if kind != "sync":
                    pred = self.fresh("vote")
                    cur.append(ast.copy_location(
                        ast.Assign(targets=[ast.Name(id=pred, ctx=ast.Store())], value=vote), s))  # fmt: skip
                    if target:
                        self.barrier_targets.add(target)
                self.flush(cur, items)
                items.append(Barrier(kind, s.lineno, pred, target))
                continue
            self.flush(cur, items)
            warp = not has_barrier  # warp-level operations only: the condition must agree per warp
            if isinstance(s, ast.If) and contains_warp_op(s.test, self.names, self.local):
                t = self.fresh("wt")  # the test's warp-level operations first, then an if on its value
                pre = located(ast.Assign(targets=[ast.Name(id=t, ctx=ast.Store())], value=s.test), s)
                test = ast.copy_location(ast.Name(id=t, ctx=ast.Load()), s.test)
                items.extend(self.split([pre, ast.copy_location(ast.If(test, s.body, s.orelse), s)]))
            elif isinstance(s, ast.If):
                items.append(BlockIf(self.cond(s.test, s.lineno), self.split(s.body), self.split(s.orelse),
                                     warp))  # fmt: skip
            elif isinstance(s, ast.While):
                if s.orelse:
                    _refuse(s, "while/else with a barrier or warp-level operation inside")
                if contains_warp_op(s.test, self.names, self.local):
                    _refuse(s, "a warp-level operation in a while loop's condition")
                _check_no_break(s.body, s)
                items.append(BlockWhile(self.cond(s.test, s.lineno), self.split(s.body), warp))
            elif isinstance(s, ast.For):
                if contains_warp_op(s.iter, self.names, self.local):
                    _refuse(s, "a warp-level operation in a for loop's range")
                items.extend(self.split(self.for_as_while(s)))
            else:
                _refuse(s, f"a barrier or warp-level operation inside {type(s).__name__.lower()}")
        self.flush(cur, items)
        return items

    def split_warp_stmt(self, s: ast.stmt, cur: list, items: list) -> None:
        """A statement (no barrier) with warp-level calls: their arguments stored per thread in the region
        before, one warp step each, the statement on their results in the region after."""
        if not isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            _refuse(s, f"a warp-level operation inside {type(s).__name__.lower()}")
        hoist = HoistWarpOps(self)
        s = hoist.visit(s)
        for assigns, op in hoist.steps:
            cur.extend(assigns)
            self.flush(cur, items)
            items.append(op)
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)):
            cur.append(s)

    def for_as_while(self, s: ast.For) -> list:
        """``for v in range(a, b, c): body`` with a barrier inside -> a while over fresh bound names."""
        it = s.iter
        is_range = (
            isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and "range" not in self.local and not it.keywords and 1 <= len(it.args) <= 3
        )  # fmt: skip
        if not is_range or s.orelse or not isinstance(s.target, ast.Name):
            _refuse(s, "a barrier or warp-level operation inside a for loop other than 'for name in range()'")
        _check_no_break(s.body, s)
        args = list(it.args)
        start, stop, step = (ast.Constant(0), args[0], None) if len(args) == 1 else (args[0], args[1], None)
        if len(args) == 3:
            step = args[2]
        i, hi = self.fresh("ri"), self.fresh("re")
        out = [
            ast.Assign(targets=[ast.Name(id=hi, ctx=ast.Store())], value=stop),
            ast.Assign(targets=[ast.Name(id=i, ctx=ast.Store())], value=start),
        ]
        if step is None or (
            isinstance(step, ast.Constant) and isinstance(step.value, int) and step.value > 0
        ):
            test = ast.parse(f"{i} < {hi}", mode="eval").body
            inc = step or ast.Constant(1)
        elif isinstance(step, ast.Constant) and isinstance(step.value, int) and step.value < 0:
            test = ast.parse(f"{i} > {hi}", mode="eval").body
            inc = step
        else:
            st = self.fresh("rs")
            out.append(ast.Assign(targets=[ast.Name(id=st, ctx=ast.Store())], value=step))
            test = ast.parse(f"({st} > 0 and {i} < {hi}) or ({st} < 0 and {i} > {hi})", mode="eval").body
            inc = ast.Name(id=st, ctx=ast.Load())
        body = [
            ast.Assign(
                targets=[ast.Name(id=s.target.id, ctx=ast.Store())], value=ast.Name(id=i, ctx=ast.Load())
            ),
            ast.AugAssign(target=ast.Name(id=i, ctx=ast.Store()), op=ast.Add(), value=inc),
            *s.body,
        ]
        out.append(ast.While(test=test, body=body, orelse=[]))
        for node in out:
            located(node, s)
        return out


def located(node: ast.AST, at: ast.AST) -> ast.AST:
    for child in ast.walk(node):
        if not hasattr(child, "lineno") or getattr(child, "lineno", None) is None:
            ast.copy_location(child, at)
    ast.fix_missing_locations(node)
    return node


def names_in(node_or_list) -> tuple[set[str], set[str]]:
    """(names read, names written) anywhere under the nodes."""
    reads, writes = set(), set()
    nodes = node_or_list if isinstance(node_or_list, list) else [node_or_list]
    for n in nodes:
        for sub in ast.walk(n):
            if isinstance(sub, ast.Name):
                (writes if isinstance(sub.ctx, (ast.Store, ast.Del)) else reads).add(sub.id)
    return reads, writes


def walk_items(items: list, in_loop: bool = False):
    """Every (unit, in_block_loop) of an item tree: regions and conditions."""
    for it in items:
        if isinstance(it, list):
            for r in it:
                yield r, in_loop
        elif isinstance(it, BlockIf):
            yield it.cond, in_loop
            yield from walk_items(it.body, in_loop)
            yield from walk_items(it.orelse, in_loop)
        elif isinstance(it, BlockWhile):
            yield it.cond, True
            yield from walk_items(it.body, True)


def rewrite_returns(stmts: list) -> list:
    """A kernel's ``return`` inside a region: the thread has exited (it no longer counts at barriers)."""

    class R(ast.NodeTransformer):
        def visit_Return(self, node):
            if node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None
            ):
                _refuse(node, "a kernel returns no value")
            mark = ast.parse(f"{P}alive[{P}t] = False").body[0]
            return [located(mark, node), ast.copy_location(ast.Return(value=ast.Constant(False)), node)]

    out = []
    for s in stmts:
        r = R().visit(s)
        out.extend(r if isinstance(r, list) else [r])
    return out
