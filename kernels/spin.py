"""Device code for the GPU timer (visualizer/engine/timing/gpu_timing.py), not a lesson: a kernel that keeps the GPU
busy for a given number of nanoseconds while the host queues the launches to be timed behind it."""

from numba import cuda, int64, uint64

from visualizer.kernels.probes import globaltimer


@cuda.jit
def spin(ns, stamps):
    """One thread reads %globaltimer until ``ns`` (a uint64) nanoseconds have passed; it records when
    it started and stopped in ``stamps`` (int64, 2), so the host can check that it really waited."""
    if cuda.grid(1) == 0:
        t0 = uint64(globaltimer())
        t = t0
        while t - t0 < ns:
            t = uint64(globaltimer())
        stamps[0] = int64(t0)
        stamps[1] = int64(t)
