"""Which lenses a capture asked for, the same way for both front ends.

A lens records something inside the kernel through an instrumenter pass (engine/instrument.py): the
SIMT lens's branches and barriers (instrument_branches.py), accesses the kernel records itself on a
GPU (instrument_accesses.py, gpu_access_job.py), seeded delays that make races show
(instrument_delays.py). ``worker.prepare_builtin`` and ``source_capture.prepare_source`` each build
their kernel their own way, and share everything else here:

1. ``Lenses.of(backend, request, blocks, threads_per_block)`` before building: the passes to build with
   and the lenses' zeroed buffers;
2. ``lenses.buffer_args(added)`` for the traced build's argument layout, from the parameters the
   instrumenter appended after the trace buffers;
3. ``lenses.attach(job, ...)`` once the Job exists: the access buffers and their decoder, the delay
   tables of every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Lenses:
    passes: tuple = ()  # the SIMT lens's passes (their info goes to launch.json "lens")
    buffers: dict = field(default_factory=dict)  # their zeroed buffers, by parameter name
    record_accesses: bool = False  # the kernel records its own accesses (the access pass)
    delays: bool = False  # seeded per-warp delays (with a schedule seed only)
    seed: int | None = None

    @classmethod
    def of(cls, backend, request: dict, blocks: int, threads_per_block: int) -> Lenses:
        from visualizer.engine import gpu_access_job

        out = cls(seed=request.get("schedule_seed"))
        out.delays = bool(request.get("delays")) and out.seed is not None
        if request.get("branches") or request.get("barriers"):
            from visualizer.engine.instrument_branches import lens

            which = (bool(request.get("branches")), bool(request.get("barriers")))
            out.passes, out.buffers = lens(backend.simulator, blocks, threads_per_block, *which)
        out.record_accesses = gpu_access_job.wanted(backend, request)
        return out

    def build_passes(self, access_pass) -> tuple:
        """Every pass to build the traced kernel with: the lens's, then ``access_pass`` if wanted."""
        return (*self.passes, access_pass) if self.record_accesses else self.passes

    @staticmethod
    def buffer_args(added) -> list[tuple[str, str]]:
        """The traced build's trailing ("buffer", name) arguments for the parameters the instrumenter
        appended after ``_vz_trace, _vz_active`` (the delay table is the Job's "delay" buffer)."""
        from visualizer.engine.gpu_access_job import BUFFER_OF

        return [("buffer", BUFFER_OF.get(name, name)) for name in added]

    def info(self, infos: dict) -> dict:
        """What the lens's passes recorded about the kernel (sites), for launch.json "lens"."""
        return {p.name: infos[p.name] for p in self.passes}

    def attach(self, job, backend, request: dict, infos: dict, host_arrays: dict, namespace: dict) -> None:
        """After the Job is made: the access pass's buffers and decoder, the delays' per-run tables."""
        if self.record_accesses:
            from visualizer.engine import gpu_access_job

            gpu_access_job.attach(job, backend, request, infos["accesses"], host_arrays, namespace)
        if self.delays:
            from visualizer.engine.instrument_delays import use_delays

            use_delays(job, self.seed, infos["delays"]["sites"])
