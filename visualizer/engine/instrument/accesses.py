"""The instrumenter's access pass: every global and shared element access of a kernel, recorded on a GPU.

Pure Python (``ast`` only). ``AccessPass.apply(fn, info)`` rewrites the traced copy of a kernel in
place so that each load, store and atomic of a global array (a kernel parameter) or a shared array
(a name bound to ``cuda.shared.array``) passes its index through a recording device function of
kernels/access_probes.py, which returns the same index::

    C[row, col] = acc            ->  C[_vz_at2(<bufs>, C, row, col, 7)] = acc
    s[t] += s[t + stride]        ->  _vz_k0 = t
                                     s[_vz_at1(<bufs>, s, _vz_k0, 8)] += s[_vz_at1(<bufs>, s, t + stride, 9)]
                                     _vz_at1(<bufs>, s, _vz_k0, 10)       (the store, after the add)
    cuda.atomic.add(h, b, 1)     ->  cuda.atomic.add(h, _vz_at1(<bufs>, h, b, 11), 1)

Python evaluates an index before the access it belongs to and a right-hand side before the store,
so the records keep the kernel's own order; a conditional expression records only the branch that
runs. ``<bufs>`` are the record buffer (``_vz_acc``, one of the pass's ``params``, with
``_vz_acc_cnt`` and ``_vz_acc_sel``), this lane's state (``_vz_st``: its record count, the buffer's
records per lane and where its own start, a local array the compiler keeps in registers), this warp's slot (``_vz_slot = _vz_slot_of(_vz_acc_sel)``,
-1 for a warp that records nothing) and the barrier epoch (``_vz_ep``, one more after each statement
that calls ``cuda.syncthreads*``), all set first. No shared memory and no word between lanes: each
lane records its own stream (kernels/access_probes.py). Every exit (each ``return`` of the kernel's
own, and its end) writes the lane's count of accesses (``_vz_acc_end``). A loop that records is kept twice: ``if _vz_slot < 0:`` the loop as written
(the warps of unsampled blocks run the kernel's own code), ``else:`` the loop recorded, where a loop
over a constant range that indexes a local array is unrolled (``_Unroller``: so that the array stays
in registers, as in the kernel's own build). The constants come from the kernel's namespace (a
built-in's closure) or, for a visitor's module, from its top-level integer assignments
(``module_constants``). Once every lane of the warp is done recording (its buffer full, or exited),
the warp runs the loop as written plus one count per access (``_vz_atcN``), with the whole block
together if the loop reaches a barrier: a range loop leaves its recorded steps for a counted loop of
its own (``_split``), any other loop asks ``_vz_room`` at each iteration (``_rewrite_block``).

``info`` gets ``sites`` (one per recorded access: line, array, op) and ``arrays`` (name, space and,
for shared arrays, the source text of their shape and dtype): what the host needs to decode the
buffers into the access table (analysis/gpu_accesses.py).

Not recorded (said in ``info["skipped"]``): slices and partial indices (views, not accesses);
accesses inside device functions that call a barrier; an index given as one tuple variable with more than
one dimension is recorded only if it is written out (``a[i, j]``); ``compare_and_swap`` (no index).
"""

from __future__ import annotations

import ast
import copy

from visualizer.engine.instrument.ast_tools import (
    BeforeReturns,
    assigned_names,
    each_statement,
    function_source_tree,
    located,
)

ACC, CNT, SEL = "_vz_acc", "_vz_acc_cnt", "_vz_acc_sel"
SLOT, EPOCH, SLOT_FN = "_vz_slot", "_vz_ep", "_vz_slot_of"
ST, START_FN, END_FN = "_vz_st", "_vz_acc_start", "_vz_acc_end"
COUNT, ROOM_FN = "_vz_n", "_vz_room"  # accesses counted in the loops' counted copies; may the warp record
# the pass's own names for numba.cuda, uint32 and uint64 (whatever the module imports)
CUDA, U32, U64 = "_vz_cuda", "_vz_u32", "_vz_u64"
AT = "_vz_at"  # + the number of indices: _vz_at1 ... _vz_at4
ATC = "_vz_atc"  # the same access only counted: _vz_atc1 ... _vz_atc4
ATV = "_vz_atv"  # the same through a view: _vz_atv1 ... _vz_atv3 (one more argument, the view's offset)
VIEW_OFF = "_vz_view_off"  # + the number of indices: a view's byte offset in its array
VO = "_vz_vo_"  # + a view's name: the variable holding that offset
TMP = "_vz_k"
THEN = "_vz_then"  # then(v, recorded) -> v: an atomic recorded after the loads of its value
MAX_DIMS = 4
MAX_SITES = 1 << 15  # kernels/access_probes.MAX_SITES: the site's bits in the access word
LOAD, STORE, ATOMIC = "load", "store", "atomic"
# the probes a clean build binds to no-ops: the accesses in their arguments are not the kernel's
PROBE_CALLS = frozenset({"trace_begin", "trace_end", "trace_tile", "trace_row_state"})
ATOMIC_INDEXED = frozenset({"add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min",
                            "nanmax", "nanmin", "cas"})  # fmt: skip


def _pure(node: ast.AST) -> bool:
    """An expression that may be evaluated twice: names, constants and arithmetic (no call, no load)."""
    return not any(isinstance(n, (ast.Call, ast.Subscript, ast.NamedExpr)) for n in ast.walk(node))


def _name(n: str, ctx=None) -> ast.Name:
    return ast.Name(n, ctx or ast.Load())


def _is_cuda_attr(node: ast.AST, *path: str) -> bool:
    """``node`` is ``cuda.<path...>`` (e.g. ``cuda.shared.array``)."""
    for attr in reversed(path):
        if not (isinstance(node, ast.Attribute) and node.attr == attr):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id == "cuda"


def _declared(fn: ast.FunctionDef, kind: str) -> dict[str, ast.Call]:
    """Names bound to ``cuda.<kind>.array(...)`` (kind: shared, local) -> that call."""
    out: dict[str, ast.Call] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _is_cuda_attr(node.value.func, kind, "array"):
                out.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def shared_arrays(fn: ast.FunctionDef) -> dict[str, tuple[str, str]]:
    """Names bound to ``cuda.shared.array(shape, dtype)`` -> (shape source, dtype source)."""
    out: dict[str, tuple[str, str]] = {}
    for name, call in _declared(fn, "shared").items():
        kw = {k.arg: k.value for k in call.keywords}
        shape = call.args[0] if call.args else kw.get("shape")
        dtype = call.args[1] if len(call.args) > 1 else kw.get("dtype")
        out[name] = (
            ast.unparse(shape) if shape is not None else "",
            ast.unparse(dtype) if dtype is not None else "",
        )
    return out


def local_arrays(fn: ast.FunctionDef) -> set[str]:
    """Names bound to ``cuda.local.array(...)``."""
    return set(_declared(fn, "local"))


def _calls_barrier(stmt: ast.stmt) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr.startswith("syncthreads") and _is_cuda_attr(node.func, node.func.attr):
                return True
    return False


class _Rewriter(ast.NodeTransformer):
    block_rooms = True  # a loop reaching a barrier asks the block for room (AccessPass.block_rooms)

    def __init__(self, arrays: dict[str, str], sites: list, skipped: list, names=None, devices=None,
                 locals_=frozenset(), views=None, count=False):  # fmt: skip
        self.count = count  # the counted copy of a loop: each access only counted (``counting``)
        self.arrays = arrays  # name -> space
        self.names = names or {}  # a device function's parameter or a view -> the kernel's array it is
        self.views = (
            views or {}
        )  # a view's name -> the name of its byte offset in that array (_register_views)
        self.views_made: dict[int, ast.stmt] = {}  # id of a view's assignment -> the offset's assignment
        self.devices = devices  # _Devices: the kernel's device functions, recorded where they get arrays
        self.locals = locals_  # local arrays (a device function's copies unroll loops over them too)
        self.sites = sites
        self.skipped = skipped
        self.temps = 0

    # nested functions (closures) are left alone
    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def _site(self, node: ast.AST, array: str, op: str) -> int:
        self.sites.append({"line": node.lineno, "array": self.names.get(array, array),
                           "space": self.arrays[array], "op": op})  # fmt: skip
        return len(self.sites) - 1

    def _indices(self, node: ast.Subscript) -> list[ast.expr] | None:
        sl = node.slice
        idx = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        if any(isinstance(i, (ast.Slice, ast.Starred)) for i in idx) or not 1 <= len(idx) <= MAX_DIMS:
            self.skipped.append({"line": node.lineno, "array": node.value.id, "why": "a slice or view"})
            return None
        return idx

    def counting(self) -> _Rewriter:
        """A rewriter for the counted copy of a loop: the same arrays, views and device functions, each
        access ``_vz_atcN(_vz_n, a, *idx)`` (no site: nothing is recorded there)."""
        rw = _Rewriter(self.arrays, [], [], names=self.names, devices=self.devices, locals_=self.locals,
                       views=self.views, count=True)  # fmt: skip
        rw.temps = self.temps + 1_000_000  # its own temporaries
        return rw

    def _call(self, array: str, idx: list[ast.expr], site: int, at: ast.AST) -> ast.Call:
        if self.count:
            args = [_name(COUNT), _name(array), *idx]
            return located(ast.Call(func=_name(f"{ATC}{len(idx)}"), args=args, keywords=[]), at)
        args = [_name(n) for n in (ACC, ST, SLOT, EPOCH)] + [_name(array), *idx, ast.Constant(site)]
        if array in self.views:  # an element of a view: its offset in the array it is a view of, first
            args.insert(5, _name(self.views[array]))
            return located(ast.Call(func=_name(f"{ATV}{len(idx)}"), args=args, keywords=[]), at)
        return located(ast.Call(func=_name(f"{AT}{len(idx)}"), args=args, keywords=[]), at)

    def visit_Assign(self, node: ast.Assign):
        origin = self.views_made.get(id(node))
        self.generic_visit(node)
        if origin is None:
            return node
        return [node, origin]  # the view's offset, right after the view

    def _recorded(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            return node.value.id if node.value.id in self.arrays else None
        return None

    def visit_Subscript(self, node: ast.Subscript):
        node.slice = self.visit(node.slice)
        array = self._recorded(node)
        if array is None or isinstance(node.ctx, ast.Del):
            node.value = self.visit(node.value)
            return node
        idx = self._indices(node)
        if idx is None:
            return node
        op = STORE if isinstance(node.ctx, ast.Store) else LOAD
        call = self._call(array, idx, self._site(node, array, op), node)
        node.slice = call if len(idx) == 1 else call  # a k-index call returns the k-tuple
        return node

    def visit_AugAssign(self, node: ast.AugAssign):
        """``a[i] += v``: a load, then v, then a store of the same element (indices bound once)."""
        array = self._recorded(node.target)
        if array is None:
            return self.generic_visit(node)
        target = node.target
        target.slice = self.visit(target.slice)  # loads inside the index come first
        idx = self._indices(target)
        node.value = self.visit(node.value)
        if idx is None:
            return node
        binds, names = [], []
        for i in idx:
            if isinstance(i, (ast.Name, ast.Constant)):
                names.append(i)
                continue
            tmp = f"{TMP}{self.temps}"
            self.temps += 1
            binds.append(located(ast.Assign(targets=[_name(tmp, ast.Store())], value=i), node))
            names.append(_name(tmp))
        load = self._call(array, [located(ast.Name(n.id, ast.Load()), node) if isinstance(n, ast.Name)
                                  else n for n in names], self._site(node, array, LOAD), node)  # fmt: skip
        target.slice = load
        store = self._call(array, [located(ast.Name(n.id, ast.Load()), node) if isinstance(n, ast.Name)
                                   else n for n in names], self._site(node, array, STORE), node)  # fmt: skip
        return [*binds, node, located(ast.Expr(store), node)]

    def visit_Call(self, node: ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in PROBE_CALLS:
            return node  # a probe's arguments: the clean build makes none of these accesses
        self.generic_visit(node)
        if isinstance(f, ast.Name) and self.devices is not None and f.id in self.devices.defs:
            return self.devices.call(node, self)
        if (
            isinstance(f, ast.Attribute)
            and _is_cuda_attr(f, "atomic", f.attr)
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in self.arrays
        ):
            array = node.args[0].id
            if f.attr not in ATOMIC_INDEXED or len(node.args) < 2:
                self.skipped.append({"line": node.lineno, "array": array, "why": f"cuda.atomic.{f.attr}"})
                return node
            sl = node.args[1]
            idx = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
            if not 1 <= len(idx) <= MAX_DIMS:
                return node
            call = self._call(array, idx, self._site(node, array, ATOMIC), node)
            if not self.count and self._records(node.args[-1]) and all(map(_pure, idx)):
                # its value loads memory first (``cuda.atomic.add(h, b, s[b])``): the atomic is recorded
                # after those loads, as it runs, not before them; its index is evaluated once more (pure)
                node.args[-1] = located(
                    ast.Call(func=_name(THEN), args=[node.args[-1], call], keywords=[]), node
                )
            else:
                node.args[1] = call
        return node

    @staticmethod
    def _records(node: ast.AST) -> bool:
        """Whether evaluating ``node`` records an access (a recording probe call inside it)."""
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith(AT)
                   for n in ast.walk(node))  # fmt: skip


def _epochs(body: list[ast.stmt]) -> list[ast.stmt]:
    """After each statement that calls a barrier (at this level), ``_vz_ep += 1``; into blocks."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(stmt)
            continue
        nested = False
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, _epochs(inner))
                nested = True
        if isinstance(stmt, ast.Try):
            for h in stmt.handlers:
                h.body = _epochs(h.body)
        out.append(stmt)
        if not nested and _calls_barrier(stmt):
            bump = ast.AugAssign(target=_name(EPOCH, ast.Store()), op=ast.Add(), value=ast.Constant(1))
            out.append(located(bump, stmt))
    return out


def _register_views(body: list[ast.stmt], rw: _Rewriter, params: set[str]) -> None:
    """Views made at the top level of ``body`` of a recorded array with integer indices, each bound
    once: ``qh = q[b, h]``. Their accesses are recorded as the array's own elements, through
    ``_vz_atv*`` with the view's byte offset, set right after the view (``_vz_vo_qh =
    _vz_view_off2(q, b, h)``, plus the offset of ``q`` itself if that is a view too). Which
    subscript is a view and which an element is the array's ``ndim``, known when the kernel
    compiles: for an element both the offset and the view's records are compiled away."""
    bound: dict[str, int] = {}
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                bound[n.id] = bound.get(n.id, 0) + 1
    for stmt in body:
        if not (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            continue
        x, v = stmt.targets[0].id, stmt.value
        if not (isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in rw.arrays):
            continue
        sl = v.slice
        idx = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        if (bound.get(x) != 1 or x in params or x in rw.arrays or not 1 <= len(idx) < MAX_DIMS
                or any(isinstance(i, (ast.Slice, ast.Starred)) or any(isinstance(n, ast.Call) for n in ast.walk(i))
                       for i in idx)):  # fmt: skip
            continue
        a = v.value.id
        off: ast.expr = ast.Call(func=_name(f"{VIEW_OFF}{len(idx)}"), args=[_name(a), *copy.deepcopy(idx)],
                                 keywords=[])  # fmt: skip
        if a in rw.views:
            off = ast.BinOp(left=_name(rw.views[a]), op=ast.Add(), right=off)
        rw.views[x] = VO + x
        rw.arrays[x] = rw.arrays[a]
        rw.names[x] = rw.names.get(a, a)
        if not rw.count:  # (a counted access needs no offset)
            rw.views_made[id(stmt)] = located(
                ast.Assign(targets=[_name(VO + x, ast.Store())], value=off), stmt
            )


def _reaches_barrier(stmt: ast.stmt, devices) -> bool:
    """The statement calls ``cuda.syncthreads*``, itself or through the kernel's device functions."""
    seen: set[str] = set()
    todo = [stmt]
    while todo:
        node = todo.pop()
        if _calls_barrier(node):
            return True
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and devices is not None:
                name = n.func.id
                if name in devices.defs and name not in seen:
                    seen.add(name)
                    todo.append(devices.defs[name][0])
    return False


def _range_args(loop: ast.For) -> list[ast.expr] | None:
    """``for v in range(...)`` with a plain name: its (start, stop, step) expressions, else None."""
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and not it.keywords and 1 <= len(it.args) <= 3 and isinstance(loop.target, ast.Name)
            and not any(isinstance(a, ast.Starred) for a in it.args)):  # fmt: skip
        return None
    args = list(it.args)
    if len(args) == 1:
        args.insert(0, ast.Constant(0))
    if len(args) == 2:
        args.append(ast.Constant(1))
    return args


def _room_test(rw: _Rewriter, original: ast.stmt) -> ast.expr:
    """``_vz_room(...)``, asked by the whole block (``cuda.syncthreads_or``) if the loop reaches a barrier."""
    room: ast.expr = ast.Call(func=_name(ROOM_FN), args=[_name(ACC), _name(ST), _name(COUNT)], keywords=[])
    if _reaches_barrier(original, rw.devices):
        room = ast.Call(func=ast.Attribute(value=_name(CUDA), attr="syncthreads_or", ctx=ast.Load()),
                        args=[room], keywords=[])  # fmt: skip
    return located(room, original)


def _split(original: ast.For, recorded: ast.For, rw: _Rewriter, unroll) -> list[ast.stmt] | None:
    """A recorded ``for v in range(a, b, s)`` (no ``break`` or ``else`` of its own) as two loops::

        _vz_r0_lo, _vz_r0_hi, _vz_r0_st = a, b, s      (recorded once, as range() evaluates them)
        _vz_r0_nx = _vz_r0_lo
        for v in range(_vz_r0_lo, _vz_r0_hi, _vz_r0_st):
            if not <room>: break
            _vz_r0_nx = v + _vz_r0_st
            <the body recorded>
        for v in range(_vz_r0_nx, _vz_r0_hi, _vz_r0_st):
            <the body counted>

    A warp (or, when the loop reaches a barrier, its block together) leaves the recorded loop at the
    first iteration it has no room for, and runs the rest in a loop of its own: the kernel's body with
    one add per access, which the compiler allocates registers for apart from the recorded body's (in
    one loop holding both, flash_attention's counted iterations ran in a 13,512-instruction loop with
    170 spill loads; alone, 1,569 and 23). ``continue`` is fine: the next start is set first."""
    bounds = _range_args(recorded)
    if bounds is None or _jumps_out(original, ast.Break):
        return None
    tag = f"_vz_r{rw.temps}_"
    rw.temps += 1
    lo, hi, step, nxt = (tag + x for x in ("lo", "hi", "st", "nx"))
    var = recorded.target.id
    counted = rw.counting().visit(copy.deepcopy(original))
    body = counted.body if unroll is None else unroll.block(counted.body)

    def rng(start: str) -> ast.Call:
        return ast.Call(func=_name("range"), args=[_name(start), _name(hi), _name(step)], keywords=[])

    out = [
        ast.Assign(targets=[ast.Tuple([_name(n, ast.Store()) for n in (lo, hi, step)], ast.Store())],
                   value=ast.Tuple(bounds, ast.Load())),
        ast.Assign(targets=[_name(nxt, ast.Store())], value=_name(lo)),
        ast.For(target=_name(var, ast.Store()), iter=rng(lo), orelse=[], body=[
            ast.If(test=ast.UnaryOp(op=ast.Not(), operand=_room_test(rw, original)), body=[ast.Break()], orelse=[]),
            ast.Assign(targets=[_name(nxt, ast.Store())],
                       value=ast.BinOp(left=_name(var), op=ast.Add(), right=_name(step))),
            *recorded.body]),
        ast.For(target=_name(var, ast.Store()), iter=rng(nxt), body=body, orelse=[]),
    ]  # fmt: skip
    return [located(s, original) for s in out]


def _rewrite_block(stmts: list[ast.stmt], rw: _Rewriter, sites: list, unroll=None) -> list[ast.stmt]:
    """The statements with their accesses recorded; a loop that records any becomes
    ``if _vz_slot < 0: <the loop as written> else: <the loop recorded>``, so the warps that record
    nothing run the kernel's own loop (unrolled and fused as the compiler likes: the cost stays with the
    sampled warps). Sampling is per block, so both sides of that ``if`` are uniform in a block and its
    barriers are reached by every thread of the block, or by none. ``unroll``: an ``_Unroller`` for the
    recorded copies.

    Once every lane of a warp is done recording (past its ``cap`` a lane only counts anyway), the warp
    runs the kernel's own body with a plain count per access, so a long kernel's sampled warps cost
    their buffer's worth of recording, not their whole run's. Nothing is recorded after that in either
    copy, so the records are the same. A range loop is split in two (``_split``: the recorded loop,
    left when there is no room, then the counted loop); any other loop asks at each iteration, ``if
    _vz_room(...): <the body recorded> else: <the body counted>``. A loop that reaches a barrier asks
    with ``cuda.syncthreads_or(_vz_room(...))`` instead: the whole block then takes one copy, and every
    thread meets the same barriers (with each lane answering for itself, matmul_tiled's recording on the
    H200 never finished: lanes of one warp can see the done bits at different moments). That extra
    barrier is met where the loop's own are, by the same threads, and only in sampled blocks.

    In a counted copy (a device function's counting copy) accesses are only counted: no copies."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, (ast.For, ast.While)) and not rw.count:
            original = copy.deepcopy(stmt)
            before = len(sites)
            new = rw.visit(stmt)
            if len(sites) == before:
                out.extend(new if isinstance(new, list) else [new])
                continue
            new = new if isinstance(new, list) else [new]
            if unroll is not None:
                new = unroll.block(new)
            # (without block rooms: a loop that reaches a barrier stays recorded to its end, AccessPass)
            block_room = rw.block_rooms or not _reaches_barrier(original, rw.devices)
            if len(new) == 1 and isinstance(new[0], (ast.For, ast.While)) and block_room:
                split = _split(original, new[0], rw, unroll) if isinstance(new[0], ast.For) else None
                if split is not None:
                    new = split
                else:
                    counted = rw.counting().visit(copy.deepcopy(original))
                    body = counted.body if unroll is None else unroll.block(counted.body)
                    new[0].body = [located(ast.If(test=_room_test(rw, original), body=new[0].body, orelse=body),
                                           stmt)]  # fmt: skip
            test = ast.Compare(left=_name(SLOT), ops=[ast.Lt()], comparators=[ast.Constant(0)])
            branch = ast.If(test=located(test, stmt), body=[original], orelse=new)
            out.append(ast.copy_location(branch, stmt))
        elif isinstance(stmt, ast.If):
            stmt.test = rw.visit(stmt.test)
            stmt.body = _rewrite_block(stmt.body, rw, sites, unroll)
            stmt.orelse = _rewrite_block(stmt.orelse, rw, sites, unroll)
            out.append(stmt)
        else:
            new = rw.visit(stmt)
            out.extend(new if isinstance(new, list) else [new])
    return out


# --- device functions: a recording copy per way the kernel calls one -----------------------------

MAX_DEVICE_DEPTH = 4  # device functions calling device functions: recorded this deep


class _Devices:
    """The kernel's device functions (``defs``: name -> (its ``def``, with its file's line numbers; the
    integer constants of its namespace)). A call that passes a recorded array (a global or shared
    array, by name, as a positional argument) is redirected to a copy of the function recorded as the
    kernel is, the parameter standing for the caller's array (the sites name the kernel's array, at
    the device function's lines), the recording state passed on as four more parameters::

        store_tile(buf, sQ, rb, cg, scale)  ->  store_tile__vz_rec0(buf, sQ, rb, cg, scale, <bufs>)

    One copy per device function and arrangement of arrays (``module_defs``, defined before the
    kernel). A device function that calls a barrier is left as it is and said in ``skipped`` (the
    barrier epoch is the kernel's count, not passed back), so is one more than MAX_DEVICE_DEPTH calls
    deep."""

    def __init__(self, defs: dict, sites: list, skipped: list):
        self.defs = defs
        self.sites = sites
        self.skipped = skipped
        self.copies: dict[tuple, str] = {}
        self.module_defs: list[ast.FunctionDef] = []
        self.depth = 0

    def call(self, node: ast.Call, caller: _Rewriter) -> ast.Call:
        name = node.func.id
        fdef, constants = self.defs[name]
        params = [a.arg for a in fdef.args.args]
        arrays, locals_ = {}, set()
        indexed = {
            n.value.id
            for n in ast.walk(fdef)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
        }
        indexed |= {n.args[0].id for n in ast.walk(fdef) if isinstance(n, ast.Call) and n.args
                    and isinstance(n.args[0], ast.Name)}  # an atomic's array, or an array passed on  # fmt: skip
        offsets = {}  # a parameter given a view -> the caller's name of that view's offset
        for param, arg in zip(params, node.args, strict=False):
            if isinstance(arg, ast.Name) and arg.id in caller.arrays and param in indexed:
                arrays[param] = (caller.names.get(arg.id, arg.id), caller.arrays[arg.id])
                if arg.id in caller.views:
                    offsets[param] = caller.views[arg.id]
            elif isinstance(arg, ast.Name) and arg.id in caller.locals:
                locals_.add(param)
        if not arrays or fdef.args.vararg or fdef.args.kwonlyargs:
            return node
        skipped = [] if caller.count else self.skipped  # (a loop's recorded copy says it, once)
        if _calls_barrier(fdef):
            skipped.append({"line": node.lineno, "array": next(iter(arrays.values()))[0],
                            "why": f"in {name}, a device function that calls a barrier"})  # fmt: skip
            return node
        if self.depth >= MAX_DEVICE_DEPTH:
            skipped.append({"line": node.lineno, "array": next(iter(arrays.values()))[0],
                            "why": f"in {name}, device functions nested too deep"})  # fmt: skip
            return node
        count = caller.count  # a loop's counted copy calls a counting copy: each access one add
        key = (
            name,
            tuple(sorted(arrays if count else arrays.items())),
            tuple(sorted(locals_)),
            tuple(sorted(offsets)) if not count else (),
            count,
        )  # (a count is a count, whose array it is)
        if key not in self.copies:
            copy_name = f"{name}__vz_{'cnt' if count else 'rec'}{len(self.copies)}"
            self.copies[key] = copy_name
            body_def = copy.deepcopy(fdef)
            own_locals = frozenset(locals_) | frozenset(local_arrays(body_def))
            rw = _Rewriter({p: sp for p, (_, sp) in arrays.items()}, [] if count else self.sites, [] if count
                           else self.skipped, names={p: a for p, (a, _) in arrays.items()}, devices=self,
                           locals_=own_locals, views={} if count else {p: VO + p for p in offsets},
                           count=count)  # fmt: skip
            _register_views(body_def.body, rw, set())
            self.depth += 1
            try:
                unroll = _Unroller(constants, assigned_names(body_def), set(own_locals))
                body_def.body = _rewrite_block(body_def.body, rw, rw.sites, unroll)
                if count:  # nothing else unrolls a counting copy's loops
                    body_def.body = unroll.block(body_def.body)
            finally:
                self.depth -= 1
            body_def.name = copy_name
            for d in (
                body_def.decorator_list
            ):  # an explicit signature no longer fits: the copy has more parameters
                if isinstance(d, ast.Call):
                    d.args = []
            for extra in self._extra(offsets, count, own=True):
                body_def.args.args.append(ast.copy_location(ast.arg(arg=extra), fdef))
            self.module_defs.append(ast.fix_missing_locations(body_def))
        node.func = located(_name(self.copies[key]), node)
        node.args = [*node.args, *(located(_name(n), node) for n in self._extra(offsets, count, own=False))]
        return node

    @staticmethod
    def _extra(offsets: dict, count: bool, own: bool) -> tuple[str, ...]:
        """The parameters a copy takes after the function's own: the count alone for a counting copy;
        the recording state and each view parameter's offset (its own name, or the caller's)."""
        if count:
            return (COUNT,)
        return (ACC, ST, COUNT, SLOT, EPOCH, *(VO + p if own else offsets[p] for p in sorted(offsets)))


def _is_device_decorator(d: ast.expr) -> bool:
    return isinstance(d, ast.Call) and any(
        k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value is True for k in d.keywords
    )


def module_device_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """A visitor's module's top-level device functions (``@cuda.jit(device=True)``), by name."""
    return {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any(_is_device_decorator(d) for d in n.decorator_list)
    }


def namespace_device_functions(namespace: dict) -> dict[str, tuple[ast.FunctionDef, dict]]:
    """The device functions a built-in kernel's namespace names (a factory's closure: flash_attention's
    ``load_tile``, ``store_tile``): name -> (their ``def`` from their file, their own namespace)."""
    from visualizer.engine.instrument.instrumenter import function_namespace

    out = {}
    for name, obj in namespace.items():
        py = getattr(obj, "py_func", None) or getattr(obj, "fn", None)
        device = (getattr(obj, "targetoptions", None) or {}).get("device") or getattr(obj, "_device", False)
        if not (device and callable(py)) or name.startswith("_vz_"):
            continue
        try:
            fdef = function_source_tree(py).body[0]
        except (OSError, TypeError):
            continue
        if isinstance(fdef, ast.FunctionDef) and fdef.name == name:
            out[name] = (fdef, function_namespace(py))
    return out


# --- unrolling the recorded loops of a constant trip count --------------------------------------

MAX_UNROLL_TRIPS = 64  # a recorded loop of more iterations is left a loop
MAX_UNROLL_STATEMENTS = 768  # ... and one whose unrolled body would have more statements than this


def _records(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith(AT)
               for n in ast.walk(node))  # fmt: skip


def _jumps_out(loop: ast.For | ast.While, jumps=(ast.Break, ast.Continue)) -> bool:
    """A ``break`` or ``continue`` (``jumps``) of this loop itself (not of a loop inside it), or an
    ``else:``."""
    if loop.orelse:
        return True
    todo = list(loop.body)
    while todo:
        n = todo.pop()
        if isinstance(n, jumps):
            return True
        if isinstance(
            n, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        ):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return False


def _statements(stmts: list[ast.stmt]) -> int:
    return sum(1 for s in stmts for n in ast.walk(s) if isinstance(n, ast.stmt))


class _Unroller:
    """Unrolls, in the recorded copy of a loop, each ``for v in range(...)`` whose bounds are compile-time
    constants (``constants``: names the kernel never binds -> ints), whose body records and whose
    variable (or a name computed from it) indexes a local array: ``v = 0``, the body, ``v = 1``, the
    body, ... Why: the compiler fully unrolls such a loop as written (flash_attention's ``for u in
    range(NU)`` staging loop over ``buf``), which keeps the local array in registers; with a record
    call per access the loop outgrows its unrolling budget, stays a loop, and the array it indexes moves
    to local memory, for every warp (one allocation serves both copies of the loop). On the H200 that
    cost flash_attention seq 4096 5x before a sampled warp recorded anything (ncu: 540 MB of local
    stores); unrolled, the build with no warp sampled ran 0.812 ms, the traced build 0.819 ms. A loop
    that indexes no local array is left to the compiler (unrolling matmul_tiled's ``k`` loop took its
    recording build from 80 registers to 127). Inner loops first; a loop with its own
    ``break``/``continue``/``else``, more than MAX_UNROLL_TRIPS iterations or an unrolled body over
    MAX_UNROLL_STATEMENTS is left as it is. Same order, same values: each copy is the body as the loop
    would run it, and the copies share their sites."""

    def __init__(self, constants: dict, assigned: set[str], local_arrays: set[str]):
        self.constants = {k: v for k, v in constants.items()
                          if k not in assigned and isinstance(v, int) and not isinstance(v, bool)}  # fmt: skip
        self.local_arrays = local_arrays

    def trips(self, loop: ast.For) -> list[int] | None:
        bounds = _range_args(loop)
        if bounds is None:
            return None
        try:
            args = [_value(a, self.constants) for a in bounds]
        except (ValueError, AttributeError, ZeroDivisionError):
            return None
        if not all(isinstance(a, int) for a in args) or args[2] == 0:
            return None
        r = range(*args)
        return list(r) if len(r) <= MAX_UNROLL_TRIPS else None

    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        return each_statement(stmts, self.stmt)

    def stmt(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [stmt]
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, self.block(inner))
        if not (isinstance(stmt, ast.For) and _records(stmt) and not _jumps_out(stmt)):
            return [stmt]
        if not _indexes_local(stmt, self.local_arrays):
            return [stmt]  # unrolling it keeps nothing in registers, and costs registers (matmul's k loop)
        trips = self.trips(stmt)
        if trips is None or len(trips) * (1 + _statements(stmt.body)) > MAX_UNROLL_STATEMENTS:
            return [stmt]
        out: list[ast.stmt] = []
        for k in trips:
            bind = ast.Assign(targets=[ast.Name(stmt.target.id, ast.Store())], value=ast.Constant(k))
            out.append(located(bind, stmt))
            out.extend(copy.deepcopy(stmt.body))
        return out


def _indexes_local(loop: ast.For, local_arrays: set[str]) -> bool:
    """The loop's variable, or a name computed from it in the body, is in an index of a local array."""
    tainted = {loop.target.id} if isinstance(loop.target, ast.Name) else set()

    def mentions(node) -> bool:
        return any(isinstance(n, ast.Name) and n.id in tainted for n in ast.walk(node))

    for _ in range(2):  # names computed from names computed from the variable
        for n in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
            if isinstance(n, ast.Assign) and mentions(n.value):
                tainted.update(t.id for t in n.targets if isinstance(t, ast.Name))
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and mentions(n.value):
                tainted.add(n.target.id)
    return any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in local_arrays
        and mentions(n.slice)
        for n in ast.walk(ast.Module(body=loop.body, type_ignores=[]))
    )  # fmt: skip


def visitor_pass(tree: ast.Module) -> AccessPass:
    """The access pass for a visitor's module: its top-level constants and device functions."""
    constants = module_constants(tree)
    devices = {name: (fdef, constants) for name, fdef in module_device_functions(tree).items()}
    return AccessPass(constants=constants, device_functions=devices)


def module_constants(tree: ast.Module) -> dict[str, int]:
    """A visitor's module-level integer constants (``TILE = 16``, ``HALF = TILE // 2``), each bound once
    at the top level; evaluated from the source text, no code run."""
    counts: dict[str, int] = {}
    for stmt in tree.body:
        for n in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) else ():
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                counts[n.id] = counts.get(n.id, 0) + 1
    out: dict[str, int] = {}
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and counts.get(stmt.targets[0].id) == 1):  # fmt: skip
            try:
                v = _value(stmt.value, out)
            except (ValueError, AttributeError, ZeroDivisionError):
                continue
            if isinstance(v, int) and not isinstance(v, bool):
                out[stmt.targets[0].id] = v
    return out


def _end_call(at: ast.AST) -> ast.Expr:
    call = ast.Call(func=_name(END_FN), args=[_name(n) for n in (CNT, ST, COUNT, SLOT, ACC)], keywords=[])
    return located(ast.Expr(call), at)


class AccessPass:
    """The pass object the instrumenter runs (engine/instrument/instrumenter.py's ``passes=``)."""

    name = "accesses"
    params = (ACC, CNT, SEL)

    def __init__(self, exclude=(), constants: dict | None = None, device_functions: dict | None = None,
                 block_rooms: bool = True):  # fmt: skip
        self.exclude = frozenset(exclude)  # parameters that are probe buffers, not the kernel's data
        # False: a loop that reaches a barrier records to its end, with no ``syncthreads_or(_vz_room)``
        # (the compiled simulator takes no barrier inside a condition; its buffers have room for every
        # access, and past a lane's room the probes only count, so the records are the same)
        self.block_rooms = block_rooms
        # compile-time integer constants of the kernel's namespace (a closure's tile size, a module's
        # TILE): the recorded copies of loops over a constant range are unrolled (_Unroller)
        self.constants = dict(constants or {})
        # the kernel's device functions: name -> (def, its namespace's constants) (_Devices)
        self.device_functions = dict(device_functions or {})
        self.module_defs: list[ast.FunctionDef] = []  # their recording copies, after apply
        self.key = (
            self.name,
            tuple(sorted(self.exclude)),
            block_rooms,
        )  # engine/capture/builds.py caches builds by it

    def namespaces(self) -> list[dict]:
        """The device functions' own namespaces: their recording copies run in the kernel's."""
        return [ns for _, ns in self.device_functions.values()]

    def globals(self) -> dict:
        from numba import cuda, uint32, uint64

        from visualizer.kernels import access_probes as probes

        return {SLOT_FN: probes.slot_of, START_FN: probes.start, END_FN: probes.end, ROOM_FN: probes.room,
                CUDA: cuda, U32: uint32, U64: uint64, THEN: probes.then,
                **{f"{AT}{n}": fn for n, fn in probes.AT.items()},
                **{f"{ATC}{n}": fn for n, fn in probes.ATC.items()},
                **{f"{ATV}{n}": fn for n, fn in probes.ATV.items()},
                **{f"{VIEW_OFF}{n}": fn for n, fn in probes.VIEW_OFF.items()}}  # fmt: skip

    def apply(self, fn: ast.FunctionDef, info: dict) -> None:
        own = [a.arg for a in fn.args.args if not a.arg.startswith("_vz_")]
        shared = shared_arrays(fn)
        arrays = {n: "global" for n in own if n not in self.exclude}
        arrays.update({n: "shared" for n in shared})
        sites: list = []
        skipped: list = []
        devices = _Devices(self.device_functions, sites, skipped)
        locals_ = local_arrays(fn)
        rw = _Rewriter(arrays, sites, skipped, devices=devices, locals_=frozenset(locals_))
        rw.block_rooms = self.block_rooms
        _register_views(fn.body, rw, set(own))
        # (unrolled for a GPU's registers; the compiled simulator's build, without block rooms, keeps
        # its loops: unrolled, numba compiled matmul_tiled's recording for over a minute)
        constants = self.constants if self.block_rooms else {}
        body = _rewrite_block(fn.body, rw, sites, _Unroller(constants, assigned_names(fn), locals_))
        self.module_defs = devices.module_defs
        body = _epochs(body)
        exits = []
        for stmt in body:
            new = BeforeReturns(_end_call).visit(stmt)
            exits.extend(new if isinstance(new, list) else [new])
        body = exits
        if not body or not isinstance(body[-1], ast.Return):
            body.append(_end_call(fn.body[-1]))
        first = fn.body[0]

        def cuda_call(*attrs, args):
            f: ast.expr = _name(CUDA)
            for a in attrs:
                f = ast.Attribute(value=f, attr=a, ctx=ast.Load())
            return ast.Call(func=f, args=args, keywords=[])

        setup = [
            ast.Assign(targets=[_name(SLOT, ast.Store())],
                       value=ast.Call(func=_name(SLOT_FN), args=[_name(SEL)], keywords=[])),
            # this lane's state (count, records per lane, where its own start: registers once inlined)
            ast.Assign(targets=[_name(ST, ast.Store())],
                       value=cuda_call("local", "array", args=[ast.Constant(3), _name(U32)])),
            ast.Assign(targets=[_name(COUNT, ast.Store())],
                       value=cuda_call("local", "array", args=[ast.Constant(1), _name(U64)])),
            ast.Expr(ast.Call(func=_name(START_FN), args=[_name(n) for n in (ACC, CNT, ST, COUNT, SLOT)],
                              keywords=[])),
            ast.Assign(targets=[_name(EPOCH, ast.Store())], value=ast.Constant(0)),
        ]  # fmt: skip
        for s in setup:
            located(s, first)
        doc = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0
        fn.body = body[:doc] + setup + body[doc:]
        if len(sites) > MAX_SITES:
            raise ValueError(f"the kernel has {len(sites):,} accesses to record, more than the {MAX_SITES:,} "
                             "the GPU recording can tell apart")  # fmt: skip
        used = {s["array"] for s in sites}
        info["sites"] = sites
        info["arrays"] = [
            {
                "name": n,
                "space": space,
                "shape_src": shared.get(n, ("", ""))[0] if space == "shared" else "",
                "dtype_src": shared.get(n, ("", ""))[1] if space == "shared" else "",
            }
            for n, space in arrays.items()
            if n in used
        ]
        info["skipped"] = skipped


# --- before the instrumenter runs passes (and for tests): the pass on its own ------------------


def standalone(tree: ast.Module, kernel: str, exclude=()) -> tuple[ast.Module, dict]:
    """The module plus ``<kernel>__traced``: the kernel with only the access pass (its parameters
    appended; engine/instrument/instrumenter.py ``instrument(..., trace=False)``), and the pass's info."""
    from visualizer.engine.instrument.instrumenter import instrument

    p = visitor_pass(tree)  # as a visitor's module gets it
    p.exclude = frozenset(exclude)
    out = instrument(tree, kernel, passes=(p,), trace=False)
    return out, out.vz_info[p.name]


# --- host side: what each recorded array is -----------------------------------------------------

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b}  # fmt: skip


def _value(node: ast.AST, names: dict):
    """A shape or dtype expression's value: constants, names and attributes of ``names``, tuples and
    + - * //; anything else raises ValueError (no code is run)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(node.id)
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_value(node.value, names), node.attr)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e, names) for e in node.elts)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, names), _value(node.right, names)
        if (
            not (isinstance(left, int) and isinstance(right, int))
            or abs(left) > 1 << 40
            or abs(right) > 1 << 40
        ):
            raise ValueError("not a small integer")
        return _OPS[type(node.op)](left, right)
    raise ValueError(type(node).__name__)


def _dtype_of(value):
    import numpy as np

    try:
        return np.dtype(str(value))
    except TypeError:
        return np.dtype(getattr(value, "__name__", str(value)))


def resolve_arrays(info: dict, host: dict, namespace: dict) -> list[dict]:
    """Name, space, dtype, itemsize and shape of every array the pass's sites name.

    ``host``: kernel parameter -> its array (global ones); ``namespace``: the kernel module's globals,
    where a shared array's shape and dtype (``cuda.shared.array((TILE, TILE), float32)``) are looked up.
    A shape it cannot work out is left empty (the table then indexes the array by element offset)."""
    out = []
    for a in info["arrays"]:
        if a["space"] == "global":
            ary = host[a["name"]]
            out.append(
                {**a, "dtype": str(ary.dtype), "itemsize": ary.dtype.itemsize, "shape": list(ary.shape)}
            )
            continue
        shape: list[int] = []
        dtype = None
        try:
            v = _value(ast.parse(a["shape_src"], mode="eval").body, namespace)
            shape = [int(x) for x in (v if isinstance(v, tuple) else (v,))]
        except (ValueError, SyntaxError, TypeError, AttributeError):
            pass
        try:
            dtype = _dtype_of(_value(ast.parse(a["dtype_src"], mode="eval").body, namespace))
        except (ValueError, SyntaxError, TypeError, AttributeError):
            pass
        out.append({**a, "dtype": str(dtype) if dtype is not None else "", "shape": shape,
                    "itemsize": dtype.itemsize if dtype is not None else 0})  # fmt: skip
    return out
