"""The one place probes enter a kernel: at the AST level, at entry and before every exit.

Pure Python (``ast`` only); the result is compiled and executed only in a worker process. Every
kernel goes through here: a visitor's module source (``instrument``) and a built-in kernel's plain
Python function from ``kernels/`` (``instrument_function``: its source read with ``inspect``, its
closure constants as globals), so both get the same probes and the same lenses.

Given a module and a kernel name, ``instrument`` returns a module AST with one
function added right after the kernel: ``<kernel>__traced``, a copy of the kernel that

* takes two more parameters, the trace buffers ``_vz_trace`` and ``_vz_active``;
* starts with ``_vz_t0 = _vz_trace_begin(_vz_trace)``;
* calls ``_vz_trace_end(_vz_trace, _vz_active, _vz_t0, WORK)`` before every ``return`` of its own
  (not those of nested functions) and at the end of its body. WORK says whether the thread did
  work: ``did_work`` (an expression over the kernel's names, a built-in spec's ``active_when``,
  evaluated where the kernel ends), else inferred: False past a guard ``if ...: return``, a
  whole-body guard's condition, True otherwise.

**Passes** (the lenses: memory accesses, branches, delays...) are objects with ``name``,
``params`` (parameter names appended to the traced kernel after ``_vz_trace, _vz_active``, in
pass order), ``globals()`` (the names their inserted calls use -> device functions from
``kernels/``) and ``apply(fn, info)``, which rewrites the traced copy in place before the trace
probes go in and leaves what the host needs (sites, line tables) in ``info``. The module tree
carries ``tree.vz_info[pass.name]`` and ``tree.vz_params`` (every parameter added, in order).

``instrument`` is the one function that applies passes: with ``trace=False`` it applies them alone,
without the trace probes (the passes' own tests, a launch by hand).

Everything else in the module (constants, device functions, imports, the untouched kernel) is left
as written, so the clean kernel is the user's own. Every added node carries the line of the
statement it belongs to, and the copied kernel keeps the user's line numbers, so tracebacks,
Numba's messages and per-line access records point at the user's lines.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, Protocol

from visualizer.engine.instrument.ast_tools import (
    BeforeReturns,
    function_source_tree,
    located,
    remember_rewritten,
)

TRACE, ACTIVE, T0, WORK = "_vz_trace", "_vz_active", "_vz_t0", "_vz_work"
BEGIN, END = "_vz_trace_begin", "_vz_trace_end"
TRACED_SUFFIX = "__traced"


def traced_name(kernel: str) -> str:
    return kernel + TRACED_SUFFIX


class Pass(Protocol):
    """One lens's instrumentation (module docstring)."""

    name: str
    params: tuple[str, ...]

    def globals(self) -> dict[str, Any]: ...

    def apply(self, fn: ast.FunctionDef, info: dict) -> None: ...


def _end_call(at: ast.AST, did_work: ast.expr | None = None) -> ast.Expr:
    call = ast.Expr(
        ast.Call(
            func=ast.Name(END, ast.Load()),
            args=[
                ast.Name(TRACE, ast.Load()),
                ast.Name(ACTIVE, ast.Load()),
                ast.Name(T0, ast.Load()),
                ast.Constant(True) if did_work is None else did_work,
            ],
            keywords=[],
        )
    )
    return located(call, at)


def _traced_decorators(fn: ast.FunctionDef) -> list[ast.expr]:
    """Keep a jit decorator's options (fastmath, lineinfo...), not its signatures or other decorators."""
    out = []
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        is_jit = (isinstance(target, ast.Attribute) and target.attr == "jit") or (
            isinstance(target, ast.Name) and target.id == "jit"
        )
        if not is_jit:
            continue
        if isinstance(dec, ast.Call):
            keep = [k for k in dec.keywords if k.arg not in ("device", None)]
            dec = ast.copy_location(ast.Call(func=copy.deepcopy(dec.func), args=[], keywords=keep), dec)
        out.append(dec)
    return out


def _is_guard_return(stmt: ast.stmt) -> bool:
    """``if <out of range>: return`` at the top of a kernel: the thread leaves without working."""
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Return)
        and stmt.body[0].value is None
    )


def _is_whole_body_guard(body: list[ast.stmt]) -> bool:
    """``i = cuda.grid(1)`` ... ``if i < n: <all the work>``: only index arithmetic before one last if."""
    if not body or not isinstance(body[-1], ast.If) or body[-1].orelse:
        return False
    for stmt in body[:-1]:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return False
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            names = t.elts if isinstance(t, ast.Tuple) else [t]
            if not all(isinstance(n, ast.Name) for n in names):
                return False
    return True


def find_kernel(tree: ast.Module, kernel: str) -> tuple[int, ast.FunctionDef]:
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name == kernel:
            return i, node
    raise KeyError(kernel)


def instrument(
    tree: ast.Module,
    kernel: str,
    *,
    did_work: str | None = None,
    passes: tuple = (),
    trace: bool = True,
    suffix: str = TRACED_SUFFIX,
) -> ast.Module:
    """A new module AST: the module plus ``<kernel>__traced`` right after the kernel (module docstring).
    ``trace=False``: the passes alone, no trace probes or buffers (``suffix`` names the copy)."""
    passes = tuple(passes)
    tree = copy.deepcopy(tree)
    index, fn = find_kernel(tree, kernel)
    traced = copy.deepcopy(fn)
    traced.name = kernel + suffix
    traced.decorator_list = _traced_decorators(fn)
    params = ([TRACE, ACTIVE] if trace else []) + [name for p in passes for name in p.params]
    taken = {a.arg for a in fn.args.args}
    clash = [name for name in params if name in taken]
    if clash:
        raise ValueError(f"the kernel already has a parameter named {clash[0]}")
    for name in params:
        traced.args.args.append(ast.copy_location(ast.arg(arg=name), fn))
    infos: dict[str, dict] = {}
    for p in passes:
        infos[p.name] = {}
        p.apply(traced, infos[p.name])
    added = []
    for p in passes:  # a pass's module-level helpers (the access pass's recording device functions)
        for d in getattr(p, "module_defs", []):
            tree.body.insert(index + 1, d)
            index += 1
            added.append(d)
    tree.vz_defs = added  # exec'd, their functions read their source from these (remember_rewritten)
    if not trace:
        tree.body.insert(index + 1, traced)
        tree = ast.fix_missing_locations(tree)
        tree.vz_info, tree.vz_params = infos, params
        return tree
    # which threads did work: the spec's expression; else those past a guard return did not; under a
    # whole-body guard, those whose condition held; everyone else did
    declared = located(ast.parse(did_work, mode="eval").body, fn) if did_work else None
    did_work = declared
    source_body = list(traced.body)
    prefix: list[ast.stmt] = []
    if declared is None and _is_whole_body_guard(source_body):
        guard = source_body[-1]
        keep = ast.Assign(targets=[ast.Name(WORK, ast.Store())], value=guard.test)
        prefix = [ast.copy_location(keep, guard)]
        guard.test = located(ast.Name(WORK, ast.Load()), guard)
        did_work = ast.Name(WORK, ast.Load())
    body: list[ast.stmt] = []
    for stmt in source_body:
        if _is_guard_return(stmt):
            ret = stmt.body[0]
            stmt.body = [_end_call(ret, located(ast.Constant(False), ret)), ret]
            body.append(stmt)
            continue
        if prefix and stmt is source_body[-1]:
            body.extend(prefix)
        body.extend(_as_list(BeforeReturns(_end_call).visit(stmt)))
    begin = ast.Assign(
        targets=[ast.Name(T0, ast.Store())],
        value=ast.Call(func=ast.Name(BEGIN, ast.Load()), args=[ast.Name(TRACE, ast.Load())], keywords=[]),
    )
    located(begin, fn.body[0])
    last = fn.body[-1]
    if not isinstance(body[-1], ast.Return):
        end = _end_call(last, copy.deepcopy(did_work) if did_work is not None else None)
        for child in ast.walk(end):  # on the kernel's last line, so a trace points at where it ended
            child.lineno = child.end_lineno = getattr(last, "end_lineno", last.lineno)
        body.append(end)
    traced.body = [begin, *body]
    tree.body.insert(index + 1, traced)
    tree = ast.fix_missing_locations(tree)
    tree.vz_info = infos
    tree.vz_params = params
    return tree


def probe_globals(passes: tuple = ()) -> dict[str, Any]:
    """The names the instrumented code calls: the trace probes and every pass's device functions."""
    from visualizer.kernels.probes import trace_begin, trace_end

    out: dict[str, Any] = {BEGIN: trace_begin, END: trace_end}
    for p in passes:
        out.update(p.globals())
    return out


def function_namespace(py_fn) -> dict[str, Any]:
    """A function's module globals plus its closure's constants (a tile size a factory closed over):
    every name its body can see, as one dict (where a traced copy runs; where shapes are looked up)."""
    namespace = dict(py_fn.__globals__)
    for name, cell in zip(py_fn.__code__.co_freevars, py_fn.__closure__ or (), strict=True):
        namespace[name] = cell.cell_contents
    return namespace


def instrument_function(py_fn, *, did_work: str | None = None, passes: tuple = ()):
    """A built-in kernel's plain Python function (kernels/), instrumented like a visitor's kernel:
    returns ``(traced_python_function, tree)``. The source comes from the kernel's file, so every
    line number (per-line access records, tracebacks) is the file's own; globals are the function's
    module globals plus its closure's constants (a tile size a factory closed over), so numba
    freezes them the same way."""
    tree = function_source_tree(py_fn)
    fn = tree.body[0]
    fn.decorator_list = []
    tree = instrument(tree, fn.name, did_work=did_work, passes=passes)
    namespace = function_namespace(py_fn)
    for p in passes:  # what a pass's module-level helpers name (a device function's closure)
        for ns in getattr(p, "namespaces", lambda: [])():
            for k, v in ns.items():
                namespace.setdefault(k, v)
    namespace.update(probe_globals(passes))
    exec(compile(tree, py_fn.__code__.co_filename, "exec"), namespace)
    remember_rewritten(namespace, tree.vz_defs)
    traced = namespace[traced_name(fn.name)]
    traced.__qualname__ = py_fn.__qualname__ + TRACED_SUFFIX
    return traced, tree


def _as_list(x) -> list:
    return x if isinstance(x, list) else [x]
