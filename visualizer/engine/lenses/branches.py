"""The SIMT lens: which lanes of each warp took each branch, and (GPU) how long warps waited at
each barrier. Two lenses, asked for apart, so that branch probes inside a loop do not lengthen the
work timed between barriers. Their passes are engine/instrument/branches.py's; their tables
analysis/branches.py's (launch.json "lens" keeps the passes' site tables)."""

from __future__ import annotations

from visualizer.engine.lenses import Lens, register


class _Simt(Lens):
    barriers = False

    def passes(self, kernel):
        from visualizer.engine.instrument.branches import BarrierPass, BranchPass

        sim = self.ctx.backend.simulator
        return (BarrierPass(),) if self.barriers else (BranchPass(probe_constant_loops=sim),)

    def buffers(self):
        from visualizer.engine.instrument.branches import branch_buffers

        ctx = self.ctx
        return branch_buffers(
            ctx.backend.simulator, ctx.launch.blocks, ctx.launch.threads_per_block, barriers=self.barriers
        )

    @classmethod
    def reply_bytes(cls, simulator, blocks, threads_per_block, threads):
        from visualizer.engine.instrument.branches import branch_buffers

        bufs = branch_buffers(simulator, blocks, threads_per_block, barriers=cls.barriers)
        return sum(a.nbytes for a in bufs.values())

    reply_part = "lens"

    def reply(self, reply, launch):
        from visualizer.engine.instrument.branches import trim_logs

        # the log travels with the records made, not the room
        reply["buffers"].update(trim_logs({k: reply["buffers"][k] for k in self.buffers_made}))
        launch.setdefault("lens", {}).update(self.info)

    @property
    def buffers_made(self):
        from visualizer.engine.instrument.branches import BAR_COUNT, BAR_LOG, BRANCH_COUNT, BRANCH_LOG

        return (BAR_LOG, BAR_COUNT) if self.barriers else (BRANCH_LOG, BRANCH_COUNT)


@register
class Branches(_Simt):
    name = "branches"
    help = "the SIMT lens: which lanes of each warp took each branch (branches.parquet, launch.json branches)"


@register
class Barriers(_Simt):
    name = "barriers"
    help = (
        "GPU only: %%globaltimer at each warp's arrival at and release from every syncthreads "
        "(barriers.parquet, launch.json barriers)"
    )
    backends = frozenset({"gpu"})  # the simulator has no clock
    barriers = True

    @classmethod
    def problem(cls, given, backend_name):
        if given.get("barriers") and backend_name == "sim":
            return "--barriers reads the GPU's clock: the simulator has none (use --backend gpu)"
        return None
