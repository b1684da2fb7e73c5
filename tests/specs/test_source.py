"""Launch and argument specs of a user's kernel: parsed on the host, bad input is one LaunchError line."""

import numpy as np
import pytest

from visualizer.specs import source as uspec
from visualizer.specs.catalog import LaunchError

VADD = """
from numba import cuda

@cuda.jit
def vadd(a, b, c, n):
    i = cuda.grid(1)
    if i < n:
        c[i] = a[i] + b[i]

@cuda.jit(device=True)
def helper(x):
    return x
"""


def test_dims_pad_to_three_and_accept_x_or_comma():
    assert uspec.parse_dims("64", "grid") == (64, 1, 1)
    assert uspec.parse_dims("4,4", "grid") == (4, 4, 1)
    assert uspec.parse_dims("8x8x2", "block") == (8, 8, 2)


@pytest.mark.parametrize("bad", ["", "0", "4,,4", "1,2,3,4", "a", "-3"])
def test_bad_dims_are_one_line(bad):
    with pytest.raises(LaunchError) as err:
        uspec.parse_dims(bad, "grid")
    assert "\n" not in str(err.value) and "grid" in str(err.value)


def test_one_thread_per_element_rounds_up():
    assert uspec.threads_for(1000, (128, 1, 1)) == (8, 1, 1)
    assert uspec.threads_for(1024, (128, 1, 1)) == (8, 1, 1)
    with pytest.raises(LaunchError):
        uspec.threads_for(1000, (16, 16, 1))


def test_arg_specs_make_the_arrays_they_name():
    rng = np.random.default_rng(0)
    r = uspec.parse_arg("a", "rand:float32:64x32")
    assert (r.kind, r.dtype, r.shape) == ("rand", "float32", (64, 32))
    a = uspec.make_array(r, rng)
    assert a.dtype == np.float32 and a.shape == (64, 32) and 0 <= a.min() and a.max() < 1
    ints = uspec.make_array(uspec.parse_arg("k", "rand:int32:100"), rng)
    assert ints.dtype == np.int32 and set(np.unique(ints)) <= set(range(10))
    np.testing.assert_array_equal(
        uspec.make_array(uspec.parse_arg("x", "arange:int64:2x3"), rng), np.arange(6).reshape(2, 3)
    )
    assert uspec.make_array(uspec.parse_arg("o", "ones:float64:5"), rng).sum() == 5
    assert uspec.parse_arg("n", "1000").value == 1000 and uspec.parse_arg("s", "0.5").value == 0.5


def test_file_spec_loads_npy_and_refuses_pickles_and_server_paths(tmp_path):
    good = tmp_path / "x.npy"
    np.save(good, np.arange(10, dtype=np.float32))
    spec = uspec.parse_arg("x", f"file:{good}")
    np.testing.assert_array_equal(spec.array, np.arange(10, dtype=np.float32))
    evil = tmp_path / "o.npy"
    np.save(evil, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(LaunchError, match="not a readable|not supported"):
        uspec.parse_arg("x", f"file:{evil}")
    with pytest.raises(LaunchError, match="upload"):
        uspec.parse_arg("x", f"file:{good}", allow_files=False)
    uploaded = uspec.parse_arg(
        "x", "file:mine.npy", allow_files=False, uploads={"mine.npy": good.read_bytes()}
    )
    assert uploaded.array.shape == (10,)


@pytest.mark.parametrize(
    "text, words",
    [
        ("rand:float128:10", "not supported"),
        ("rand:float32", "DTYPE:SHAPE"),
        ("zeros:float32:0", "at least 1"),
        ("zeros:float32:100000x100000", "limit"),
        ("banana", "not an argument spec"),
        ("file:/etc/passwd", ".npy"),
        ("nan", "not an argument spec"),
    ],
)
def test_bad_arg_specs_are_one_line(text, words):
    with pytest.raises(LaunchError) as err:
        uspec.parse_arg("a", text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_plan_checks_parameters_against_the_source():
    sl = uspec.plan_source_launch(
        VADD,
        "vadd",
        grid=None,
        block="128",
        threads_for_n=1000,
        args=["a=rand:float32:1000", "b=rand:float32:1000", "c=zeros:float32:1000", "n=1000"],
        reference="c=a+b",
    )
    assert sl.params == ["a", "b", "c", "n"] and sl.launch.grid == (8, 1, 1)
    assert sl.reference == ["c=a+b"]
    req = sl.request("sim")
    assert req["op"] == "source" and req["args"]["n"]["value"] == 1000
    base = dict(grid="8", block="128")
    full = ["a=rand:float32:10", "b=rand:float32:10", "c=zeros:float32:10", "n=10"]
    cases = [
        (dict(args=full[:3]), "no value for n"),
        (dict(args=[*full, "d=1"]), "no parameter 'd'"),
        (dict(args=[*full, "n=3"]), "twice"),
        (dict(args=full, block="2048"), "exceeds the limit of 1024"),
        (dict(args=full, grid="10000", block="64"), "too many for the CUDA simulator"),
        (dict(args=full, reference="z=a"), "NAME=EXPR"),
        (dict(args=full, reference="c=a+"), "syntax error"),
    ]
    for kwargs, words in cases:
        with pytest.raises(LaunchError) as err:
            uspec.plan_source_launch(VADD, "vadd", **{**base, **kwargs})
        assert words in str(err.value), (kwargs, str(err.value))
    with pytest.raises(LaunchError, match="no function 'nope'.*vadd, helper"):
        uspec.plan_source_launch(VADD, "nope", args=full, **base)


def test_syntax_error_names_its_line():
    with pytest.raises(LaunchError) as err:
        uspec.syntax_check("x = 1\ndef k(a:\n    pass\n", "mine.py")
    assert "mine.py line 2" in str(err.value)


def test_kernel_names_skip_device_functions():
    assert uspec.kernel_names(VADD) == ["vadd"]
