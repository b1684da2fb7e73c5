"""The CUDA driver's occupancy answer next to the calculator's, for real compiled kernels (GPU only).

Run in a process where numba targets the GPU (NUMBA_ENABLE_CUDASIM unset or 0).
"""

from __future__ import annotations

import numpy as np

from visualizer.analysis.occupancy import occupancy


def _compiled(dispatcher, args, config):
    dispatcher[config](*args)
    (_, kernel), *_ = dispatcher.overloads.items()
    return kernel


def driver_sweep(
    block_sizes=(32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024),
    dynamic_smem=(0, 1024, 4096, 12288, 24576, 40960, 47104),
    max_registers=(None, 24, 32, 40, 64, 96, 128, 255),
) -> list[dict]:
    """Blocks per SM from cuOccupancyMaxActiveBlocksPerMultiprocessor vs the calculator, per case."""
    from numba import cuda

    from visualizer.engine.capture.builds import pair
    from visualizer.kernels.matmul import matmul_tiled_kernel
    from visualizer.kernels.vector_add import vector_add

    dev = cuda.get_current_device()
    cc = dev.compute_capability
    arch = f"sm_{cc[0]}{cc[1]}"
    ctx = cuda.current_context()
    n = 64
    vec = [cuda.to_device(np.zeros(n, np.float32)) for _ in range(3)]
    mat = [cuda.to_device(np.zeros((16, 16), np.float32)) for _ in range(3)]
    trace = cuda.to_device(np.zeros((3, n), np.int64))
    active = cuda.to_device(np.zeros(n, np.uint8))
    tiles = cuda.to_device(np.zeros((1, 1, 2, 5), np.int64))
    kernels = {  # the instrumented build takes trace and active last; the clean one does not
        "vector_add": (vector_add, [*vec, n], (1, 64)),
        "matmul_tiled": (matmul_tiled_kernel(16), [*mat, 16, tiles], (1, (8, 8))),
    }
    rows = []
    for name, (fn, args, config) in kernels.items():
        for maxreg in max_registers:
            opts = {} if maxreg is None else {"max_registers": maxreg}
            for build, disp in zip(("instrumented", "clean"), pair(fn, **opts), strict=True):
                kernel = _compiled(disp, args + ([trace, active] if build == "instrumented" else []), config)
                regs, static = int(kernel.regs_per_thread), int(kernel.shared_mem_per_block)
                cufunc = kernel._codelibrary.get_cufunc()
                for threads in block_sizes:
                    for smem in dynamic_smem:
                        driver = int(ctx.get_active_blocks_per_multiprocessor(cufunc, threads, smem))
                        calc = occupancy(arch, threads, regs, smem_dynamic=smem, smem_static=static)
                        rows.append(
                            {
                                "kernel": name, "build": build, "max_registers": maxreg, "regs": regs,
                                "static_smem": static, "threads": threads, "dynamic_smem": smem,
                                "driver": driver, "calculator": calc.blocks_per_sm, "limiters": calc.limiters,
                            }
                        )  # fmt: skip
    return rows
