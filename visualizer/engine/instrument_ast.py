"""AST pieces every instrumenter pass uses (engine/instrument.py and its passes): pure ``ast``."""

from __future__ import annotations

import ast
from collections.abc import Callable


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
