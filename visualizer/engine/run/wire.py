"""Messages between the server and a sandboxed worker, without pickle.

multiprocessing's Connection.recv() unpickles what arrives, and unpickling runs code: a sandbox that
wrote a crafted pickle to its socket would run it in the server. So the sandbox and the server speak
this instead: one JSON header (None, bool, int, float, str, list; tuples, dicts, complex numbers,
bytes and numpy arrays of plain dtypes as small tagged objects), then the raw bytes of each array.
Reading it builds nothing but those types (never an object dtype), with every size bounded.
"""

from __future__ import annotations

import json

import numpy as np

from visualizer.engine.run.messages import MalformedMessage, Message

MAX_HEADER_BYTES = 64 << 20
MAX_BLOBS = 4096
KINDS = frozenset("biufcSUmM")  # numpy dtype kinds that are plain bytes (no objects, no structs)
MAX_FIELDS = 16  # a record dtype (e.g. RNG states) may have this many plain fields


class WireError(OSError):
    """A message that is not one (malformed, too big, a type this format does not carry)."""


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


def _decode(obj, blobs: list[bytes]):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [_decode(v, blobs) for v in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise WireError("malformed message")
    ((tag, value),) = obj.items()
    if tag == "t":
        return tuple(_decode(v, blobs) for v in value)
    if tag == "d":
        out = {}
        for k, v in value:
            key = _decode(k, blobs)
            if not isinstance(key, (str, int, float, bool, tuple)) and key is not None:
                raise WireError("malformed message: a dict key")
            out[key] = _decode(v, blobs)
        return out
    if tag == "c":
        re_, im = value
        return complex(float(re_), float(im))
    if tag == "b":
        return blobs[int(value)]
    if tag in ("a", "s"):
        dtype_text, shape, index = value
        if tag == "s":  # a record of plain fields, packed
            if not isinstance(dtype_text, list) or not 0 < len(dtype_text) <= MAX_FIELDS:
                raise WireError("malformed message: record fields")
            fields = []
            for name, fmt in dtype_text:
                field_type = np.dtype(str(fmt))
                if not isinstance(name, str) or len(name) > 64 or field_type.kind not in KINDS:
                    raise WireError("malformed message: a record field")
                fields.append((name, field_type))
            dtype = np.dtype(fields)
        else:
            dtype = np.dtype(str(dtype_text))
        if dtype.hasobject or (tag == "a" and (dtype.kind not in KINDS or dtype.fields is not None)):
            raise WireError(f"malformed message: dtype {dtype}")
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise WireError("malformed message: a negative shape")
        data = blobs[int(index)]
        if len(data) != int(np.prod(shape, dtype=object)) * dtype.itemsize:
            raise WireError("malformed message: array bytes do not match its shape")
        return np.frombuffer(data, dtype).reshape(shape).copy()
    raise WireError(f"malformed message: tag {tag!r}")


class Channel:
    """A Connection that carries this format instead of pickles (the same send/recv/poll/close)."""

    def __init__(self, conn, max_bytes: int):
        self.conn = conn
        self.max_bytes = max_bytes  # all the bytes of one message

    def send(self, obj) -> None:
        blobs: list[bytes] = []
        header = json.dumps([_encode(obj, blobs), [len(b) for b in blobs]]).encode()
        self.conn.send_bytes(header)  # encoded in full first: a send never stops half-way
        for b in blobs:
            self.conn.send_bytes(b)

    def recv(self):
        try:
            header = json.loads(self.conn.recv_bytes(MAX_HEADER_BYTES))
            body, sizes = header
            if not isinstance(sizes, list) or len(sizes) > MAX_BLOBS or any(int(n) < 0 for n in sizes):
                raise WireError("malformed message: its parts")
            if sum(int(n) for n in sizes) > self.max_bytes:
                raise WireError(f"a message over {self.max_bytes >> 20} MiB")
            blobs = [self.conn.recv_bytes(max(int(n), 1)) for n in sizes]
            if [len(b) for b in blobs] != [int(n) for n in sizes]:
                raise WireError("malformed message: a part of the wrong size")
            return _decode(body, blobs)
        except (EOFError, WireError):
            raise
        except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError, MemoryError) as exc:
            raise WireError(f"malformed message ({type(exc).__name__})") from None

    def poll(self, timeout=0.0) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        self.conn.close()

    def fileno(self) -> int:
        return self.conn.fileno()


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

    def recv(self):
        try:
            return check_reply(super().recv())
        except WireError as exc:
            self.error = str(exc)
            raise
