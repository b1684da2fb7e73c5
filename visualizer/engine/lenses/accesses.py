"""The memory-access lens: every global and shared load, store and atomic of the kernel.

* **simulator**: its listener is the access recorder (engine/sim/access_record.py): every access of every
  thread, exact, with no change to the kernel;
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

# the instrumenter's parameter names -> the buffer names of a hand-made launch (tools/access_cost.py)
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
    # not on the compiled simulator engine yet: its recorder listens to fastsim (a capture asking for it
    # runs on fastsim, saying so)
    backends = frozenset({"gpu", "sim"})

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
        self.by_pass = not ctx.backend.listens or self.options_given.get("access_engine") == "pass"
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
        return (access_pass(kernel),) if self.by_pass else ()

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
        reply["accesses"] = gpu_accesses.decode(
            got,
            self.plan,
            self.info["accesses"]["sites"],
            self.arrays,
            self.ctx.launch.grid,
            self.ctx.launch.block,
        )
        if self.ctx.backend.simulator:  # the pass ran on the simulator: simulated, not measured
            from visualizer.analysis.provenance import SIMULATED_SAMPLED

            reply["accesses"]["source"] = SIMULATED_SAMPLED
            reply["accesses"]["sample"]["on"] = "simulator"


# --- by hand: the access pass's build of one kernel launched on its own -----------------------------
# Record sampled warps' accesses of one launch with the access pass, on either backend (the cross-check,
# tools/crosscheck_fresh.py, and the tests): on the simulator it runs the very same build
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
