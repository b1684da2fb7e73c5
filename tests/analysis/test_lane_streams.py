"""A sampled warp's requests rebuilt from its lanes' own streams (analysis/lane_streams.py): by hand
(interleaved paths, an order only a second pass finds, a full buffer mid-divergence, streams that do
not fit together) and from divergent kernels recorded by the access pass (tests/access_divergence_cases.py)
on the simulator, and marked gpu, on the H200."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis import gpu_accesses, lane_streams, memory

HERE = Path(__file__).resolve().parents[1]  # tests/
sys.path.insert(0, str(HERE))
from case_scripts import run_case_script  # noqa: E402

from tests.engine.test_gpu_accesses import ACC, FULL, decode_hand, norm, stream  # noqa: E402

EVEN = sum(1 << lane for lane in range(0, 32, 2))
ODD = FULL & ~EVEN


def lanes_of(mask):
    return [lane for lane in range(32) if mask >> lane & 1]


def streams(per_lane: dict, cap=16, totals=None):
    """``per_lane``: lane -> [(offset, site, epoch, mask)]: one slot's buffers as the probes write them."""
    p = gpu_accesses.plan((2, 1, 1), (64, 1, 1), [0], records=32 * 2 * cap)
    bufs = gpu_accesses.host_buffers(p)
    for lane, recs in per_lane.items():
        stream(bufs, 0, lane, recs, (totals or {}).get(lane))
    return bufs, p


def rebuilt(per_lane, cap=16, totals=None):
    bufs, _ = streams(per_lane, cap, totals)
    return lane_streams.rebuild(bufs["_vz_acc"].reshape(2, cap + 1, 64)[0, :cap], bufs["_vz_acc_cnt"][0])


def test_interleaved_paths_come_back_in_the_order_the_lanes_made_them():
    """Even and odd lanes take turns at site 0 (each turn a request of 16), then all meet at site 1."""
    per_lane = {}
    for lane in range(32):
        mine = [i for i in range(4) if (lane + i) % 2 == 0]
        per_lane[lane] = [(4 * lane + 128 * i, 0, 0, EVEN if lane % 2 == 0 else ODD) for i in mine]
        per_lane[lane].append((4 * lane, 1, 1, FULL))
    w = rebuilt(per_lane)
    assert not w.inconsistent and w.requests == 5 and w.unrecorded == 0
    at0 = w.site == 0
    # turns: evens at i=0 (occurrence 0), odds at i=1 (1), evens (2), odds (3)
    for occ in range(4):
        got = sorted(w.lane[at0 & (w.occurrence == occ)].tolist())
        assert got == lanes_of(EVEN if occ % 2 == 0 else ODD)
        assert (w.offset[at0 & (w.occurrence == occ)] // 128 == occ).all()
    assert (w.epoch[w.site == 1] == 1).all() and (w.request[w.site == 1] == 4).all()
    assert sorted(w.seq[w.lane == 3].tolist()) == [0, 1, 2]  # the lane's own order


def test_an_order_across_lanes_that_one_pass_does_not_give():
    """Lane 0 makes 5 accesses alone, then one with lane 1; lane 1 then one with lane 2, which made
    nothing before: the last request comes after the shared one although it sits first in lane 2."""
    a, ab, bc = 1, 0b11, 0b110
    per_lane = {0: [(8 * k, 0, 0, a) for k in range(5)] + [(0, 1, 0, ab)],
                1: [(4, 1, 0, ab), (4, 2, 0, bc)], 2: [(8, 2, 0, bc)]}  # fmt: skip
    w = rebuilt(per_lane)
    assert not w.inconsistent and w.requests == 7
    assert w.request[w.site == 2].min() > w.request[w.site == 1].max() > w.request[w.site == 0].max()


def test_a_lane_that_ran_out_cuts_its_requests_and_their_lanes_later_records():
    """cap 3. Lane 0 made 5 accesses: X with lane 1, two alone, then V with lane 1 (not recorded).
    Lane 1 holds X, V, then U with lane 2; lane 2 holds U, then T alone. V lacks lane 0, so lane 1
    stops before V; U then lacks lane 1, so lane 2 stops before U (and T, after it, goes too)."""
    x, v, u = (0, 0, 0, 0b11), (4, 1, 0, 0b11), (8, 2, 0, 0b110)
    per_lane = {0: [x, (12, 3, 0, 0b1), (16, 3, 0, 0b1)], 1: [x, v, u], 2: [u, (20, 4, 0, 0b100)]}
    w = rebuilt(per_lane, cap=3, totals={0: 5})
    assert not w.inconsistent
    assert sorted(zip(w.lane.tolist(), w.site.tolist(), strict=True)) == [(0, 0), (0, 3), (0, 3), (1, 0)]
    assert w.requests == 3 and w.unrecorded == 5 + 3 + 2 - 4
    # the same streams with lane 0's count saying it did not run out: V names a lane with no V
    assert "lane 0, which holds no such record" in rebuilt(per_lane, cap=3).inconsistent


@pytest.mark.parametrize(
    "per_lane,totals,why",
    [
        (
            {0: [(0, 0, 0, 0b11), (4, 1, 0, 0b11)], 1: [(4, 1, 0, 0b11), (0, 0, 0, 0b11)]},
            None,
            "opposite orders",
        ),
        ({0: [(0, 0, 0, 0b11)]}, None, "lane 1, which holds no such record"),
        ({0: [(0, 0, 0, 0b10)]}, None, "does not name its own lane"),
        ({0: [(0, 0, 0, 0b1)]}, {0: 2}, "does not hold"),
    ],
)
def test_streams_that_do_not_fit_together_are_said_never_guessed(per_lane, totals, why):
    if why == "does not hold":  # the count says 2 records, the buffer holds 1
        bufs, p = streams(per_lane, cap=4, totals=totals)
    else:
        bufs, p = streams(per_lane, totals=totals)
    w = lane_streams.rebuild(bufs["_vz_acc"].reshape(2, -1, 64)[0, :-1], bufs["_vz_acc_cnt"][0])
    assert why in w.inconsistent and len(w.lane) == 0
    rec = decode_hand(bufs, p, nsites=2)
    assert len(rec["records"]) == 0 and rec["sample"]["inconsistent_warps"] == 1
    text = gpu_accesses.describe_sample(rec["sample"])
    assert "do not fit together" in text and why in text


# --- divergent kernels recorded by the access pass ---------------------------------------------

CASES_PY = HERE / "access_divergence_cases.py"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return run_case_script(CASES_PY, tmp_path_factory.mktemp("div_sim"), "sim")


def same_streams(recorded: dict, simulator: dict) -> None:
    """Every thread's own accesses, in its own order (tseq), as the simulator recorded them."""
    g_acc = memory.build(recorded)[0]
    s_acc = memory.build(simulator)[0]
    assert len(g_acc) > 0 and recorded["sample"]["inconsistent_warps"] == 0
    pd.testing.assert_frame_equal(norm(g_acc, ACC), norm(s_acc, ACC))


def test_divergent_kernels_keep_every_lanes_stream(sim):
    for kernel, res in sim.items():
        assert res["correct"], kernel
        same_streams(res["recorded"], res["simulator"])
    # interleaved: each request at the branches' sites is one parity of lanes, four turns each
    acc = memory.build(sim["interleaved"]["recorded"])[0]
    branch = acc[
        (acc["space"].astype(str) == "shared") & (acc["op"].astype(str) == "load")
    ]  # the two branches
    parity = branch.groupby(["block", "warp", "pc", "occurrence"])["lane"].agg(lambda x: set(x % 2))
    assert (parity.map(len) == 1).all() and len(parity) == 2 * 2 * 2 * 4


def test_divergent_kernels_with_a_full_buffer_keep_whole_requests_only(sim, tmp_path):
    small = run_case_script(CASES_PY, tmp_path, "sim-small")
    for kernel, res in small.items():
        rec, full = res["recorded"], sim[kernel]["recorded"]
        g_acc, g_req = memory.build(rec)[:2]
        f_acc, f_req = memory.build(full)[:2]
        assert rec["sample"]["inconsistent_warps"] == 0
        kept = g_acc.groupby(["block", "thread"])["tseq"].agg(["size", "max"])
        assert (kept["size"] == kept["max"] + 1).all() and (kept["size"] <= 3).all(), kernel
        keys = ["block", "warp", "line", "pc", "epoch", "lanes", "addresses", "sectors", "wavefronts"]
        merged = norm(g_req, keys).merge(norm(f_req, keys), how="left", indicator=True)
        assert (merged["_merge"] == "both").all(), kernel  # each kept request whole, as in the full recording
        assert rec["sample"]["unrecorded_accesses"] == len(f_acc) - len(g_acc)
    assert small["interleaved"]["recorded"]["sample"]["unrecorded_accesses"] > 0


@pytest.mark.gpu
def test_divergent_kernels_on_the_gpu_keep_every_lanes_stream(sim, tmp_path):
    gpu = run_case_script(CASES_PY, tmp_path, "gpu")
    for kernel, res in gpu.items():
        assert res["correct"], kernel
        same_streams(res["recorded"], sim[kernel]["simulator"])
        req = memory.build(res["recorded"])[1]
        print(kernel, "GPU requests per line:", req.groupby("line")["lanes"].agg(list).to_dict())
    np.testing.assert_equal(gpu["interleaved"]["blocks"], [0, 1])


def test_a_long_zigzag_of_shared_requests_still_gets_an_order():
    """Lanes 0 and 1 meet 80 times, each time after solo accesses of one of them (alternately): more
    passes than the fast order takes (lane_streams.RELAX_ROUNDS), so the exact sort decides."""
    per_lane = {0: [], 1: []}
    for meet in range(80):
        solo = meet % 2
        per_lane[solo] += [(8 * len(per_lane[solo]), 0, 0, 1 << solo)] * 3
        for lane in (0, 1):
            per_lane[lane].append((4 * meet, 1, 0, 0b11))
    assert 80 > lane_streams.RELAX_ROUNDS
    w = rebuilt(per_lane, cap=max(len(v) for v in per_lane.values()))
    assert not w.inconsistent and w.requests == 80 + 3 * 80
    for lane in (0, 1):  # the warp's order agrees with each lane's own
        order = w.request[w.lane == lane][np.argsort(w.seq[w.lane == lane])]
        assert (np.diff(order) > 0).all()
    shared = w.site == 1
    assert sorted(set(w.occurrence[shared].tolist())) == list(range(80))
