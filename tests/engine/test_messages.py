"""The runner's messages (engine/run/messages.py): typed, checked, and the same tuple on the wire."""

import pytest

from visualizer.engine.run.messages import MalformedMessage, Message


def test_a_message_round_trips_as_its_tuple():
    for msg in (
        Message("ok", 3, {"launch": {}}),
        Message("error", 4, "boom", "Traceback ..."),
        Message("blocks", 5, 12),
        Message("progress", 5, 1),
        Message("ready", None, {"backend": "sim"}),
    ):
        assert Message.from_wire(msg.to_wire()) == msg
    assert Message("fatal", 1, "lost").failed and not Message("ok", 1, {}).failed


@pytest.mark.parametrize(
    "bad",
    [
        ("ok",),  # no id
        ("hello", 1, {}),  # no such kind
        ("ok", "1", {}),  # an id that is not an int
        ("progress", 1, -5),  # the old sign trick: a total is its own kind now ("blocks")
        ("blocks", 1, "12"),
        ("error", 1, {"not": "a line"}),
        ("ok", 1, "not a reply"),
        ("ok", 1, {}, 7),  # a detail that is not text
        ["ok", 1, {}],  # a list, not a tuple
        (["ok"], 1, {}),  # an unhashable kind: a TypeError before, uncaught by the runner
        ({"k": 1}, 1, {}),
        ("blocks", 1, 2**70),  # more blocks than any launch
        ("progress", 1, float("nan")),
        ("ok", float("inf"), {}),
    ],
)
def test_a_malformed_tuple_is_refused(bad):
    with pytest.raises(MalformedMessage):
        Message.from_wire(bad)


def test_the_runner_counts_blocks_and_progress(sim_runner):
    seen = []
    sim_runner.capture(
        "vector_add", {"n": 256, "block": 32}, progress=lambda done, total: seen.append((done, total))
    )
    assert seen and all(total == 16 for _, total in seen)  # 8 blocks, instrumented + clean launch
    assert seen[-1][0] <= 16
