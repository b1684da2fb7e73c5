"""Access probes: device functions that record a kernel's own loads, stores and atomics on the GPU.

The instrumenter's access pass (visualizer/engine/instrument_accesses.py) rewrites every element
access of a global array (a kernel parameter) or a shared array so that its index goes through one
of these functions, which records the access and returns the same index::

    A[row, col]            ->  A[at2(rec, st, slot, ep, A, row, col, SITE)]
    cuda.atomic.add(h, i, 1) -> cuda.atomic.add(h, at1(rec, st, slot, ep, h, i, SITE), 1)

so the kernel computes exactly what it did, in the same order, conditional expressions included.

Only *sampled warps* record: ``slot_of(sel)`` (once, at the kernel's start) is the warp's row in the
buffers, or -1 for a warp that records nothing (``sel[block]`` is the block's first row or -1).

**Per-lane streams.** Each recording lane writes its own accesses, in its own program order, with
no word to any other lane: no shared counter, no atomic, no shuffle, no ballot, and no branch. Its
state is three registers (``st``, a local array the compiler promotes): its access count ``k`` (64
bits: it never wraps), the buffer's ``cap`` records per lane, and ``base``, where its records
start. Its k-th access goes to ``rec[base + 64 min(k, cap)]`` and 32 words on (lane-contiguous: a
converged warp's two stores coalesce into 256 bytes each); past ``cap`` that is the slot's scratch
row, written over each time, so a full buffer costs what recording does and no branch:

* the access word: ``byte offset + 1`` (bits 0-39), the element size in bytes (bits 40-47; 0 for
  one of 256 bytes or more: the host knows the dtype) and the site (bits 48-62: line, array, op,
  the pass's table);
* the request word: the barrier epoch (``cuda.syncthreads()`` calls passed so far) in bits 32-62,
  and ``cuda.activemask()`` in bits 0-31: the lanes that made this request together.

Where the thread exits, ``end`` writes its count of accesses (``cnt[slot, lane]``), recorded or not.
The host rebuilds each warp's requests from its lanes' streams (analysis/lane_streams.py): a request
is the lanes of one mask that each have it, with the same site and epoch, at the same place in their
order.

Buffers (the host allocates them, analysis/gpu_accesses.py decodes them):

* ``rec`` int64 (slots * (cap + 1) * 64,): slot s's rows from ``s * (cap + 1) * 64``, row k holding
  its lanes' access words (columns 0-31) and request words (32-63), row ``cap`` the scratch row;
* ``cnt`` uint64 (slots, 32): each lane's accesses in all;
* ``sel`` int32 (blocks,): first slot of each sampled block, -1 elsewhere.

The same source runs on the simulator (engine/fastsim.py gives activemask its warp semantics), which
is how CI checks the GPU recording without a GPU.
"""

from numba import cuda, int64, uint32, uint64

OFFSET_BITS = 40  # byte offset + 1 (a 1 TiB array at most: a GPU's whole memory is less)
SIZE_SHIFT, SITE_SHIFT = 40, 48
MAX_SITES = 1 << 15  # sites one kernel may record (bits 48-62 of the access word)


@cuda.jit(device=True)
def _warp():
    t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    return t // 32


@cuda.jit(device=True)
def slot_of(sel):
    """This warp's row in the access buffers, or -1 if its block is not sampled."""
    b = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    base = sel[b]
    if base < 0:
        return -1
    return base + _warp()


@cuda.jit(device=True)
def start(rec, cnt, st, slot):
    """At the kernel's start: no access yet; this lane's records start at ``base``."""
    rows = uint64(uint32(rec.shape[0]) // uint32(cnt.shape[0] * 64))  # cap + scratch row (a 32-bit division)
    st[0] = 0
    st[1] = rows - uint64(1)
    st[2] = uint64(max(slot, 0)) * rows * uint64(64) + uint64(cuda.laneid)


@cuda.jit(device=True)
def end(cnt, st, slot):
    """Where the thread exits: how many accesses it made (the host says how many did not fit)."""
    if slot >= 0:
        cnt[slot, cuda.laneid] = st[0]


@cuda.jit(device=True)
def note(rec, st, ep, word):
    """Record this lane's next access (``word``: offset + 1, size, site) and who made it with it.
    No branch: past ``cap`` the two words go to the slot's scratch row, written over each time."""
    mask = cuda.activemask()
    k = st[0]
    i = uint32(st[2]) + uint32(min(k, st[1])) * uint32(64)  # < 2**32: gpu_accesses.MAX_BUFFER_WORDS
    rec[i] = word
    rec[i + uint32(32)] = (ep << 32) | int64(mask)  # mask: uint32, zero-extended
    st[0] = k + uint64(1)


@cuda.jit(device=True)
def _word(offset, itemsize, site):
    size = itemsize if itemsize < 256 else 0
    return (offset + 1) | (size << SIZE_SHIFT) | (site << SITE_SHIFT)


@cuda.jit(device=True)
def _wrap(i, n):
    return i + n if i < 0 else i


@cuda.jit(device=True)
def at1(rec, st, slot, ep, a, i, site):
    """``a[i]``'s index, recorded (a 1-d element access; a row of a wider array is not one)."""
    if slot >= 0 and a.ndim == 1:
        note(rec, st, ep, _word(_wrap(i, a.shape[0]) * a.strides[0], a.itemsize, site))
    return i


@cuda.jit(device=True)
def at2(rec, st, slot, ep, a, i, j, site):
    if slot >= 0 and a.ndim == 2:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        note(rec, st, ep, _word(off, a.itemsize, site))
    return i, j


@cuda.jit(device=True)
def at3(rec, st, slot, ep, a, i, j, k, site):
    if slot >= 0 and a.ndim == 3:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        off += _wrap(k, a.shape[2]) * a.strides[2]
        note(rec, st, ep, _word(off, a.itemsize, site))
    return i, j, k


@cuda.jit(device=True)
def at4(rec, st, slot, ep, a, i, j, k, m, site):
    if slot >= 0 and a.ndim == 4:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        off += _wrap(k, a.shape[2]) * a.strides[2] + _wrap(m, a.shape[3]) * a.strides[3]
        note(rec, st, ep, _word(off, a.itemsize, site))
    return i, j, k, m


AT = {1: at1, 2: at2, 3: at3, 4: at4}  # the recording index function for an access of n indices
