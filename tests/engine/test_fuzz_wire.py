"""Property tests (Hypothesis) over the wire protocol, both directions: what a sandbox sends the server
(engine/run/wire.py's framing and JSON header, engine/run/messages.py's tuple, analysis/capture.check_reply's
reply) and what the server sends a sandbox (the request, read by the same Channel).

Each property runs FUZZ_EXAMPLES generated cases per run (300, the forged-reply one 100; derandomized, so
CI sees the same cases every time: 7 properties, 1,900 cases, about a minute); ``VISUALIZER_FUZZ_EXAMPLES=100000`` runs the long version (docs/benchmarks.md says what it
found). Every failure must be one line of a known class (WireError, EOFError, MalformedMessage,
ReplyError), and reading a message may allocate no more than its byte budget (tracemalloc).
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import struct
import time
import tracemalloc
from multiprocessing.connection import Connection

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from visualizer.analysis.capture import Expected, ReplyError, build_capture, check_reply
from visualizer.engine.run import wire
from visualizer.engine.run.messages import MalformedMessage, Message

FUZZ_EXAMPLES = int(os.environ.get("VISUALIZER_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BUDGET = 64 << 10  # the byte budget of a fuzzed message (the server's is the run's reply_bytes)
ONE_LINE = 300


def _one_line(exc: BaseException) -> None:
    text = str(exc)
    assert "\n" not in text and len(text) <= ONE_LINE, text


def _read(frames: list[bytes], channel_class=wire.ServerChannel, budget: int = BUDGET):
    """Write raw frames (each up to the socket's buffer) into a socketpair, close the writer, read one
    message with the given channel: a value, or WireError/EOFError, with the peak allocation."""
    a, b = socket.socketpair()
    writer, reader = Connection(a.detach()), Connection(b.detach())
    try:
        data = b"".join(frames)[: 150 << 10]  # within the socket buffer: the writer never blocks
        os.write(writer.fileno(), data)
        writer.close()
        channel = channel_class(reader, budget)
        tracemalloc.start()
        try:
            return channel.recv(deadline=time.monotonic() + 30)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < 2 * budget + (1 << 20), f"{peak} bytes allocated for a message of budget {budget}"
    finally:
        reader.close()
        if not writer.closed:
            writer.close()


def frame(data: bytes) -> bytes:
    return struct.pack("!i", len(data)) + data


# --- raw bytes: any frame, any header --------------------------------------------------------------


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=4), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4))
def test_any_bytes_are_a_message_or_one_line(chunks, lengths):
    """Random frames whose length prefixes may lie (negative, huge, short) and random bodies."""
    frames = [struct.pack("!i", n) + c for n, c in zip(lengths, chunks, strict=False)] + chunks[
        len(lengths) :
    ]
    try:
        _read(frames)
    except (wire.WireError, EOFError) as exc:
        _one_line(exc)


JSON_ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1" + "0" * 60]),
)
TAGS = st.sampled_from(["t", "d", "a", "s", "b", "c", "x", ""])


def _raw_json(value) -> str:
    """JSON text with the sentinel strings spliced in raw (Infinity, 1e400, a 61-digit int)."""
    text = json.dumps(value)
    for raw in ("Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1" + "0" * 60):
        text = text.replace(json.dumps(raw), raw)
    return text


JSON_VALUES = st.recursive(
    JSON_ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(TAGS, inner, min_size=1, max_size=2),
        st.builds(lambda tag, v: {tag: v}, TAGS, st.lists(inner, max_size=4)),
    ),
    max_leaves=24,
)


@FUZZ
@given(JSON_VALUES, st.lists(st.integers(-4, 64), max_size=4), st.integers(0, 3), st.booleans())
def test_any_json_header_is_a_message_or_one_line(body, sizes, extra_parts, well_formed_sizes):
    """Headers near the format's grammar (its tags, holding anything; Infinity, NaN, 1e400, huge ints),
    with parts that may or may not match the sizes they announce."""
    header = _raw_json([body, sizes]).encode() if well_formed_sizes else _raw_json(body).encode()
    parts = [frame(bytes(max(n, 0))) for n in sizes[: len(sizes) - extra_parts if extra_parts else None]]
    try:
        got = _read([frame(header), *parts])
    except (wire.WireError, EOFError) as exc:
        _one_line(exc)
    else:
        assert isinstance(got, tuple)
        Message.from_wire(got)  # what ServerChannel returns, the runner accepts


@FUZZ
@given(st.integers(0, 40), st.sampled_from(["[", '{"t": [', '{"d": [[', '{"a": [']))
def test_deep_nesting_is_one_line(depth_hundreds, opener):
    text = opener * (depth_hundreds * 100 + 65)
    try:
        _read([frame(text.encode())])
    except (wire.WireError, EOFError) as exc:
        _one_line(exc)


# --- round trips: what the server sends a sandbox, what a sandbox sends back ------------------------

PLAIN_DTYPES = st.sampled_from(["<f4", "<f8", "<i4", "<i8", "<u1", "|b1", "<c8", "<u8", "<i2", ">f8"])
ARRAYS = PLAIN_DTYPES.flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
)
VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**100), 2**100),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.binary(max_size=16),
        st.complex_numbers(allow_nan=False, allow_infinity=False, max_magnitude=1e300),
        ARRAYS,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-5, 5)), inner, max_size=4),
    ),
    max_leaves=20,
)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
    if isinstance(a, float):
        return isinstance(b, float) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@FUZZ
@given(VALUES)
def test_what_either_side_sends_comes_back_as_it_was(value):
    """The server's request to a sandbox and a sandbox's reply travel the same way (Channel both ends)."""
    a, b = socket.socketpair()
    ends = Connection(a.detach()), Connection(b.detach())
    try:
        wire.Channel(ends[0], 1 << 20).send(("ok", 1, {"value": value}))
        kind, rid, got = wire.Channel(ends[1], 1 << 20).recv(deadline=time.monotonic() + 30)
    finally:
        for end in ends:
            end.close()
    assert (kind, rid) == ("ok", 1) and _same(value, got["value"]), (value, got)


# --- the message tuple and the reply ------------------------------------------------------------------


@FUZZ
@given(
    st.one_of(
        st.tuples(st.one_of(st.sampled_from(["ok", "blocks", "progress", "error", "ready"]), VALUES), VALUES),
        st.tuples(st.sampled_from(["ok", "blocks", "progress", "error"]), VALUES, VALUES),
        st.tuples(VALUES, VALUES, VALUES, VALUES),
        VALUES,
    )
)
def test_any_tuple_is_a_message_or_one_line(msg):
    try:
        Message.from_wire(msg)
    except MalformedMessage as exc:
        _one_line(exc)


def _reply() -> tuple[dict, Expected]:
    trace = np.zeros((3, 64), np.int64)
    trace[1], trace[2] = np.arange(64), np.arange(64) + 5
    launch = {
        "grid": [2, 1, 1], "block": [32, 1, 1], "threads": 64, "blocks": 2, "threads_per_block": 32,
        "recorded_per": "thread", "source": "simulated", "backend": "sim", "user_kernel": True,
        "kernel": "k (yours)", "kernel_name": "k", "filename": "k.py", "kernel_source": "", "params": {},
        "written": ["out"], "tile_operands": [], "row_table": None, "arg_order": ["a", "out"],
    }  # fmt: skip
    reply = {
        "launch": launch,
        "timing": {"instrumented_ms": 1.0, "clean_ms": 0.5},
        "buffers": {"trace": trace, "active": np.ones(64, np.uint8)},
        "outputs": {"out": np.zeros(64, np.float32)},
        "inputs": {"a": np.arange(64, dtype=np.float32)},
        "check": {"correct": True, "outputs": {}},
    }
    return reply, Expected((2, 1, 1), (32, 1, 1), {"a": ("<f4", (64,)), "out": ("<f4", (64,))})


def test_the_reply_the_fuzzer_starts_from_is_accepted():
    reply, expected = _reply()
    cap = build_capture(reply, expected)
    assert len(cap.threads) == 64 and cap.launch["user_kernel"]


PATHS = [
    ("launch", "threads"), ("launch", "blocks"), ("launch", "threads_per_block"), ("launch", "grid"),
    ("launch", "block"), ("launch", "recorded_per"), ("launch", "user_kernel"), ("launch", "source"),
    ("launch", "written"), ("launch", "lens"), ("launch", "runs"), ("timing", "clean_ms"),
    ("buffers", "trace"), ("buffers", "active"), ("buffers", "tiles"), ("outputs", "out"), ("inputs", "a"),
    ("check", "correct"), ("runs",), ("accesses",), ("launch",), ("buffers",),
]  # fmt: skip
WEIRD = st.one_of(
    VALUES,
    st.sampled_from(
        [50_000_000, 2**63, -1, 0, float("inf"), float("nan"), 1e400, [50_000_000, 1, 1], [0, 1, 1]]
    ),
    ARRAYS,
)


@settings(FUZZ, max_examples=max(1, FUZZ_EXAMPLES // 3))  # each builds pandas tables: a third as many
@given(st.lists(st.tuples(st.sampled_from(PATHS), WEIRD), min_size=1, max_size=3))
@example([(("launch", "threads"), np.zeros((2, 1), np.float32))])  # the long run's find: a 2-line quote
@example([(("launch", "recorded_per"), np.zeros(0, np.float32))])  # the first run's: an ambiguous truth
def test_a_forged_reply_is_refused_in_one_line_or_builds_within_budget(changes):
    """A valid reply with up to three fields replaced by anything: check_reply refuses it (ReplyError,
    one line) or it is the launch asked for, and its tables are made within a small allocation."""
    reply, expected = _reply()
    reply = copy.deepcopy(reply)
    for path, value in changes:
        where = reply
        for key in path[:-1]:
            where = where.get(key) if isinstance(where, dict) else None
        if isinstance(where, dict):  # an earlier change may have replaced the mapping this one goes into
            where[path[-1]] = value
    try:
        check_reply(reply, expected)
    except ReplyError as exc:
        _one_line(exc)
        return
    tracemalloc.start()
    try:
        build_capture(reply, expected)
    except Exception:  # noqa: BLE001 - the runner turns anything after the check into one line
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes for a reply of 64 threads"


@pytest.mark.parametrize("threads", [50_000_000, 2**40])
def test_a_forged_thread_count_is_refused_without_allocating(threads):
    reply, expected = _reply()
    reply["launch"]["threads"] = threads
    tracemalloc.start()
    try:
        with pytest.raises(ReplyError, match="its launch does not add up"):
            build_capture(reply, expected)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
