"""The SIMT lens's instrumenter passes: branch probes and barrier probes (pure ``ast``).

``BranchPass`` rewrites the traced copy of a kernel so that every branch of its source is recorded:

* ``if c:`` / ``elif c:`` / ``while c:`` -> the test becomes ``_vz_branch(_vz_br, _vz_brn, SITE, c)``,
  which returns ``c`` unchanged (kernels/branch_probes.py), so the probe runs exactly when, and by
  the lanes that, evaluate the test;
* ``for i in range(a[, b[, s]]):`` (no ``else:``) -> the same loop as a ``while`` whose test is
  recorded once per iteration, the last (failing) test included::

      _vz_lo_N, _vz_hi_N, _vz_st_N = a, b, s        # evaluated once, as range() does
      while _vz_branch(..., SITE, _vz_lo_N < _vz_hi_N):
          i = _vz_lo_N
          _vz_lo_N += _vz_st_N                      # before the body, so `continue` still steps
          <body>

  A ``for`` over ``range()`` of compile-time constants (``range(MICRO)``, ``range(D // 4)``: literals
  and names the kernel never binds) runs the same number of times in every lane: its test is no
  decision a lane makes and never diverges, and the compiler unrolls it (fully, or in part). Its site
  (kind ``for-const``) keeps the inner branches' iterations apart; on a simulator it is recorded like
  any loop (the host needs the iterations to form the warps' visits) and on a GPU not probed at all
  (``probe_constant_loops=False``: a probe per test kept flash_attention's loops from being unrolled,
  its register tiles went to a 320-byte local stack frame); analysis/branches.py drops its visits
  either way, so both backends report the same table;
  Other ``for`` loops (over an array, ``zip``...) are left as written and listed as not recorded;
* a test that is a name the kernel never assigns (a module or closure constant such as
  ``if BARRIER:``), ``not`` of one, ``and``/``or`` of them or a comparison of constants (``if TILE >
  8:``) is left alone: the compiler resolves it, no branch exists on the GPU.

An early ``return`` is a branch through its ``if`` (``if i >= n: return`` is an ``if`` site whose
taken lanes leave). Nested functions are not entered.

``BarrierPass`` puts ``_vz_t = _vz_bar_arrive()`` before and ``_vz_bar_release(_vz_bar, _vz_barn, SITE,
_vz_t)`` after every ``cuda.syncthreads()`` statement (GPU: the warp's lowest lane reads %globaltimer).

Both follow the instrumenter's pass protocol (engine/instrument/instrumenter.py): ``name``, ``params`` (appended to
the traced kernel's parameters), ``globals()`` (the device functions the inserted calls name) and
``apply(fn, info)``, which rewrites ``fn`` in place and stores its site table in ``info``. Added nodes
carry the line of the statement they belong to, so the kernel's own line numbers are kept.
"""

from __future__ import annotations

import ast
import copy

import numpy as np

from visualizer.engine.instrument.ast_tools import (
    assigned_names,
    each_statement,
    integer_arithmetic,
    is_call_to,
    located,
)
from visualizer.engine.instrument.instrumenter import instrument

BRANCH_FN = "_vz_branch"
BRANCH_LOG, BRANCH_COUNT = "_vz_br", "_vz_brn"
ARRIVE_FN, RELEASE_FN = "_vz_bar_arrive", "_vz_bar_release"
BAR_LOG, BAR_COUNT, BAR_T = "_vz_bar", "_vz_barn", "_vz_bar_t"

# how many records each warp (GPU) or thread (simulator) keeps at most (fewer where a launch's log
# would pass its bytes below); the counts say how many it made. The reply carries only the columns
# some row used (trim_logs)
BRANCH_RECORDS = 1 << 14
BARRIER_RECORDS = 64


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id_, ast.Store() if store else ast.Load())


def _is_static(test: ast.expr, assigned: set[str]) -> bool:
    """A test the compiler decides: a constant, a name the kernel never binds (a compile-time constant
    of its module), ``not`` of one, ``and``/``or`` of them, or a comparison of constant integer
    expressions (``if not SUBTRACT_MAX``, ``if TILE > 8``). A test that mixes a constant with a run-time
    value (``CAUSAL and j > i``) is recorded: where the constant lets the rest run, it is a branch."""
    if isinstance(test, ast.Constant):
        return not isinstance(test.value, bool) or test.value is not True  # `while True` is recorded
    if isinstance(test, ast.Name):
        return test.id not in assigned
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return isinstance(test.operand, ast.Name | ast.UnaryOp | ast.BoolOp | ast.Compare) and _is_static(
            test.operand, assigned
        )
    if isinstance(test, ast.BoolOp):
        return all(
            isinstance(v, ast.Name | ast.UnaryOp | ast.BoolOp | ast.Compare) and _is_static(v, assigned)
            for v in test.values
        )
    if isinstance(test, ast.Compare):
        return all(_is_constant(e, assigned) for e in (test.left, *test.comparators))
    return False


def _is_constant(expr: ast.expr, assigned: set[str]) -> bool:
    """An integer expression of literals and names the kernel never binds (compile-time constants)."""
    return integer_arithmetic(expr, assigned, bools=False)


def _range_args(node: ast.For) -> list[ast.expr] | None:
    it = node.iter
    if (
        isinstance(node.target, ast.Name)
        and not node.orelse
        and isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "range"
        and 1 <= len(it.args) <= 3
        and not it.keywords
    ):
        return list(it.args)
    return None


def _step_sign(step: ast.expr | None) -> int:
    """+1 or -1 when the step is a literal (or absent), 0 when only the run knows."""
    if step is None:
        return 1
    if isinstance(step, ast.Constant) and isinstance(step.value, int) and step.value != 0:
        return 1 if step.value > 0 else -1
    if (
        isinstance(step, ast.UnaryOp)
        and isinstance(step.op, ast.USub)
        and isinstance(step.operand, ast.Constant)
        and isinstance(step.operand.value, int)
    ):
        return -1
    return 0


class BranchPass:
    """Record every branch of the kernel's source, per warp and visit. ``probe_constant_loops``: probe
    the tests of loops over a constant range too (the simulator needs them; a GPU does not)."""

    name = "branches"
    params = (BRANCH_LOG, BRANCH_COUNT)

    def __init__(self, probe_constant_loops: bool = True):
        self.probe_constant_loops = probe_constant_loops

    def globals(self) -> dict:
        from visualizer.kernels.branch_probes import branch

        return {BRANCH_FN: branch}

    def apply(self, fn: ast.FunctionDef, info: dict) -> None:
        self.sites: list[dict] = []
        self.skipped: list[dict] = []
        self.assigned = assigned_names(fn)
        self.loops: list[int] = []
        self.n_range = 0
        fn.body = self._body(fn.body)
        info["sites"] = self.sites
        info["not_recorded"] = self.skipped
        info["records"] = BRANCH_RECORDS

    # --- the walk -------------------------------------------------------------------------------
    def _site(self, node: ast.stmt, kind: str) -> int:
        site = len(self.sites)
        if isinstance(node, ast.For):
            text = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
        else:
            text = f"{'elif' if kind == 'elif' else kind} {ast.unparse(node.test)}:"
        self.sites.append(
            {"site": site, "line": node.lineno, "kind": kind, "loops": list(self.loops), "text": text[:200]}
        )
        return site

    def _probe(self, site: int, test: ast.expr, at: ast.AST) -> ast.expr:
        call = ast.Call(
            func=_name(BRANCH_FN),
            args=[_name(BRANCH_LOG), _name(BRANCH_COUNT), ast.Constant(site), test],
            keywords=[],
        )
        located(call.func, at)
        for arg in call.args[:3]:
            located(arg, at)
        return ast.copy_location(call, test)

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        return each_statement(body, self._stmt)

    def _stmt(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [stmt]
        if isinstance(stmt, ast.If):
            return [self._if(stmt, "if")]
        if isinstance(stmt, ast.While):  # always recorded: its iterations tell the visits apart
            site = self._site(stmt, "while")
            stmt.test = self._probe(site, stmt.test, stmt)
            self.loops.append(site)
            stmt.body = self._body(stmt.body)
            self.loops.pop()
            stmt.orelse = self._body(stmt.orelse)
            return [stmt]
        if isinstance(stmt, ast.For):
            args = _range_args(stmt)
            if args is None:  # only the iterations are recorded (a probe at the top of the body)
                site = self._site(stmt, "for-body")
                self.skipped.append({"line": stmt.lineno, "kind": "for", "why": "not a for over range()"})
                self.loops.append(site)
                enter = ast.Expr(self._probe(site, ast.Constant(True), stmt))
                stmt.body = [located(enter, stmt), *self._body(stmt.body)]
                self.loops.pop()
                stmt.orelse = self._body(stmt.orelse)
                return [stmt]
            if all(_is_constant(a, self.assigned) for a in args):
                why = "a constant trip count: every lane runs it alike (it cannot diverge)"
                self.skipped.append({"line": stmt.lineno, "kind": "for", "why": why})
                if self.probe_constant_loops:
                    return self._for_range(stmt, args, "for-const")
                site = self._site(stmt, "for-const")
                self.loops.append(site)
                stmt.body = self._body(stmt.body)
                self.loops.pop()
                stmt.orelse = self._body(stmt.orelse)
                return [stmt]
            return self._for_range(stmt, args)
        if isinstance(stmt, (ast.With, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                if getattr(stmt, field, None):
                    setattr(stmt, field, self._body(getattr(stmt, field)))
            return [stmt]
        return [stmt]

    def _if(self, node: ast.If, kind: str) -> ast.If:
        if _is_static(node.test, self.assigned):
            node.body, node.orelse = self._body(node.body), self._body(node.orelse)
            return node
        site = self._site(node, kind)
        node.test = self._probe(site, node.test, node)
        node.body = self._body(node.body)
        orelse = node.orelse
        if len(orelse) == 1 and isinstance(orelse[0], ast.If) and orelse[0].col_offset == node.col_offset:
            node.orelse = [self._if(orelse[0], "elif")]  # `elif`: written on the if's column
        else:
            node.orelse = self._body(orelse)
        return node

    def _for_range(self, node: ast.For, args: list[ast.expr], kind: str = "for") -> list[ast.stmt]:
        k = self.n_range
        self.n_range += 1
        lo, hi, st = f"_vz_lo_{k}", f"_vz_hi_{k}", f"_vz_st_{k}"
        start, stop, step = (
            (ast.Constant(0), args[0], None)
            if len(args) == 1
            else (args[0], args[1], args[2] if len(args) == 3 else None)
        )
        sign = _step_sign(step)
        step_expr = step if step is not None else ast.Constant(1)
        setup = ast.Assign(
            targets=[ast.Tuple([_name(lo, True), _name(hi, True), _name(st, True)], ast.Store())],
            value=ast.Tuple([start, stop, step_expr], ast.Load()),
        )
        located(setup, node)
        less = ast.Compare(_name(lo), [ast.Lt()], [_name(hi)])
        more = ast.Compare(_name(lo), [ast.Gt()], [_name(hi)])
        if sign > 0:
            test: ast.expr = less
        elif sign < 0:
            test = more
        else:
            up = ast.Compare(_name(st), [ast.Gt()], [ast.Constant(0)])
            test = ast.BoolOp(
                ast.Or(),
                [
                    ast.BoolOp(ast.And(), [up, less]),
                    ast.BoolOp(ast.And(), [ast.UnaryOp(ast.Not(), up), more]),
                ],
            )
        located(test, node)
        site = self._site(node, kind)
        self.loops.append(site)
        body = self._body(node.body)
        self.loops.pop()
        head = [
            ast.Assign(targets=[copy.deepcopy(node.target)], value=_name(lo)),
            ast.AugAssign(target=_name(lo, True), op=ast.Add(), value=_name(st)),
        ]
        for h in head:
            located(h, node)
        loop = ast.While(test=self._probe(site, test, node), body=head + body, orelse=[])
        ast.copy_location(loop, node)
        loop.end_lineno, loop.end_col_offset = node.end_lineno, node.end_col_offset
        return [setup, loop]


def _is_syncthreads(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and is_call_to(stmt.value, "syncthreads") and not stmt.value.args


class BarrierPass:
    """Time every warp's arrival at and release from each ``cuda.syncthreads()`` (GPU)."""

    name = "barriers"
    params = (BAR_LOG, BAR_COUNT)

    def globals(self) -> dict:
        from visualizer.kernels.branch_probes import barrier_arrive, barrier_release

        return {ARRIVE_FN: barrier_arrive, RELEASE_FN: barrier_release}

    def apply(self, fn: ast.FunctionDef, info: dict) -> None:
        self.sites: list[dict] = []
        fn.body = self._body(fn.body)
        info["sites"] = self.sites
        info["records"] = BARRIER_RECORDS

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(stmt)
                continue
            if _is_syncthreads(stmt):
                site = len(self.sites)
                self.sites.append({"site": site, "line": stmt.lineno})
                arrive = ast.Assign(
                    targets=[_name(BAR_T, True)],
                    value=ast.Call(func=_name(ARRIVE_FN), args=[], keywords=[]),
                )
                release = ast.Expr(
                    ast.Call(
                        func=_name(RELEASE_FN),
                        args=[_name(BAR_LOG), _name(BAR_COUNT), ast.Constant(site), _name(BAR_T)],
                        keywords=[],
                    )
                )
                out += [located(arrive, stmt), stmt, located(release, stmt)]
                continue
            for field in ("body", "orelse", "finalbody"):
                if isinstance(getattr(stmt, field, None), list):
                    setattr(stmt, field, self._body(getattr(stmt, field)))
            out.append(stmt)
        return out


BUFFER_BYTES = 64 << 20  # a launch's branch (or barrier) log at most: fewer records per row above it
# a GPU's branch log (12-byte records) may take more: it then holds the SIMT lesson's pair at its
# largest (2^20 threads, 2 x (128 + 1) + 2 visits per warp: 102 MB) uncut
GPU_BRANCH_BYTES = 128 << 20


def branch_buffers(
    simulator: bool, n_blocks: int, threads_per_block: int, barriers: bool = False, records: int | None = None
) -> dict:
    """The zeroed log and count a launch passes for the branch probes (or, ``barriers``, the barrier
    probes): simulator, one row per thread (int32 codes); GPU, one row per warp (int64 records)."""
    warps = n_blocks * ((threads_per_block + 31) // 32)
    if barriers:
        rec = max(1, min(records or BARRIER_RECORDS, BUFFER_BYTES // (24 * warps)))
        rows = n_blocks if simulator else warps  # the simulator records nothing: keep it small
        return {
            BAR_LOG: np.zeros((rows, 1 if simulator else rec, 3), np.int64),
            BAR_COUNT: np.zeros(rows, np.int32),
        }
    if simulator:
        threads = n_blocks * threads_per_block
        rec = max(1, min(records or BRANCH_RECORDS, BUFFER_BYTES // (4 * threads)))
        return {BRANCH_LOG: np.zeros((threads, rec), np.int32), BRANCH_COUNT: np.zeros(threads, np.int32)}
    rec = max(1, min(records or BRANCH_RECORDS, GPU_BRANCH_BYTES // (12 * warps)))
    return {BRANCH_LOG: np.zeros((warps, rec, 3), np.int32), BRANCH_COUNT: np.zeros(warps, np.int32)}


def trim_logs(buffers: dict) -> dict:
    """The lens's logs cut to the records the fullest row made (a row's count may be past its end:
    then the log keeps its width, and the host says it was cut); other buffers as they are. For the
    reply: a log sized for thousands of records per row travels with the few a kernel made."""
    out = dict(buffers)
    for log, count in ((BRANCH_LOG, BRANCH_COUNT), (BAR_LOG, BAR_COUNT)):
        if log in out and count in out and out[log].ndim >= 2 and len(out[count]):
            used = int(min(max(int(np.max(out[count])), 1), out[log].shape[1]))
            out[log] = np.ascontiguousarray(out[log][:, :used])
    return out


def lens(
    simulator: bool, n_blocks: int, threads_per_block: int, branches: bool = True, barriers: bool = False
) -> tuple[tuple, dict]:
    """The SIMT lens of one launch: its passes and their zeroed buffers, by the parameter names the
    passes append. ``branches``: the branch probes; ``barriers``: the barrier timestamps, GPU only (the
    simulator has no clock). Asked for apart, so that one lens's probes do not stretch what the other
    measures: branch probes inside a loop lengthen the work between two barriers."""
    passes: tuple = ()
    buffers: dict = {}
    if branches:
        passes += (BranchPass(probe_constant_loops=simulator),)
        buffers.update(branch_buffers(simulator, n_blocks, threads_per_block))
    if barriers and not simulator:
        passes += (BarrierPass(),)
        buffers.update(branch_buffers(simulator, n_blocks, threads_per_block, barriers=True))
    return passes, buffers


def lens_bytes(simulator: bool, n_blocks: int, threads_per_block: int, branches: bool, barriers: bool) -> int:
    """What the lens's buffers add to a reply, at most."""
    return sum(a.nbytes for a in lens(simulator, n_blocks, threads_per_block, branches, barriers)[1].values())


def apply_passes(tree: ast.Module, kernel: str, passes, suffix: str = "__traced") -> ast.Module:
    """The passes alone, without the trace probes (tests, the by-hand GPU check): engine/instrument/instrumenter.py's
    ``instrument(..., trace=False)``; ``tree.vz_info[pass.name]`` holds what each pass recorded."""
    return instrument(tree, kernel, passes=tuple(passes), trace=False, suffix=suffix)
