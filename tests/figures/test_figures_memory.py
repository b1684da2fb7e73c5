"""Memory figure builders on hand-made access tables (DataFrame in, go.Figure out)."""

import numpy as np
import pytest

from tests.analysis.test_memory_tables import LOAD, STORE, G, S, buffers, warp_request
from visualizer.analysis import memory as tables
from visualizer.figures import memory as figs


def build(acc):
    a = tables.accesses_table(buffers(acc))
    return a, tables.requests_table(a), tables.hazards_table(a)


def test_sector_figure_one_row_per_sector_coloured_by_lane():
    acc, req, _ = build(warp_request(G, STORE, lambda lane: (32 * lane,)))
    r = req.iloc[0]
    lanes = tables.request_accesses(acc, r)
    fig = figs.sector_figure(lanes, r)
    sectors, lane_bars = fig.data
    assert len(sectors.y) == 32 and len(lane_bars.y) == 32
    assert list(lane_bars.marker.color) == list(range(32))
    assert "32 sectors for 32 lanes (ideal 4)" in fig.layout.title.text
    assert "recorded addresses, simulator" in fig.layout.title.text
    acc, req, _ = build(warp_request(G, LOAD, lambda lane: (lane,)))
    fig = figs.sector_figure(tables.request_accesses(acc, req.iloc[0]), req.iloc[0])
    assert len(fig.data[0].y) == 4 and "4 sectors" in fig.layout.title.text


def test_bank_figure_marks_conflicts():
    acc, req, _ = build(warp_request(S, LOAD, lambda lane: (lane, 0)))  # a column: one bank, 32 words
    fig = figs.bank_figure(tables.request_accesses(acc, req.iloc[0]), req.iloc[0])
    z = np.array(fig.data[0].z, dtype=float)
    assert z.shape == (32, 32) and np.nansum(z) == 32 and not np.isnan(z[:, 0]).any()
    assert "32-way bank conflict (31 extra wavefronts)" in fig.layout.title.text
    acc, req, _ = build(warp_request(S, LOAD, lambda lane: (0, lane // 2 * 2)))  # pairs of lanes share a word
    fig = figs.bank_figure(tables.request_accesses(acc, req.iloc[0]), req.iloc[0])
    assert "conflict-free" in fig.layout.title.text and np.nansum(np.array(fig.data[0].z, float)) == 0
    assert "0+1" in fig.data[0].text[0]  # lanes 0 and 1: a broadcast


def test_worst_request_and_heatmap():
    acc = warp_request(G, LOAD, lambda lane: (lane,)) + [
        dict(thread=32 + lane, array=G, op=LOAD, idx=(2 * lane,)) for lane in range(32)
    ]
    a, req, _ = build(acc)
    worst = tables.worst_request(req)
    assert worst["warp"] == 1 and worst["sectors"] == 8
    fig = figs.requests_heatmap(req, "global")
    assert np.array(fig.data[0].z).tolist() == [[4.0, 8.0]]
    with pytest.raises(ValueError):
        figs.requests_heatmap(req, "shared")


def test_raced_words_and_pairs():
    acc = [
        dict(thread=0, array=S, op=STORE, idx=(0, 5), tseq=0),
        dict(thread=1, array=S, op=LOAD, idx=(0, 5), tseq=1),
    ]
    acc += [dict(block=1, thread=3, array=S, op=STORE, idx=(0, 6), tseq=0),
            dict(block=1, thread=2, array=S, op=LOAD, idx=(0, 6), tseq=1)]  # fmt: skip
    _, _, haz = build(acc)
    fig = figs.raced_words_figure(haz)
    assert (
        list(fig.data[0].x) == ["s[5]", "s[6]"]
        and "2 raced shared words in 2 blocks" in fig.layout.title.text
    )
    pairs = tables.race_pairs(haz)
    assert pairs[["block", "word", "kind", "first", "then"]].values.tolist() == [
        [0, "s[5]", "RAW", "t0 line 10", "t1 line 10"],
        [1, "s[6]", "RAW", "t3 line 10", "t2 line 10"],
    ]
    with pytest.raises(ValueError):
        figs.raced_words_figure(haz[haz.kind == "UNINIT"])


def test_source_html_highlights_and_escapes():
    out = figs.source_html(["a = 1", "if x < y:", "b"], 10, 11)
    assert out.count("background:#ffe08a") == 1 and "  11  if x &lt; y:" in out
