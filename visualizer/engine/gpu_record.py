"""Record sampled warps' accesses of one kernel launch with the access pass, on either backend.

The access pass (engine/instrument_accesses.py) rewrites the kernel; this module compiles that
build, allocates the access buffers for the chosen warps (analysis/gpu_accesses.plan), launches it
and decodes what the warps wrote into the recorder's buffers (analysis/gpu_accesses.decode). On
the simulator it runs the very same build (engine/fastsim.py gives activemask and shfl_sync warp
semantics), which is how tests check the GPU recording against the simulator recorder.

``record_source`` serves the cross-check and the tests (a module's source and a kernel name); the
capture front ends add the pass to the instrumenter's others.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types

import numpy as np

from visualizer.analysis import gpu_accesses
from visualizer.engine import instrument_accesses as ia


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
        from visualizer.engine import fastsim

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
    """The simulator recorder's buffers (engine/access_record.py) of the module's own kernel on ``arrays``."""
    from numba import cuda

    from visualizer.engine import access_record

    dev = {k: cuda.to_device(v.copy()) for k, v in arrays.items()}
    r = access_record.start(dev, set(), grid, block)
    try:
        getattr(module, kernel)[tuple(grid), tuple(block)](*dev.values())
    finally:
        access_record.stop()
    return r.buffers()
