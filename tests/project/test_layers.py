"""The tree is the architecture drawing: imports point down the layers, no circles, and numba,
streamlit and plotly stay in the layers that own them (ARCHITECTURE.md). Read with ``ast``; nothing
is imported. Every import counts, also one inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# layer -> the layers it may import (itself always)
ALLOWED = {
    "kernels": set(),
    "specs": set(),
    "analysis": {"specs"},
    "engine": {"specs", "analysis", "kernels"},
    "figures": {"specs", "analysis"},
    "web": {"specs", "analysis", "engine", "figures"},
    "tools": {"specs", "analysis", "engine", "figures", "kernels", "web"},  # serve starts the web
    # the maintainers' tools (devtools/, in the checkout, not installed): they may import any layer; no
    # layer imports them (violations() says so for every file of the package, whatever its layer)
    "devtools": {"specs", "analysis", "engine", "figures", "kernels", "web", "tools"},
}
# third-party packages owned by a few layers
OWNERS = {
    "numba": {"kernels", "engine"},
    "streamlit": {"web"},
    "plotly": {"figures", "web"},
    "distributed": {"engine", "tools"},  # optional (requirements-cluster.txt): the cluster and its starter
    "dask": {"engine", "tools"},
}
# Deliberate exceptions, each with its reason: the benchmarks time kernels outside the runner (no worker
# process in between is the point); the bench and the load test are clients of the app (Streamlit's
# test harness and its wire protocol), not pages.
EXCEPTIONS = {
    ("visualizer/tools/bench.py", "numba"),
    ("visualizer/tools/attention_bench.py", "numba"),
    ("devtools/access_cost.py", "numba"),  # a benchmark too: four builds timed on one set of arrays
    ("visualizer/tools/bench.py", "streamlit.testing"),
    ("visualizer/tools/loadtest.py", "streamlit.proto"),
}


def excepted(rel: str, module: str) -> bool:
    return any(rel == f and (module == m or module.startswith(m + ".")) for f, m in EXCEPTIONS)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "devtools":
        return "devtools"
    if parts[0] != "visualizer":
        return None
    if len(parts) == 1:
        return "top"
    if parts[1] == "app":
        return "web"  # the Streamlit entry script, kept at visualizer/app.py for `streamlit run`
    if parts[1] == "__main__":
        return "tools"
    return parts[1] if parts[1] in ALLOWED else None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "kernels":  # the checkout's kernels/ folder is the package visualizer.kernels
        parts = ["visualizer", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, tree: ast.AST | None = None, type_only: bool = False) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file; `from pkg import mod` names pkg.mod
    where pkg.mod is a module of this tree. ``type_only``: the imports under ``if TYPE_CHECKING:`` too."""
    tree = tree or ast.parse(path.read_text(), str(path))
    here = module_name(path)
    found = []
    for node in ast.walk(tree) if type_only else _walk_runtime(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                pkg = here.split(".")
                if path.name != "__init__.py":
                    pkg = pkg[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((sub if sub in MODULES else base, node.lineno))
    return found


def _walk_runtime(tree: ast.AST):
    """ast.walk, less the bodies of ``if TYPE_CHECKING:`` (annotations only, never imported)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


PACKAGE = ("visualizer", "kernels")  # what the wheel installs (setup.py), kernels/ as visualizer.kernels
DEVTOOLS = "devtools"  # the maintainers' tools: in the checkout only


def project_files() -> list[Path]:
    return sorted(p for d in (*PACKAGE, DEVTOOLS) for p in (ROOT / d).rglob("*.py"))


MODULES = {module_name(p) for p in project_files()}


def violations(files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        src_layer = layer_of(module_name(path))
        rel = path.relative_to(ROOT)
        for mod, line in imports_of(path):
            top = mod.split(".")[0]
            if top == "kernels":
                bad.append(
                    f"{rel}:{line}: imports the top-level kernels ({mod}); the package is visualizer.kernels"
                )
            if top == DEVTOOLS and rel.parts[0] in PACKAGE:
                bad.append(
                    f"{rel}:{line}: the installed package imports {mod}, a tool the wheel does not ship"
                )
            if top in OWNERS and src_layer not in OWNERS[top] and not excepted(str(rel), mod):
                bad.append(f"{rel}:{line}: {top} imported in layer {src_layer}")
            dst_layer = layer_of(mod)
            if dst_layer is None or src_layer is None or dst_layer == src_layer:
                continue
            if dst_layer == "top" or src_layer == "top":
                continue
            if dst_layer not in ALLOWED[src_layer]:
                bad.append(f"{rel}:{line}: {src_layer} imports {dst_layer} ({mod})")
    return bad


def cycles(files: list[Path], type_only: bool = False) -> list[list[str]]:
    """The import circles among ``files``; ``type_only``: counting the imports made for annotations only
    (``if TYPE_CHECKING:``), which are a circle of the design even where Python never runs them."""
    graph: dict[str, set[str]] = {}
    for path in files:
        me = module_name(path)
        deps = set()
        for mod, _ in imports_of(path, type_only=type_only):
            while mod and mod not in MODULES:
                mod = mod.rpartition(".")[0]
            if (
                mod
                and mod != me
                and not me.startswith(mod + ".")
                and not (ROOT / mod.replace(".", "/")).is_dir()
            ):
                deps.add(mod)
        graph[me] = deps
    # Tarjan's strongly connected components
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_belongs_to_a_layer():
    homeless = [
        str(p.relative_to(ROOT))
        for p in project_files()
        if layer_of(module_name(p)) is None and module_name(p) != "visualizer"
    ]
    assert homeless == []


def test_imports_point_down_the_layers():
    assert violations(project_files()) == []


def test_no_import_circles():
    assert cycles(project_files()) == []


@pytest.mark.parametrize(
    "where, line, why",
    [
        (
            "visualizer/analysis/planted.py",
            "from visualizer.engine.run.runner import Runner",
            "analysis imports engine",
        ),
        ("visualizer/figures/planted.py", "import streamlit as st", "streamlit imported in layer figures"),
        ("visualizer/specs/planted.py", "from numba import cuda", "numba imported in layer specs"),
        ("visualizer/engine/planted.py", "from visualizer.web import session", "engine imports web"),
        ("visualizer/tools/planted.py", "from devtools import crosscheck", "does not ship"),
        ("visualizer/planted.py", "import devtools.ship_h200", "does not ship"),  # the top layer, too
        ("kernels/planted.py", "from devtools.crosscheck import CASES", "does not ship"),
    ],
)
def test_a_planted_wrong_way_import_fails(tmp_path, monkeypatch, where, line, why):
    planted = ROOT / where

    def read_text(self, *a, **k):
        return line + "\n" if self == planted else Path.read_text.__wrapped__(self, *a, **k)

    read_text.__wrapped__ = Path.read_text
    monkeypatch.setattr(Path, "read_text", read_text)
    assert any(why in v for v in violations([planted]))


def test_a_planted_circle_is_found(monkeypatch):
    a, b = ROOT / "visualizer/analysis/schedule.py", ROOT / "visualizer/analysis/capture.py"
    real = Path.read_text
    extra = {
        a: "\nfrom visualizer.analysis import capture\n",
        b: "\nfrom visualizer.analysis import schedule\n",
    }
    monkeypatch.setattr(Path, "read_text", lambda self, *x, **k: real(self, *x, **k) + extra.get(self, ""))
    assert ["visualizer.analysis.capture", "visualizer.analysis.schedule"] in cycles([a, b])


def test_every_root_constant_is_the_repository():
    """A module that finds the repository as ``parents[N]`` of its own file names the right N
    (moving a file one folder deeper must move its N too)."""
    import re

    wrong = []
    for path in project_files():
        for m in re.finditer(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d)\]", path.read_text()):
            if not (path.resolve().parents[int(m.group(1))] / "pyproject.toml").exists():
                wrong.append(f"{path.relative_to(ROOT)}: parents[{m.group(1)}]")
    assert wrong == []


def test_no_file_imports_a_top_level_kernels_package():
    """The device code is visualizer.kernels in a checkout and in the wheel; an import of plain ``kernels``
    works only in a checkout, and there it would load every module a second time."""
    files = project_files() + sorted((ROOT / "tests").rglob("*.py"))
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in files
        for mod, line in imports_of(p)
        if mod.split(".")[0] == "kernels"
    ]
    assert found == []
    planted = ROOT / "visualizer/engine/planted.py"
    assert any(
        "top-level kernels" in v for v in _violations_of(planted, "from kernels.probes import trace_tile")
    )


def _violations_of(planted: Path, line: str) -> list[str]:
    real = Path.read_text
    try:
        Path.read_text = lambda self, *a, **k: line + "\n" if self == planted else real(self, *a, **k)
        return violations([planted])
    finally:
        Path.read_text = real


def test_the_installed_package_never_imports_devtools():
    """devtools/ is not in the wheel: an import of it from visualizer/ or kernels/ (also one made for
    annotations only) would work in a checkout and fail once installed."""
    package = [p for p in project_files() if p.relative_to(ROOT).parts[0] in PACKAGE]
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in package
        for mod, line in imports_of(p, type_only=True)
        if mod.split(".")[0] == DEVTOOLS
    ]
    assert found == []
    tools = [p for p in project_files() if p.relative_to(ROOT).parts[0] == DEVTOOLS]
    assert len(tools) > 1 and len(package) > len(tools)  # both halves were read
    assert any(mod.startswith("visualizer.") for p in tools for mod, _ in imports_of(p))  # the allowed way
