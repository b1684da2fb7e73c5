"""Python source for the compiled engine, from a kernel's split body (translate.py).

One kernel becomes one generated module:

* ``__cc_flat``: the kernel as one thread runs it, barriers removed: numba's type inference of it
  gives every per-thread variable's type (the dtype of its expansion array); never run;
* ``__cc_region_K`` / ``__cc_cond_K``: one thread's part of the body between barriers (loads of the
  expanded variables it touches, the statements, stores of those it writes), or a condition;
* ``__cc_block``: one block: shared arrays (poisoned), expansion arrays, then the item tree as loops
  over the block's threads (default order: linear, x fastest; seeded: warps in a drawn order, a drawn
  lane order, statement by statement, so one warp may run ahead of another between barriers); a
  warp-level operation is a warp step between two regions (``warp_step``), a warp-level ``if`` or loop
  sets aside the threads of the warps not in it (``BlockWriter.warp_if`` / ``warp_while``);
* ``__cc_grid``: every block, one after another (or in ``prange`` where the engine allows it).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import textwrap
from dataclasses import dataclass, field

from visualizer.engine.compiled.translate import (
    IDS,
    Barrier,
    BlockIf,
    BlockWhile,
    Cond,
    CudaRewriter,
    FoldConstantIfs,
    Names,
    P,
    Region,
    Splitter,
    WarpOp,
    _refuse,
    array_decl,
    contains_barrier,
    local_names,
    names_in,
    refuse_spin_waits,
    rewrite_returns,
    walk_items,
)
from visualizer.engine.instrument.ast_tools import integer_arithmetic

HEAD = [P + "bx", P + "by", P + "bz", P + "bdx", P + "bdy", P + "bdz", P + "gdx", P + "gdy", P + "gdz"]
CTX = "(" + ", ".join(P + i for i in IDS) + ")"


@dataclass
class Plan:
    """A kernel split and rewritten, before types are known."""

    name: str
    params: list[str]
    written_params: set[str]
    items: list
    regions: list
    conds: list
    shared: dict  # name -> (shape, dtype)
    local_arrays: dict  # name -> (shape, dtype)
    expanded: list[str]  # per-thread variables (sorted)
    barrier_targets: set[str]
    ns: dict  # the generated module's globals (device functions, helpers, arrays)
    atomic_targets: set[str] = field(default_factory=set)
    device_fns: list = field(default_factory=list)
    has_block_control: bool = False  # a BlockIf / BlockWhile: a condition checked uniform at run time
    n_syncs: int = 0
    candidates: set = field(default_factory=set)  # the kernel's own variables (what may be per thread)
    remat: dict = field(default_factory=dict)  # array view -> (its one assignment, names it reads), in order
    array_ndims: dict = field(default_factory=dict)  # every array name the regions index -> ndim


def unrecorded_views(plan: Plan, ndims: dict, probes: dict) -> None:
    """The access pass's view at the top of the kernel, ``kh = k[_vz_at2(<bufs>, k, b, h, site)]`` with
    ``k`` of more than 2 dimensions: the probe records no view (kernels/access_probes.py atvN: only an
    element of ``k``) and returns its indices, so it becomes ``kh = k[b, h]`` here, which
    ``rematerialize`` takes (its probe's buffers and epoch are not assigned once). ``probes``: the
    compiled names of those probes -> their number of indices."""
    for it in plan.items:
        if not isinstance(it, list):
            continue
        for stmt in (s for r in it for s in r.stmts):
            v = stmt.value if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
            call = v.slice if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) else None
            n = (
                probes.get(call.func.id)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                else None
            )
            if n is None or call.keywords or len(call.args) < n + 2:
                continue
            a, idx = call.args[-n - 2], call.args[-n - 1 : -1]
            if isinstance(a, ast.Name) and a.id == v.value.id and ndims.get(a.id, 0) > n:
                v.slice = ast.copy_location(ast.Tuple(elts=idx, ctx=ast.Load()) if n > 1 else idx[0], call)


def rematerialize(plan: Plan, is_array) -> None:
    """An array view kept across a barrier (``kh = k[b, h]``) is not copied per thread: each region that
    reads it evaluates its one assignment again, from per-thread copies of the numbers it reads. Only
    where that is the same value: assigned once, at the top of the kernel, from names assigned once."""
    stores: dict[str, int] = {}
    for unit, _ in walk_items(plan.items):
        for node in ast.walk(ast.Module(body=_unit_stmts(unit), type_ignores=[])):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores[node.id] = stores.get(node.id, 0) + 1
    top = [s for it in plan.items if isinstance(it, list) for r in it for s in r.stmts]
    for v in [v for v in plan.expanded if is_array(v)]:
        stmt = next((s for s in top if isinstance(s, ast.Assign) and len(s.targets) == 1
                     and isinstance(s.targets[0], ast.Name) and s.targets[0].id == v), None)  # fmt: skip
        if stmt is None or stores.get(v) != 1:
            return  # left expanded: typing refuses it in one line
        deps = names_in(stmt.value)[0] & plan.candidates
        if any(stores.get(d) != 1 or (is_array(d) and d not in plan.remat) for d in deps):
            return
        plan.remat[v] = (stmt, deps)
        plan.expanded.remove(v)
        for d in deps:
            if d not in plan.remat and d not in plan.expanded:
                plan.expanded.append(d)
    plan.expanded.sort()


def _unit_stmts(unit) -> list:
    return unit.stmts if isinstance(unit, Region) else [ast.Expr(value=unit.expr)]


def refuse_hidden_races(body: list, items: list, params: list, shared: set) -> None:
    """A seeded schedule interleaves warps at the statements between barriers, one thread's statement at
    a time, and keeps the block together at each iteration of a loop with a barrier inside. Two races
    need finer interleaving, which fastsim's schedule has: a read-modify-write of a global array element
    (``bins[b] += 1``: a lost update), and shared memory read after a loop body's last barrier (the next
    iteration's writes overtaking those reads). Such a kernel is refused (fastsim runs its seeded runs),
    so the race shows rather than being hidden."""
    globals_ = set(params)
    for node in (n for stmt in body for n in ast.walk(stmt)):
        target = node.target if isinstance(node, ast.AugAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                reads = {x.value.id for x in ast.walk(node.value) if isinstance(x, ast.Subscript)
                         and isinstance(x.value, ast.Name)}  # fmt: skip
                target = t if t.value.id in reads else None
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Name)
            and target.value.id in globals_
        ):
            _refuse(node, f"a seeded schedule would run the read-modify-write of global {target.value.id!r} in "
                          "one step per thread, hiding a lost update: fastsim's seeded schedule interleaves it")  # fmt: skip

    def shared_after_last_barrier(loop_body: list) -> bool:
        last = max((i for i, it in enumerate(loop_body) if isinstance(it, Barrier)), default=None)
        after = loop_body[last + 1 :] if last is not None else []
        for unit, _ in walk_items(after):
            for stmt in _unit_stmts(unit):
                if any(isinstance(n, ast.Name) and n.id in shared for n in ast.walk(stmt)):
                    return True
        return False

    def visit(its: list) -> None:
        for it in its:
            if isinstance(it, BlockWhile):
                if shared_after_last_barrier(it.body):
                    _refuse(None, f"a seeded schedule would keep the block together at each iteration of the loop "
                                  f"at line {it.cond.line}, whose body reads shared memory after its last barrier: "
                                  "fastsim's seeded schedule lets the next iteration's writes overtake those reads")  # fmt: skip
                visit(it.body)
            elif isinstance(it, BlockIf):
                visit(it.body)
                visit(it.orelse)

    visit(items)


def plan_kernel(fn: ast.FunctionDef, names: Names, compile_device, soft: bool) -> Plan:
    """Split ``fn`` at its barriers (soft: every statement between barriers its own region, for the
    seeded schedules) and rewrite every region's ``cuda.*``."""
    fn = copy.deepcopy(fn)
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
        _refuse(fn, "a kernel with *args, **kwargs, keyword-only or default parameters")
    params = [x.arg for x in a.args]
    local = local_names(fn)
    shared, local_arrays = {}, {}

    class Decls(ast.NodeTransformer):  # array declarations out of the body, into the block's allocations
        def visit_Assign(self, node):
            d = array_decl(node, names, local)
            if d is None:
                return node
            kind, name, shape, dtype = d
            table = shared if kind == "shared" else local_arrays
            if name in shared or name in local_arrays:
                _refuse(node, f"{name!r} declared as an array twice")
            table[name] = (shape, dtype)
            return ast.copy_location(ast.Pass(), node)

    fn = FoldConstantIfs(names, local).visit(fn)
    refuse_spin_waits(fn, names, local)
    body = [Decls().visit(s) for s in fn.body]
    splitter = Splitter(names, local, soft)
    items = splitter.split(body)
    if soft:
        refuse_hidden_races(body, items, params, set(shared))
    ns: dict = {}
    rewriter = CudaRewriter(names, local | splitter.extra_vars, ns, False, compile_device)
    for r in splitter.regions:
        r.stmts = rewrite_returns([rewriter.visit(s) for s in r.stmts])
        for s in r.stmts:
            ast.fix_missing_locations(s)
    for c in splitter.conds:
        if contains_barrier(c.expr, names, local):
            _refuse(c.expr, "a barrier inside a condition")
        c.expr = ast.fix_missing_locations(rewriter.visit(c.expr))
    arrays = set(shared) | set(local_arrays)
    written_params = {
        p for p in params if any(p in names_in(_unit_stmts(u))[1] for u, _ in walk_items(items))
    }
    candidates = (local | splitter.extra_vars) - arrays - (set(params) - written_params)
    touched: dict[str, int] = {}
    looped: set[str] = set()
    for unit, in_loop in walk_items(items):
        reads, writes = names_in(_unit_stmts(unit))
        for v in (reads | writes) & candidates:
            touched[v] = touched.get(v, 0) + 1
            if in_loop:
                looped.add(v)
    votes = {it.pred for it in _syncs(items) if it.pred}
    # a variable kept per thread carries a value from one unit to another (or to the same unit's next
    # run in a block-level loop): one that no unit can read before assigning it carries none
    exposed = set().union(*(upward_exposed(_unit_stmts(u)) for u, _ in walk_items(items)))
    expanded = (
        ({v for v, k in touched.items() if k > 1} | looped) & exposed
        | splitter.barrier_targets
        | votes
        | written_params
        | splitter.warp_vars
    )
    plan = Plan(
        fn.name, params, written_params, items, splitter.regions, splitter.conds, shared, local_arrays,
        sorted(expanded), splitter.barrier_targets, ns,
    )  # fmt: skip
    plan.atomic_targets = rewriter.usage.atomic_targets
    plan.device_fns = rewriter.usage.device_calls
    plan.has_block_control = bool(splitter.conds)
    plan.n_syncs = sum(1 for _ in _syncs(items))
    plan.candidates = candidates
    return plan


def upward_exposed(stmts: list) -> set[str]:
    """The names these statements may read before they have certainly assigned them (the value they
    read then comes from before the statements). Conservative: a construct not followed here (``with``,
    ``try``, a nested function, ...) counts every name in it as read first; a loop's body may not run
    (nothing it assigns counts after it), and a branch counts only what both sides assign."""
    exposed: set[str] = set()

    def reads(node, defined: set) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and (not isinstance(n.ctx, ast.Load) or n.id not in defined):
                exposed.add(n.id)  # a name stored inside an expression (:=) counts as read: conservative

    def target(t, defined: set) -> None:
        if isinstance(t, ast.Name):
            defined.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                target(e, defined)
        elif isinstance(t, ast.Starred):
            target(t.value, defined)
        else:  # a[i] = ..., a.x = ...: reads a and i
            reads(t, defined)

    def block(body: list, defined: set) -> set:
        defined = set(defined)
        for st in body:
            if isinstance(st, ast.Assign):
                reads(st.value, defined)
                for t in st.targets:
                    target(t, defined)
            elif isinstance(st, ast.AugAssign):
                reads(st.value, defined)
                if isinstance(st.target, ast.Name) and st.target.id not in defined:
                    exposed.add(st.target.id)
                target(st.target, defined)
            elif isinstance(st, ast.AnnAssign) and st.value is not None:
                reads(st.value, defined)
                target(st.target, defined)
            elif isinstance(st, (ast.Expr, ast.Return, ast.Raise, ast.Assert)):
                reads(st, defined)
            elif isinstance(st, ast.If):
                reads(st.test, defined)
                defined = block(st.body, defined) & block(st.orelse, defined)
            elif isinstance(st, ast.For):
                reads(st.iter, defined)
                inner = set(defined)
                target(st.target, inner)
                block(st.body, inner)
                block(st.orelse, defined)
            elif isinstance(st, ast.While):
                reads(st.test, defined)
                block(st.body, defined)
                block(st.orelse, defined)
            elif isinstance(st, ast.Delete):
                for t in st.targets:
                    reads(t, set())
                    if isinstance(t, ast.Name):
                        defined.discard(t.id)
            elif isinstance(st, (ast.Pass, ast.Break, ast.Continue)):
                pass
            else:
                reads(st, set())
        return defined

    block(stmts, set())
    return exposed


def _syncs(items):
    for it in items:
        if isinstance(it, Barrier):
            yield it
        elif isinstance(it, BlockIf):
            yield from _syncs(it.body)
            yield from _syncs(it.orelse)
        elif isinstance(it, BlockWhile):
            yield from _syncs(it.body)


def _src(node) -> str:
    return ast.unparse(node)


def _indent(lines: list[str], n: int) -> list[str]:
    return [" " * n + x for x in lines]


def flat_source(plan: Plan) -> str:
    """The typing function: the kernel for one thread, barriers gone (module docstring)."""
    out = [f"def {P}flat({', '.join(P + i for i in IDS)}, {', '.join(plan.params)}):", f"    {P}ctx = {CTX}"]
    for name, (shape, dtype) in {**plan.shared, **plan.local_arrays}.items():
        out.append(f"    {name} = {P}np.zeros({shape!r}, {P}np.{dtype.name})")

    def emit(items) -> list[str]:
        lines = []
        for it in items:
            if isinstance(it, list):
                for r in it:
                    lines += [x for s in r.stmts for x in _src(s).splitlines()]
            elif isinstance(it, Barrier):
                if it.target:
                    lines.append(f"{it.target} = {P}i32(0)")
            elif isinstance(it, WarpOp):
                lines += warp_result_types(it)
            elif isinstance(it, BlockIf):
                lines.append(f"if {_src(it.cond.expr)}:")
                lines += _indent(emit(it.body) or ["pass"], 4)
                lines.append("else:")
                lines += _indent(emit(it.orelse) or ["pass"], 4)
            elif isinstance(it, BlockWhile):
                lines.append(f"while {_src(it.cond.expr)}:")
                lines += _indent(emit(it.body) or ["pass"], 4)
        return lines

    body = emit(plan.items)
    # the flat function has no alive array: a thread's return is a plain return
    body = [x for x in body if not x.strip().startswith(f"{P}alive[")]
    out += _indent(body or ["pass"], 4)
    return "\n".join(out) + "\n"


def warp_result_types(op: WarpOp) -> list[str]:
    """What a warp-level operation returns, for the typing function: a shuffle its value's type, ballot
    and match_any an int32, the votes a boolean, match_all both, activemask a uint32 (as numba-cuda's)."""
    if op.kind.startswith("shfl"):
        return [f"{op.targets[0]} = {op.args[1]}"]
    value = {"ballot_sync": f"{P}i32(0)", "match_any_sync": f"{P}i32(0)", "activemask": f"{P}u32(0)",
             "match_all_sync": f"{P}i32(0)"}.get(op.kind, "False")  # fmt: skip
    lines = [f"{op.targets[0]} = {value}"] if op.targets else []
    if op.kind == "match_all_sync":
        lines.append(f"{op.targets[1]} = False")
    return lines


PACK = P + "pack"  # the tuple of a unit's arrays and values (packed_args), made once per block


def unit_args(plan: Plan) -> list[str]:
    """A unit's parameters: the thread, the block's ids, then one tuple of everything else. Passed one by
    one, a region took ~60 parameters, and Python compiles a call of more than 30 arguments as
    ``f(*args)``: numba's lowering of that tuple at every call, and of every parameter's reference
    count in every region, was most of a large kernel's compile time (flash_attention seq 1024)."""
    return [P + "t", *HEAD, P + "alive", P + "err", PACK]


def packed_args(plan: Plan) -> list[str]:
    """What ``PACK`` holds: the kernel's parameters, the shared arrays, the per-thread arrays."""
    return (
        [(P + "e_" + p) if p in plan.written_params else p for p in plan.params if p not in plan.expanded]
        + list(plan.shared)
        + [P + "e_" + v for v in plan.expanded]
        + [P + "la_" + v for v in plan.local_arrays]
    )


class CheckedIndex(ast.NodeTransformer):
    """``a[i, j]`` -> ``a[__cc_ix(i, a.shape[0], err), ...]`` for every array the kernel indexes: an
    index out of range is noted in ``err`` and read as 0 (negative ones wrap, as numpy's do); the launch
    then raises, undoes its writes and fastsim runs it (its IndexError). No exception in the loop:
    numba's ``boundscheck`` (and a raise here) kept the tiled matmul's inner loop 14x slower."""

    def __init__(self, arrays: dict, shapes: dict):
        self.arrays = arrays  # name -> ndim
        self.shapes = shapes  # shared and local arrays: name -> their constant shape

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if not (isinstance(node.value, ast.Name) and node.value.id in self.arrays):
            return node
        name, ndim = node.value.id, self.arrays[node.value.id]
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if ndim > 1 and not isinstance(node.slice, ast.Tuple):
            if not 2 <= ndim <= 4:
                _refuse(node, f"{name}[...] indexed by a tuple variable (write the indices out)")
            # a tuple of all the indices (the access pass's at2(...) returns one): checked as one
            node.slice = ast.Call(func=ast.Name(id=f"{P}ixt{ndim}", ctx=ast.Load()), keywords=[],
                                  args=[node.slice, ast.parse(f"{name}.shape", mode="eval").body,
                                        ast.Name(id=P + "err", ctx=ast.Load())])  # fmt: skip
            return ast.fix_missing_locations(node)
        checked = []
        for d, e in enumerate(parts):
            if isinstance(e, ast.Slice) or d >= ndim:
                checked.append(e)
                continue
            if name in self.shapes:  # a constant bound: LLVM drops the check where a loop range proves it
                shape = ast.Constant(self.shapes[name][d])
            else:
                shape = ast.parse(f"{name}.shape[{d}]", mode="eval").body
            err = ast.Name(id=P + "err", ctx=ast.Load())
            checked.append(
                ast.Call(func=ast.Name(id=P + "ix", ctx=ast.Load()), args=[e, shape, err], keywords=[])
            )
        node.slice = (
            ast.Tuple(elts=checked, ctx=ast.Load()) if isinstance(node.slice, ast.Tuple) else checked[0]
        )
        return ast.fix_missing_locations(node)


def _is_check(node) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == P + "ix"
        and len(node.args) == 3
    )


def _pure(node, written: set) -> bool:
    """An expression of numbers only (names, constants, arithmetic, ``a.shape[d]``), none of whose names
    the loop writes: the same value in every iteration, and evaluating it again has no effect."""

    def shape_read(node):  # a.shape[d]
        return (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
            and isinstance(node.value.value, ast.Name)
            and isinstance(node.slice, ast.Constant)
            and node.value.value.id not in written
        )

    return integer_arithmetic(node, written, leaf=shape_read)


def _every_iteration(stmts: list):
    """The expressions a loop body evaluates in every iteration, whatever its data: statements up to the
    first that may leave the iteration (break, continue, return, raise), and in each only the parts
    evaluated unconditionally (an ``if``'s test, not its branches; ``a if c else b``'s ``c``; the first
    operand of ``and``/``or``; a nested loop's range, not its body)."""

    def exprs(node):
        if isinstance(node, ast.IfExp):
            yield from exprs(node.test)
        elif isinstance(node, ast.BoolOp):
            yield from exprs(node.values[0])
        elif isinstance(node, ast.Compare):
            yield from exprs(node.left)
            yield from exprs(node.comparators[0])
        elif isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        else:
            yield node
            for child in ast.iter_child_nodes(node):
                yield from exprs(child)

    for s in stmts:
        if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Raise)) for n in ast.walk(s)):
            return
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            yield from exprs(s)
        elif isinstance(s, (ast.If, ast.While)):
            yield from exprs(s.test)
        elif isinstance(s, ast.For):
            yield from exprs(s.iter)


class HoistChecks:
    """A checked index (``__cc_ix(i, n, err)``) that a ``for ... in range()`` loop evaluates in every
    iteration, with ``i`` and ``n`` the same in every iteration, is checked once before the loop (only if
    the loop runs at least once): the tiled matmul's ``sA[ty, k]`` checks ``ty`` once, not 16 times. The
    check's store to ``err`` inside the loop kept LLVM from optimising the loop (6x slower). Same result:
    an index out of range is noted exactly when the launch without hoisting would note it."""

    def __init__(self):
        self.count = 0

    def stmts(self, stmts: list) -> list:
        out = []
        for s in stmts:
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(s, name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(s, name, self.stmts(inner))
            if isinstance(s, ast.For):
                out += [ast.fix_missing_locations(h) for h in self.hoist(s)]
            out.append(s)
        return out

    def hoist(self, node: ast.For) -> list:
        """The checks hoisted out of ``node`` (its body rewritten to read them), to run before it."""
        it = node.iter
        is_range = (
            isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and not it.keywords and 1 <= len(it.args) <= 3 and not node.orelse
        )  # fmt: skip
        if not is_range:
            return []
        written = names_in(node.body)[1] | names_in(node.target)[1]
        if all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in it.args):
            if len(range(*[a.value for a in it.args])) == 0:
                return []
            runs = None  # runs at least once
        elif all(_pure(a, written) for a in it.args):
            a = [f"({_src(x)})" for x in it.args]
            start, stop = ("0", a[0]) if len(a) == 1 else (a[0], a[1])
            test = f"{stop} > {start}"
            if len(a) == 3:
                test = f"({a[2]} > 0 and {start} < {stop}) or ({a[2]} < 0 and {start} > {stop})"
            runs = ast.parse(test, mode="eval").body
        else:
            return []
        names: dict[str, str] = {}
        replace: dict[int, str] = {}
        hoisted = []
        for expr in list(_every_iteration(node.body)):
            if not (_is_check(expr) and _pure(expr.args[0], written) and _pure(expr.args[1], written)):
                continue
            key = ast.dump(ast.Tuple(elts=expr.args[:2], ctx=ast.Load()))
            if key not in names:
                self.count += 1
                names[key] = f"{P}h{self.count}"
                value = copy.deepcopy(expr)
                if runs is not None:
                    value = ast.IfExp(test=copy.deepcopy(runs), body=value, orelse=ast.Constant(0))
                hoisted.append(ast.Assign(targets=[ast.Name(id=names[key], ctx=ast.Store())], value=value))
            replace[id(expr)] = names[key]

        class Swap(ast.NodeTransformer):
            def visit_Call(self, call):
                if id(call) in replace:
                    return ast.copy_location(ast.Name(id=replace[id(call)], ctx=ast.Load()), call)
                return self.generic_visit(call)

        if replace:
            node.body = [Swap().visit(s) for s in node.body]
        return hoisted


def unit_source(plan: Plan, unit, fname: str) -> str:
    """One thread's unit: a region, or a condition (a function each: numba's cost of one function
    grows faster than its size, so one function for all units compiled slower, 52 s against 18)."""
    out = [
        f"def {fname}({', '.join(unit_args(plan))}):",
        f"    {P}tx = {P}t % {P}bdx",
        f"    {P}ty = ({P}t // {P}bdx) % {P}bdy",
        f"    {P}tz = {P}t // ({P}bdx * {P}bdy)",
        f"    {P}ctx = {CTX}",
    ]
    body = _unit_body(plan, unit)
    used = {n.id for n in ast.walk(ast.parse("\n".join(body))) if isinstance(n, ast.Name)}
    out += [f"    {a} = {PACK}[{i}]" for i, a in enumerate(packed_args(plan)) if a in used]  # what it reads
    out += _indent(body, 4)
    return "\n".join(out) + "\n"


def _unit_body(plan: Plan, unit) -> list[str]:
    out = []
    stmts = _unit_stmts(unit)
    reads, writes = names_in(stmts)
    touched = reads | writes
    remats = [v for v in plan.remat if v in touched and v not in writes]
    for v in remats:
        touched |= plan.remat[v][1]
    for v in plan.local_arrays:
        if v in touched:
            out.append(f"{v} = {P}la_{v}[{P}t]")
    for v in plan.expanded:
        if v in touched:
            out.append(f"{v} = {P}e_{v}[{P}t]")
    for v in remats:
        out.append(f"{v} = {_src(plan.remat[v][0].value)}")
    shapes = {k: v[0] for k, v in {**plan.shared, **plan.local_arrays}.items()}
    check = CheckedIndex(plan.array_ndims, shapes)
    if isinstance(unit, Cond):
        return out + [f"if {_src(check.visit(copy.deepcopy(unit.expr)))}:", "    return True", "return False"]
    checked = HoistChecks().stmts([check.visit(copy.deepcopy(s)) for s in stmts])
    out += [x for s in checked for x in _src(s).splitlines()]
    for v in plan.expanded:
        if v in writes:
            out.append(f"{P}e_{v}[{P}t] = {v}")
    return out + ["return False"]


def block_source(plan: Plan, dtypes: dict, seeded: bool) -> str:
    """``__cc_block``: one block's threads through the item tree (module docstring)."""
    params = [(P + "p_" + p) if p in plan.written_params else p for p in plan.params]
    out = [f"def {P}block({', '.join(HEAD)}, {P}rng, {', '.join(params)}):"]
    b = [
        f"{P}nthr = {P}bdx * {P}bdy * {P}bdz",
        f"{P}alive = {P}np.ones({P}nthr, {P}np.bool_)",
        f"{P}err = {P}np.zeros(1, {P}np.int64)",
    ]
    for name, (shape, dtype) in plan.shared.items():
        b.append(f"{name} = {P}np.empty({shape!r}, {P}np.{dtype.name})")
        b.append(f"{name}.fill({P}poison_{name})")
    for v in plan.expanded:
        b.append(f"{P}e_{v} = {P}np.zeros({P}nthr, {P}np.{dtypes[v].name})")
        if v in plan.written_params:
            b.append(f"{P}e_{v}[:] = {P}p_{v}")
    for v, (shape, dtype) in plan.local_arrays.items():
        b.append(f"{P}la_{v} = {P}np.zeros(({P}nthr,) + {shape!r}, {P}np.{dtype.name})")
    if seeded:
        b += [
            f"{P}lanes = {P}np.empty(32, {P}np.int64)",
            f"{P}nw = ({P}nthr + 31) // 32",
            f"{P}prog = {P}np.empty({P}nw, {P}np.int64)",
            f"{P}pend = {P}np.empty({P}nw, {P}np.int64)",
        ]
    writer = BlockWriter(plan, dtypes, seeded)
    packed = packed_args(plan)
    b.append(f"{PACK} = ({', '.join(packed)}{',' if packed else ''})")
    out += _indent(b + writer.emit(plan.items) + [f"return {P}err[0]"], 4)
    return "\n".join(out) + "\n"


class BlockWriter:
    """The item tree as loops over a block's threads (block_source)."""

    def __init__(self, plan: Plan, dtypes: dict, seeded: bool):
        self.plan, self.dtypes, self.seeded = plan, dtypes, seeded
        self.call_args = ", ".join([P + "u", *unit_args(plan)[1:]])
        self.serial = 0  # numbers the per-construct arrays of warp-level ifs and loops

    def group(self, regions: list[Region]) -> list[str]:
        call_args = self.call_args
        if not self.seeded:
            assert len(regions) == 1
            return [
                f"for {P}u in range({P}nthr):",
                f"    if {P}alive[{P}u]:",
                f"        {P}region_{regions[0].index}({call_args})",
            ]
        m = len(regions)
        lines = [
            f"for {P}w in range({P}nw):",
            f"    {P}prog[{P}w] = 0",
            f"    {P}pend[{P}w] = {P}w",
            f"{P}npend = {P}nw",
            f"while {P}npend > 0:",
            f"    {P}k = {P}rng_below({P}rng, {P}npend)",
            f"    {P}w = {P}pend[{P}k]",
            f"    {P}j = {P}prog[{P}w]",
            f"    {P}prog[{P}w] = {P}j + 1",
            f"    if {P}j + 1 == {m}:",
            f"        {P}npend -= 1",
            f"        {P}pend[{P}k] = {P}pend[{P}npend]",
            f"    {P}cnt = min(32, {P}nthr - 32 * {P}w)",
            f"    {P}shuffled_lanes({P}rng, {P}lanes, {P}cnt)",
            f"    for {P}l in range({P}cnt):",
            f"        {P}u = 32 * {P}w + {P}lanes[{P}l]",
            f"        if {P}alive[{P}u]:",
        ]
        for j, r in enumerate(regions):
            kw = "if" if j == 0 else "elif"
            lines += [f"            {kw} {P}j == {j}:", f"                {P}region_{r.index}({call_args})"]
        return lines

    def uniform(self, c: Cond) -> list[str]:
        return [
            f"{P}first = True",
            f"{P}c = False",
            f"for {P}u in range({P}nthr):",
            f"    if {P}alive[{P}u]:",
            f"        {P}v = {P}cond_{c.index}({self.call_args})",
            f"        if {P}first:",
            f"            {P}c = {P}v",
            f"            {P}first = False",
            f"        elif {P}v != {P}c:",
            f"            raise {P}Divergent({c.line})",
        ]

    def barrier(self, it: Barrier) -> list[str]:
        if it.kind == "sync":
            return []  # every region before it has run for every thread
        lines = [
            f"{P}votes = 0",
            f"{P}nlive = 0",
            f"for {P}u in range({P}nthr):",
            f"    if {P}alive[{P}u]:",
            f"        {P}nlive += 1",
            f"        if {P}e_{it.pred}[{P}u]:",
            f"            {P}votes += 1",
        ]
        result = {"count": f"{P}votes", "and": f"1 if {P}votes == {P}nlive else 0",
                  "or": f"1 if {P}votes > 0 else 0"}[it.kind]  # fmt: skip
        if it.target and it.target in self.plan.expanded:
            lines += [f"{P}res = {result}", f"{P}e_{it.target}[:] = {P}res"]
        return lines

    def emit(self, items) -> list[str]:
        lines = []
        for it in items:
            if isinstance(it, list):
                lines += self.group(it)
            elif isinstance(it, Barrier):
                lines += self.barrier(it)
            elif isinstance(it, WarpOp):
                lines += warp_step(it, self.dtypes)
            elif isinstance(it, BlockIf) and it.warp:
                lines += self.warp_if(it)
            elif isinstance(it, BlockWhile) and it.warp:
                lines += self.warp_while(it)
            elif isinstance(it, BlockIf):
                lines += self.uniform(it.cond)
                lines.append(f"if {P}c:")
                lines += _indent(self.emit(it.body) or ["pass"], 4)
                lines.append("else:")
                lines += _indent(self.emit(it.orelse) or ["pass"], 4)
            elif isinstance(it, BlockWhile):
                lines.append("while True:")
                lines += _indent(
                    self.uniform(it.cond) + [f"if not {P}c:", "    break"] + self.emit(it.body), 4
                )
        return lines

    def warp_cond(self, c: Cond, cd: str) -> list[str]:
        """Each live thread's condition into ``cd``; it must be the same for a warp's live lanes."""
        return [
            f"for {P}u in range({P}nthr):",
            f"    {cd}[{P}u] = False",
            f"    if {P}alive[{P}u]:",
            f"        {cd}[{P}u] = {P}cond_{c.index}({self.call_args})",
            f"if {P}warp_uniform({cd}, {P}alive, {P}nthr):",
            f"    raise {P}WarpRefused({c.line}, 5, 'if')",
        ]

    def warp_if(self, it: BlockIf) -> list[str]:
        """An ``if`` each warp takes as one (warp-level operations inside, no barrier): the threads not
        taking a branch are set aside (not alive) while it runs, and get their state back after it."""
        self.serial += 1
        sv, cd = f"{P}sv{self.serial}", f"{P}cd{self.serial}"
        lines = [f"{sv} = {P}alive.copy()", f"{cd} = {P}np.zeros({P}nthr, {P}np.bool_)"]
        lines += self.warp_cond(it.cond, cd)
        lines += [f"for {P}u in range({P}nthr):", f"    {P}alive[{P}u] = {sv}[{P}u] and {cd}[{P}u]"]
        lines += self.emit(it.body)
        lines += [
            f"for {P}u in range({P}nthr):",
            f"    if {cd}[{P}u]:",
            f"        {sv}[{P}u] = {P}alive[{P}u]",
            f"        {P}alive[{P}u] = False",
            "    else:",
            f"        {P}alive[{P}u] = {sv}[{P}u]",
        ]
        lines += self.emit(it.orelse)
        return lines + [
            f"for {P}u in range({P}nthr):",
            f"    if {cd}[{P}u]:",
            f"        {P}alive[{P}u] = {sv}[{P}u]",
        ]

    def warp_while(self, it: BlockWhile) -> list[str]:
        """A loop each warp runs as one: a thread whose condition fails waits (``lf``) until every warp
        has left the loop."""
        self.serial += 1
        lf, cd, more = f"{P}lf{self.serial}", f"{P}cd{self.serial}", f"{P}more{self.serial}"
        body = self.warp_cond(it.cond, cd) + [
            f"{more} = False",
            f"for {P}u in range({P}nthr):",
            f"    if {P}alive[{P}u]:",
            f"        if {cd}[{P}u]:",
            f"            {more} = True",
            "        else:",
            f"            {lf}[{P}u] = True",
            f"            {P}alive[{P}u] = False",
            f"if not {more}:",
            "    break",
        ]
        lines = [f"{lf} = {P}np.zeros({P}nthr, {P}np.bool_)", f"{cd} = {P}np.zeros({P}nthr, {P}np.bool_)"]
        lines += ["while True:"] + _indent(body + self.emit(it.body), 4)
        return lines + [f"for {P}u in range({P}nthr):", f"    {P}alive[{P}u] = {lf}[{P}u]"]


SHFL_MODES = {"shfl_sync": 0, "shfl_up_sync": 1, "shfl_down_sync": 2, "shfl_xor_sync": 3}
VOTE_MODES = {"ballot_sync": 0, "all_sync": 1, "any_sync": 2, "eq_sync": 3}


def _match_keys(var: str, dtypes: dict, op: WarpOp) -> str:
    """The per-thread values a match compares, as their bits (floats viewed as integers of their size)."""
    dt = dtypes[var]
    if dt.kind == "f":
        return f"{P}e_{var}.view({P}np.int{dt.itemsize * 8})"
    if dt.kind not in "biu":
        _refuse(None, f"cuda.{op.kind} of a {dt.name} value (line {op.line})")
    return f"{P}e_{var}"


def warp_step(op: WarpOp, dtypes: dict) -> list[str]:
    """The warp step: every warp's lanes' results from their stored arguments (runtime.py), or the launch
    is refused (fastsim runs it, and raises its one-line error where a GPU's result is undefined)."""
    e = [f"{P}e_{v}" for v in op.args + op.targets]
    live = f"{P}alive, {P}nthr"
    if op.kind in SHFL_MODES:
        call = f"{P}warp_shfl({SHFL_MODES[op.kind]}, {e[0]}, {e[1]}, {e[2]}, {live}, {e[3]})"
    elif op.kind in VOTE_MODES:
        call = f"{P}warp_vote({VOTE_MODES[op.kind]}, {e[0]}, {e[1]}, {live}, {e[2]}, None)"
    elif op.kind.startswith("match"):
        mode, pred = (5, e[3]) if op.kind == "match_all_sync" else (4, "None")
        call = f"{P}warp_vote({mode}, {e[0]}, {_match_keys(op.args[1], dtypes, op)}, {live}, {e[2]}, {pred})"
    elif op.kind == "syncwarp":
        call = f"{P}warp_check_all({e[0]}, {live}, False)"
    else:  # activemask
        call = f"{P}warp_active({live}, {e[0]})"
    lines = [f"{P}wc = {call}"]
    for code in range(1, 5):  # numba raises exceptions with constant arguments
        lines += [f"if {P}wc == {code}:", f"    raise {P}WarpRefused({op.line}, {code}, {op.kind!r})"]
    return lines


def grid_source(plan: Plan, parallel: bool) -> str:
    params = [(P + "p_" + p) if p in plan.written_params else p for p in plan.params]
    loop = f"{P}prange" if parallel else "range"
    return textwrap.dedent(f"""\
        def {P}grid({P}gdx, {P}gdy, {P}gdz, {P}bdx, {P}bdy, {P}bdz, {P}rng, {", ".join(params)}):
            {P}nb = {P}gdx * {P}gdy * {P}gdz
            {P}bad = 0
            for {P}b in {loop}({P}nb):  # blocks in np.ndindex(grid) order, as fastsim runs them
                {P}bad += {P}block({P}b // ({P}gdy * {P}gdz), ({P}b // {P}gdz) % {P}gdy, {P}b % {P}gdz,
                         {P}bdx, {P}bdy, {P}bdz, {P}gdx, {P}gdy, {P}gdz, {P}rng, {", ".join(params)})
            if {P}bad:
                raise IndexError("an index out of bounds")
        """)


def source_digest(*parts: str) -> str:
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()[:16]


def poison_globals(plan: Plan) -> dict:
    from visualizer.engine.compiled.runtime import poison_value

    return {f"{P}poison_{name}": poison_value(dtype) for name, (shape, dtype) in plan.shared.items()}
