"""A capture's accesses recorded on the GPU: the access pass's buffers added to a Job, decoded after.

Both front ends (worker.prepare_builtin, source_capture.prepare_source) call ``attach`` when a GPU
capture asks for accesses: the traced build already has the access pass (engine/instrument_accesses.py)
and takes its four buffers among the instrumenter's added ones; ``attach`` plans which warps record
(analysis/gpu_accesses.plan: the request's ``sample_blocks``, else the first, middle and last block),
adds the zeroed buffers to the Job and sets ``job.finish_accesses``: the read-back buffers -> the
recorder's buffers, which ``analysis/memory.build`` turns into the tables every page reads. Every
launch starts its lanes' counts from 0 itself (kernels/access_probes.py ``start``), so a timed
repeat records as much as the recorded launch did: the cost is measured, not skipped.
"""

from __future__ import annotations

from visualizer.analysis import gpu_accesses
from visualizer.engine import instrument_accesses as ia

# the instrumenter's parameter names -> the Job's buffer names (the front ends lay the traced build's
# arguments out the same way; tools/access_cost.py launches by hand with it)
BUFFER_OF = {"_vz_trace": "trace", "_vz_active": "active", "_vz_delay": "delay",
             **{n: n for n in ia.AccessPass.params}}  # fmt: skip


def sample_blocks(request: dict, grid) -> list[int] | None:
    """The request's ``sample_blocks`` (a list of linear block numbers or "0,5,9"), checked; None: default."""
    raw = request.get("sample_blocks")
    if raw is None or raw == "" or raw == []:
        return None
    text = ",".join(str(b) for b in raw) if isinstance(raw, (list, tuple)) else str(raw)
    return gpu_accesses.parse_blocks(text, grid)


def wanted(backend, request: dict) -> bool:
    """Whether this capture's accesses come from the access pass: on a GPU always; on the simulator
    only when asked (``access_engine="pass"``: how CI runs the GPU path), else its exact recorder."""
    if not request.get("accesses"):
        return False
    return not backend.simulator or request.get("access_engine") == "pass"


def attach(job, backend, request: dict, info: dict, host_arrays: dict, namespace: dict) -> None:
    """Add the access buffers to ``job`` and decode them after the launch (module docstring).

    ``info``: the access pass's info;
    ``host_arrays``: kernel parameter name -> host array (the global arrays' dtypes and shapes);
    ``namespace``: where shared arrays' shapes are looked up."""
    from visualizer.specs.catalog import LaunchError

    try:
        blocks = sample_blocks(request, job.grid)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    plan = gpu_accesses.plan(job.grid, job.block, blocks)
    job.buffers.update(gpu_accesses.host_buffers(plan))
    arrays = ia.resolve_arrays(info, host_arrays, namespace)

    def finish(recorded: dict) -> dict:
        got = {k: recorded.pop(k) for k in ia.AccessPass.params}
        return gpu_accesses.decode(got, plan, info["sites"], arrays, job.grid, job.block)

    job.finish_accesses = finish
