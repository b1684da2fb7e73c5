"""The hardware timeline as Chrome-trace JSON (analysis/chrome_trace.py): schema and values.

Perfetto's trace processor is downloaded on first use, so the file is checked here by a schema of
the Trace Event Format's parts it uses and by its values against the capture's own tables."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pandas as pd
import pytest

from visualizer.analysis.chrome_trace import WARP_TID_BASE, WARPS_PER_SLOT, block_spans, chrome_trace_json

NUM = {"type": "number", "minimum": 0}
SCHEMA = {
    "type": "object",
    "required": ["traceEvents", "displayTimeUnit", "otherData"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object", "required": ["source", "kernel"]},
        "traceEvents": {
            "type": "array",
            "minItems": 1,
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["ph", "name", "pid", "tid", "ts", "dur", "cat", "args"],
                        "properties": {
                            "ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"enum": ["block", "warp"]},
                            "pid": {"type": "integer", "minimum": 1}, "tid": {"type": "integer", "minimum": 0},
                            "ts": NUM, "dur": NUM, "args": {"type": "object", "required": ["block", "source"]},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["ph", "name", "pid", "tid", "args"],
                        "properties": {
                            "ph": {"const": "M"},
                            "name": {"enum": ["process_name", "process_sort_index", "thread_name",
                                              "thread_sort_index"]},
                            "pid": {"type": "integer", "minimum": 1}, "tid": {"type": "integer", "minimum": 0},
                            "args": {"type": "object", "minProperties": 1},
                        },
                    },
                ]
            },
        },
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def cap(sim_runner):
    # 3 blocks of 64 threads: two warps each; the simulator models their SMs and times
    return sim_runner.capture("matmul_tiled", {"n": 24, "tile": 8})


def test_trace_is_valid_and_slices_match_the_capture(cap):
    trace = json.loads(chrome_trace_json(cap))  # the file, as a viewer reads it
    jsonschema.validate(trace, SCHEMA)
    assert trace["otherData"]["source"] == cap.source
    ev = trace["traceEvents"]
    th = cap.threads
    blocks = [e for e in ev if e["ph"] == "X" and e["cat"] == "block"]
    assert len(blocks) == cap.launch["blocks"]
    for e in blocks:
        mine = th[th["block"] == e["args"]["block"]]
        assert e["pid"] == int(mine["sm"].iloc[0]) + 1
        assert e["ts"] == pytest.approx(mine["t_start_ns"].min() / 1e3, abs=1e-3)
        assert e["dur"] == pytest.approx((mine["t_end_ns"].max() - mine["t_start_ns"].min()) / 1e3, abs=2e-3)
        assert e["args"]["threads"] == len(mine)
    warps = [e for e in ev if e["ph"] == "X" and e["cat"] == "warp"]
    assert len(warps) == th.groupby(["block", "warp"]).ngroups
    for e in warps:
        mine = th[(th["block"] == e["args"]["block"]) & (th["warp"] == e["args"]["warp"])]
        assert e["ts"] == pytest.approx(mine["t_start_ns"].min() / 1e3, abs=1e-3)
        assert e["ts"] + e["dur"] == pytest.approx(mine["t_end_ns"].max() / 1e3, abs=2e-3)
        assert e["tid"] >= WARP_TID_BASE and (e["tid"] - WARP_TID_BASE) % WARPS_PER_SLOT == e["args"]["warp"]
    names = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in ev if e["ph"] == "X"} <= names  # every track is named
    sms = {e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert sms == {f"SM {s}" for s in th["sm"].unique()}


def test_slices_on_one_track_never_overlap(cap):
    ev = json.loads(chrome_trace_json(cap))["traceEvents"]
    tracks: dict = {}
    for e in ev:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(spans, spans[1:], strict=False))


def test_overlapping_blocks_get_their_own_slots():
    # SM 0 runs blocks 0 and 1 at once, then block 2 after block 0 ended: slots 0, 1, 0
    th = pd.DataFrame({
        "block": [0, 1, 2, 3], "block_x": [0, 1, 2, 3], "block_y": 0, "block_z": 0, "sm": [0, 0, 0, 5],
        "t_start_ns": [0, 10, 100, 0], "t_end_ns": [100, 200, 150, 50], "thread": 0, "active": True,
    })  # fmt: skip
    spans = block_spans(th)
    assert spans["slot"].tolist() == [0, 1, 0, 0]
    assert np.array_equal(spans["start_ns"], th["t_start_ns"])
