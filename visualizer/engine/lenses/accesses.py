"""The memory-access lens: every global and shared load, store and atomic of the kernel.

* **simulator**: its listener is the access recorder (engine/sim/access_record.py): every access of every
  thread, exact, with no change to the kernel;
* **compiled simulator** (engine/compiled/): the access pass, as on a GPU, with every warp recording
  while the launch fits the buffers (``compiled_plan``; the first, middle and last block past that) and
  two probes of their own (``compiled_probes``: no ``activemask`` there); the lanes' records are formed
  into requests by the recorder's rule (``recorder_masks``), so the tables equal the recorder's;
* **GPU** (and the simulator when asked, ``access_engine="pass"``: how CI runs the GPU path): the
  kernel records its own accesses through the access pass (engine/instrument/accesses.py) in sampled
  warps (analysis/gpu_accesses.plan: the request's ``sample_blocks``, else the first, middle and last
  block); its four buffers come back and are decoded into the recorder's form. Every launch starts its
  lanes' counts from 0 itself (kernels/access_probes.py ``start``), so a timed repeat records as much
  as the recorded launch did: the cost is measured, not skipped.

Either way ``reply["accesses"]`` is what analysis/memory.build turns into the tables every page reads.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types

import numpy as np

from visualizer.analysis import gpu_accesses
from visualizer.engine.instrument import accesses as ia
from visualizer.engine.lenses import Lens, Option, register

# the instrumenter's parameter names -> the buffer names of a hand-made launch (devtools/access_cost.py)
BUFFER_OF = {
    "_vz_trace": "trace",
    "_vz_active": "active",
    **{n: n for n in ("_vz_acc", "_vz_acc_cnt", "_vz_acc_sel")},
}


def limit_message(limit: int) -> str:
    return (
        f"too many memory accesses to record (limit {limit:,} accesses, RECORD_LIMIT in "
        "visualizer/engine/sim/access_record.py); use a smaller launch, or record sampled warps as a GPU "
        "does (--access-engine pass)"
    )


def sample_blocks(raw, grid) -> list[int] | None:
    """``sample_blocks`` (a list of linear block numbers or "0,5,9"), checked; None: the default."""
    from visualizer.analysis import gpu_accesses

    if raw is None or raw == "" or raw == []:
        return None
    text = ",".join(str(b) for b in raw) if isinstance(raw, (list, tuple)) else str(raw)
    return gpu_accesses.parse_blocks(text, grid)


def access_pass(kernel):
    """The access pass for this kernel: a visitor's module's constants and device functions, or a
    built-in function's closure (its tile sizes: constant loops are unrolled) and the device functions
    it names (flash_attention's store_tile); a kernel's probe-buffer parameters are not its data."""
    from visualizer.engine.instrument.accesses import AccessPass, namespace_device_functions, visitor_pass

    if kernel.tree is not None:
        return visitor_pass(kernel.tree)
    if not kernel.namespace:
        return AccessPass()  # a module that does not parse: loading it says what is wrong
    return AccessPass(
        exclude=kernel.probe_params,
        constants=kernel.namespace,
        device_functions=namespace_device_functions(kernel.namespace),
    )


@register
class Accesses(Lens):
    name = "accesses"
    reply_part = "accesses"
    help = (
        "record every load/store: adds accesses/requests/hazards.parquet (simulator: every thread; "
        "GPU: the kernel records its own accesses in sampled warps, see --sample-blocks)"
    )
    options = (
        Option(
            "sample_blocks",
            "with --accesses on a GPU: the linear block numbers whose warps record (default: the first, "
            "middle and last block)",
        ),
        Option("access_engine", "with --accesses on the simulator: 'pass' records as a GPU does"),
    )

    @classmethod
    def problem(cls, given, backend_name):
        if given.get("sample_blocks") is not None and not given.get("accesses"):
            return "--sample-blocks chooses which warps record accesses: add --accesses"
        if given.get("access_engine") not in (None, "pass"):
            return "--access-engine takes only 'pass' (the simulator records as a GPU does)"
        return None

    def __init__(self, ctx):
        super().__init__(ctx)
        # the recorder listens to the Python simulator; every other backend runs the access pass
        # on the compiled engine (planned: a kernel it can't take runs this build on fastsim, which
        # gives the same tables)
        self.compiled = ctx.backend.listens and ctx.request.planned_sim_engine()[0] == "compiled"
        self.pass_asked = self.options_given.get("access_engine") == "pass"  # sampled warps, as on a GPU
        self.by_pass = not ctx.backend.listens or self.pass_asked
        self.by_pass = self.by_pass or self.compiled
        if self.compiled:
            compiled_probes()
        self.recorder = None
        self.plan = None
        self.arrays = None
        self.kernel = None

    @classmethod
    def reply_bytes(cls, simulator, blocks, threads_per_block, threads):
        from visualizer.engine.sim.access_record import COLUMNS, RECORD_LIMIT

        return RECORD_LIMIT * len(COLUMNS) * 8

    # --- the instrumenter (GPU): the access pass and its buffers ------------------------------
    def passes(self, kernel):
        if not self.by_pass:
            return ()
        made = access_pass(kernel)
        if self.compiled:  # the compiled engine's build: no barrier inside a condition (AccessPass)
            made.block_rooms = False
            made.key = (*made.key[:-1], False)
        return (made,)

    def built(self, infos, kernel):
        super().built(infos, kernel)
        self.kernel = kernel
        if not self.by_pass:
            return
        from visualizer.analysis import gpu_accesses
        from visualizer.engine.instrument import accesses as ia
        from visualizer.specs.catalog import LaunchError

        try:
            blocks = sample_blocks(self.options_given.get("sample_blocks"), self.ctx.launch.grid)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        if self.compiled and blocks is None and not self.pass_asked:
            self.plan = compiled_plan(self.ctx.launch.grid, self.ctx.launch.block, kernel)
        else:
            self.plan = gpu_accesses.plan(self.ctx.launch.grid, self.ctx.launch.block, blocks)
        self.arrays = ia.resolve_arrays(infos["accesses"], kernel.host_arrays, kernel.namespace)

    def buffers(self):
        from visualizer.analysis import gpu_accesses

        return gpu_accesses.host_buffers(self.plan) if self.by_pass else {}

    # --- the simulator: the recorder is a listener --------------------------------------------
    def listener(self, arrays, excluded):
        if self.by_pass:
            return None
        from visualizer.engine.sim import access_record as record
        from visualizer.specs.catalog import LaunchError

        estimate = self.kernel.estimates.get("accesses")
        if callable(estimate) and estimate(self.kernel.values) > record.RECORD_LIMIT:
            raise LaunchError(
                f"about {int(estimate(self.kernel.values)):,} memory accesses: "
                + limit_message(record.RECORD_LIMIT)
            )
        self.recorder = record.Recorder.for_launch(
            arrays, excluded, self.ctx.launch.grid, self.ctx.launch.block
        )
        return self.recorder

    def error(self, exc):
        from visualizer.specs.catalog import LaunchError

        if self.recorder is not None and self.recorder.overflow:
            return LaunchError(limit_message(self.recorder.limit))
        return None

    # --- the reply ----------------------------------------------------------------------------
    def reply(self, reply, launch):
        if self.recorder is not None:
            reply["accesses"] = self.recorder.buffers()
            return
        from visualizer.analysis import gpu_accesses
        from visualizer.engine.instrument.accesses import AccessPass

        got = {k: reply["buffers"].pop(k) for k in AccessPass.params}
        if self.compiled:
            got["_vz_acc"] = recorder_masks(got["_vz_acc"], got["_vz_acc_cnt"])
        reply["accesses"] = gpu_accesses.decode(
            got,
            self.plan,
            self.info["accesses"]["sites"],
            self.arrays,
            self.ctx.launch.grid,
            self.ctx.launch.block,
            lockstep=not self.ctx.backend.simulator,  # a simulator runs lanes one after another
        )
        if self.compiled and not self.pass_asked:
            simulated(reply["accesses"], self.plan)
        elif self.ctx.backend.simulator:  # sampled warps as a GPU does (asked, or fastsim ran the pass)
            from visualizer.analysis.provenance import SIMULATED_SAMPLED

            reply["accesses"]["source"] = SIMULATED_SAMPLED
            reply["accesses"]["sample"]["on"] = "simulator"


# --- the compiled simulator's hook ----------------------------------------------------------------


def compiled_plan(grid, block, kernel) -> dict:
    """The warps that record on the compiled engine: every warp of every block while each lane has room
    for its accesses (the spec's estimate, where it has one) and for at least ``MIN_LANE_RECORDS``, in
    ``DEFAULT_RECORDS`` lane accesses in all (the recorder's limit); else the GPU's default sample."""
    blocks = gpu_accesses.linear_blocks(grid)
    p = gpu_accesses.plan(grid, block, list(range(blocks)))
    threads = blocks * int(block[0]) * int(block[1]) * int(block[2])
    estimate = kernel.estimates.get("accesses") if kernel is not None else None
    per_lane = estimate(kernel.values) / max(threads, 1) if callable(estimate) else 0
    if p["cap"] >= max(MIN_LANE_RECORDS, per_lane):
        return p
    return gpu_accesses.plan(grid, block, None)


MIN_LANE_RECORDS = 64


def recorder_masks(rec: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """The request words' masks by the simulator recorder's rule (engine/sim/access_record.py): a warp's
    request at a site is the lanes' j-th access there (in one barrier epoch), whatever ran in between.
    The compiled engine runs a warp's lanes one after another, so its probe writes each lane's own bit
    (``compiled_probes``); here each record gets the lanes of its group. A lane that ran out of room is
    put in every group it is not in: such a request may lack it, so the decode leaves it out (and says
    so) rather than show it with fewer lanes than it had."""
    from visualizer.analysis import lane_streams as ls

    cnt = np.asarray(cnt, np.int64)
    slots = len(cnt)
    if slots == 0:
        return rec
    rows = len(rec) // (64 * slots)
    cap = rows - 1
    out = rec.reshape(slots, rows, 64).copy()
    n = np.minimum(cnt, cap)
    for s in np.flatnonzero(n.sum(axis=1)):
        ks, lanes = np.nonzero(np.arange(cap)[:, None] < n[s][None, :])
        if not len(ks):
            continue
        site = out[s, ks, lanes] >> ls.SITE_SHIFT
        epoch = out[s, ks, lanes + ls.LANES] >> 32
        # j: the record's rank among its lane's records with the same (site, epoch), in its order
        order = np.lexsort((ks, epoch, site, lanes))
        key = np.stack([lanes[order], site[order], epoch[order]])
        new = np.r_[True, (key[:, 1:] != key[:, :-1]).any(axis=0)]
        pos = np.arange(len(order))
        j = np.empty(len(order), np.int64)
        j[order] = pos - np.maximum.accumulate(np.where(new, pos, 0))
        group = np.unique(np.stack([site, epoch, j]), axis=1, return_inverse=True)[1].reshape(-1)
        mask = np.zeros(group.max() + 1, np.int64)
        np.bitwise_or.at(mask, group, np.int64(1) << lanes)
        ran_out = int(sum(1 << int(x) for x in np.flatnonzero(cnt[s] > cap)))
        mask |= ran_out
        out[s, ks, lanes + ls.LANES] = (epoch << 32) | mask[group]
    return out.reshape(-1)


def simulated(accesses: dict, plan: dict) -> None:
    """The decoded recording as the simulator's: its label, and the sample only where warps were
    sampled (every warp recorded: the recorder's tables, nothing left out)."""
    from visualizer.analysis.memory import SOURCE

    sample = accesses.get("sample")
    whole = (
        sample is not None
        and len(plan["blocks"]) == len(plan["sel"])
        and not (sample["unrecorded_accesses"] or sample["inconsistent_warps"])
    )
    if whole:
        del accesses["sample"]
        accesses["source"] = SOURCE
    else:
        from visualizer.analysis.provenance import SIMULATED_SAMPLED

        accesses["source"] = SIMULATED_SAMPLED
        if sample is not None:
            sample["on"] = "simulator"
            sample["where"] = "the simulator (compiled engine)"


_COMPILED_PROBES: dict = {}


def compiled_probes() -> None:
    """The compiled engine's ``start`` and ``note`` of kernels/access_probes.py (registered with it once):
    the same words, with no ``activemask`` (the engine runs a warp's lanes one after another): the lanes
    the warp has from the block's size, and each lane's own bit as its request's mask
    (``recorder_masks`` forms the requests)."""
    if _COMPILED_PROBES:
        return
    from numba import int64, njit, uint32, uint64

    from visualizer.engine.compiled.translate import substitute
    from visualizer.kernels import access_probes as probes

    @njit(cache=False, nogil=True)
    def start(ids, rec, cnt, st, n, slot):
        lane = ids[0] % 32
        rows = uint32(rec.shape[0]) // uint32(cnt.shape[0] * 64)
        n[0] = uint64(0)
        st[0] = uint32(0)
        st[1] = rows - uint32(1)
        st[2] = uint32(max(slot, 0)) * rows * uint32(64) + uint32(lane)
        if slot >= 0:
            have = min(32, ids[7] * ids[8] * ids[9] - (ids[0] - lane))  # the lanes this warp has
            rec[st[2] - uint32(lane) + st[1] * uint32(64)] = ~((int64(1) << int64(have)) - int64(1))

    @njit(cache=False, nogil=True)
    def note(ids, rec, st, ep, k, word):
        i = st[2] + k * uint32(64)
        rec[i] = word
        rec[i + uint32(32)] = (int64(ep) << int64(32)) | (int64(1) << int64(ids[0] % 32))

    substitute(probes.start, "access_start", start)
    substitute(probes.note, "access_note", note)
    _COMPILED_PROBES.update(start=start, note=note)


# --- by hand: the access pass's build of one kernel launched on its own -----------------------------
# Record sampled warps' accesses of one launch with the access pass, on either backend (the cross-check,
# devtools/crosscheck_fresh.py, and the tests): on the simulator it runs the very same build
# (engine/sim/fastsim.py gives activemask and shfl_sync warp semantics), which is how tests check the GPU
# recording against the simulator recorder. ``record_source`` takes a module's source and a kernel name.


def recording_build(module: types.ModuleType, kernel: str, exclude=()):
    """(``<kernel>__traced`` with the access pass, the pass's info, its module's namespace).

    The module's own file is parsed, so the traced copy keeps its line numbers; it is compiled in a
    copy of the module's globals (its constants and device functions) plus the pass's functions."""
    source = inspect.getsource(module)
    filename = inspect.getsourcefile(module) or f"<{module.__name__}>"
    tree, info = ia.standalone(ast.parse(source, filename), kernel, exclude)
    traced_name = kernel + "__traced"
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and (n.name == traced_name or "__vz_rec" in n.name)]  # the kernel and its device functions' recording copies  # fmt: skip
    only = ast.Module(body=defs, type_ignores=[])
    ns = dict(vars(module))
    ns.update(AccessGlobals.get())
    exec(compile(only, filename, "exec"), ns)  # our own kernel modules' source (never a visitor's here)
    return ns[traced_name], info, ns


class AccessGlobals:
    _cache: dict | None = None

    @classmethod
    def get(cls) -> dict:
        if cls._cache is None:
            cls._cache = ia.AccessPass().globals()
        return cls._cache


def record_launch(cuda, traced, info, namespace, grid, block, arrays: dict, blocks=None,
                  records: int = gpu_accesses.DEFAULT_RECORDS) -> tuple[dict, dict]:  # fmt: skip
    """Launch ``traced`` on ``arrays`` (the kernel's parameters in order -> host arrays), recording
    the sampled warps. Returns (the recorder's buffers, the arrays after the launch)."""
    p = gpu_accesses.plan(grid, block, blocks, records)
    host = gpu_accesses.host_buffers(p)
    dev = {k: cuda.to_device(v) for k, v in arrays.items()}
    bufs = {k: cuda.to_device(v) for k, v in host.items()}
    traced[tuple(grid), tuple(block)](*dev.values(), *[bufs[k] for k in ia.AccessPass.params])
    cuda.synchronize()
    got = {k: v.copy_to_host() for k, v in bufs.items()}
    after = {k: v.copy_to_host() for k, v in dev.items()}
    resolved = ia.resolve_arrays(info, arrays, namespace)
    return gpu_accesses.decode(got, p, info["sites"], resolved, grid, block), after


def module_of(name: str) -> types.ModuleType:
    __import__(name)
    return sys.modules[name]


def zeros_for(outputs: dict) -> dict[str, np.ndarray]:
    return {k: np.zeros(shape, dtype) for k, (shape, dtype) in outputs.items()}


def backend_cuda(engine: str):
    """numba.cuda for ``engine`` ("sim": with fastsim installed, whose warp intrinsics the access
    probes need; "gpu"), chosen before numba is first imported in this process."""
    import os

    if engine == "sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from visualizer.engine.sim import fastsim

        fastsim.install()
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    from numba import cuda

    return cuda


def launch_plain(module: types.ModuleType, kernel: str, grid, block, arrays: dict) -> dict:
    """The module's own kernel launched once on ``arrays`` (the GPU build ncu profiles); the arrays after."""
    from numba import cuda

    dev = {k: cuda.to_device(v) for k, v in arrays.items()}
    getattr(module, kernel)[tuple(grid), tuple(block)](*dev.values())
    cuda.synchronize()
    return {k: v.copy_to_host() for k, v in dev.items()}


def record_with_simulator(module: types.ModuleType, kernel: str, grid, block, arrays: dict) -> dict:
    """The simulator recorder's buffers (engine/sim/access_record.py) of the module's own kernel on ``arrays``."""
    from numba import cuda

    from visualizer.engine.sim import access_record

    dev = {k: cuda.to_device(v.copy()) for k, v in arrays.items()}
    r = access_record.start(dev, set(), grid, block)
    try:
        getattr(module, kernel)[tuple(grid), tuple(block)](*dev.values())
    finally:
        access_record.stop()
    return r.buffers()
