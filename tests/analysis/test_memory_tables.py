"""Each definition of the memory-access tables on hand-made accesses (no simulator)."""

import numpy as np
import pandas as pd

from visualizer.analysis import memory as tables
from visualizer.engine.sim.access_record import ATOMIC, COLUMNS, LOAD, STORE

ARRAYS = [
    {"name": "g", "space": "global", "itemsize": 4, "dtype": "float32", "shape": [4096]},
    {"name": "s", "space": "shared", "itemsize": 4, "dtype": "float32", "shape": [64, 64]},
    {"name": "d", "space": "global", "itemsize": 8, "dtype": "float64", "shape": [1024]},
    {"name": "s8", "space": "shared", "itemsize": 8, "dtype": "float64", "shape": [1024]},
    {"name": "s16", "space": "shared", "itemsize": 16, "dtype": "complex128", "shape": [1024]},
    {"name": "c", "space": "global", "itemsize": 16, "dtype": "complex128", "shape": [1024]},
]
G, S, D, S8, S16, C16 = 0, 1, 2, 3, 4, 5


def buffers(accesses):
    """accesses: dicts with thread, array, op, idx (tuple); optional block, tseq, epoch, line, pc, occ."""
    rows = []
    seq: dict = {}
    for a in accesses:
        key = (a.get("block", 0), a["thread"])
        tseq = a.get("tseq", seq.get(key, 0))
        seq[key] = tseq + 1
        idx = tuple(a["idx"]) + (0,) * (3 - len(a["idx"]))
        shape = ARRAYS[a["array"]]["shape"]
        offset = idx[0] if len(shape) == 1 else idx[0] * shape[1] + idx[1]
        row = dict(
            block=a.get("block", 0), thread=a["thread"], tseq=tseq, array=a["array"], op=a["op"],
            offset=offset, epoch=a.get("epoch", 0), line=a.get("line", 10), pc=a.get("pc", 0), code=0,
            occurrence=a.get("occ", 0), i0=idx[0], i1=idx[1], i2=idx[2],
        )  # fmt: skip
        rows.append([row[c] for c in COLUMNS])
    return {
        "records": np.array(rows, np.int64).reshape(-1, len(COLUMNS)),
        "columns": list(COLUMNS),
        "arrays": ARRAYS,
        "limit": 1000,
    }


def warp_request(array, op, index_of_lane, lanes=range(32), **kw):
    return [dict(thread=lane, array=array, op=op, idx=index_of_lane(lane), **kw) for lane in lanes]


def one_request(accesses):
    req = tables.requests_table(tables.accesses_table(buffers(accesses)))
    assert len(req) == 1, req
    return req.iloc[0]


def test_sectors_and_ideal_sectors():
    r = one_request(warp_request(G, LOAD, lambda lane: (lane,)))
    assert (r.lanes, r.bytes, r.sectors, r.ideal_sectors) == (32, 128, 4, 4)
    r = one_request(warp_request(G, LOAD, lambda lane: (2 * lane,)))
    assert (r.sectors, r.ideal_sectors) == (8, 4)
    r = one_request(warp_request(G, LOAD, lambda lane: (32 * lane,)))  # 128 bytes apart
    assert (r.sectors, r.ideal_sectors) == (32, 4)
    r = one_request(warp_request(G, LOAD, lambda lane: (7,)))  # every lane the same word
    assert (r.sectors, r.ideal_sectors, r.addresses) == (1, 1, 1)
    r = one_request(warp_request(G, STORE, lambda lane: (lane + 4,)))  # misaligned by 16 bytes
    assert (r.sectors, r.ideal_sectors) == (5, 4)
    r = one_request(warp_request(D, LOAD, lambda lane: (lane,)))  # 8-byte elements
    assert (r.bytes, r.sectors, r.ideal_sectors) == (256, 8, 8)
    r = one_request(warp_request(G, LOAD, lambda lane: (lane,), lanes=range(5)))  # partial warp
    assert (r.lanes, r.sectors, r.ideal_sectors) == (5, 1, 1)
    assert r.bank_ways == 0 and r.extra_wavefronts == 0


def test_a_16_byte_global_access_is_two_8_byte_requests_and_a_shared_one_stays_one():
    """numba's complex128 is 8-byte aligned: ptxas loads it as two LDG.E.64, each a request of its own.
    A warp reading 32 consecutive complex128: each half covers 32 lanes 16 bytes apart, 512 bytes, so 16
    sectors, though its 32 x 8 distinct bytes could fit in 8."""
    req = tables.requests_table(tables.accesses_table(buffers(warp_request(C16, LOAD, lambda lane: (lane,)))))
    span = 32 * 16 // tables.SECTOR_BYTES
    assert len(req) == 2
    assert list(req["sectors"]) == [span, span] and list(req["ideal_sectors"]) == [32 * 8 // 32] * 2
    assert list(req["bytes"]) == [32 * 8] * 2 and list(req["lanes"]) == [32, 32]
    summ = tables.summary(req, tables.hazards_table(tables.accesses_table(buffers([]))), 32)
    assert summ["global_ld_requests"] == 2 and summ["global_ld_sectors"] == 2 * span
    # a stride of two elements: each half touches 32 sectors of its own (every other 16-byte pair)
    req = tables.requests_table(
        tables.accesses_table(buffers(warp_request(C16, STORE, lambda lane: (2 * lane,))))
    )
    assert list(req["sectors"]) == [32, 32] and list(req["op"].astype(str)) == ["store", "store"]
    # shared complex128 is one LDS.128: one request, four quarter-warp wavefronts
    r = one_request(warp_request(S16, LOAD, lambda lane: (lane,)))
    assert (r.bytes, r.wavefronts) == (32 * 16, 4)


def test_bank_ways_conflicts_and_broadcast():
    column = one_request(warp_request(S, LOAD, lambda lane: (lane, 3)))  # word 64*lane+3: one bank
    assert (column.bank_ways, column.extra_wavefronts, column.sectors) == (32, 31, 0)
    row = one_request(warp_request(S, LOAD, lambda lane: (2, lane)))
    assert row.bank_ways == 1 and row.extra_wavefronts == 0
    broadcast = one_request(warp_request(S, LOAD, lambda lane: (5, 5)))
    assert broadcast.bank_ways == 1
    # two half-warps on two words of one bank (each half a broadcast): 2-way
    halves = one_request(warp_request(S, LOAD, lambda lane: (0, 0) if lane < 16 else (0, 32)))
    assert halves.bank_ways == 2 and halves.extra_wavefronts == 1
    # stride 2 words: 16 banks used twice each
    assert one_request(warp_request(S, STORE, lambda lane: (0, 2 * lane))).bank_ways == 2


def test_wavefronts_as_the_hardware_counts_them():
    """128 bytes per wavefront: 4-byte accesses in one phase, 8-byte in two, 16-byte in four."""
    column = one_request(warp_request(S, LOAD, lambda lane: (lane, 3)))
    assert (column.wavefronts, column.ideal_wavefronts, column.extra_wavefronts) == (32, 1, 31)
    row = one_request(warp_request(S, LOAD, lambda lane: (2, lane)))
    assert (row.wavefronts, row.ideal_wavefronts, row.extra_wavefronts) == (1, 1, 0)
    # a conflict-free float64 read: two half-warps of 128 bytes each, no conflict (bank_ways says 2)
    f64 = one_request(warp_request(S8, LOAD, lambda lane: (lane,)))
    assert (f64.bank_ways, f64.wavefronts, f64.ideal_wavefronts, f64.extra_wavefronts) == (2, 2, 2, 0)
    # float64 at a stride of 2 elements: each half-warp uses 16 banks twice
    f64s2 = one_request(warp_request(S8, LOAD, lambda lane: (2 * lane,)))
    assert (f64s2.wavefronts, f64s2.extra_wavefronts) == (4, 2)
    # phases are counted apart: lanes 0-15 16-way on bank 0/1, lanes 16-31 consecutive (1 wavefront);
    # one warp-wide count of the busiest bank would say 16
    uneven = one_request(warp_request(S8, LOAD, lambda lane: (16 * lane,) if lane < 16 else (lane,)))
    assert (uneven.bank_ways, uneven.wavefronts, uneven.extra_wavefronts) == (16, 17, 15)
    # 16-byte elements: four quarter-warps of 8 lanes x 16 bytes
    c128 = one_request(warp_request(S16, LOAD, lambda lane: (lane,)))
    assert (c128.wavefronts, c128.ideal_wavefronts, c128.extra_wavefronts) == (4, 4, 0)
    c128s2 = one_request(warp_request(S16, STORE, lambda lane: (2 * lane,)))
    assert (c128s2.wavefronts, c128s2.extra_wavefronts) == (8, 4)
    # a half warp of float64: one phase, one wavefront
    half = one_request(warp_request(S8, LOAD, lambda lane: (lane,), lanes=range(16)))
    assert (half.wavefronts, half.ideal_wavefronts, half.extra_wavefronts) == (1, 1, 0)
    # global requests have no wavefronts here
    g = one_request(warp_request(G, LOAD, lambda lane: (lane,)))
    assert (g.wavefronts, g.ideal_wavefronts, g.extra_wavefronts) == (0, 0, 0)


def test_nsight_conflict_count_of_column_reads():
    """32 warps of a 32x32 block each read a column of a float32 tile: 32 x 31 = 992 conflicts."""
    acc = []
    for warp in range(32):
        acc += [
            dict(thread=32 * warp + lane, array=S, op=LOAD, idx=(lane, warp)) for lane in range(32)
        ]  # fmt: skip
    req = tables.requests_table(tables.accesses_table(buffers(acc)))
    assert len(req) == 32
    summ = tables.summary(req, tables.hazards_table(tables.accesses_table(buffers(acc))), len(acc))
    assert summ["shared_ld_bank_conflicts"] == 992
    assert summ["shared_ld_wavefronts"] == 32 * 32
    assert tables.line_summary(req)["bank_conflicts"].tolist() == [992]


def test_requests_split_by_occurrence_and_instruction():
    acc = warp_request(G, LOAD, lambda lane: (lane,), occ=0) + warp_request(
        G, LOAD, lambda lane: (lane,), occ=1
    )
    acc += warp_request(G, LOAD, lambda lane: (lane + 32,), occ=0, pc=8)  # a second access on the line
    acc += [dict(thread=40, array=G, op=LOAD, idx=(0,))]  # warp 1
    req = tables.requests_table(tables.accesses_table(buffers(acc)))
    assert len(req) == 4
    assert req.groupby("warp").size().tolist() == [3, 1]


def hazards(acc):
    return tables.hazards_table(tables.accesses_table(buffers(acc)))


def test_hazard_kinds_by_program_order():
    raw = hazards(
        [
            dict(thread=0, array=S, op=STORE, idx=(0, 5), tseq=0),
            dict(thread=1, array=S, op=LOAD, idx=(0, 5), tseq=1),
        ]
    )
    raw = raw[raw.kind != "UNINIT"]  # thread 1's read is also uninitialised: nothing wrote it earlier
    assert raw[["kind", "thread_a", "thread_b", "array", "index"]].values.tolist() == [["RAW", 0, 1, "s", 5]]
    war = hazards(
        [
            dict(thread=1, array=S, op=LOAD, idx=(0, 5), tseq=0),
            dict(thread=0, array=S, op=STORE, idx=(0, 5), tseq=3),
        ]
    )
    assert war[["kind", "thread_a", "thread_b"]].values.tolist() == [["UNINIT", 1, -1], ["WAR", 1, 0]]
    waw = hazards(
        [dict(thread=3, array=S, op=STORE, idx=(1, 1)), dict(thread=2, array=S, op=STORE, idx=(1, 1))]
    )
    assert waw[["kind", "thread_a", "thread_b", "index"]].values.tolist() == [["WAW", 2, 3, 65]]


def test_no_hazard_when_ordered_or_private():
    # a barrier between the store and the other thread's load
    assert (
        hazards(
            [
                dict(thread=0, array=S, op=STORE, idx=(0, 5)),
                dict(thread=1, array=S, op=LOAD, idx=(0, 5), epoch=1),
            ]
        )
        .query("kind != 'UNINIT'")
        .empty
    )
    # same thread; two loads; different blocks' shared memory
    assert hazards(
        [dict(thread=0, array=S, op=STORE, idx=(0, 5)), dict(thread=0, array=S, op=LOAD, idx=(0, 5))]
    ).empty
    assert hazards(
        [
            dict(thread=0, array=S, op=STORE, idx=(0, 5)),
            dict(thread=1, array=S, op=STORE, idx=(0, 5), block=1),
        ]
    ).empty
    # atomics on one word from many threads do not race
    assert hazards([dict(thread=t, array=G, op=ATOMIC, idx=(0,), block=t % 2) for t in range(8)]).empty


def test_global_hazards_between_blocks():
    h = hazards(
        [
            dict(thread=0, array=G, op=STORE, idx=(9,), block=0),
            dict(thread=0, array=G, op=STORE, idx=(9,), block=3),
        ]
    )
    assert h[["kind", "space", "block", "block_b", "index"]].values.tolist() == [["WAW", "global", 0, 3, 9]]
    # in one block, a barrier orders global accesses too
    h = hazards(
        [dict(thread=0, array=G, op=STORE, idx=(9,)), dict(thread=1, array=G, op=LOAD, idx=(9,), epoch=1)]
    )
    assert h.empty
    # reads only: no hazard
    assert hazards([dict(thread=t, array=G, op=LOAD, idx=(9,), block=t) for t in range(4)]).empty


def test_pairs_are_capped_but_counted():
    h = hazards([dict(thread=t, array=S, op=STORE, idx=(0, 0)) for t in range(20)])
    assert len(h) == tables.MAX_PAIRS_PER_WORD and (h["pairs"] == 20 * 19 // 2).all()


def test_uninit_reads():
    h = hazards([dict(thread=4, array=S, op=LOAD, idx=(0, 7), line=12)])
    assert h[["kind", "thread_a", "line_a", "index", "epoch"]].values.tolist() == [["UNINIT", 4, 12, 7, 0]]
    # written earlier by the reading thread itself: initialised
    assert hazards(
        [dict(thread=4, array=S, op=STORE, idx=(0, 7)), dict(thread=4, array=S, op=LOAD, idx=(0, 7))]
    ).empty
    # written by another thread before a barrier: initialised
    assert hazards(
        [dict(thread=1, array=S, op=STORE, idx=(0, 7)), dict(thread=4, array=S, op=LOAD, idx=(0, 7), epoch=1)]
    ).empty
    # written by another thread in the same epoch: not "earlier" (and a RAW race)
    h = hazards(
        [
            dict(thread=1, array=S, op=STORE, idx=(0, 7), tseq=0),
            dict(thread=4, array=S, op=LOAD, idx=(0, 7), tseq=5),
        ]
    )
    assert sorted(h["kind"]) == ["RAW", "UNINIT"]
    # written in another block: still uninitialised in this one
    h = hazards(
        [
            dict(thread=1, array=S, op=STORE, idx=(0, 7), block=0),
            dict(thread=1, array=S, op=LOAD, idx=(0, 7), block=1, epoch=2),
        ]
    )
    assert h[["kind", "block"]].values.tolist() == [["UNINIT", 1]]
    # the reading thread's own later store does not count
    h = hazards(
        [
            dict(thread=2, array=S, op=LOAD, idx=(0, 1), tseq=0),
            dict(thread=2, array=S, op=STORE, idx=(0, 1), tseq=1),
        ]
    )
    assert h["kind"].tolist() == ["UNINIT"]
    summ = tables.summary(
        tables.requests_table(tables.accesses_table(buffers([dict(thread=2, array=S, op=LOAD, idx=(0, 1))]))),
        h,
        1,
    )
    assert summ["uninit_reads"] == 1 and summ["hazards"]["UNINIT"] == 1


def test_tables_do_not_depend_on_record_order():
    acc = warp_request(S, STORE, lambda lane: (0, lane)) + warp_request(S, LOAD, lambda lane: (lane, 0))
    acc += [dict(thread=3, array=S, op=STORE, idx=(3, 0))]
    a = buffers(acc)
    b = dict(a, records=a["records"][np.random.default_rng(1).permutation(len(a["records"]))])
    for make in (lambda x: tables.accesses_table(x), lambda x: tables.requests_table(tables.accesses_table(x)),
                 lambda x: tables.hazards_table(tables.accesses_table(x))):  # fmt: skip
        pd.testing.assert_frame_equal(make(a), make(b))


def test_empty():
    empty = buffers([])
    acc = tables.accesses_table(empty)
    assert acc.empty and tables.requests_table(acc).empty and tables.hazards_table(acc).empty
    assert tables.summary(tables.requests_table(acc), tables.hazards_table(acc), 0)["global_ld_requests"] == 0
