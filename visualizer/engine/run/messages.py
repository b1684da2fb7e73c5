"""What a worker and the runner say to each other: one typed message, sent as a plain tuple.

The worker answers every request with exactly one of ``ok`` (payload: the reply), ``invalid`` (the
launch was refused: a one-line reason), ``error`` (it failed: one line, and a traceback excerpt in
``detail``) or ``fatal`` (the GPU context is lost: the worker leaves). While it runs it may send
``blocks`` (how many blocks one launch has) and ``progress`` (how many more finished). ``ready``
opens a worker's life (payload: its device). Every message carries the id of the request it
answers, so a reply to a request the runner gave up on is never taken for another's.

On the wire a message is the tuple ``(kind, request_id, payload[, detail])``: pickled between the
runner and a built-in kernels' worker, JSON-encoded (engine/run/wire.py) from a visitor's sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = frozenset({"ready", "blocks", "progress", "ok", "error", "invalid", "fatal"})
FAILURES = frozenset({"error", "invalid", "fatal"})
MAX_COUNT = 1 << 40  # blocks or progress: more than any launch has (catalog admits far fewer)


class MalformedMessage(ValueError):
    """A tuple that is not a message (one line)."""


@dataclass(frozen=True)
class Message:
    kind: str
    request_id: int | None
    payload: Any = None
    detail: str | None = None

    def to_wire(self) -> tuple:
        head = (self.kind, self.request_id, self.payload)
        return head if self.detail is None else (*head, self.detail)

    @classmethod
    def from_wire(cls, msg) -> Message:
        """The message a tuple holds, checked: kind, id and the payload's type for its kind."""
        # the kind is checked to be a str first: a list or a dict there is unhashable (TypeError)
        if not isinstance(msg, tuple) or not 2 <= len(msg) <= 4 or type(msg[0]) is not str:
            raise MalformedMessage("malformed message from the worker")
        if msg[0] not in KINDS:
            raise MalformedMessage("malformed message from the worker")
        kind, rid, payload = msg[0], msg[1], msg[2] if len(msg) > 2 else None
        detail = msg[3] if len(msg) > 3 else None
        if rid is not None and type(rid) is not int:
            raise MalformedMessage("malformed message from the worker: its request id")
        if kind in ("blocks", "progress") and (type(payload) is not int or not 0 <= payload <= MAX_COUNT):
            raise MalformedMessage(f"malformed {kind} message from the worker")
        if kind in FAILURES and not isinstance(payload, str):
            raise MalformedMessage("malformed error message from the worker")
        if kind in ("ok", "ready") and not isinstance(payload, dict):
            raise MalformedMessage("malformed reply from the worker")
        if detail is not None and not isinstance(detail, str):
            raise MalformedMessage("malformed message from the worker: its detail")
        return cls(kind, rid, payload, detail)

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:500]
