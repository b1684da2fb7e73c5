"""The memory-access lens: every global and shared load, store and atomic of the kernel.

* **simulator**: its listener is the access recorder (engine/access_record.py): every access of every
  thread, exact, with no change to the kernel;
* **GPU** (and the simulator when asked, ``access_engine="pass"``: how CI runs the GPU path): the
  kernel records its own accesses through the access pass (engine/instrument_accesses.py) in sampled
  warps (analysis/gpu_accesses.plan: the request's ``sample_blocks``, else the first, middle and last
  block); its four buffers come back and are decoded into the recorder's form. Every launch starts its
  lanes' counts from 0 itself (kernels/access_probes.py ``start``), so a timed repeat records as much
  as the recorded launch did: the cost is measured, not skipped.

Either way ``reply["accesses"]`` is what analysis/memory.build turns into the tables every page reads.
"""

from __future__ import annotations

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
        "visualizer/engine/access_record.py); use a smaller launch"
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
    from visualizer.engine.instrument_accesses import AccessPass, namespace_device_functions, visitor_pass

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

    def __init__(self, ctx):
        super().__init__(ctx)
        self.by_pass = not ctx.backend.simulator or self.options_given.get("access_engine") == "pass"
        self.recorder = None
        self.plan = None
        self.arrays = None
        self.kernel = None

    @classmethod
    def reply_bytes(cls, simulator, blocks, threads_per_block, threads):
        from visualizer.engine.access_record import COLUMNS, RECORD_LIMIT

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
        from visualizer.engine import instrument_accesses as ia
        from visualizer.specs.catalog import LaunchError

        try:
            blocks = sample_blocks(self.options_given.get("sample_blocks"), self.ctx.grid)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        self.plan = gpu_accesses.plan(self.ctx.grid, self.ctx.block, blocks)
        self.arrays = ia.resolve_arrays(infos["accesses"], kernel.host_arrays, kernel.namespace)

    def buffers(self):
        from visualizer.analysis import gpu_accesses

        return gpu_accesses.host_buffers(self.plan) if self.by_pass else {}

    # --- the simulator: the recorder is a listener --------------------------------------------
    def listener(self, arrays, excluded):
        if self.by_pass:
            return None
        from visualizer.engine import access_record as record
        from visualizer.specs.catalog import LaunchError

        estimate = self.kernel.estimates.get("accesses")
        if callable(estimate) and estimate(self.kernel.values) > record.RECORD_LIMIT:
            raise LaunchError(
                f"about {int(estimate(self.kernel.values)):,} memory accesses: "
                + limit_message(record.RECORD_LIMIT)
            )
        self.recorder = record.Recorder.for_launch(arrays, excluded, self.ctx.grid, self.ctx.block)
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
        from visualizer.engine.instrument_accesses import AccessPass

        got = {k: reply["buffers"].pop(k) for k in AccessPass.params}
        reply["accesses"] = gpu_accesses.decode(
            got, self.plan, self.info["accesses"]["sites"], self.arrays, self.ctx.grid, self.ctx.block
        )
