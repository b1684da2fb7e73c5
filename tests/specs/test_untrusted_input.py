"""Hostile text and files sent to the server or the CLI: bounded before they are parsed or allocated,
one line each, and the Your kernel page keeps working (the 100 kB source, the 50,000-term reference,
the 193-byte .npy whose header claims 10^12 elements)."""

import ast
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from visualizer.specs import source as uspec
from visualizer.specs.catalog import LaunchError
from visualizer.web.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
ENTRY = str(ROOT / "visualizer" / "app.py")
UNARY = "-" * 100_000 + "1"  # MemoryError in CPython's parser
TERMS = "c = " + " + ".join(["a"] * 50_000)  # RecursionError while the parser builds the tree


def hostile_npy(claimed=10**12) -> bytes:
    """A well-formed .npy header claiming ``claimed`` float64 elements, followed by almost nothing."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + str(claimed) + ",), }"
    header = header.ljust(117) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    return data + b"\0" * (193 - len(data))


def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 400, text
    return text


# --- .npy files --------------------------------------------------------------------------------


def test_npy_whose_header_claims_a_terabyte_is_one_line_before_any_allocation(tmp_path):
    data = hostile_npy()
    assert len(data) == 193
    with pytest.raises(MemoryError):  # what numpy's own loader does with it
        np.load(io.BytesIO(data))
    with pytest.raises(LaunchError) as err:
        uspec.parse_arg("a", "file:up.npy", allow_files=False, uploads={"up.npy": data})
    assert "1,000,000,000,000 elements; the limit is" in one_line(err)
    path = tmp_path / "huge.npy"
    path.write_bytes(data)
    with pytest.raises(LaunchError) as err:
        uspec.parse_arg("a", f"file:{path}")
    assert "elements; the limit is" in one_line(err)


@pytest.mark.parametrize(
    "shape, words",
    [
        ("-" * 3_000 + "1", "not a readable .npy array"),  # MemoryError in numpy's header parser
        ("+".join(["1"] * 2_000), "not a readable .npy array"),  # RecursionError there
        ("9" * 3_000, "about 10^2999 elements; the limit is"),
    ],
)
def test_npy_header_that_numpys_own_parser_chokes_on_is_one_line(shape, words):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + shape + ",), }"
    header = header.ljust(64 * (len(header) // 64 + 1) - 11) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    with pytest.raises(LaunchError) as err:
        uspec.load_npy(data, "a=file:up.npy")
    assert words in one_line(err)


def test_npy_header_larger_than_the_file_is_refused():
    data = hostile_npy(claimed=1000)  # 8,000 bytes claimed, 65 held: within the limits, but a lie
    with pytest.raises(LaunchError) as err:
        uspec.load_npy(data, "a=file:up.npy")
    assert "8,000 bytes" in one_line(err) and "the file holds 65" in str(err.value)


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda b: np.save(b, np.array([{"x": 1}], dtype=object), allow_pickle=True),
            "(a pickle) is not supported",
        ),
        (lambda b: np.save(b, np.zeros(3, dtype=[("x", "f4")])), "not supported"),
        (lambda b: np.save(b, np.zeros((2, 2, 2, 2), dtype=np.float32)), "4 axes; up to 3"),
        (lambda b: b.write(b"not an npy file at all"), "not a readable .npy"),
    ],
)
def test_npy_objects_records_and_junk_are_refused(make, words):
    buf = io.BytesIO()
    make(buf)
    with pytest.raises(LaunchError) as err:
        uspec.load_npy(buf.getvalue(), "a=file:x.npy")
    assert words in one_line(err)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=">f4").reshape(3, 4),  # big-endian: read as native
        np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
        np.zeros((2, 0), dtype=np.float64),
    ],
)
def test_bounded_loader_reads_what_np_save_wrote(array):
    buf = io.BytesIO()
    np.save(buf, array)
    got = uspec.load_npy(buf.getvalue(), "x")
    np.testing.assert_array_equal(got, array)
    assert got.shape == array.shape and got.dtype.isnative and got.flags.c_contiguous and got.flags.writeable


# --- text parsed in the server --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        UNARY,
        "x = " + " + ".join(["a"] * 3_000),
        "x = " + "lambda: " * 3_000 + "1",
        "x = f'{" + "-" * 3_000 + "1}'",
        "x = " + " if c else ".join(["a"] * 3_000),
        "x = f" + "()" * 3_000,
        "x = a" + ".b" * 3_000,
    ],
)
def test_deep_sources_are_one_line_not_a_parser_crash(text):
    with pytest.raises(LaunchError) as err:
        uspec.syntax_check(text, "your_kernel.py")
    assert "nests too deeply" in one_line(err)
    assert uspec.kernel_names(text) == []


def test_null_bytes_and_oversized_sources_are_one_line():
    with pytest.raises(LaunchError) as err:
        uspec.syntax_check("x = 1\0", "k.py")
    assert "null bytes" in one_line(err)
    with pytest.raises(LaunchError) as err:
        uspec.syntax_check("#" * (uspec.MAX_SOURCE_BYTES + 1))
    assert "the limit is 200,000" in one_line(err)


def _depth(tree: ast.AST) -> int:
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


@pytest.mark.parametrize(
    "text",
    [
        *(e.source for e in EXAMPLES.values()),
        "x = " + " + ".join(["a[i] * b[j]"] * 200),  # a long unrolled sum is still a kernel
        "x = " + " - ".join(["-a"] * 300),
        "W = [" + ", ".join(["-1.5"] * 20_000) + "]",  # a big table of constants: wide, not deep
        "y = " + "(" * 150 + "1" + ")" * 150,
        "z = f(" + "g(" * 100 + "1" + ")" * 101,
        "def f(a):\n" + "".join("    " * k + "if a:\n" for k in range(1, 60)) + "    " * 60 + "pass\n",
        "q = lambda a: lambda b: a + b\nr = f'{a + b!r:>{w}}'",
    ],
)
def test_real_code_passes_and_the_estimate_bounds_the_real_depth(text):
    tree = uspec.syntax_check(text)
    estimate, _ = uspec.nesting_depth(text)
    assert estimate <= uspec.MAX_NESTING
    assert estimate >= _depth(tree) - 3, (estimate, _depth(tree))  # Module / Expr / Load wrappers aside


def test_a_50000_term_reference_is_one_line():
    with pytest.raises(LaunchError) as err:
        uspec.parse_reference(TERMS, ["a", "c"])
    assert "the reference is" in one_line(err) and "the limit is" in str(err.value)
    deep = "c = " + " + ".join(["a"] * 2_500)  # under the byte limit, over the depth limit
    with pytest.raises(LaunchError) as err:
        uspec.parse_reference(deep, ["a", "c"])
    assert "nests too deeply" in one_line(err)
    assert uspec.parse_reference("c = a + a * 2", ["a", "c"]) == ["c=a + a * 2"]


@pytest.mark.parametrize(
    "call",
    [
        lambda: uspec.parse_dims("1," * 50_000, "block"),
        lambda: uspec.parse_dims("9" * 5_000, "grid"),
        lambda: uspec.parse_arg("a", "rand:float32:" + "9" * 100_000),
        lambda: uspec.parse_arg("a", "1" * 400 + "x"),
        lambda: uspec.parse_args({f"a{i}": "1" for i in range(10_000)}),
        lambda: uspec.plan_source_launch(
            EXAMPLES["vector_add"].source, "k" * 100_000, grid="1", block="1", args={}
        ),
    ],
)
def test_launch_fields_and_argument_specs_are_bounded(call):
    with pytest.raises(LaunchError) as err:
        call()
    one_line(err)


# --- the Your kernel page -------------------------------------------------------------------------


def _page(monkeypatch, allow: str) -> AppTest:
    monkeypatch.setenv("VISUALIZER_ALLOW_USER_CODE", allow)
    at = AppTest.from_file(ENTRY, default_timeout=600)
    at.query_params["backend"] = "sim"
    at.run()
    at.switch_page("web/pages/your_kernel.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _run_button(at):
    return next(b for b in at.button if b.label == "Run your kernel")


@pytest.mark.parametrize("allow", ["0", "1"])  # the source is parsed on every rerun, even with code off
def test_100kb_source_keeps_the_page_and_its_run_button(monkeypatch, allow):
    at = _page(monkeypatch, allow)
    at.text_area(key="uk_source").set_value(UNARY).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "nests too deeply" in errors[0] and "\n" not in errors[0], errors
    assert _run_button(at).disabled
    at.text_area(key="uk_source").set_value(EXAMPLES["vector_add"].source).run()  # and it recovers
    assert not at.exception and not at.error
    assert not _run_button(at).disabled or allow == "0"


def test_50000_term_reference_is_one_line_on_the_page(monkeypatch):
    at = _page(monkeypatch, "1")
    at.text_area(key="uk_reference").set_value(TERMS)
    _run_button(at).click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "the reference is" in errors[0] and "\n" not in errors[0], errors
    assert not _run_button(at).disabled  # fix the reference and run again
    assert at.session_state["capture"] is None or not at.session_state["capture"].launch.get("user_kernel")


def test_hostile_upload_is_one_line_on_the_page(monkeypatch):
    at = _page(monkeypatch, "1")
    at.file_uploader[0].upload("big.npy", hostile_npy()).run()
    at.text_input(key="uk_arg_a").set_value("file:big.npy")
    _run_button(at).click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "elements; the limit is" in errors[0], errors


# --- the CLI with --source ------------------------------------------------------------------------


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def one_line_exit(res, code, words):
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture
def marked_kernel(tmp_path):
    """A kernel file that leaves a marker when its module runs: proof of whether the run happened."""
    marker = tmp_path / "ran"
    src = tmp_path / "k.py"
    src.write_text(f"open({str(marker)!r}, 'w').close()\n" + EXAMPLES["vector_add"].source)
    return src, marker


def source_args(src, *extra):
    return ["capture", "--source", str(src), "--threads-for", "100", "--block", "32", "--backend", "sim"] + [
        "--arg",
        "a=rand:float32:100",
        "--arg",
        "b=rand:float32:100",
        "--arg",
        "c=zeros:float32:100",
        *extra,
    ]


def test_source_with_an_unusable_out_is_refused_before_the_run(tmp_path, marked_kernel):
    src, marker = marked_kernel
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_exit(cli(*source_args(src, "--out", str(blocker / "sub"))), 2, "--out")
    one_line_exit(cli(*source_args(src, "--out", str(blocker))), 2, "is not a directory")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    one_line_exit(cli(*source_args(src, "--out", str(tmp_path / "mine"))), 2, "not part of a capture bundle")
    assert not marker.exists(), "the kernel's module ran although --out was unusable"
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--repeats", "0"], "--repeats: must be at least 1"),
        (["--seed", "-1"], "--seed: must be at least 0"),
        (["--timeout", "nan"], "--timeout: must be a positive number"),
        (["--rtol", "-1"], "--rtol: must be a finite number"),
        (["--threads-for", "0"], "--threads-for: must be at least 1"),
        (["--reference", TERMS[:30_000]], "the reference is"),
        (["--arg", "x=1"], "no parameter 'x'"),
    ],
)
def test_source_errors_are_one_line_exit_2(tmp_path, marked_kernel, extra, words):
    src, marker = marked_kernel
    one_line_exit(cli(*source_args(src, "--out", str(tmp_path / "o"), *extra)), 2, words)
    assert not marker.exists()


def test_source_hostile_npy_is_one_line_exit_2(tmp_path, marked_kernel):
    src, marker = marked_kernel
    npy = tmp_path / "a.npy"
    npy.write_bytes(hostile_npy())
    args = source_args(src, "--out", str(tmp_path / "o"))
    args[args.index("a=rand:float32:100")] = f"a=file:{npy}"
    one_line_exit(cli(*args), 2, "elements; the limit is")
    assert not marker.exists()


def test_capture_help_shows_both_ways_to_name_the_kernel():
    res = cli("capture", "--help", timeout=60)
    assert res.returncode == 0, res.stderr
    for words in (
        "a built-in kernel",
        "--source FILE.py",
        "--kernel KERNEL",
        "--arg NAME=SPEC",
        "--reference",
    ):
        assert words in res.stdout, words
