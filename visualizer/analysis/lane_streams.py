"""One sampled warp's requests, rebuilt on the host from its lanes' own streams of records.

Pure numpy. On the GPU each recording lane writes its accesses in its own program order, with no word
to any other lane (kernels/access_probes.py): its k-th access as an *access word* (byte offset + 1,
element size, site) and a *request word* (barrier epoch, and ``cuda.activemask()``: the lanes that
made this request together), and at its exit how many accesses it made in all (past its buffer's
``cap`` it only counted them). ``rebuild`` turns the 32 streams back into the warp's requests:

* the lanes of one request each hold it with the same mask, site and epoch. Two requests with the same
  mask, site and epoch are made by the same lanes, so every one of those lanes holds them in the same
  order: the j-th such record of one lane and the j-th of another are the same request. Each group
  must hold exactly the lanes of its mask;
* where a lane's buffer ran out, the requests it took part in after that cannot be complete: such a
  request, and every later record of each of its lanes, is left out (the lanes' counts say how many
  accesses are not in the tables, never a wrong picture); what is kept is, in every lane, a first
  part of its stream;
* the requests are put in an order every lane's stream agrees with (a request comes after each
  request its lanes made before it; ties by lowest lane): ``occurrence`` is a request's rank among
  the warp's requests at its site.

Streams that do not fit together (a record naming a lane that has no such record and did not run
out, a record whose mask lacks its own lane, two lanes holding two requests in opposite orders) are
``inconsistent``: the warp's records are all left out and the reason said, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LANES = 32
OFFSET_MASK = (1 << 40) - 1  # access word: byte offset + 1 in bits 0-39
SIZE_SHIFT, SITE_SHIFT = 40, 48  # element size in bits 40-47, site in bits 48-62
MASK_BITS = 0xFFFFFFFF  # request word: activemask in bits 0-31, barrier epoch from bit 32
RELAX_ROUNDS = 64  # order passes before the exact (slower) topological sort takes over


@dataclass
class Warp:
    """One warp's kept records (one row per lane access, in no particular order) and what is left out."""

    lane: np.ndarray  # int64, the lane of each kept access
    seq: np.ndarray  # its index in the lane's own stream (the lane's n-th access)
    offset: np.ndarray  # byte offset
    size: np.ndarray  # element size the device saw (0: 256 bytes or more, the host knows)
    site: np.ndarray
    epoch: np.ndarray
    occurrence: np.ndarray  # the request's rank among this warp's requests at its site
    request: np.ndarray  # the request's rank in the warp's order
    requests: int  # requests kept
    made: int  # lane accesses the lanes made in all
    inconsistent: str = ""  # why the streams do not fit together ("" when they do)

    @property
    def unrecorded(self) -> int:
        return self.made - len(self.lane)


def _empty(made: int, why: str = "") -> Warp:
    z = np.zeros(0, np.int64)
    return Warp(z, z, z, z, z, z, z, z, 0, made, why)


def rebuild(rec: np.ndarray, counts: np.ndarray, *, lockstep: bool = True) -> Warp:
    """The warp's requests from ``rec`` (cap, 64): access words in columns 0-31, request words in
    32-63, row k = each lane's k-th access) and ``counts`` (32,): each lane's accesses in all.

    ``lockstep=False``: the lanes ran one after another, not as a warp (the compiled simulator, whose
    masks group the j-th access of each lane at a site and epoch, as the simulator's recorder does);
    two lanes may then hold two requests in opposite orders (a loop whose lanes take its branches in
    different turns), and the requests are ordered by epoch and each one's earliest place in any lane
    rather than refused."""
    cap = rec.shape[0]
    counts = np.asarray(counts, np.int64)
    made = int(counts.sum())
    if made == 0:
        return _empty(0)
    if (counts < 0).any():
        return _empty(made, "a lane's access count is negative")
    n = np.minimum(counts, cap)
    ran_out = int(sum(1 << int(lane) for lane in np.flatnonzero(counts > cap)))
    valid = np.arange(cap)[:, None] < n[None, :]  # (cap, 32): the records each lane wrote
    ks, lanes = np.nonzero(valid)
    word = rec[ks, lanes]
    meta = rec[ks, lanes + LANES]
    if (word <= 0).any():
        return _empty(made, "a lane's count says it recorded an access its buffer does not hold")
    mask = meta & MASK_BITS
    if ((mask >> lanes) & 1 == 0).any():
        return _empty(made, "a record's mask does not name its own lane")
    site = word >> SITE_SHIFT

    # group: the j-th record with the same (request word, site) of each lane is one request
    order = np.lexsort((ks, lanes, site, meta))
    m_s, s_s, l_s = meta[order], site[order], lanes[order]
    new_key = np.r_[True, (m_s[1:] != m_s[:-1]) | (s_s[1:] != s_s[:-1])]
    new_run = new_key | np.r_[True, l_s[1:] != l_s[:-1]]
    pos = np.arange(len(order))
    run_start = np.maximum.accumulate(np.where(new_run, pos, 0))
    j = pos - run_start
    key = np.cumsum(new_key) - 1
    req_sorted = np.unique(key * (cap + 1) + j, return_inverse=True)[1].reshape(-1)
    req = np.empty(len(order), np.int64)
    req[order] = req_sorted
    nreq = int(req.max()) + 1
    present = np.zeros(nreq, np.int64)
    np.bitwise_or.at(present, req, np.int64(1) << lanes)
    rmask = np.zeros(nreq, np.int64)
    rmask[req] = mask
    missing = rmask & ~present
    if (missing & ~ran_out).any():
        lost = int((missing & ~ran_out)[(missing & ~ran_out) != 0][0])
        lane = (lost & -lost).bit_length() - 1
        return _empty(
            made, f"a request names lane {lane}, which holds no such record and did not run out of buffer"
        )

    # leave out the requests a lane could not record, and every later record of each of their lanes
    at = np.full((LANES, cap), -1, np.int64)  # lane, k -> request
    at[lanes, ks] = req
    bad = missing != 0
    while True:
        hit = np.where(at >= 0, bad[np.maximum(at, 0)], False)
        first = np.where(hit.any(axis=1), hit.argmax(axis=1), cap)
        later = (np.arange(cap)[None, :] >= first[:, None]) & (at >= 0)
        now = bad.copy()
        now[at[later]] = True
        if (now == bad).all():
            break
        bad = now
    keep = ~later[lanes, ks]
    if not keep.any():
        return _empty(made)

    level = _order(at, ~bad, nreq, cap)
    if level is None and not lockstep:
        first = np.full(nreq, cap, np.int64)
        np.minimum.at(first, req, ks)
        repoch = np.zeros(nreq, np.int64)
        repoch[req] = meta >> 32
        level = repoch * (cap + 1) + first
    if level is None:
        return _empty(made, "two lanes hold two requests in opposite orders")
    kept = np.flatnonzero(~bad)
    low_lane = np.zeros(nreq, np.int64)  # the lowest lane of each request's mask (never 0: its own lanes)
    low_lane[kept] = np.log2((rmask[kept] & -rmask[kept]).astype(np.float64)).astype(np.int64)
    ranked = kept[np.lexsort((low_lane[kept], level[kept]))]
    rank = np.full(nreq, -1, np.int64)
    rank[ranked] = np.arange(len(ranked))
    rsite = np.zeros(nreq, np.int64)
    rsite[req] = site
    # occurrence: rank among the kept requests at the same site, in the warp's order
    by_site = ranked[np.argsort(rsite[ranked], kind="stable")]
    ss = rsite[by_site]
    starts = np.r_[0, np.flatnonzero(np.diff(ss)) + 1]
    occ = np.zeros(nreq, np.int64)
    occ[by_site] = np.arange(len(by_site)) - np.repeat(starts, np.diff(np.r_[starts, len(by_site)]))

    w, r = word[keep], req[keep]
    return Warp(
        lane=lanes[keep].astype(np.int64),
        seq=ks[keep].astype(np.int64),
        offset=(w & OFFSET_MASK) - 1,
        size=(w >> SIZE_SHIFT) & 0xFF,
        site=site[keep],
        epoch=meta[keep] >> 32,
        occurrence=occ[r],
        request=rank[r],
        requests=len(kept),
        made=made,
    )


def _order(at: np.ndarray, good: np.ndarray, nreq: int, cap: int) -> np.ndarray | None:
    """A level per request that grows along every lane's stream (None: no such order, a cycle).

    Kept records are a first part of each lane's stream, so along a lane the constraint is
    ``level[k] >= level[k-1] + 1``: ``level - k`` must not fall, a running maximum. Start from each
    request's latest position in any lane and repeat until nothing moves; a converged warp takes one
    pass. Past ``RELAX_ROUNDS`` passes an exact topological sort decides."""
    ok = (at >= 0) & good[np.maximum(at, 0)]
    k = np.broadcast_to(np.arange(cap)[None, :], at.shape)
    r = at[ok]
    level = np.zeros(nreq, np.int64)
    np.maximum.at(level, r, k[ok])
    low = np.iinfo(np.int64).min // 4
    for _ in range(RELAX_ROUNDS):
        a = np.where(ok, level[np.maximum(at, 0)] - k, low)
        need = np.maximum.accumulate(a, axis=1) + k
        new = level.copy()
        np.maximum.at(new, r, need[ok])
        if (new == level).all():
            return level
        level = new
    return _kahn(at, ok, nreq)


def _kahn(at: np.ndarray, ok: np.ndarray, nreq: int) -> np.ndarray | None:
    """Longest-path levels by Kahn's algorithm over the lanes' successive records; None on a cycle."""
    succ: dict[int, set[int]] = {}
    indeg = np.zeros(nreq, np.int64)
    used = np.zeros(nreq, bool)
    for lane in range(at.shape[0]):
        row = at[lane][ok[lane]].tolist()
        for x in row:
            used[x] = True
        for x, y in zip(row, row[1:], strict=False):
            if y not in succ.setdefault(x, set()):
                succ[x].add(y)
                indeg[y] += 1
    level = np.zeros(nreq, np.int64)
    ready = [int(x) for x in np.flatnonzero(used & (indeg == 0))]
    done = 0
    while ready:
        x = ready.pop()
        done += 1
        for y in succ.get(x, ()):
            level[y] = max(level[y], level[x] + 1)
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    return level if done == int(used.sum()) else None
