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
import functools
import io
import math
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from visualizer.specs.launch import DeviceLimits, Launch, LaunchError, ceil_div, check_launch, quoted

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
MAX_NESTING = 1000  # estimated syntax-tree depth; CPython's parser gives up near 3,000 (less in a deep stack)
MAX_REFERENCE_BYTES = 20_000  # all reference lines together
MAX_FIELD_CHARS = 500  # one launch field or argument spec
NPY_MAX_HEADER = 4096  # bytes of a .npy header (np.save writes about 128 for the dtypes taken here)
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
    _field(text, what)
    parts = [p.strip() for p in re.split(r"[,x×]", str(text).strip().lower())]
    if not parts or len(parts) > 3 or any(not p for p in parts):
        raise LaunchError(f"{what} must be X[,Y[,Z]] with 1 to 3 positive integers, got {quoted(text)}")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise LaunchError(
            f"{what} must be X[,Y[,Z]] with 1 to 3 positive integers, got {quoted(text)}"
        ) from None
    if min(dims) < 1:
        raise LaunchError(f"{what} must have at least 1 in each dimension, got {quoted(text)}")
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
        raise LaunchError(f"shape must look like 1000 or 64x64, got {quoted(text)}") from None
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise LaunchError(f"shape must have 1 to 3 axes of at least 1, got {quoted(text)}")
    if math.prod(shape) > MAX_ARRAY_ELEMENTS:
        raise LaunchError(
            f"shape {quoted(text)} has {math.prod(shape):,} elements; the limit is {MAX_ARRAY_ELEMENTS:,}"
        )
    return shape


def _dtype(text: str) -> str:
    name = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "bool_": "bool"}.get(
        text, text
    )
    if name not in DTYPES:
        raise LaunchError(f"dtype {quoted(text)} is not supported; choose one of {', '.join(DTYPES)}")
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


def _field(text, what: str) -> None:
    """A launch field or argument spec longer than anyone types is refused before it is parsed."""
    if len(str(text)) > MAX_FIELD_CHARS:
        raise LaunchError(f"{what} is {len(str(text)):,} characters; the limit is {MAX_FIELD_CHARS}")


def load_npy(data: bytes | str | Path, label: str) -> np.ndarray:
    """An uploaded or named .npy file as an array, bounded before anything is allocated.

    The header is read on its own (numpy.lib.format.read_magic / read_array_header_*): object dtypes
    (pickles) and dtypes outside DTYPES are refused, and the shape must fit MAX_ARRAY_ELEMENTS,
    MAX_ARRAY_BYTES and the bytes the file really holds, so a 200-byte file whose header claims
    10^12 elements is one line, not a memory error in the server.
    """
    from numpy.lib import format as npformat

    try:
        if isinstance(data, bytes):
            fh, size = io.BytesIO(data), len(data)
        else:
            path = Path(data)
            if path.exists() and not path.is_file():
                raise LaunchError(f"{label}: not a regular file")
            fh = open(path, "rb")  # noqa: SIM115 (closed below)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        raise LaunchError(f"{label}: no such file") from None
    except OSError as exc:
        raise LaunchError(f"{label}: cannot read it ({exc.strerror or exc})") from None
    with fh:
        try:
            version = npformat.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(fh, max_header_size=NPY_MAX_HEADER)
            elif version == (2, 0):
                shape, fortran, dtype = npformat.read_array_header_2_0(fh, max_header_size=NPY_MAX_HEADER)
            else:
                raise ValueError(f"format version {version[0]}.{version[1]} is not supported")
        except (MemoryError, RecursionError):  # numpy parses the header with ast: a deep one is refused
            raise LaunchError(f"{label}: not a readable .npy array (its header nests too deeply)") from None
        except (OSError, ValueError, EOFError, SyntaxError, TypeError, tokenize.TokenError) as exc:
            # TokenError: numpy re-tokenizes a version 1.0 header ("'shape': [" never closes)
            why = " ".join(str(exc).split())[:120]
            raise LaunchError(f"{label}: not a readable .npy array ({why})") from None
        if dtype.hasobject:
            raise LaunchError(
                f"{label}: dtype object (a pickle) is not supported; only numeric arrays are read"
            )
        if dtype.name not in DTYPES:
            raise LaunchError(f"{label}: dtype {dtype} is not supported; use one of {', '.join(DTYPES)}")
        if len(shape) > 3 or any(d < 0 for d in shape):
            raise LaunchError(f"{label}: its shape has {len(shape)} axes; up to 3 are supported")
        elements = math.prod(shape)
        if elements > MAX_ARRAY_ELEMENTS:
            claimed = f"{elements:,}" if elements < 10**18 else f"about 10^{len(str(elements)) - 1}"
            raise LaunchError(f"{label}: {claimed} elements; the limit is {MAX_ARRAY_ELEMENTS:,}")
        nbytes = elements * dtype.itemsize
        if nbytes > MAX_ARRAY_BYTES:
            raise LaunchError(f"{label}: {nbytes:,} bytes; the limit is {MAX_ARRAY_BYTES >> 20} MiB")
        left = size - fh.tell()
        if left < nbytes:
            raise LaunchError(
                f"{label}: its header says {shape} {dtype} ({nbytes:,} bytes) but the file holds {max(left, 0):,}"
            )
        raw = fh.read(nbytes)
    array = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return np.ascontiguousarray(array, dtype=dtype.newbyteorder("=")).copy()


def parse_arg(name: str, text: str, *, allow_files: bool = True, uploads: dict | None = None) -> ArgSpec:
    """One ``NAME=SPEC``'s SPEC. ``allow_files`` is False in the web app (no server paths)."""
    _field(text, f"argument {name}")
    raw = str(text).strip()
    number = _number(raw)
    if number is not None:
        return ArgSpec(name, raw, "scalar", value=number)
    kind, _, rest = raw.partition(":")
    kind = kind.strip().lower()
    if kind == "file":
        if uploads is not None and rest in uploads:
            array = load_npy(uploads[rest], f"{name}={raw}")
            return ArgSpec(name, raw, "file", dtype=array.dtype.name, shape=array.shape, array=array)
        if not allow_files:
            raise LaunchError(
                f"{name}: file: arguments are not read from the server here; upload a .npy instead"
            )
        if not rest.endswith(".npy"):
            raise LaunchError(f"{name}: file: takes a .npy file, got {quoted(rest)}")
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
            raise LaunchError(
                f"{name}: expected {kind}:DTYPE:SHAPE (e.g. {kind}:float32:1000), got {quoted(raw)}"
            )
        return ArgSpec(name, raw, kind, dtype=_dtype(dtype.strip().lower()), shape=parse_shape(shape))
    raise LaunchError(
        f"{name}: {quoted(raw)} is not an argument spec; use a number, rand|zeros|ones|arange:DTYPE:SHAPE, rng:SEED:N or file:PATH.npy"
    )


def parse_args(pairs: list[str] | dict[str, str], **kwargs) -> dict[str, ArgSpec]:
    """``["a=rand:float32:1000", "n=1000"]`` (or a dict) -> ArgSpecs by name, in order."""
    items = list(pairs.items()) if isinstance(pairs, dict) else []
    if not isinstance(pairs, dict):
        for pair in pairs:
            name, sep, value = str(pair).partition("=")
            if not sep or not name.strip():
                raise LaunchError(f"--arg expects NAME=SPEC, got {quoted(pair)}")
            items.append((name.strip(), value))
    specs: dict[str, ArgSpec] = {}
    if len(items) > MAX_ARGS:
        raise LaunchError(f"{len(items)} arguments; the limit is {MAX_ARGS}")
    for name, value in items:
        if not name.isidentifier():
            raise LaunchError(f"argument name {quoted(name)} is not a Python identifier")
        if name in specs:
            raise LaunchError(f"argument {quoted(name)} is given twice")
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


# --- bounded parsing: every text a visitor sends is measured before ast.parse sees it ------------

_RESETS = {",", ";", ":", "=", "->"}  # siblings follow: the depth count of the level starts again
_NESTING_WORDS = {"not", "and", "or", "if", "else", "lambda", "await", "in", "is", "for", "yield", "from"}
_FSTRING_OPS = re.compile(r"[-+*/%@&|^~<>!.(\[{]|\b(?:not|and|or|if|else|lambda|in|is|for)\b")


def _fstring_cost(token: str) -> int:
    """A bound on the depth of the expressions inside an f-string token (parsed by ast.parse too)."""
    prefix = token[: len(token) - len(token.lstrip("rRbBuUfF"))]
    if "f" not in prefix.lower():
        return 0
    body = token.replace("{{", "").replace("}}", "")
    inside = "".join(re.findall(r"\{[^}]*", body))  # from each opening brace to its closing one
    return len(_FSTRING_OPS.findall(inside)) + inside.count("{")


def nesting_depth(text: str, stop_above: int | None = None) -> tuple[int, int]:
    """(an upper estimate of the syntax-tree depth of ``text``, the line where it is deepest).

    Read with ``tokenize`` (linear, no recursion): within one bracket level, every operator, dot,
    opening bracket or operator keyword since the last ``,`` ``;`` ``:`` or ``=`` may nest one level
    deeper (``a + a + a`` is a left-deep tree, ``- - - 1`` a chain); the open brackets' levels add up,
    and so do indented blocks. ``lambda`` bodies and f-string expressions count too. A text the
    tokenizer rejects is measured up to that point (ast.parse then reports the syntax error).
    Stops early once the depth passes ``stop_above``.
    """

    levels = [0]  # depth-building tokens since the last reset, per open bracket
    lambdas = [0]  # lambdas waiting for their ':' per open bracket (that ':' is no reset)
    indent = deepest = where = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, string = tok.type, tok.string
            if kind == tokenize.INDENT:
                indent += 1
            elif kind == tokenize.DEDENT:
                indent -= 1
            elif kind == tokenize.NEWLINE:
                levels, lambdas = [0], [0]
            elif kind == tokenize.OP:
                if string in "([{":
                    levels[-1] += 1
                    levels.append(0)
                    lambdas.append(0)
                elif string in ")]}":
                    if len(levels) > 1:
                        levels.pop()
                        lambdas.pop()
                elif string == ":" and lambdas[-1]:
                    lambdas[-1] -= 1
                elif string in _RESETS or (string.endswith("=") and string not in ("==", "<=", ">=", "!=")):
                    levels[-1] = 0
                else:
                    levels[-1] += 1
            elif kind == tokenize.NAME and string in _NESTING_WORDS:
                levels[-1] += 1
                if string == "lambda":
                    lambdas[-1] += 1
            elif kind == tokenize.STRING:
                levels[-1] += _fstring_cost(string)
            depth = 2 * indent + sum(levels) + len(levels)
            if depth > deepest:
                deepest, where = depth, tok.start[0]
                if stop_above is not None and deepest > stop_above:
                    break
    except (tokenize.TokenError, SyntaxError):
        pass  # the parser says what is wrong
    return deepest, where


def bounded_parse(
    text: str, *, what: str, filename: str = "<text>", mode: str = "exec", max_bytes: int = MAX_SOURCE_BYTES
) -> ast.AST:
    """``ast.parse`` with bounds, for any text a visitor sent: its size and nesting depth are checked
    first, and the parser's own MemoryError / RecursionError (too complex) is one line too."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise LaunchError(f"{what} is {size:,} bytes; the limit is {max_bytes:,}")
    depth, line = nesting_depth(text, stop_above=MAX_NESTING)
    if depth > MAX_NESTING:
        raise LaunchError(
            f"{what} nests too deeply (over {MAX_NESTING} levels at line {line}): split the expression into steps"
        )
    try:
        return ast.parse(text, filename=filename, mode=mode)
    except (MemoryError, RecursionError):
        raise LaunchError(
            f"{what} is too complex to parse (nested too deeply): split it into steps"
        ) from None


# --- the kernel's parameters, read from the source with ast (no execution) ------------------------


def syntax_check(source: str, filename: str = "kernel.py") -> ast.Module:
    """Parse only (safe in the server, bounded): a syntax error becomes one line naming its line.

    The page checks its source several times a rerun: the last few trees are kept (read only).
    """
    return _parsed_source(source, filename)


@functools.lru_cache(maxsize=4)
def _parsed_source(source: str, filename: str) -> ast.Module:
    try:
        return bounded_parse(source, what="the source", filename=filename)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "") if exc.lineno else ""
        text = (exc.text or "").strip()
        line = f": {text[:80]}" if text else ""
        raise LaunchError(
            f"syntax error in {' '.join((Path(filename).name, where)).strip()}: {exc.msg}{line}"
        ) from None


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    """The module-level function ``name`` (decorated or not)."""
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for node in funcs:
        if node.name == name:
            return node
    known = ", ".join(f.name for f in funcs) or "none"
    raise LaunchError(f"no function {quoted(name)} at the top level of the source (functions: {known})")


def kernel_names(source: str) -> list[str]:
    """Module-level functions that look like kernels (decorated with a jit but not device=True, or plain)."""
    try:
        tree = syntax_check(source)
    except LaunchError:
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
    total = sum(
        len(str(i).encode("utf-8", "surrogatepass")) for i in ([items] if isinstance(items, str) else items)
    )
    if total > MAX_REFERENCE_BYTES:
        raise LaunchError(f"the reference is {total:,} bytes; the limit is {MAX_REFERENCE_BYTES:,}")
    if isinstance(items, str):
        items = [line for line in items.splitlines() if line.strip() and not line.strip().startswith("#")]
    out = []
    for item in items:
        item = str(item).strip()
        if item.startswith("fn:"):
            if not item[3:].strip().isidentifier():
                raise LaunchError(f"reference {quoted(item)}: fn: takes a function name from the source")
            out.append("fn:" + item[3:].strip())
            continue
        name, sep, expr = item.partition("=")
        name = name.strip()
        if not sep or name not in params:
            raise LaunchError(
                f"reference {quoted(item)} must be NAME=EXPR with NAME one of the kernel's arguments ({', '.join(params)})"
            )
        try:
            bounded_parse(expr.strip(), what=f"the reference for {name}", mode="eval")
        except SyntaxError as exc:
            raise LaunchError(
                f"reference for {name}: syntax error: {exc.msg} in {quoted(expr.strip())}"
            ) from None
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
        raise LaunchError(f"kernel name {quoted(kernel)} is not a Python identifier")
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
