"""Wrong keys: counted per client, logged without their text, answered ever more slowly, with
bounded memory (web/keycheck.py); and through the app, a wrong key in a link is logged once."""

import logging

from tests.conftest import open_app
from visualizer.web.keycheck import FIRST_DELAY_S, FORGET_AFTER_S, FREE_TRIES, MAX_DELAY_S, WrongKeys


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_client_waits_longer_after_each_wrong_key_and_is_forgotten_later():
    clock = Clock()
    keys = WrongKeys(clock)
    delays = []
    for _ in range(FREE_TRIES + 8):
        delays.append(keys.delay("10.0.0.7"))
        keys.wrong("10.0.0.7")
    assert delays[:FREE_TRIES] == [0.0] * FREE_TRIES  # a mistyped link or two: no wait
    assert delays[FREE_TRIES : FREE_TRIES + 2] == [FIRST_DELAY_S, 2 * FIRST_DELAY_S]
    assert max(delays) == MAX_DELAY_S and delays == sorted(delays)
    assert keys.delay("10.0.0.8") == 0.0  # another client is not slowed by this one
    clock.now += FORGET_AFTER_S + 1
    assert keys.delay("10.0.0.7") == 0.0
    keys.wrong("10.0.0.7")
    keys.right("10.0.0.7")
    assert keys.delay("10.0.0.7") == 0.0 and keys.total == FREE_TRIES + 9


def test_memory_is_bounded_however_many_clients_send_keys():
    keys = WrongKeys(Clock(), max_clients=100)
    for i in range(10_000):
        keys.wrong(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
    assert len(keys) == 100 and keys.total == 10_000


def test_each_wrong_key_is_one_log_line_without_the_key(caplog, monkeypatch):
    key = "test-key-" + "w" * 32
    monkeypatch.setenv("VISUALIZER_TOKEN", key)
    monkeypatch.delenv("VISUALIZER_ALLOW_USER_CODE", raising=False)
    wrong = "guess-" + "g" * 40
    with caplog.at_level(logging.WARNING, logger="visualizer.key"):
        at = open_app(backend="sim", token=wrong)
    lines = [r.getMessage() for r in caplog.records if r.name == "visualizer.key"]
    assert len(lines) == 1 and "a wrong key" in lines[0] and "\n" not in lines[0], lines
    assert wrong not in lines[0] and key not in lines[0] and "g" * 10 not in lines[0]
    assert any("not this server's" in w.value for w in at.warning)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="visualizer.key"):
        open_app("your_kernel", backend="sim", token=key)  # the right key: nothing logged
    assert not [r for r in caplog.records if r.name == "visualizer.key"]
