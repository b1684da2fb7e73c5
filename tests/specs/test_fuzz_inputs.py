"""Property tests (Hypothesis) over the parsers of outside text this branch owns: the argument and
launch specs a visitor writes (specs/source.py), .npy headers (the bounded loader every upload and
``file:`` argument goes through), and a bundle's JSON (launch.json, timing.json, read by ``compare``).

Each property: the input is accepted within the limits, or refused with one line (a LaunchError or a
BundleError, never another exception), and the Python memory allocated on the way (tracemalloc's
peak) stays under a budget stated per target, so a header claiming 10^12 elements is refused before
anything is allocated for it.

Cases per run: ``FUZZ_EXAMPLES`` per target (default 200, derandomized: the same cases every CI run);
``FUZZ_EXAMPLES=100000 FUZZ_RANDOM=1`` is the long run recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from visualizer.analysis import compare as cmp
from visualizer.analysis.capture import Capture
from visualizer.specs import source as uspec
from visualizer.specs.launch import LaunchError
from visualizer.tools import bundle
from visualizer.tools.bundle import BundleError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not os.environ.get("FUZZ_RANDOM"),
    deadline=None,  # no timing in tests: the machine may be busy
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SPEC_BUDGET = 2 * 2**20  # parsing one argument or launch field: no array is made
KERNEL = """from numba import cuda


@cuda.jit
def scale(a, c, n):
    i = cuda.grid(1)
    if i < n:
        c[i] = 2 * a[i]
"""


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text and len(text) < 600, text
    return text


class Peak:
    """tracemalloc's peak of Python allocations inside the block, in bytes."""

    def __enter__(self):
        tracemalloc.start()
        tracemalloc.reset_peak()
        return self

    def __exit__(self, *exc):
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return False


# --- argument and launch specs --------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-3, 70),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**26, 2**26 + 1, 2**31, 10**30, 0, 1]),
).map(str)
SHAPES = st.lists(NUMBERS, min_size=0, max_size=5).flatmap(
    lambda parts: st.sampled_from(["x", ",", "×", " x "]).map(lambda sep: sep.join(parts))
)
DTYPE_WORDS = st.one_of(
    st.sampled_from(uspec.DTYPES + ("f32", "i64", "bool_", "object", "U5", "")), st.text(max_size=8)
)
KIND_WORDS = st.sampled_from(uspec.KINDS + ("rng", "file", "RAND", "nope", ""))
SPEC_TEXT = st.one_of(
    st.builds(lambda k, d, s: f"{k}:{d}:{s}", KIND_WORDS, DTYPE_WORDS, SHAPES),
    st.builds(lambda seed, n: f"rng:{seed}:{n}", NUMBERS, SHAPES),
    st.builds(lambda k, rest: f"{k}:{rest}", KIND_WORDS, st.text(max_size=40)),
    NUMBERS,
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0x10", "1_000", "0b11", "-0.0", "file:up.npy"]),
    st.text(max_size=80),
    st.text(alphabet="0123456789x,:.-+eE_abcdefghijklmnopqrstuvwxyz ", max_size=600),
)


@FUZZ
@given(text=SPEC_TEXT)
def test_argument_specs_are_parsed_within_limits_or_refused_in_one_line(text):
    with Peak() as peak:
        try:
            spec = uspec.parse_arg("a", text, allow_files=False, uploads={})
        except LaunchError as exc:
            one_line(exc)
            spec = None
    assert peak.bytes < SPEC_BUDGET, (text[:80], peak.bytes)
    if spec is not None and spec.is_array:
        assert 1 <= len(spec.shape) <= 3 and all(d >= 1 for d in spec.shape), spec
        assert math.prod(spec.shape) <= uspec.MAX_ARRAY_ELEMENTS and spec.nbytes <= uspec.MAX_ARRAY_BYTES
    if spec is not None and spec.kind == "scalar":
        assert isinstance(spec.value, (int, float)) and math.isfinite(spec.value)


@FUZZ
@given(
    pairs=st.lists(
        st.one_of(
            st.builds(lambda n, s: f"{n}={s}", st.sampled_from(["a", "c", "n", "x", "1a", ""]), SPEC_TEXT),
            st.text(max_size=30),
        ),
        max_size=6,
    ),  # fmt: skip
    grid=st.one_of(SHAPES, st.text(max_size=30)),
    block=st.one_of(SHAPES, st.text(max_size=30)),
    threads_for=st.one_of(st.none(), st.integers(-5, 2**40)),
    reference=st.one_of(st.none(), st.text(max_size=200), st.lists(st.text(max_size=40), max_size=3)),
)
def test_launches_are_planned_within_limits_or_refused_in_one_line(
    pairs, grid, block, threads_for, reference
):
    with Peak() as peak:
        try:
            launch = uspec.plan_source_launch(
                KERNEL, "scale", grid=grid, block=block, args=pairs, threads_for_n=threads_for,
                reference=reference, backend="sim", allow_files=False, uploads={},
            )  # fmt: skip
        except LaunchError as exc:
            one_line(exc)
            launch = None
    assert peak.bytes < SPEC_BUDGET, peak.bytes
    if launch is not None:
        assert sum(s.nbytes for s in launch.args.values()) <= uspec.MAX_ARRAY_BYTES
        assert all(1 <= d for d in launch.launch.grid + launch.launch.block)


# --- .npy headers -----------------------------------------------------------------------------------

DESCRS = st.one_of(
    st.sampled_from(
        ["<f4", "<f8", ">f4", "|b1", "<i8", "|u1", "<c16", "<f2", "O", "|O", "<U5", "|V8", "<M8[s]"]
    ),
    st.just("[('x', '<f4')]"),
    st.text(max_size=12).map(repr),
)
SHAPE_TEXT = st.one_of(
    st.lists(st.integers(-3, 2**70), max_size=5).map(lambda dims: repr(tuple(dims))),
    st.sampled_from(["()", "(0,)", "(-1,)", "[3]", "None", "(1e3,)", "(2**40,)", "(" + "9" * 60 + ",)"]),
    st.text(max_size=30),
)


@st.composite
def npy_files(draw) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300))  # anything at all
    descr, shape = draw(DESCRS), draw(SHAPE_TEXT)
    fortran = draw(st.sampled_from(["False", "True", "0", "'no'"]))
    header = "{" + f"'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, " + "}"
    if draw(st.booleans()):
        header = header.ljust(64 * (len(header) // 64 + 1) - 11) + "\n"
    version = draw(st.sampled_from([(1, 0), (2, 0), (3, 0), (0, 9)]))
    length = len(header.encode("latin1", "replace"))
    if draw(st.integers(0, 4)) == 0:
        length = draw(st.integers(0, 2**32 - 1))  # a header length that lies
    width = 2 if version[0] == 1 else 4
    length_bytes = (length % (1 << (8 * width))).to_bytes(width, "little")
    data = b"\x93NUMPY" + bytes(version) + length_bytes + header.encode("latin1", "replace")
    return data + draw(st.binary(max_size=4096))


@FUZZ
@given(data=npy_files())
def test_npy_headers_are_bounded_before_anything_is_allocated(data):
    with Peak() as peak:
        try:
            array = uspec.load_npy(data, "a=file:up.npy")
        except LaunchError as exc:
            one_line(exc)
            array = None
    # what the file holds, copied at most twice, and the header's parse: never what a header claims
    assert peak.bytes < 4 * len(data) + 512 * 1024, (data[:120], peak.bytes)
    if array is not None:
        assert array.nbytes <= len(data) and array.ndim <= 3 and not array.dtype.hasobject


def test_a_header_numpy_cannot_tokenize_is_one_line():
    """Found by the fuzz: numpy re-tokenizes a version 1.0 header, and an unclosed ``[`` raised
    tokenize.TokenError out of load_npy (a traceback on the page and in the CLI)."""
    data = b"\x93NUMPY\x01\x004\x00{'descr': <f4, 'fortran_order': False, 'shape': [, }"
    with pytest.raises(LaunchError, match="not a readable .npy array") as err:
        uspec.load_npy(data, "a=file:up.npy")
    one_line(err.value)


def test_a_header_claiming_a_terabyte_stays_under_the_budget():
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    with Peak() as peak, pytest.raises(LaunchError, match="elements; the limit is"):
        uspec.load_npy(data, "a")
    assert peak.bytes < 512 * 1024


# --- bundle JSON ------------------------------------------------------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory) -> Path:
    """A real bundle with memory accesses (the most fields compare reads); ``FUZZ_BUNDLE=DIR``: one
    captured before (the long run reuses it)."""
    if os.environ.get("FUZZ_BUNDLE"):
        return Path(os.environ["FUZZ_BUNDLE"])
    out = tmp_path_factory.mktemp("fuzz") / "a"
    res = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", "transpose_tiled", "--accesses", "--backend", "sim"]
        + ["--param", "rows=32", "--param", "cols=32", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    return out


def paths_of(obj, prefix=()):
    """Every key path of a JSON object (into nested objects)."""
    for key, value in obj.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from paths_of(value, (*prefix, key))


@st.composite
def edited_json(draw, original: dict):
    """The original object with a few fields replaced by any JSON value, removed, or added."""
    obj = json.loads(json.dumps(original))
    paths = list(paths_of(obj))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        node = obj
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        action = draw(st.integers(0, 5))
        if action == 0:
            node.pop(path[-1], None)
        elif action == 1:
            node[draw(st.text(max_size=8))] = draw(JSON_VALUES)
        else:
            node[path[-1]] = draw(JSON_VALUES)
    return obj


def compare_reads(directory: Path, good) -> None:
    """What ``compare`` does with a bundle's JSON: the bounded reader (bundle.load's first step, its
    allocations measured), then the comparison and its text over the real bundle's tables (the Parquet
    side is the corpus's, tests/tools/test_bundle_untrusted.py)."""
    with Peak() as peak:
        try:
            launch, timing, check = bundle.read_meta(directory)
        except BundleError as exc:
            one_line(exc)
            launch = None
    assert peak.bytes < 16 * 2**20, peak.bytes
    if launch is None:
        return
    other = Capture(launch, timing, {}, {}, good.threads, check=check, requests=good.requests)
    table = cmp.compare(good, other)  # no exception: what the reader let through, compare can use
    cmp.as_text(table)
    cmp.differences(table)


@pytest.fixture(scope="module")
def fuzz_dir(real_bundle, tmp_path_factory) -> tuple[Path, object, dict, dict]:
    work = tmp_path_factory.mktemp("fuzzed") / "b"
    shutil.copytree(real_bundle, work)
    launch = json.loads((real_bundle / "launch.json").read_text())
    timing = json.loads((real_bundle / "timing.json").read_text())
    return work, bundle.load(real_bundle, only=bundle.COMPARE_READS), launch, timing


@FUZZ
@given(data=st.data())
def test_bundle_json_is_checked_before_compare_uses_it(fuzz_dir, data):
    work, good, launch, timing = fuzz_dir
    which = data.draw(st.sampled_from(["launch", "timing", "both", "raw"]))
    new_launch = data.draw(edited_json(launch)) if which in ("launch", "both") else launch
    new_timing = data.draw(edited_json(timing)) if which in ("timing", "both") else timing
    (work / "launch.json").write_text(json.dumps(new_launch))
    (work / "timing.json").write_text(json.dumps(new_timing))
    if which == "raw":  # text that is barely JSON, or not at all
        raw = data.draw(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
        (work / data.draw(st.sampled_from(["launch.json", "timing.json"]))).write_bytes(raw)
    compare_reads(work, good)


def test_the_fuzz_runs_derandomized_with_a_stated_number_of_cases():
    assert FUZZ.max_examples == EXAMPLES and (FUZZ.derandomize or os.environ.get("FUZZ_RANDOM"))
    assert np.__version__  # the .npy cases use numpy's own header reader
