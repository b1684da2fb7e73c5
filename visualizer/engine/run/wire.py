"""Messages between the server and a sandboxed worker, without pickle.

multiprocessing's Connection.recv() unpickles what arrives, and unpickling runs code: a sandbox that
wrote a crafted pickle to its socket would run it in the server. So the sandbox and the server speak
this instead: one JSON header (None, bool, int, float, str, list; tuples, dicts, complex numbers,
bytes and numpy arrays of plain dtypes as small tagged objects), then the raw bytes of each array.
Reading it builds nothing but those types (never an object dtype), with every size bounded.

Every read has a deadline (``recv(deadline=...)``): a sender that stops half-way through a message (a
length that promises 1,000 bytes, then one byte) is read with a poll before each ``read``, never with a
blocking ``recv_bytes``, so the runner's time limit holds inside a message too (``WireTimeout``). The
same framing reader serves the built-in kernels' pickles (``PickleChannel``: our own worker, trusted,
but it can be stopped mid-message by SIGSTOP or a full machine).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import select
import struct
import time

import numpy as np

from visualizer.engine.run.messages import MalformedMessage, Message

MAX_HEADER_BYTES = 64 << 20
MAX_BLOBS = 4096
KINDS = frozenset("biufcSUmM")  # numpy dtype kinds that are plain bytes (no objects, no structs)
MAX_FIELDS = 16  # a record dtype (e.g. RNG states) may have this many plain fields


MAX_DEPTH = 64  # nesting of lists, tuples and dicts in one message (a reply needs about 6)
MAX_INT_DIGITS = 40  # an int in a header: a count, a size, an id (2**128 has 39 digits)


class WireError(OSError):
    """A message that is not one (malformed, too big, a type this format does not carry)."""


class WireTimeout(WireError):
    """The sender stopped before its message was whole and the reader's deadline passed."""


def _read_exact(fd: int, n: int, deadline: float | None) -> bytearray:
    """``n`` bytes from ``fd``, each read after a poll that waits no later than ``deadline``
    (time.monotonic); EOFError when the other end closes, WireTimeout at the deadline."""
    buf = bytearray(n)
    view = memoryview(buf)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    got = 0
    while got < n:
        if deadline is None:
            wait_ms = None
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireTimeout(f"the sender stopped half-way through a message ({got} of {n} bytes)")
            wait_ms = max(1, math.ceil(min(left, 1.0) * 1000))
        if not poller.poll(wait_ms):
            continue
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError
        got += k
    return buf


def recv_frame(fd: int, max_bytes: int, deadline: float | None = None) -> bytearray:
    """One message of multiprocessing's framing (a 4-byte big-endian length, -1 then 8 bytes for a
    big one, the bytes), refused before anything is allocated when its length is over ``max_bytes``."""
    (size,) = struct.unpack("!i", _read_exact(fd, 4, deadline))
    if size == -1:
        (size,) = struct.unpack("!Q", _read_exact(fd, 8, deadline))
    if size < 0 or size > max_bytes:
        raise WireError(f"a message part of {size} bytes, over its limit of {max_bytes}")
    return _read_exact(fd, size, deadline)


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise WireError("malformed message: an integer too long")
    return int(text)


def loads_header(data) -> object:
    """A header's JSON, with no int longer than MAX_INT_DIGITS digits (WireError). NaN, Infinity and
    1e400 (= inf) stay floats: a visitor's kernel may well compute them (an error of NaN); where a count
    or a size is needed the reader checks for an int (analysis/capture.check_reply)."""
    return json.loads(data, parse_int=_bounded_int)


def _encode(obj, blobs: list):
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, np.generic):
        return _encode(obj.item(), blobs)
    if isinstance(obj, (bool, int, float, str)):  # subclasses (IntEnum, ...) as the plain type
        return _encode(next(t for t in (bool, int, float, str) if isinstance(obj, t))(obj), blobs)
    if isinstance(obj, complex):
        return {"c": [obj.real, obj.imag]}
    if isinstance(obj, list):
        return [_encode(v, blobs) for v in obj]
    if isinstance(obj, tuple):
        return {"t": [_encode(v, blobs) for v in obj]}
    if isinstance(obj, dict):
        return {"d": [[_encode(k, blobs), _encode(v, blobs)] for k, v in obj.items()]}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        blobs.append(bytes(obj))
        return {"b": len(blobs) - 1}
    if isinstance(obj, np.ndarray) and obj.dtype.fields is not None:
        # a record of plain fields (numba's xoroshiro128p RNG states: two uint64): sent packed
        fields = [(name, obj.dtype.fields[name][0]) for name in obj.dtype.names]
        if len(fields) > MAX_FIELDS or any(f.kind not in KINDS or f.fields is not None for _, f in fields):
            raise TypeError(f"an array of dtype {obj.dtype} cannot be sent")
        packed = np.dtype([(name, f.str) for name, f in fields])
        blobs.append(np.ascontiguousarray(obj.astype(packed)).tobytes())
        return {"s": [[[name, f.str] for name, f in fields], list(obj.shape), len(blobs) - 1]}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in KINDS:
            raise TypeError(f"an array of dtype {obj.dtype} cannot be sent")
        blobs.append(np.ascontiguousarray(obj).tobytes())
        return {"a": [obj.dtype.str, list(obj.shape), len(blobs) - 1]}
    raise TypeError(f"a {type(obj).__name__} cannot be sent")


def _hashable(key) -> bool:
    if isinstance(key, tuple):
        return all(_hashable(k) for k in key)
    return key is None or isinstance(key, (str, int, float, bool))


def _index(value, blobs: list) -> int:
    if type(value) is not int or not 0 <= value < len(blobs):
        raise WireError("malformed message: a part that is not there")
    return value


def _decode(obj, blobs: list, depth: int = 0):
    if depth > MAX_DEPTH:
        raise WireError(f"malformed message: nested deeper than {MAX_DEPTH}")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [_decode(v, blobs, depth + 1) for v in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise WireError("malformed message")
    ((tag, value),) = obj.items()
    if tag in ("t", "d", "c", "a", "s") and not isinstance(value, list):
        raise WireError(f"malformed message: tag {tag!r} holds no list")
    if tag == "t":
        return tuple(_decode(v, blobs, depth + 1) for v in value)
    if tag == "d":
        out = {}
        for item in value:
            if not isinstance(item, list) or len(item) != 2:
                raise WireError("malformed message: a dict item")
            key = _decode(item[0], blobs, depth + 1)
            if not _hashable(key):  # a list or a dict as a key: unhashable
                raise WireError("malformed message: a dict key")
            out[key] = _decode(item[1], blobs, depth + 1)
        return out
    if tag == "c":
        if len(value) != 2 or not all(type(v) in (int, float) for v in value):
            raise WireError("malformed message: a complex number")
        return complex(float(value[0]), float(value[1]))
    if tag == "b":
        return bytes(blobs[_index(value, blobs)])
    if tag in ("a", "s"):
        if len(value) != 3 or not isinstance(value[1], list) or len(value[1]) > 32:
            raise WireError("malformed message: an array")
        dtype_text, shape, index = value
        if tag == "s":  # a record of plain fields, packed
            if not isinstance(dtype_text, list) or not 0 < len(dtype_text) <= MAX_FIELDS:
                raise WireError("malformed message: record fields")
            fields = []
            for field in dtype_text:
                if not isinstance(field, list) or len(field) != 2 or not isinstance(field[1], str):
                    raise WireError("malformed message: a record field")
                name, fmt = field
                field_type = _dtype(fmt)
                if not isinstance(name, str) or len(name) > 64 or field_type.kind not in KINDS:
                    raise WireError("malformed message: a record field")
                fields.append((name, field_type))
            dtype = np.dtype(fields)
        else:
            dtype = _dtype(dtype_text)
        if dtype.hasobject or (tag == "a" and (dtype.kind not in KINDS or dtype.fields is not None)):
            raise WireError(f"malformed message: dtype {dtype}")
        if not all(type(n) is int and n >= 0 for n in shape):
            raise WireError("malformed message: a shape that is not counts")
        data = blobs[_index(index, blobs)]
        if len(data) != math.prod(shape) * dtype.itemsize:  # before anything is made from the shape
            raise WireError("malformed message: array bytes do not match its shape")
        return np.frombuffer(data, dtype).reshape(shape).copy()
    raise WireError(f"malformed message: tag {str(tag)[:20]!r}")


def _dtype(text) -> np.dtype:
    """A dtype named by a short string (``<f8``, ``|u1``): never an object, a struct or a long text."""
    if not isinstance(text, str) or len(text) > 8:
        raise WireError("malformed message: a dtype")
    try:
        return np.dtype(text)
    except (TypeError, ValueError):
        raise WireError(f"malformed message: dtype {text[:8]!r}") from None


class _Wrapped:
    """A Connection wrapped to read each message within a byte budget: what both channels do alike."""

    def __init__(self, conn, max_bytes: int):
        self.conn = conn
        self.max_bytes = max_bytes  # all the bytes of one message

    def poll(self, timeout=0.0) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        self.conn.close()

    def fileno(self) -> int:
        return self.conn.fileno()


class Channel(_Wrapped):
    """A Connection that carries this format instead of pickles (the same send/recv/poll/close)."""

    def __init__(self, conn, max_bytes: int):
        super().__init__(conn, max_bytes)
        self.header_bytes = min(MAX_HEADER_BYTES, max_bytes)

    def send(self, obj) -> None:
        blobs: list[bytes] = []
        header = json.dumps([_encode(obj, blobs), [len(b) for b in blobs]]).encode()
        self.conn.send_bytes(header)  # encoded in full first: a send never stops half-way
        for b in blobs:
            self.conn.send_bytes(b)

    def recv(self, deadline: float | None = None):
        """The next message; every read waits no later than ``deadline`` (time.monotonic; None: no
        limit, the sandbox's side). WireError (one line) for anything that is not a message within its
        byte budget, WireTimeout at the deadline, EOFError when the other end closed."""
        fd = self.conn.fileno()
        try:
            header = loads_header(recv_frame(fd, self.header_bytes, deadline))
            if not isinstance(header, list) or len(header) != 2:
                raise WireError("malformed message: its header")
            body, sizes = header
            if not isinstance(sizes, list) or len(sizes) > MAX_BLOBS:
                raise WireError("malformed message: its parts")
            if not all(type(n) is int and n >= 0 for n in sizes):
                raise WireError("malformed message: its parts' sizes")
            if sum(sizes) > self.max_bytes:
                raise WireError(f"a message over {self.max_bytes >> 20} MiB")
            blobs = []
            for n in sizes:
                blob = recv_frame(fd, n, deadline)
                if len(blob) != n:
                    raise WireError("malformed message: a part of the wrong size")
                blobs.append(blob)
            return _decode(body, blobs)
        except (EOFError, WireError):
            raise
        except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError, MemoryError) as exc:
            raise WireError(f"malformed message ({type(exc).__name__})") from None


def check_reply(msg) -> tuple:
    """A message from a sandbox as the runner reads it (engine/run/messages.py checks it), else WireError."""
    try:
        Message.from_wire(msg)
    except MalformedMessage as exc:
        raise WireError(str(exc).replace("from the worker", "from the sandbox")) from None
    return msg


class ServerChannel(Channel):
    """The server's end: every message it reads is checked to be one the runner expects."""

    error: str | None = None  # why the last message was refused, for the runner's one line

    def recv(self, deadline: float | None = None):
        try:
            return check_reply(super().recv(deadline))
        except WireTimeout:
            raise  # not a refusal: the run's time limit, said as such
        except WireError as exc:
            self.error = str(exc)
            raise


class PickleChannel(_Wrapped):
    """A built-in kernels' worker's Connection (pickles: our own code), read with the same deadline and
    byte budget per read as a sandbox's channel."""

    def send(self, obj) -> None:
        self.conn.send(obj)

    def recv(self, deadline: float | None = None):
        return pickle.loads(recv_frame(self.conn.fileno(), self.max_bytes, deadline))
