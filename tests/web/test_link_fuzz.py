"""Property tests (Hypothesis) over every decoder of a link's text: the packed kernel (``yk``), the
built-in kernel's name, backend and parameters, every page control a link seeds, a lesson's
question, the operator's key, and the Host/Origin headers. Whatever the text, the answer is a
value or one printable line, never an exception, and nothing is decoded past its bound.

Cases per run: FUZZ_EXAMPLES (derandomized, so CI sees the same cases every run). A long run:
``VISUALIZER_FUZZ_EXAMPLES=100000 python3 -m pytest -q tests/web/test_link_fuzz.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import json
import os
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from visualizer.engine.run.user_runner import token_matches
from visualizer.specs import catalog
from visualizer.web.current_kernel import (
    LINK_MAX_BYTES,
    LINK_MAX_CHARS,
    KernelLink,
    LinkError,
    decode_link,
    encode_link,
)
from visualizer.web.hostcheck import host_allowed, host_name, origin_allowed, refusal
from visualizer.web.session import (
    LINK_VALUE_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    RunConfig,
    config_from_query,
    link_value,
    question_from_link,
)

FUZZ_EXAMPLES = int(os.environ.get("VISUALIZER_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    deadline=None,  # a loaded machine: no timing
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALID = KernelLink(
    source="from numba import cuda\n\n@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    a[i] = i\n",
    kernel="k",
    grid=(2,),
    block=(32,),
    args={"a": "zeros:float32:64"},
    reference=("a = a",),
    backend="sim",
)


def one_line(text: str, limit: int = 3 * MESSAGE_MAX_CHARS) -> None:
    """A message a page may show: one line, bounded, encodable (no lone surrogate reaches the browser)."""
    assert isinstance(text, str) and "\n" not in text and len(text) <= limit, text[:200]
    text.encode("utf-8")


def pack(raw: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)
# every string a JSON document can carry, lone surrogates included (json.loads turns "\\ud800" into one)
any_text = st.text(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=60)
fields = sorted(VALID.as_json())


def decoded_or_one_line(text) -> KernelLink | None:
    try:
        got = decode_link(text)
    except LinkError as exc:
        one_line(str(exc))
        return None
    # what decoded is usable text: the page's widgets and its parser take every field
    for value in (got.source, got.kernel, *got.args, *got.args.values(), *got.reference):
        value.encode("utf-8")
    return got


@FUZZ
@given(st.text(max_size=200))
def test_any_text_as_yk_is_a_kernel_or_one_line(text):
    decoded_or_one_line(text)


@FUZZ
@given(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", max_size=400))
def test_any_base64_as_yk_is_a_kernel_or_one_line(text):
    decoded_or_one_line(text)


@FUZZ
@given(st.binary(max_size=400))
def test_any_packed_bytes_are_a_kernel_or_one_line(raw):
    decoded_or_one_line(pack(raw))


@FUZZ
@given(json_values)
def test_any_packed_json_is_a_kernel_or_one_line(value):
    decoded_or_one_line(pack(json.dumps(value).encode()))


@FUZZ
@given(st.sampled_from(fields), json_values | any_text)
def test_a_link_with_one_field_replaced_is_a_kernel_or_one_line(field, value):
    state = VALID.as_json()
    state[field] = value
    decoded_or_one_line(pack(json.dumps(state).encode()))


@FUZZ
@given(st.sampled_from(["source", "kernel", "reference", "args"]), any_text)
def test_a_link_whose_text_carries_any_character_is_a_kernel_or_one_line(field, text):
    """Lone surrogates among them: issue 36's crashing 170-character link."""
    state = VALID.as_json()
    state[field] = (
        state["source"] + "# " + text if field == "source"
        else [text] if field == "reference"
        else {"a": text} if field == "args"
        else text
    )  # fmt: skip
    got = decoded_or_one_line(pack(json.dumps(state).encode()))
    if got is not None and field == "source":  # JSON joins a high and a low surrogate into one character
        assert got.source.endswith(json.loads(json.dumps(text)))


@FUZZ
@given(st.integers(0, 400), st.integers(0, 255))
def test_a_valid_link_cut_or_with_a_byte_changed_is_a_kernel_or_one_line(cut, byte):
    raw = zlib.compress(json.dumps(VALID.as_json()).encode(), 9)
    changed = bytearray(raw[: max(1, len(raw) - cut % len(raw))])
    changed[cut % len(changed)] = byte
    decoded_or_one_line(base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("="))


def test_the_long_link_with_a_lone_surrogate_from_issue_36_is_one_line():
    state = {**VALID.as_json(), "source": VALID.source + "# \ud800\n"}
    text = pack(json.dumps(state).encode())
    assert len(text) < 300  # a link short enough to paste in a chat
    with pytest.raises(LinkError, match="lone surrogate"):
        decode_link(text)


@pytest.mark.parametrize("mib", [2, 8, 23])
def test_a_zlib_bomb_inflates_no_further_than_the_bound(mib):
    """A link of up to LINK_MAX_CHARS that unpacks to ~1000 times as much (zlib's best ratio): refused
    having allocated about LINK_MAX_BYTES, whatever it would unpack to."""
    bomb = zlib.compressobj(9)
    chunk = b"\0" * (1 << 20)
    packed = b"".join(bomb.compress(chunk) for _ in range(mib)) + bomb.flush()
    text = base64.urlsafe_b64encode(packed).decode().rstrip("=")
    assert len(text) <= LINK_MAX_CHARS
    tracemalloc.start()
    try:
        with pytest.raises(LinkError, match="unpacks to more than"):
            decode_link(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * LINK_MAX_BYTES + 4 * LINK_MAX_CHARS, peak


def test_what_encodes_decodes():
    assert decode_link(encode_link(VALID)) == VALID


# -- the built-in kernel's link: name, backend, parameters -----------------------------------------

query_keys = st.sampled_from(["kernel", "backend", "n", "block", "tile", "seed", "stride"]) | st.text(
    max_size=20
)
query_values = (
    st.text(max_size=30)
    | st.integers(-(10**30), 10**30).map(str)
    | st.sampled_from(list(catalog.KERNELS) + ["auto", "sim", "gpu", "²", "١٢", "1_000", " 64 ", "9" * 5000])
)


@FUZZ
@given(st.dictionaries(query_keys, query_values, max_size=6))
def test_any_query_is_a_configuration_or_one_line(query):
    config, error = config_from_query(query)
    assert isinstance(config, RunConfig) and config.kernel in catalog.KERNELS
    if error is not None:
        one_line(error)
        assert error.startswith("Bad link")


def test_a_value_past_the_bound_is_refused_before_it_is_parsed():
    config, error = config_from_query({"kernel": "vector_add", "n": "1" * (LINK_VALUE_MAX_CHARS + 1)})
    assert "over 1,000 characters" in error and config.kernel == "vector_add"


# -- a page control's link value ---------------------------------------------------------------------

controls = st.sampled_from(
    [
        (False, None),
        (True, None),
        (0, (0, 63)),
        (32, (1, 255)),
        (0.5, (0.0, 1.0)),
        ("H200", ["H200", "A100", "RTX 4090"]),
        ("", None),  # free text (Compare's parameters)
    ]
)


@FUZZ
@given(controls, st.text(max_size=60) | st.sampled_from(["nan", "inf", "-0", "1e400", "²", "9" * 5000]))
def test_any_control_value_is_taken_or_one_line(control, raw):
    default, allowed = control
    value, notice = link_value("some_key", default, allowed, raw=raw)
    assert type(value) is type(default)
    if notice is not None:
        one_line(notice)
        assert value == default
    elif isinstance(allowed, list):
        assert value in allowed
    elif allowed is not None:
        assert allowed[0] <= value <= allowed[1]


@FUZZ
@given(st.text(max_size=20) | st.sampled_from(["²", "٣", "0", "1", "007", "9" * 5000]), st.integers(1, 12))
def test_any_question_number_is_taken_or_one_line(raw, count):
    q, notice = question_from_link(raw, count)
    assert 0 <= q <= count
    if notice is not None:
        one_line(notice)


def test_a_superscript_two_was_a_crash_of_the_lessons_page():
    """str.isdigit('²') is true and int('²') raises: the page used to check the one and call the other."""
    q, notice = question_from_link("²", 3)
    assert q == 0 and "was ignored" in notice


# -- the operator's key and the request headers --------------------------------------------------------


@FUZZ
@given(any_text | st.none() | st.integers())
def test_any_key_is_compared_without_raising(presented):
    assert token_matches(presented, {"VISUALIZER_TOKEN": "k" * 43}) is False


@FUZZ
@given(
    any_text | st.none(), any_text | st.none(), st.sampled_from([None, "127.0.0.1", "10.0.0.7", "::1", "x"])
)
def test_any_host_and_origin_are_judged_in_one_line(host, origin, client):
    host_name(host)
    host_allowed(host)
    origin_allowed(origin)
    why = refusal(host, origin, client, ("gpu-box.lab",), False)
    if why is not None:
        one_line(why, 400)
