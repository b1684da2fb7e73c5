"""Launch and argument specs for a user's kernel: parsed and checked on the host, one-line errors.

Host side only (numpy, no numba): the CLI and the web app refuse bad input before a worker starts.

* geometry: ``X[,Y[,Z]]`` for the grid and the block (``x`` works as a separator too), or
  ``one thread per element of N`` (``threads_for(N, block)``: grid = ceil(N / block)).
* argument SPEC: ``rand:DTYPE:SHAPE`` | ``zeros:DTYPE:SHAPE`` | ``ones:DTYPE:SHAPE`` |
  ``arange:DTYPE:SHAPE`` | ``file:PATH.npy`` | a number (``1000``, ``0.5``), where SHAPE is
  ``1000`` or ``64x64`` (up to 3 axes) | ``rng:SEED:N``: N xoroshiro128p random-number states, as
  numba.cuda.random's ``create_xoroshiro128p_states(N, seed=SEED)`` makes them.
"""

from __future__ import annotations

import ast
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from visualizer.catalog import DeviceLimits, Launch, LaunchError, ceil_div, check_launch

DTYPES = (
    "float32",
    "float64",
    "float16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
)
KINDS = ("rand", "zeros", "ones", "arange")
MAX_ARRAY_ELEMENTS = 1 << 26  # 64 Mi elements per array
MAX_ARRAY_BYTES = 1 << 30  # 1 GiB over all array arguments of one launch
MAX_SOURCE_BYTES = 200_000
MAX_ARGS = 32
RNG_STATE_BYTES = 16  # one xoroshiro128p state: two uint64 (numba.cuda.random.xoroshiro128p_dtype)
RTOL, ATOL = 1e-4, 1e-5  # float32 sums in a different order than numpy's still pass


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: an array to make (kind, dtype, shape), a loaded array, or a scalar."""

    name: str
    text: str  # what the user wrote (kept for labels and the bundle's launch.json)
    kind: str  # rand | zeros | ones | arange | file | scalar
    dtype: str = ""
    shape: tuple[int, ...] = ()
    value: int | float | None = None
    array: np.ndarray | None = None  # kind == "file": the loaded contents

    @property
    def is_array(self) -> bool:
        return self.kind != "scalar"

    @property
    def nbytes(self) -> int:
        if self.array is not None:
            return int(self.array.nbytes)
        if self.kind == "scalar":
            return 0
        if self.kind == "rng":
            return math.prod(self.shape) * RNG_STATE_BYTES
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def parse_dims(text: str, what: str) -> tuple[int, int, int]:
    """``"64"``, ``"4,4"``, ``"8x8x2"`` -> (x, y, z) padded with 1s."""
    parts = [p.strip() for p in re.split(r"[,x×]", str(text).strip().lower())]
    if not parts or len(parts) > 3 or any(not p for p in parts):
        raise LaunchError(f"{what} must be X[,Y[,Z]] with 1 to 3 positive integers, got {text!r}")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise LaunchError(f"{what} must be X[,Y[,Z]] with 1 to 3 positive integers, got {text!r}") from None
    if min(dims) < 1:
        raise LaunchError(f"{what} must have at least 1 in each dimension, got {text!r}")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def threads_for(n: int, block: tuple[int, int, int]) -> tuple[int, int, int]:
    """The 1-D grid that gives one thread per element of ``n`` with blocks of ``block``."""
    if n < 1:
        raise LaunchError(f"n must be at least 1 element, got {n}")
    if block[1] != 1 or block[2] != 1:
        raise LaunchError("'one thread per element' takes a 1-D block (Y and Z must be 1)")
    return (ceil_div(n, block[0]), 1, 1)


def parse_shape(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in re.split(r"[x×,]", text.strip().lower())]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise LaunchError(f"shape must look like 1000 or 64x64, got {text!r}") from None
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise LaunchError(f"shape must have 1 to 3 axes of at least 1, got {text!r}")
    if math.prod(shape) > MAX_ARRAY_ELEMENTS:
        raise LaunchError(
            f"shape {text} has {math.prod(shape):,} elements; the limit is {MAX_ARRAY_ELEMENTS:,}"
        )
    return shape


def _dtype(text: str) -> str:
    name = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "bool_": "bool"}.get(
        text, text
    )
    if name not in DTYPES:
        raise LaunchError(f"dtype {text!r} is not supported; choose one of {', '.join(DTYPES)}")
    return name


def _number(text: str) -> int | float | None:
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return value


def load_npy(data: bytes | str | Path, label: str) -> np.ndarray:
    """An uploaded or named .npy file as an array (never unpickles objects)."""
    try:
        src = io.BytesIO(data) if isinstance(data, bytes) else data
        array = np.load(src, allow_pickle=False)
    except FileNotFoundError:
        raise LaunchError(f"{label}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise LaunchError(
            f"{label}: not a readable .npy array ({' '.join(str(exc).split())[:120]})"
        ) from None
    if not isinstance(array, np.ndarray):
        raise LaunchError(f"{label}: expected one array in a .npy file, not an archive")
    if array.dtype.name not in DTYPES:
        raise LaunchError(f"{label}: dtype {array.dtype} is not supported; use one of {', '.join(DTYPES)}")
    if array.size > MAX_ARRAY_ELEMENTS:
        raise LaunchError(f"{label}: {array.size:,} elements; the limit is {MAX_ARRAY_ELEMENTS:,}")
    return np.ascontiguousarray(array)


def parse_arg(name: str, text: str, *, allow_files: bool = True, uploads: dict | None = None) -> ArgSpec:
    """One ``NAME=SPEC``'s SPEC. ``allow_files`` is False in the web app (no server paths)."""
    raw = str(text).strip()
    number = _number(raw)
    if number is not None:
        return ArgSpec(name, raw, "scalar", value=number)
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind == "file":
        if uploads is not None and rest in uploads:
            return ArgSpec(name, raw, "file", array=load_npy(uploads[rest], f"{name}={raw}"))
        if not allow_files:
            raise LaunchError(
                f"{name}: file: arguments are not read from the server here; upload a .npy instead"
            )
        if not rest.endswith(".npy"):
            raise LaunchError(f"{name}: file: takes a .npy file, got {rest!r}")
        array = load_npy(Path(rest).expanduser(), f"{name}={raw}")
        return ArgSpec(name, raw, "file", dtype=array.dtype.name, shape=array.shape, array=array)
    if kind == "rng":
        seed_text, sep, count = rest.partition(":")
        seed = _number(seed_text.strip())
        if not sep or type(seed) is not int or not 0 <= seed < 2**64:
            raise LaunchError(
                f"{name}: expected rng:SEED:N (N xoroshiro128p states, SEED an integer >= 0, e.g. rng:1:4096), "
                f"got {raw!r}"
            )
        shape = parse_shape(count)
        if len(shape) != 1:
            raise LaunchError(f"{name}: rng:SEED:N takes one count N, got {count!r}")
        return ArgSpec(name, raw, "rng", value=seed, shape=shape)
    if kind in KINDS:
        dtype, sep, shape = rest.partition(":")
        if not sep:
            raise LaunchError(f"{name}: expected {kind}:DTYPE:SHAPE (e.g. {kind}:float32:1000), got {raw!r}")
        return ArgSpec(name, raw, kind, dtype=_dtype(dtype.strip().lower()), shape=parse_shape(shape))
    raise LaunchError(
        f"{name}: {raw!r} is not an argument spec; use a number, rand|zeros|ones|arange:DTYPE:SHAPE, rng:SEED:N or file:PATH.npy"
    )


def parse_args(pairs: list[str] | dict[str, str], **kwargs) -> dict[str, ArgSpec]:
    """``["a=rand:float32:1000", "n=1000"]`` (or a dict) -> ArgSpecs by name, in order."""
    items = list(pairs.items()) if isinstance(pairs, dict) else []
    if not isinstance(pairs, dict):
        for pair in pairs:
            name, sep, value = str(pair).partition("=")
            if not sep or not name.strip():
                raise LaunchError(f"--arg expects NAME=SPEC, got {pair!r}")
            items.append((name.strip(), value))
    specs: dict[str, ArgSpec] = {}
    for name, value in items:
        if not name.isidentifier():
            raise LaunchError(f"argument name {name!r} is not a Python identifier")
        if name in specs:
            raise LaunchError(f"argument {name!r} is given twice")
        specs[name] = parse_arg(name, value, **kwargs)
    if len(specs) > MAX_ARGS:
        raise LaunchError(f"{len(specs)} arguments; the limit is {MAX_ARGS}")
    total = sum(s.nbytes for s in specs.values())
    if total > MAX_ARRAY_BYTES:
        raise LaunchError(
            f"the arrays take {total / 2**20:,.0f} MiB; the limit is {MAX_ARRAY_BYTES >> 20} MiB"
        )
    return specs


def make_array(spec: ArgSpec, rng: np.random.Generator) -> np.ndarray:
    """The host array an array spec describes (deterministic for a seed)."""
    if spec.array is not None:
        return spec.array.copy()
    dtype = np.dtype(spec.dtype)
    if spec.kind == "zeros":
        return np.zeros(spec.shape, dtype)
    if spec.kind == "ones":
        return np.ones(spec.shape, dtype)
    if spec.kind == "arange":
        return np.arange(math.prod(spec.shape)).astype(dtype).reshape(spec.shape)
    # rand: floats uniform in [0, 1) like np.random.rand; integers 0..9 (float32 sums stay exact)
    if dtype.kind == "b":
        return rng.integers(0, 2, spec.shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, spec.shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.random(spec.shape) + 1j * rng.random(spec.shape)).astype(dtype)
    return rng.random(spec.shape).astype(dtype)


# --- the kernel's parameters, read from the source with ast (no execution) ------------------------


def syntax_check(source: str, filename: str = "kernel.py") -> ast.Module:
    """Parse only (safe in the server): a syntax error becomes one line naming its line."""
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise LaunchError(f"the source is {len(source.encode()):,} bytes; the limit is {MAX_SOURCE_BYTES:,}")
    try:
        return ast.parse(source, filename=filename)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        text = (exc.text or "").strip()
        shown = f": {text[:80]}" if text else ""
        raise LaunchError(f"syntax error in {Path(filename).name} {where}: {exc.msg}{shown}") from None


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    """The module-level function ``name`` (decorated or not)."""
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for node in funcs:
        if node.name == name:
            return node
    known = ", ".join(f.name for f in funcs) or "none"
    raise LaunchError(f"no function {name!r} at the top level of the source (functions: {known})")


def kernel_names(source: str) -> list[str]:
    """Module-level functions that look like kernels (decorated with a jit but not device=True, or plain)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        device = any(
            isinstance(d, ast.Call)
            and any(
                k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value for k in d.keywords
            )
            for d in node.decorator_list
        )
        jitted = any(_is_jit(d) for d in node.decorator_list)
        if jitted and not device:
            names.append(node.name)
    return names


def _is_jit(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit"
    )


def kernel_params(source: str, kernel: str, filename: str = "kernel.py") -> list[str]:
    """The kernel's positional parameter names, in order; one-line errors for what cannot be a kernel."""
    fn = find_function(syntax_check(source, filename), kernel)
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise LaunchError(f"{kernel}: a kernel takes plain positional parameters only (no *args, **kw, /, *)")
    return [p.arg for p in a.args]


@dataclass
class SourceLaunch:
    """A checked launch of a user's kernel, ready to send to a worker."""

    source: str
    kernel: str
    filename: str
    params: list[str]
    args: dict[str, ArgSpec]
    launch: Launch
    reference: list[str]  # "NAME=EXPR" numpy expressions, or ["fn:NAME"]: a function in the source
    rtol: float = RTOL
    atol: float = ATOL

    def request(self, backend: str, seed: int = 0, repeats: int = 20, accesses: bool = False) -> dict:
        return {
            "op": "source",
            "source": self.source,
            "filename": self.filename,
            "kernel": self.kernel,
            "params": self.params,
            "grid": list(self.launch.grid),
            "block": list(self.launch.block),
            "args": {
                name: {
                    "text": s.text,
                    "kind": s.kind,
                    "dtype": s.dtype,
                    "shape": list(s.shape),
                    "value": s.value,
                    "array": s.array,
                }
                for name, s in self.args.items()
            },
            "reference": list(self.reference),
            "rtol": self.rtol,
            "atol": self.atol,
            "seed": seed,
            "repeats": repeats,
            "accesses": accesses,
            "backend": backend,
        }


def parse_reference(items: list[str] | str | None, params: list[str]) -> list[str]:
    """``NAME=EXPR`` lines (numpy over the argument names) or ``fn:NAME``; checked for syntax here."""
    if items is None:
        return []
    if isinstance(items, str):
        items = [line for line in items.splitlines() if line.strip() and not line.strip().startswith("#")]
    out = []
    for item in items:
        item = item.strip()
        if item.startswith("fn:"):
            if not item[3:].strip().isidentifier():
                raise LaunchError(f"reference {item!r}: fn: takes a function name from the source")
            out.append("fn:" + item[3:].strip())
            continue
        name, sep, expr = item.partition("=")
        name = name.strip()
        if not sep or name not in params:
            raise LaunchError(
                f"reference {item!r} must be NAME=EXPR with NAME one of the kernel's arguments ({', '.join(params)})"
            )
        try:
            ast.parse(expr.strip(), mode="eval")
        except SyntaxError as exc:
            raise LaunchError(f"reference for {name}: syntax error: {exc.msg} in {expr.strip()!r}") from None
        out.append(f"{name}={expr.strip()}")
    return out


def plan_source_launch(
    source: str,
    kernel: str,
    *,
    grid: str | tuple | None,
    block: str | tuple,
    args: list[str] | dict[str, str],
    threads_for_n: int | None = None,
    reference: list[str] | str | None = None,
    backend: str = "sim",
    filename: str = "kernel.py",
    allow_files: bool = True,
    uploads: dict | None = None,
    limits: DeviceLimits | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> SourceLaunch:
    """Everything checked that can be checked without running the code; raises one-line LaunchErrors."""
    if not str(kernel).isidentifier():
        raise LaunchError(f"kernel name {kernel!r} is not a Python identifier")
    params = kernel_params(source, kernel, filename)
    blk = parse_dims(block, "block") if isinstance(block, str) else tuple(block)
    if threads_for_n is not None:
        grd = threads_for(int(threads_for_n), blk)  # type: ignore[arg-type]
    elif grid is None:
        raise LaunchError("give a grid (X[,Y[,Z]]) or 'one thread per element of n'")
    else:
        grd = parse_dims(grid, "grid") if isinstance(grid, str) else tuple(grid)
    specs = parse_args(args, allow_files=allow_files, uploads=uploads)
    missing = [p for p in params if p not in specs]
    if missing:
        raise LaunchError(f"{kernel} takes ({', '.join(params)}): no value for {', '.join(missing)}")
    extra = [n for n in specs if n not in params]
    if extra:
        raise LaunchError(f"{kernel} takes ({', '.join(params)}): it has no parameter {extra[0]!r}")
    if not any(s.is_array for s in specs.values()):
        raise LaunchError(f"{kernel} needs at least one array argument to write its result to")
    launch = Launch(grid=grd, block=blk, scalars={n: s.value for n, s in specs.items() if not s.is_array})
    check_launch(launch, limits or DeviceLimits(), backend)
    return SourceLaunch(
        source=source,
        kernel=kernel,
        filename=filename,
        params=params,
        args={p: specs[p] for p in params},
        launch=launch,
        reference=parse_reference(reference, params),
        rtol=rtol,
        atol=atol,
    )
