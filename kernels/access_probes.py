"""Access probes: device functions that record a kernel's own loads, stores and atomics on the GPU.

The instrumenter's access pass (visualizer/engine/instrument/accesses.py) rewrites every element
access of a global array (a kernel parameter) or a shared array so that its index goes through one
of these functions, which records the access and returns the same index::

    A[row, col]            ->  A[at2(rec, st, slot, ep, A, row, col, SITE)]
    cuda.atomic.add(h, i, 1) -> cuda.atomic.add(h, at1(rec, st, slot, ep, h, i, SITE), 1)

so the kernel computes exactly what it did, in the same order, conditional expressions included.

Only *sampled warps* record: ``slot_of(sel)`` (once, at the kernel's start) is the warp's row in the
buffers, or -1 for a warp that records nothing (``sel[block]`` is the block's first row or -1).

**Per-lane streams.** Each recording lane writes its own accesses, in its own program order, with
no word to any other lane: no shared counter, no shuffle, no ballot. Its state is three
32-bit registers (``st``, a local array the compiler promotes): its access count ``k`` (it stops at
2**32 - 1, read "at least"), the buffer's ``cap`` records per lane, and ``base``, where its records
start. Its k-th access, while ``k < cap``, goes to ``rec[base + 64 k]`` and 32 words on
(lane-contiguous: a converged warp's two stores coalesce into 256 bytes each); past ``cap`` it is only
counted: one compare, and no word is made. The byte offset is the element's address less the array's
data pointer, which on a GPU the compiler shares with the kernel's own access (``_offN``).

**Done.** A lane past its ``cap``, or exiting, sets its bit in its warp's done word (word 0 of the
slot's spare row; ``room``). Once all are set, the warp's loops run their counted copies: the
kernel's own body and ``atcN``, one add per access into ``n`` (a 64-bit local). The thread's count
is ``st[0] + n``. A range loop's counted iterations run in a loop of their own (the access pass's
``_split``). (H200, flash_attention seq 4096, 2026-12-02: a sampled lane makes 161,888 accesses; with
20,833 of them recorded the kernel took 13.7 ms with no counted copies, 5.6 ms with them in the
recorded loop, 3.4 ms in a loop of their own, 2.7 ms with the shared address; with 2,048 recorded,
the default, 1.2 ms against the clean kernel's 0.67.)
The only atomics are these ORs; the records themselves still go word by word, lane by lane.

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
  its lanes' access words (columns 0-31) and request words (32-63); row ``cap`` is spare: its
  word 0 is the warp's done word, the rest is never written (it stays because of registers too:
  with ``cap`` taken as rows - 1, ptxas 13.0 gives transpose_tiled's recording build 32 registers;
  with ``cap`` taken as rows it gives 34, and that halves the build's blocks per SM);
* ``cnt`` uint64 (slots, 32): each lane's accesses in all;
* ``sel`` int32 (blocks,): first slot of each sampled block, -1 elsewhere.

The same source runs on the simulator (engine/sim/fastsim.py gives activemask its warp semantics), which
is how CI checks the GPU recording without a GPU.
"""

from numba import cuda, int32, int64, uint32, uint64

from visualizer.kernels.probes import SIMULATOR

OFFSET_BITS = 40  # byte offset + 1 (a 1 TiB array at most: a GPU's whole memory is less)
SIZE_SHIFT, SITE_SHIFT = 40, 48
MAX_SITES = 1 << 15  # sites one kernel may record (bits 48-62 of the access word)
COUNT_MAX = (1 << 32) - 1  # a lane's count stops here


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


DONE = uint64(1) << uint64(63)  # n's top bit: every lane of the warp is done (room's answer, kept)


@cuda.jit(device=True)
def _done_at(st):
    """Where this warp's lanes say they are done recording (a bit each): word 0 of its spare row."""
    return st[2] - uint32(cuda.laneid) + st[1] * uint32(64)


@cuda.jit(device=True)
def _done(rec, st):
    """This lane is done (past its ``cap``, or exiting); whether every lane of its warp is."""
    lane = int64(1) << cuda.laneid
    return cuda.atomic.or_(rec, _done_at(st), lane) | lane == -1


@cuda.jit(device=True)
def start(rec, cnt, st, n, slot):
    """At the kernel's start: no access yet; this lane's records start at ``base``; no lane of the
    warp is done: its done word has a bit set for each lane the warp lacks (not in ``activemask()`` at
    the start: a block's last warp may have fewer than 32) and for none it has. Each lane writes it
    itself, before its own first access: a warp starts converged, and having one lane write it while
    the others wait cost transpose_tiled 4 registers (at 34 it has half the blocks per SM)."""
    rows = uint32(rec.shape[0]) // uint32(cnt.shape[0] * 64)  # cap + the spare row (a 32-bit division)
    n[0] = uint64(0)
    st[0] = uint32(0)
    st[1] = rows - uint32(1)
    st[2] = uint32(max(slot, 0)) * rows * uint32(64) + uint32(cuda.laneid)
    if slot >= 0:
        rec[_done_at(st)] = ~int64(cuda.activemask())


@cuda.jit(device=True)
def end(cnt, st, n, slot, rec):
    """Where the thread exits: how many accesses it made (the host says how many did not fit); the
    lane is done."""
    if slot >= 0:
        cnt[slot, cuda.laneid] = uint64(st[0]) + (n[0] & ~DONE)
        if not n[0] & DONE:
            _done(rec, st)


@cuda.jit(device=True)
def room(rec, st, n):
    """Whether this warp may still record: the warp runs a loop's next iteration recorded if so, and
    the kernel's own body with a count per access (``atcN``) once every lane of the warp is done (past
    its ``cap``, where it only counts, or exited). Nothing is recorded after that either way, so which
    copy a lane runs changes no record. n's top bit keeps the answer. An ``int32``: what
    ``cuda.syncthreads_or`` takes."""
    if st[0] < st[1]:
        return int32(1)
    if n[0] & DONE:
        return int32(0)
    if _done(rec, st):
        n[0] |= DONE
        return int32(0)
    return int32(1)


@cuda.jit(device=True)
def _next(st, k):
    st[0] = k + uint32(k != uint32(COUNT_MAX))


@cuda.jit(device=True)
def note(rec, st, ep, k, word):
    """Record this lane's k-th access (``word``: offset + 1, size, site) and who made it with it."""
    mask = cuda.activemask()
    i = st[2] + k * uint32(64)  # < 2**32: gpu_accesses.MAX_BUFFER_WORDS
    rec[i] = word
    rec[i + uint32(32)] = (ep << 32) | int64(mask)  # mask: uint32, zero-extended


@cuda.jit(device=True)
def _word(offset, itemsize, site):
    size = itemsize if itemsize < 256 else 0
    # 64-bit from the start: on the simulator an int32 index makes an int32 offset, which numpy 2 will
    # not OR with a 48-bit field (on a GPU the offset is already 64-bit: the cast is free)
    return (int64(offset) + 1) | (size << SIZE_SHIFT) | (site << SITE_SHIFT)


@cuda.jit(device=True)
def _wrap(i, n):
    return int64(i + n) if i < 0 else int64(i)  # 64-bit: an int32 index times a stride may pass 2**31


@cuda.jit(device=True)
def _stride_off1(a, i):
    return _wrap(i, a.shape[0]) * a.strides[0]


@cuda.jit(device=True)
def _stride_off2(a, i, j):
    return _stride_off1(a, i) + _wrap(j, a.shape[1]) * a.strides[1]


@cuda.jit(device=True)
def _stride_off3(a, i, j, m):
    return _stride_off2(a, i, j) + _wrap(m, a.shape[2]) * a.strides[2]


@cuda.jit(device=True)
def _stride_off4(a, i, j, m, n):
    return _stride_off3(a, i, j, m) + _wrap(n, a.shape[3]) * a.strides[3]


# ``_offN(a, *idx)``: the byte offset of ``a[idx]`` in ``a``'s data (a negative index counts from the end,
# as the kernel's own indexing does). On the simulator, from the shape and strides above. On a GPU, from
# the element's own address (``_elem_offset``): the same instructions the kernel's access runs next
# (numba's basic indexing: each index fixed, then the item pointer), so the compiler computes the
# address once for both, and the offset costs one subtraction from the loop-invariant data pointer.
# (H200, flash_attention: the sums of strides took about 25 of the 37 instructions of a recorded access.)
if SIMULATOR:
    _off1, _off2, _off3, _off4 = _stride_off1, _stride_off2, _stride_off3, _stride_off4
else:
    from numba.cuda import cgutils
    from numba.cuda import types as nbtypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.np.arrayobj import fix_integer_index, make_array

    @intrinsic
    def _elem_offset(typingctx, a, idx):
        """Byte offset of ``a[idx]`` (a UniTuple of integers, one per dimension) in ``a``'s data: the item
        pointer built as numba's basic indexing builds it, minus the data pointer; 0 where ``idx`` does
        not name one element (a view's partial index: the callers record only whole elements)."""
        if not (isinstance(a, nbtypes.Array) and isinstance(idx, nbtypes.BaseTuple)):
            return None
        itypes = list(idx.types) if hasattr(idx, "types") else [idx.dtype] * idx.count
        if not all(isinstance(t, nbtypes.Integer) for t in itypes):
            return None

        def codegen(context, builder, sig, args):
            aryty, tupty = sig.args
            intp = context.get_value_type(nbtypes.intp)
            if aryty.ndim != len(itypes):
                return intp(0)
            ary = make_array(aryty)(context, builder, args[0])
            shapes = cgutils.unpack_tuple(builder, ary.shape, aryty.ndim)
            raw = cgutils.unpack_tuple(builder, args[1], len(itypes))
            inds = [
                fix_integer_index(context, builder, t, v, n)
                for t, v, n in zip(itypes, raw, shapes, strict=True)
            ]
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)
            return builder.sub(builder.ptrtoint(ptr, intp), builder.ptrtoint(ary.data, intp))

        return nbtypes.intp(a, idx), codegen

    @cuda.jit(device=True, inline="always")
    def _off1(a, i):
        return _elem_offset(a, (i,))

    @cuda.jit(device=True, inline="always")
    def _off2(a, i, j):
        return _elem_offset(a, (i, j))

    @cuda.jit(device=True, inline="always")
    def _off3(a, i, j, m):
        return _elem_offset(a, (i, j, m))

    @cuda.jit(device=True, inline="always")
    def _off4(a, i, j, m, n):
        return _elem_offset(a, (i, j, m, n))


# ``atvN``: an element access of N indices, recorded, ``base`` bytes into its array (a view's offset;
# 0 for the array itself). The offset is taken first, where the kernel's own access shares it (_offN).


@cuda.jit(device=True)
def atv1(rec, st, slot, ep, a, base, i, site):
    off = _off1(a, i)  # first: the kernel's own access, next, shares its address (_offN)
    if slot >= 0 and a.ndim == 1:
        k = st[0]
        if k < st[1]:
            note(rec, st, ep, k, _word(base + off, a.itemsize, site))
        _next(st, k)
    return i


@cuda.jit(device=True)
def atv2(rec, st, slot, ep, a, base, i, j, site):
    off = _off2(a, i, j)  # first: the kernel's own access, next, shares its address (_offN)
    if slot >= 0 and a.ndim == 2:
        k = st[0]
        if k < st[1]:
            note(rec, st, ep, k, _word(base + off, a.itemsize, site))
        _next(st, k)
    return i, j


@cuda.jit(device=True)
def atv3(rec, st, slot, ep, a, base, i, j, m, site):
    off = _off3(a, i, j, m)  # first: the kernel's own access, next, shares its address (_offN)
    if slot >= 0 and a.ndim == 3:
        k = st[0]
        if k < st[1]:
            note(rec, st, ep, k, _word(base + off, a.itemsize, site))
        _next(st, k)
    return i, j, m


@cuda.jit(device=True)
def atv4(rec, st, slot, ep, a, base, i, j, m, n, site):
    off = _off4(a, i, j, m, n)  # first: the kernel's own access, next, shares its address (_offN)
    if slot >= 0 and a.ndim == 4:
        k = st[0]
        if k < st[1]:
            note(rec, st, ep, k, _word(base + off, a.itemsize, site))
        _next(st, k)
    return i, j, m, n


@cuda.jit(device=True)
def then(v, recorded):
    """``v``, after ``recorded`` (an ``atN`` call) was evaluated: an atomic whose value loads memory is
    recorded after those loads, in the order they run (``cuda.atomic.add(h, b, then(s[at1(.., s, b, 7)],
    at1(.., h, b, 8)))``)."""
    return v


@cuda.jit(device=True)
def at1(rec, st, slot, ep, a, i, site):
    """``a[i]``'s index, recorded (a 1-d element access; a row of a wider array is not one)."""
    return atv1(rec, st, slot, ep, a, 0, i, site)


@cuda.jit(device=True)
def at2(rec, st, slot, ep, a, i, j, site):
    return atv2(rec, st, slot, ep, a, 0, i, j, site)


@cuda.jit(device=True)
def at3(rec, st, slot, ep, a, i, j, m, site):
    return atv3(rec, st, slot, ep, a, 0, i, j, m, site)


@cuda.jit(device=True)
def at4(rec, st, slot, ep, a, i, j, m, n, site):
    return atv4(rec, st, slot, ep, a, 0, i, j, m, n, site)


AT = {1: at1, 2: at2, 3: at3, 4: at4}  # the recording index function for an access of n indices


# ``atcN``: the same access only counted, in ``n`` (64 bits: a plain add per access, which the compiler
# sums over an unrolled body or a loop). A warp whose lanes are all past ``cap`` runs its loops' next
# iterations through these (``room``): the kernel's own code plus a count.


@cuda.jit(device=True)
def atc1(n, a, i):
    if a.ndim == 1:
        n[0] += uint64(1)
    return i


@cuda.jit(device=True)
def atc2(n, a, i, j):
    if a.ndim == 2:
        n[0] += uint64(1)
    return i, j


@cuda.jit(device=True)
def atc3(n, a, i, j, m):
    if a.ndim == 3:
        n[0] += uint64(1)
    return i, j, m


@cuda.jit(device=True)
def atc4(n, a, i, j, m, n4):
    if a.ndim == 4:
        n[0] += uint64(1)
    return i, j, m, n4


ATC = {1: atc1, 2: atc2, 3: atc3, 4: atc4}


# Views the kernel makes (``qh = q[b, h]``): ``view_offN`` is the view's byte offset in its array (0 for
# an element: then there is no view), and ``atvN`` records an element of the view as that array's.


@cuda.jit(device=True)
def view_off1(a, i):
    return _stride_off1(a, i) if a.ndim > 1 else 0


@cuda.jit(device=True)
def view_off2(a, i, j):
    return _stride_off2(a, i, j) if a.ndim > 2 else 0


@cuda.jit(device=True)
def view_off3(a, i, j, m):
    return _stride_off3(a, i, j, m) if a.ndim > 3 else 0


ATV = {1: atv1, 2: atv2, 3: atv3}  # through a view (a view has fewer dimensions than its array: 3 at most)
VIEW_OFF = {1: view_off1, 2: view_off2, 3: view_off3}
