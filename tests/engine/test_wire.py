"""The sandbox's messages: no pickles, only plain data and plain arrays, every size bounded."""

import json
import pickle
import socket
from multiprocessing.connection import Connection

import numpy as np
import pytest

from visualizer.engine.run.wire import Channel, ServerChannel, WireError


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    ends = Connection(a.detach()), Connection(b.detach())
    yield ends
    for end in ends:
        end.close()


def test_a_reply_comes_back_as_it_was_sent(pair):
    reply = {
        "launch": {"grid": [4, 1, 1], "kernel": "k (yours)", "params": {"a": "rand:float32:8"}, "x": None},
        "arrays": {"trace": np.arange(12, dtype=np.int64).reshape(3, 4), "active": np.ones(7, np.uint8)},
        "values": [np.float32(1.5), np.int64(-3), True, float("nan"), 2**70, 1 + 2j, b"\x00raw"],
        "complex": np.array([1 + 1j, 2], np.complex64),
        "empty": np.empty((0, 5), np.float64),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        3: ("a", 1),
    }
    Channel(pair[0], 1 << 20).send(("ok", 7, reply))
    kind, rid, got = ServerChannel(pair[1], 1 << 20).recv()
    assert (kind, rid) == ("ok", 7)
    assert got["launch"] == reply["launch"] and got[3] == ("a", 1)
    for name in ("trace", "active"):
        np.testing.assert_array_equal(got["arrays"][name], reply["arrays"][name])
        assert got["arrays"][name].dtype == reply["arrays"][name].dtype
    assert got["values"][:3] == [1.5, -3, True] and np.isnan(got["values"][3])
    assert got["values"][4:] == [2**70, 1 + 2j, b"\x00raw"]
    np.testing.assert_array_equal(got["complex"], reply["complex"])
    np.testing.assert_array_equal(got["fortran"], reply["fortran"])
    assert got["empty"].shape == (0, 5) and got["arrays"]["trace"].flags.writeable


class Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # what a pickle may do when it is read: call anything
        return (open, (self.path, "w"))


def test_a_pickle_from_the_sandbox_is_never_unpickled(pair, tmp_path):
    target = tmp_path / "planted"
    pair[0].send(("ok", 1, Planted(str(target))))  # multiprocessing's own send: a pickle
    server = ServerChannel(pair[1], 1 << 20)
    with pytest.raises(WireError):
        server.recv()
    assert not target.exists() and "malformed" in server.error
    pickle.loads(pickle.dumps(Planted(str(target))))  # the same bytes unpickled do plant it
    assert target.exists()


@pytest.mark.parametrize(
    "header, parts",
    [
        ([{"a": ["|O", [2], 0]}, [16]], [b"\x00" * 16]),  # an object array: pointers from the sandbox
        ([{"a": ["<f8", [4], 0]}, [16]], [b"\x00" * 16]),  # 4 doubles in 16 bytes
        ([{"a": ["<f8", [-2], 0]}, [0]], [b""]),
        ([{"x": 1}, []], []),  # an unknown tag
        ([{"t": [1]}, [-5, 10]], [b"", b"0123456789"]),  # negative part sizes
        ([{"t": [1]}, [1 << 40]], []),  # over the limit
        (["[" * 5000, []], []),
    ],
)
def test_malformed_messages_are_refused(pair, header, parts):
    pair[0].send_bytes(json.dumps(header).encode())
    for p in parts:
        pair[0].send_bytes(p)
    with pytest.raises(WireError):
        ServerChannel(pair[1], 1 << 20).recv()


def test_deep_nesting_and_unexpected_shapes_are_refused(pair):
    pair[0].send_bytes(("[" * 5000 + "]" * 5000).encode())  # within the socket buffer
    with pytest.raises(WireError):
        Channel(pair[1], 1 << 20).recv()
    for bad in (["ok", 1, {}], ("ok", "1", {}), ("progress", 1, "3"), ("ok", 1, [1]), ("shell", 1, {})):
        Channel(pair[0], 1 << 20).send(bad)
        with pytest.raises(WireError):
            ServerChannel(pair[1], 1 << 20).recv()


def test_what_cannot_be_sent_is_refused_before_anything_is_sent(pair):
    with pytest.raises(TypeError):
        Channel(pair[0], 1 << 20).send({"x": np.array([object()])})
    with pytest.raises(TypeError):
        Channel(pair[0], 1 << 20).send({"x": Planted("p")})
    assert not pair[1].poll(0.1)


def test_a_record_of_plain_fields_travels_and_an_object_field_does_not():
    """numba's RNG states (two uint64 per state) come back from a visitor's run; an object field never."""
    from visualizer.engine.run import wire

    states = np.zeros(4, np.dtype([("s0", "<u8"), ("s1", "<u8")], align=True))
    states["s0"], states["s1"] = np.arange(4), 2**63 + 1
    blobs: list = []
    back = wire._decode(wire._encode(states, blobs), blobs)
    assert back.dtype.names == ("s0", "s1") and (back["s0"] == states["s0"]).all()
    assert (back["s1"] == states["s1"]).all()
    with pytest.raises(wire.WireError):
        wire._decode({"s": [[["x", "O"]], [1], 0]}, [b"\0" * 8])


@pytest.mark.parametrize(
    "change, why",
    [
        ({"sass": ["not", "text"]}, "its sass is not text"),
        ({"ptxas_log": 7}, "its ptxas_log is not text"),
        ({"missing": "ptxas"}, "its missing tools are not names"),
        ({"versions": {"numba": ["0.68"]}}, "its tool versions are not text"),
        ({}, None),
    ],
)
def test_a_compile_reply_s_fields_are_checked_before_a_page_reads_them(change, why):
    from visualizer.engine.run.user_runner import ptx_reply_problem

    reply = {"ptx": ".version 8.0", "sass": None, "ptxas_log": None, "missing": ["nvdisasm"]}
    reply["versions"] = {"numba": "0.68.1", "ptxas": None}
    assert ptx_reply_problem({**reply, **change}) == why
