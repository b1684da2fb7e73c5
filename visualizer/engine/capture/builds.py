"""A built-in kernel's two builds, from its plain Python function in ``kernels/``.

* **instrumented**: the AST instrumenter's probes (engine/instrument/instrumenter.py), the same ones a
  visitor's kernel gets; its parameters are the kernel's own, then ``trace, active``, then each
  pass's buffers (``instrument.tree.vz_params``);
* **clean**: the function itself, its domain probes (tiles staged, softmax state) bound to
  no-ops, with the kernel's own parameters.

Both are compiled with the kernel's ``jit_options`` (kernels/probes.py ``with_options``), once per
(function, did-work expression, passes) in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from visualizer.engine.instrument.instrumenter import instrument_function


@dataclass(frozen=True)
class Builds:
    traced: Any  # numba dispatcher
    clean: Any
    params: tuple[str, ...]  # the parameters the instrumenter added to the traced build, in order
    info: dict  # each pass's info (engine/instrument/instrumenter.py), by pass name
    # the instrumented function's own AST (a FunctionDef) and namespace: the compiled simulator engine
    # compiles it from these (its file holds the kernel's original source)
    traced_tree: Any = None
    namespace: dict | None = None


_cache: dict[tuple, Builds] = {}
_clean: dict[tuple, Any] = {}  # one clean build per (function, options), whatever the lenses


def _key(py_fn, did_work, passes, options) -> tuple:
    lenses = tuple(getattr(p, "key", p.name) for p in passes)
    return (py_fn, did_work, lenses, tuple(sorted(options.items())))


def builds(py_fn, did_work: str | None = None, passes: tuple = (), **jit_options) -> Builds:
    """The instrumented and clean builds of ``py_fn`` (module docstring); ``jit_options`` add to
    (or override) the kernel's own."""
    key = _key(py_fn, did_work, passes, jit_options)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    from numba import cuda

    from visualizer.kernels.probes import without_probes

    options = {**getattr(py_fn, "jit_options", {}), **jit_options}
    traced_fn, tree = instrument_function(py_fn, did_work=did_work, passes=passes)
    clean_key = (py_fn, tuple(sorted(jit_options.items())))
    clean = _clean.get(clean_key)
    if clean is None:
        clean = _clean[clean_key] = cuda.jit(without_probes(py_fn), **options)
    fd = traced_def(tree, traced_fn.__name__)
    out = Builds(
        cuda.jit(traced_fn, **options), clean, tuple(tree.vz_params), tree.vz_info, fd, traced_fn.__globals__
    )
    _cache[key] = out
    return out


def traced_def(tree, name: str):
    """The FunctionDef named ``name`` in an instrumented module's tree (None if there is none)."""
    import ast

    return next((f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name), None)


def pair(py_fn, did_work: str | None = None, **jit_options):
    """(instrumented, clean) dispatchers: for benchmarks and tests that launch a kernel by hand
    (the instrumented one takes the kernel's arguments, then the trace and active buffers)."""
    b = builds(py_fn, did_work, **jit_options)
    return b.traced, b.clean
