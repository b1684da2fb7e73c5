"""Many steps of one built-in kernel: a host loop launching it step after step, frames sampled.

The way a simulation runs on a GPU: the host launches the step kernel again and again, swapping the
input and output arrays between launches (``spec.extra["steps"]["swap"]``), and every ``every`` steps
copies the state back and reads a frame from it (``spec.extra["steps"]["frame"]``, numpy in specs/).
On the simulator each launch runs on the compiled engine (engine/compiled/, its blocks in parallel);
on a GPU the arrays stay on the device between launches. No lens, no instrumentation: the captures
of one launch show those.
"""

from __future__ import annotations

import time

import numpy as np

from visualizer.specs.launch import LaunchError

MAX_FRAMES = 200
SIM_MAX_CELL_STEPS = 60_000_000  # threads x steps one request may run on the simulator (400 x 100 x 1500)
STEPS_CPU_S = 600  # the simulator worker's CPU seconds for one such request (2 cores: ~5 min of wall)
STEPS_TIMEOUT_S = 600.0
GPU_MAX_CELL_STEPS = 1 << 40


def plan_steps(kernel: str, params: dict | None, steps: int, every: int, backend: str):
    """(spec, values, launch), or LaunchError with one line: a kernel with no host loop, a bad count."""
    from visualizer.specs.catalog import plan_launch

    spec, values, launch = plan_launch(kernel, params, backend, sim_engine="compiled")
    if "steps" not in spec.extra:
        raise LaunchError(f"{kernel} is one launch, not a step of a simulation (no host loop)")
    if type(steps) is not int or type(every) is not int or steps < 1 or every < 1:
        raise LaunchError("steps and every must be whole numbers of at least 1")
    if steps // every > MAX_FRAMES:
        raise LaunchError(f"{steps} steps sampled every {every} is more than {MAX_FRAMES} frames")
    budget = SIM_MAX_CELL_STEPS if backend == "sim" else GPU_MAX_CELL_STEPS
    if launch.threads * steps > budget:
        raise LaunchError(
            f"{steps} steps of {launch.threads} threads is more than the {backend}'s "
            f"{budget:,} thread-steps per run; take fewer steps or a smaller grid"
        )
    return spec, values, launch


def run_steps(backend, kernel: str, params: dict | None, steps: int, every: int, seed: int = 0) -> dict:
    """Run ``steps`` launches; returns the frames (each field stacked over frames), the step of each
    frame, and the seconds the loop took (wall; launches and the frames' copies and fields)."""
    from visualizer.engine.capture.builtin import kernel_function

    spec, values, launch = plan_steps(kernel, params, steps, every, "sim" if backend.simulator else "gpu")
    fn = kernel_function(spec, values)
    host = spec.make_inputs(values, np.random.default_rng(seed))
    a, b = spec.extra["steps"]["swap"]
    frame_of = spec.extra["steps"]["frame"]
    grid, block = launch.grid, launch.block
    if backend.simulator:
        from visualizer.engine.compiled.engine import repeated_launch

        arrays = host
        compiled = repeated_launch(fn, grid, block, [arrays[n] if n in arrays else launch.scalars[n]
                                                     for n in spec.args])  # fmt: skip

        def step():
            compiled([arrays[n] if n in arrays else launch.scalars[n] for n in spec.args])

        def read():
            return arrays

    else:
        cuda = backend.cuda
        kern = cuda.jit(fn)
        arrays = {k: cuda.to_device(v) for k, v in host.items()}

        def step():
            kern[grid, block](*[arrays[n] if n in arrays else launch.scalars[n] for n in spec.args])

        def read():
            return {k: v.copy_to_host() for k, v in arrays.items()}

    frames: list[dict] = [frame_of(read(), values)]
    at = [0]
    step()  # the first launch compiles: timed apart
    arrays[a], arrays[b] = arrays[b], arrays[a]
    backend.sync()
    t0 = time.perf_counter()
    for s in range(2, steps + 1):
        step()
        arrays[a], arrays[b] = arrays[b], arrays[a]
        if s % every == 0:
            frames.append(frame_of(read(), values))
            at.append(s)
    backend.sync()
    seconds = time.perf_counter() - t0
    out = {"kernel": spec.name, "params": values, "backend": "sim" if backend.simulator else "gpu",
           "steps": steps, "every": every, "at": at, "seconds": seconds, "timed_steps": steps - 1}  # fmt: skip
    for key in frames[0]:
        out[key] = np.stack([np.asarray(f[key]) for f in frames])
    return out
