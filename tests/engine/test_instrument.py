"""The AST transform that instruments a user's kernel, run in-process on the stock simulator."""

import ast
import traceback

import numpy as np
import pytest

from visualizer.engine.capture.source import UserCodeError, kernel_pair, load_module
from visualizer.engine.instrument.instrumenter import instrument, traced_name

EARLY = """\
from numba import cuda

LIMIT = 5  # a module constant the kernel reads


@cuda.jit(device=True)
def twice(x):
    return 2 * x


@cuda.jit
def early(out, flag):
    i = cuda.grid(1)
    if i >= out.size:
        return
    if i < LIMIT:
        out[i] = twice(i)
        return
    while True:
        if flag[i] > 0:
            out[i] = -1
            return
        out[i] = 7
        break
"""


def _run(source, kernel, args, grid, block, filename="user.py"):
    from numba import cuda

    module = load_module(source, filename, kernel)
    traced, clean = kernel_pair(cuda, module, kernel)
    threads = grid * block
    trace = np.zeros((3, threads), np.int64)
    active = np.full(threads, 9, np.uint8)
    traced[grid, block](*args, trace, active)
    return trace, active, module, clean


def test_every_exit_records_the_thread_and_guard_returns_mark_it_idle():
    out = np.zeros(12, np.float32)
    flag = np.zeros(12, np.int32)
    flag[9] = 1
    trace, active, _, _ = _run(EARLY, "early", (out, flag), 2, 8)
    # the device function and the module constant work; each path reached its own return
    np.testing.assert_array_equal(out, [0, 2, 4, 6, 8, 7, 7, 7, 7, -1, 7, 7])
    assert (trace[1] > 0).all() and (trace[2] >= trace[1]).all(), "a thread left without recording"
    # threads 12..15 left through the guard `if i >= out.size: return`: idle; the rest did work
    np.testing.assert_array_equal(active, [1] * 12 + [0] * 4)


def test_whole_body_guard_marks_threads_past_the_end_idle():
    src = "from numba import cuda\n\n@cuda.jit\ndef vadd(a, c):\n    i = cuda.grid(1)\n    if i < c.size:\n        c[i] = a[i] + 1\n"
    a = np.arange(10, dtype=np.float32)
    c = np.zeros(10, np.float32)
    _, active, _, _ = _run(src, "vadd", (a, c), 2, 8)
    np.testing.assert_array_equal(c, a + 1)
    np.testing.assert_array_equal(active, [1] * 10 + [0] * 6)


def test_plain_undecorated_function_is_jitted_and_clean_build_is_the_users():
    src = (
        "from numba import cuda\n\ndef fill(a):\n    i = cuda.grid(1)\n    if i < a.size:\n        a[i] = i\n"
    )
    a = np.zeros(8, np.float32)
    _, _, _, clean = _run(src, "fill", (a,), 1, 8)
    np.testing.assert_array_equal(a, np.arange(8))
    b = np.zeros(8, np.float32)
    clean[1, 8](b)  # the clean build takes the user's own parameters, no trace buffers
    np.testing.assert_array_equal(b, np.arange(8))


def test_line_numbers_stay_the_users():
    tree = instrument(ast.parse(EARLY), "early")
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == traced_name("early"))
    original = next(n for n in ast.parse(EARLY).body if isinstance(n, ast.FunctionDef) and n.name == "early")
    lines = {node.lineno for node in ast.walk(fn) if hasattr(node, "lineno")}
    first = min([original.lineno, *(d.lineno for d in original.decorator_list)])
    assert lines <= set(range(first, original.end_lineno + 1))
    # the probes sit on the lines of the statements they belong to
    returns = [n.lineno for n in ast.walk(original) if isinstance(n, ast.Return)]
    ends = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_vz_trace_end"
    ]
    assert sorted(ends) == sorted([*returns, original.end_lineno])


def test_an_error_in_the_traced_kernel_points_at_the_users_line():
    src = "from numba import cuda\n\n\n@cuda.jit\ndef bad(a):\n    i = cuda.grid(1)\n    a[i + 100] = 1\n"
    with pytest.raises(Exception) as err:
        _run(src, "bad", (np.zeros(4, np.float32),), 1, 4, filename="mine.py")
    frames = [f for f in traceback.extract_tb(err.value.__traceback__) if f.filename == "mine.py"]
    assert frames and frames[-1].lineno == 7 and frames[-1].line == "a[i + 100] = 1"


def test_module_errors_and_device_functions_are_one_line():
    with pytest.raises(UserCodeError, match=r"line 2: .*ZeroDivisionError"):
        load_module("from numba import cuda\nX = 1 / 0\ndef k(a):\n    pass\n", "m.py", "k")
    from numba import cuda

    module = load_module(EARLY, "m.py", "twice")
    with pytest.raises(UserCodeError, match="device function"):
        kernel_pair(cuda, module, "twice")
    with pytest.raises(UserCodeError, match="syntax error at m.py line 1"):
        load_module("def k(:\n", "m.py", "k")


def test_nested_function_returns_are_left_alone():
    src = "def k(a):\n    def inner():\n        return 1\n    a[0] = inner()\n"
    tree = instrument(ast.parse(src), "k")
    fn = tree.body[1]
    inner = fn.body[1]
    assert isinstance(inner, ast.FunctionDef)
    assert [type(s).__name__ for s in inner.body] == ["Return"]


# Numba's own messages (numba-cuda 0.30.4 compiling for sm_90), shortened to one line with the user's line
NUMBA_SETATTR = (
    "Failed in cuda mode pipeline (step: nopython frontend)\n\x1b[1m\x1b[1mCannot resolve setattr: "
    '(array(float32, 1d, C)).foo = Literal[int](1)\n\x1b[1m\nFile "k.py", line 6:\x1b[0m\n\x1b[1mdef k(a):\n'
    "    <source elided>\n    i = cuda.grid(1)\n\x1b[1m    a.foo = 1\n\x1b[0m    \x1b[1m^\x1b[0m\x1b[0m\n"
    "\x1b[0m\x1b[1mDuring: typing of set attribute 'foo' at k.py (6)\x1b[0m"
)
NUMBA_NAME = (
    "Failed in cuda mode pipeline (step: nopython frontend)\n\x1b[1m\x1b[1mNameError: name 'undefined_name' "
    "is not defined\x1b[0m\n\x1b[0m\x1b[1mDuring: Pass nopython_type_inference\x1b[0m"
)


@pytest.mark.parametrize(
    "message, expected",
    [
        (
            NUMBA_SETATTR,
            "typing error at k.py line 6: a.foo = 1: Cannot resolve setattr: (array(float32, 1d, C))",
        ),
        (NUMBA_NAME, "typing error at k.py line 6: a[i] = undefined_name: NameError: name 'undefined_name'"),
    ],
)
def test_numba_typing_errors_become_one_line_with_the_users_line(message, expected):
    import linecache

    from visualizer.engine.capture.source import describe_failure

    src = "from numba import cuda\n\n@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    {}\n"
    bad = "a.foo = 1" if "setattr" in message else "a[i] = undefined_name"
    linecache.cache["k.py"] = (1, None, src.format(bad).splitlines(True), "k.py")
    TypingError = type("TypingError", (Exception,), {})
    one = str(describe_failure(TypingError(message), "k.py", simulator=False))
    assert one.startswith(expected) and "\n" not in one and "\x1b" not in one and "pipeline" not in one, one
    fault = type("CudaAPIError", (Exception,), {})(
        "[700] Call to cuCtxSynchronize results in CUDA_ERROR_ILLEGAL_ADDRESS"
    )
    assert describe_failure(fault, "k.py", simulator=False) is None  # the worker treats it as fatal
