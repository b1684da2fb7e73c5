"""Wrong keys: counted per client, logged (never their text), and answered ever more slowly.

The operator's key (``?token=``) is a 256-bit secret, so guessing it is hopeless; what a stream of
wrong keys means is someone trying, which the operator should see in the server's log, and which
should not cost the server much. A client is the peer address (for a local visitor, loopback). The
first few wrong keys of a client are answered at once (a mistyped link), then each answer waits
twice as long as the last, up to MAX_DELAY_S; a client forgets its wrong keys after FORGET_AFTER_S
without one. At most MAX_CLIENTS are remembered (the least recent forgotten first), so memory stays
bounded however many addresses send keys. No Streamlit here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

LOG = logging.getLogger("visualizer.key")
FREE_TRIES = 3  # wrong keys of a client answered without waiting
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
FORGET_AFTER_S = 600.0
MAX_CLIENTS = 4096


class WrongKeys:
    def __init__(self, clock=time.monotonic, max_clients: int = MAX_CLIENTS):
        self.clock = clock
        self.max_clients = max_clients
        self.total = 0  # every wrong key since the server started
        self._recent: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (count, last)
        self._lock = threading.Lock()

    def _count(self, client: str, now: float) -> int:
        count, last = self._recent.get(client, (0, now))
        if now - last > FORGET_AFTER_S:
            self._recent.pop(client, None)
            return 0
        return count

    def delay(self, client: str) -> float:
        """Seconds to wait before answering this client's key now (right or wrong: a wait that only
        wrong keys got would tell the key apart)."""
        with self._lock:
            count = self._count(client, self.clock())
        if count < FREE_TRIES:
            return 0.0
        return min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (count - FREE_TRIES))

    def wrong(self, client: str) -> int:
        """Count a wrong key of ``client`` and log it (one line, no key text); its recent count."""
        now = self.clock()
        with self._lock:
            count = self._count(client, now) + 1
            self._recent[client] = (count, now)
            self._recent.move_to_end(client)
            while len(self._recent) > self.max_clients:
                self._recent.popitem(last=False)
            self.total += 1
            total = self.total
        wait = 0.0 if count < FREE_TRIES else min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (count - FREE_TRIES))
        LOG.warning(
            "visualizer: a wrong key (?token=) from %s: %d from this client in the last %d min, %d since "
            "the server started; its next key is answered after %.0f s",
            client,
            count,
            FORGET_AFTER_S // 60,
            total,
            wait,
        )
        return count

    def right(self, client: str) -> None:
        with self._lock:
            self._recent.pop(client, None)

    def __len__(self) -> int:
        return len(self._recent)


WRONG_KEYS = WrongKeys()  # one per server process: every session's keys
