"""The engine's shape, measured (issue #37's "done when"): ``python3 tests/engine_shape.py`` prints
every number; tests/project/test_engine_shape.py keeps the ones reached. Read with ``ast`` only."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "visualizer" / "engine"
LENS_WORDS = ("accesses", "delays", "branches", "barriers")


def engine_modules() -> list[Path]:
    return sorted(p for p in ENGINE.rglob("*.py") if p.name != "__init__.py")


def engine_modules_rel() -> list[str]:
    return [_rel(p) for p in engine_modules()]


def _rel(path: Path) -> str:
    return str(path.relative_to(ENGINE)) if path.is_relative_to(ENGINE) else path.name


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def code_words(path: Path) -> set[str]:
    """Every name, attribute, parameter, keyword, import and string constant of the module's code
    (docstrings and comments are not code), lower-cased."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.add(node.name)
        elif isinstance(node, ast.arg):
            words.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            words.add(node.arg)
        elif isinstance(node, ast.alias):
            words.add(node.name)
            words.add(node.asname or "")
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words.add(node.value)
    return {w.lower() for w in words if w}


def lens_word_modules(paths: list[Path] | None = None) -> dict[str, list[str]]:
    """Lens word -> the engine modules whose code uses it."""
    out: dict[str, list[str]] = {w: [] for w in LENS_WORDS}
    for path in paths or engine_modules():
        words = code_words(path)
        for w in LENS_WORDS:
            if any(w in x for x in words):
                out[w].append(_rel(path))
    return out


def folder_sizes() -> dict[str, int]:
    """Each engine folder -> its modules (``__init__.py`` not counted)."""
    sizes: dict[str, int] = {}
    for d in [ENGINE, *sorted(p for p in ENGINE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        sizes[str(d.relative_to(ROOT))] = len([p for p in d.glob("*.py") if p.name != "__init__.py"])
    return sizes


def long_functions(limit: int = 100, paths: list[Path] | None = None) -> list[tuple[str, int]]:
    """(module:function, lines) of the engine's functions longer than ``limit`` lines (a nested
    function counts as part of the one it is in)."""
    out = []
    for path in paths or engine_modules():
        tree = ast.parse(path.read_text())
        todo = [(tree, "")]
        while todo:
            node, prefix = todo.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = child.end_lineno - child.lineno + 1
                    if n > limit:
                        out.append((f"{_rel(path)}:{prefix}{child.name}", n))
                elif isinstance(child, ast.ClassDef):
                    todo.append((child, f"{prefix}{child.name}."))
    return sorted(out, key=lambda x: -x[1])


REQUEST_READ = re.compile(r"\brequest(\.get\(|\[)")


def request_reads(paths: list[Path] | None = None) -> list[str]:
    """``request.get(`` / ``request[`` in the engine's code: a request read as a dict."""
    out = []
    for path in paths or engine_modules():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if REQUEST_READ.search(code):
                out.append(f"{_rel(path)}:{i}")
    return out


def _imports_simulator(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.startswith("numba.cuda.simulator") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        mod = node.module or ""
        return mod.startswith("numba.cuda.simulator") or (
            mod == "numba.cuda" and any(a.name == "simulator" for a in node.names)
        )
    return False


def simulator_patchers(paths: list[Path] | None = None) -> list[str]:
    """Engine modules that import numba's simulator (to patch it) or its classes: ``import
    numba.cuda.simulator...``, ``from numba.cuda.simulator... import``, ``from numba.cuda import
    simulator``."""
    out = []
    for path in paths or engine_modules():
        if any(_imports_simulator(node) for node in ast.walk(ast.parse(path.read_text()))):
            out.append(_rel(path))
    return out


def pass_appliers(paths: list[Path] | None = None) -> list[str]:
    """Engine functions that apply instrumenter passes (call ``X.apply(fn, info)`` on a pass)."""
    out = []
    for path in paths or engine_modules():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "apply"
                    and len(node.args) == 2
                ):
                    out.append(f"{_rel(path)}:{fn.name}")
                    break
    # a nested function's call counts for the outermost function only
    return sorted(set(out))


def duplicate_pairs(seconds: int = 120) -> list[str] | None:
    """The ``duplicates`` tool's pairs outside tests/ (None where the tool is not installed)."""
    tool = shutil.which("duplicates")
    if tool is None:
        return None
    out = subprocess.run(
        [tool, "--most", "200", "--seconds", str(seconds), "--repo", str(ROOT)],
        capture_output=True, text=True, timeout=seconds + 60,
    ).stdout  # fmt: skip
    rows = [line for line in out.splitlines() if re.match(r"D\d+ ", line)]
    return [r for r in rows if not any(side.startswith("tests/") for side in r.split()[1:4:2])]


def main() -> None:
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.project.test_layers import cycles, project_files

    print("import circles (type-only imports counted):", cycles(project_files(), type_only=True))
    print("lens word -> engine modules:")
    for w, mods in lens_word_modules().items():
        print(f"  {w}: {len(mods)} {mods}")
    print("engine folders:", folder_sizes())
    print("functions over 100 lines:", long_functions())
    reads = request_reads()
    print(f"request dict reads in the engine: {len(reads)}", reads[:60])
    print("modules importing numba's simulator:", simulator_patchers())
    print("functions applying passes:", pass_appliers())
    dup = duplicate_pairs()
    print("duplicates outside tests/:", None if dup is None else len(dup))
    for r in dup or []:
        print("  ", r)


if __name__ == "__main__":
    main()
