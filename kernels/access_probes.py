"""Access probes: device functions that record a kernel's own loads, stores and atomics on the GPU.

The instrumenter's access pass (visualizer/engine/instrument_accesses.py) rewrites every element
access of a global array (a kernel parameter) or a shared array so that its index goes through one
of these functions, which records the access and returns the same index::

    A[row, col]            ->  A[at2(acc, hdr, ctr, st, slot, ep, A, row, col, SITE)]
    cuda.atomic.add(h, i, 1) -> cuda.atomic.add(h, at1(acc, hdr, ctr, st, slot, ep, h, i, SITE), 1)

so the kernel computes exactly what it did, in the same order, conditional expressions included.

Only *sampled warps* record: ``slot_of(sel)`` (once, at the kernel's start) is the warp's row in the
buffers, or -1 for a warp that records nothing (``sel[block]`` is the block's first row or -1). A
recording warp's lanes that reach one access together are one warp request: the lowest active lane
takes the warp's next request number from its counter (an atomic) and shares it with
``cuda.shfl_sync``, so lanes of one request share one number even when the warp has diverged.
Buffers (the host allocates them, analysis/gpu_accesses.py decodes them):

* ``acc`` int64 (slots, cap, 32): byte offset + 1 of lane ``l``'s access in request ``n`` (0: the
  lane took no part);
* ``hdr`` int32 (slots, cap, 3): the request's site (line, array, op: the pass's table), the warp's
  barrier epoch (``cuda.syncthreads()`` calls passed so far) and the element size in bytes (never 0
  in a row that was written);
* ``cnt`` int32 (slots, 32): each lane's accesses past the warp's ``cap`` requests, written when the
  thread exits: nothing of them is recorded, and the host says how many (never a wrong picture);
* ``sel`` int32 (blocks,): first slot of each sampled block, -1 elsewhere.

The request counter is per warp in shared memory (``ctr``: 32 int32 the pass allocates, 128 bytes,
so the kernel's own shared arrays keep their banks), taken with a shared atomic: no global memory
round trip per request. A lane that has seen its warp's buffer full (``st[0]``) stops taking part
(``ballot_sync`` names the lanes that still do) and only counts its accesses (``st[1]``, a register).

The same source runs on the simulator (engine/fastsim.py gives activemask and shfl_sync their warp
semantics), which is how CI checks the GPU recording without a GPU.
"""

import os

from numba import cuda

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):  # the simulator: plain Python ints

    def _lowest(mask):
        """The lowest set lane of a 32-bit mask (numba types ballot_sync's result int32)."""
        m = int(mask) & 0xFFFFFFFF
        return (m & -m).bit_length() - 1

else:

    @cuda.jit(device=True)
    def _lowest(mask):
        return cuda.clz(cuda.brev(mask))  # trailing zeros: the lowest set lane


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
def start(ctr, st, slot):
    """At the kernel's start: this lane takes part, has counted nothing; its warp's counter is 0."""
    st[0] = 0
    st[1] = 0
    if slot >= 0:
        if cuda.laneid == 0:
            ctr[_warp()] = 0
        cuda.syncwarp(cuda.activemask())


@cuda.jit(device=True)
def end(cnt, st, slot):
    """Where the thread exits: its accesses past the buffer, for the host to say."""
    if slot >= 0:
        cnt[slot, cuda.laneid] = st[1]


@cuda.jit(device=True)
def note(acc, hdr, ctr, st, slot, ep, offset, itemsize, site):
    """Record one lane's access (byte ``offset``) as part of the request its active lanes make now."""
    lane = cuda.laneid
    mask = cuda.activemask()
    part = cuda.ballot_sync(mask, st[0] == 0)  # the lanes that have not seen the buffer full
    if st[0] != 0:
        st[1] += 1
        return
    leader = _lowest(part)  # the lowest of them
    n = 0
    if lane == leader:
        n = cuda.atomic.add(ctr, _warp(), 1)
    n = cuda.shfl_sync(part, n, leader)
    if n < acc.shape[1]:
        acc[slot, n, lane] = offset + 1
        if lane == leader:
            hdr[slot, n, 0] = site
            hdr[slot, n, 1] = ep
            hdr[slot, n, 2] = itemsize
    else:
        st[0] = 1
        st[1] += 1


@cuda.jit(device=True)
def _wrap(i, n):
    return i + n if i < 0 else i


@cuda.jit(device=True)
def at1(acc, hdr, ctr, st, slot, ep, a, i, site):
    """``a[i]``'s index, recorded (a 1-d element access; a row of a wider array is not one)."""
    if slot >= 0 and a.ndim == 1:
        note(acc, hdr, ctr, st, slot, ep, _wrap(i, a.shape[0]) * a.strides[0], a.itemsize, site)
    return i


@cuda.jit(device=True)
def at2(acc, hdr, ctr, st, slot, ep, a, i, j, site):
    if slot >= 0 and a.ndim == 2:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        note(acc, hdr, ctr, st, slot, ep, off, a.itemsize, site)
    return i, j


@cuda.jit(device=True)
def at3(acc, hdr, ctr, st, slot, ep, a, i, j, k, site):
    if slot >= 0 and a.ndim == 3:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        off += _wrap(k, a.shape[2]) * a.strides[2]
        note(acc, hdr, ctr, st, slot, ep, off, a.itemsize, site)
    return i, j, k


@cuda.jit(device=True)
def at4(acc, hdr, ctr, st, slot, ep, a, i, j, k, m, site):
    if slot >= 0 and a.ndim == 4:
        off = _wrap(i, a.shape[0]) * a.strides[0] + _wrap(j, a.shape[1]) * a.strides[1]
        off += _wrap(k, a.shape[2]) * a.strides[2] + _wrap(m, a.shape[3]) * a.strides[3]
        note(acc, hdr, ctr, st, slot, ep, off, a.itemsize, site)
    return i, j, k, m


AT = {1: at1, 2: at2, 3: at3, 4: at4}  # the recording index function for an access of n indices
