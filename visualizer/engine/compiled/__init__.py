"""The compiled simulator engine: a kernel's Python source compiled for the CPU (Numba ``@njit``), one
block's threads run in loops between barriers (MCUDA/POCL work-item loops), with fastsim as the
fallback for whatever it does not take (``NotCompiled``). See engine.py."""

from visualizer.engine.compiled.engine import LaunchReport, compile_kernel, launch
from visualizer.engine.compiled.translate import NotCompiled

__all__ = ["LaunchReport", "NotCompiled", "compile_kernel", "launch"]
