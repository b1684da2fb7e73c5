"""AST pieces every instrumenter pass uses (engine/instrument/instrumenter.py and its passes): pure ``ast``."""

from __future__ import annotations

import ast
from collections.abc import Callable


def assigned_names(fn: ast.FunctionDef) -> set[str]:
    """Every name a function binds: its parameters, assignment and loop targets (what is not a
    module's or a closure's constant)."""
    names = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


# a pass-added def's function (the access pass's recording copy of a device function) keeps its def here:
# its code's file holds the original, so its source is this tree, not the file's (function_source_tree)
REWRITTEN_DEF = "_vz_source_def"


def remember_rewritten(namespace: dict, defs) -> None:
    """After a module tree with pass-added ``defs`` is exec'd into ``namespace``: each def's function
    reads its source from its def (function_source_tree), so the compiled engine can take it."""
    for d in defs:
        fn = namespace.get(d.name)
        py = getattr(fn, "py_func", None) or fn
        if callable(py) and hasattr(py, "__code__"):
            setattr(py, REWRITTEN_DEF, d)


def function_source_tree(py_fn) -> ast.Module:
    """A function's own source, parsed, with its file's line numbers (the def is ``body[0]``); a
    pass-added def's function (remember_rewritten): that def."""
    import copy
    import inspect
    import textwrap

    rewritten = getattr(py_fn, REWRITTEN_DEF, None)
    if rewritten is not None:
        return ast.Module(body=[copy.deepcopy(rewritten)], type_ignores=[])
    lines, first = inspect.getsourcelines(py_fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    return tree


def located(node: ast.AST, at: ast.AST) -> ast.AST:
    """``node`` and all its children placed on ``at``'s line (the user's line), so tracebacks, Numba's
    messages and per-line records of inserted code point at the statement it belongs to."""
    for child in ast.walk(node):
        ast.copy_location(child, at)
        if hasattr(at, "end_lineno"):
            child.end_lineno = at.lineno
            child.end_col_offset = at.col_offset
    return node


class BeforeReturns(ast.NodeTransformer):
    """``return X`` -> ``<before(return)>; return X`` in a kernel's own body; nested functions,
    lambdas and classes keep their returns."""

    def __init__(self, before: Callable[[ast.Return], ast.stmt]):
        self.before = before

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Return(self, node):
        return [self.before(node), node]


def is_call_to(node: ast.AST, attr: str, prefix: bool = False) -> bool:
    """``x.attr(...)`` (``prefix``: any ``x.attr...(...)``: syncthreads and its _count/_and/_or forms)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (node.func.attr.startswith(attr) if prefix else node.func.attr == attr)
    )


def each_statement(stmts: list[ast.stmt], rewrite) -> list[ast.stmt]:
    """The statements each rewritten into a list (``rewrite(stmt) -> list``), in order."""
    return [new for stmt in stmts for new in rewrite(stmt)]


def integer_arithmetic(
    node: ast.AST, bound: set[str], bools: bool = True, leaf: Callable[[ast.AST], bool] | None = None
) -> bool:
    """Unary and binary arithmetic on integer literals (``bools``: True and False among them) and on
    names not in ``bound``; ``leaf(node)`` may accept a further kind of operand."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and (bools or not isinstance(node.value, bool))
    if isinstance(node, ast.Name):
        return node.id not in bound
    if isinstance(node, ast.BinOp):
        return integer_arithmetic(node.left, bound, bools, leaf) and integer_arithmetic(
            node.right, bound, bools, leaf
        )
    if isinstance(node, ast.UnaryOp):
        return integer_arithmetic(node.operand, bound, bools, leaf)
    return leaf is not None and leaf(node)
