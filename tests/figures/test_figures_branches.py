"""The SIMT lens's figures, on hand-made visit and barrier tables (the figure objects, not pixels)."""

import numpy as np
import pandas as pd

from visualizer.analysis import branches
from visualizer.figures import branches as fb

SITES = [
    {"site": 0, "line": 7, "kind": "if", "loops": []},
    {"site": 1, "line": 9, "kind": "while", "loops": []},
]


def _rows():
    recs = [  # block, warp, site, visit, active, taken
        (0, 0, 0, 0, 0xFFFFFFFF, 0x55555555),  # even lanes take the if
        (0, 0, 1, 0, 0xFFFFFFFF, 0x0000FFFF),
        (0, 0, 1, 1, 0x0000FFFF, 0),  # lanes 16-31 left the loop: not reached at its 2nd test
        (1, 0, 0, 0, 0xFF, 0xFF),
    ]
    return branches._frame(recs, SITES, "measured (GPU)")


def test_lane_strip_frames_say_taken_not_taken_not_reached_and_no_visit():
    sites = branches.sites_table(SITES, ["x"] * 6 + ["    if lane % 2 == 0:", "", "    while k < lane:"])
    fr = fb.lane_strip_frames(_rows(), sites, 0, 0)
    assert fr.attrs["visits"] == 2 and sorted(fr["frame"].unique()) == [0, 1]
    f0 = fr[(fr["frame"] == 0) & (fr["site"] == 0)].sort_values("lane")["state"].tolist()
    assert f0 == [fb.TAKEN, fb.NOT_TAKEN] * 16
    f1_if = fr[(fr["frame"] == 1) & (fr["site"] == 0)]["state"].unique().tolist()
    assert f1_if == [fb.NO_VISIT]  # the if has one visit only
    f1_loop = fr[(fr["frame"] == 1) & (fr["site"] == 1)].sort_values("lane")["state"].tolist()
    assert f1_loop == [fb.NOT_TAKEN] * 16 + [fb.NOT_REACHED] * 16
    assert fr["label"].iloc[0] == "L7 if lane % 2 == 0:"


def test_lane_strip_figure_has_a_frame_per_visit_and_says_its_source():
    sites = branches.sites_table(SITES)
    fig = fb.lane_strip_figure(fb.lane_strip_frames(_rows(), sites, 0, 0))
    assert len(fig.frames) == 2 and fig.layout.sliders
    assert "measured (GPU)" in fig.layout.title.text and "2 visits" in fig.layout.title.text
    z = np.asarray(fig.frames[1].data[0].z)
    assert z.shape == (2, 32) and z[1, 0] == fb.NOT_TAKEN and z[1, 31] == fb.NOT_REACHED
    assert [t.name for t in fig.data[1:]] == list(fb.STATES.values())  # the legend


def test_barrier_timeline_outlines_the_last_arrival():
    log = np.zeros((2, 2, 3), np.int64)
    log[0, 0] = (0, 1000, 1500)
    log[1, 0] = (0, 1400, 1500)
    bars = branches.barrier_rows(log, np.array([1, 1]), [{"site": 0, "line": 5}], 64)
    seg = branches.barrier_segments(bars, 0, starts={0: 0, 1: 0})
    fig = fb.barrier_timeline_figure(seg, 0)
    wait = next(t for t in fig.data if t.name == "wait")
    assert list(wait.x) == [500, 100] and list(wait.marker.line.color) == [fb.BAR_COLORS["wait"], "black"]
    assert "measured (GPU)" in fig.layout.title.text
    assert isinstance(seg, pd.DataFrame)
