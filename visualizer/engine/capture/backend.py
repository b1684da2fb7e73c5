"""The backend a capture runs on, behind one small interface: the GPU or the simulator.

Its own module (not the worker's) so that the capture sequence, the front ends and the timing code can
name it without importing the worker process that dispatches to them (that made an import circle).
A third backend (the simulator compiled for the CPU, engine/compiled/) is one more ``name``: the
capture sequence asks only ``simulator`` (no device clock, no warm-up) and the methods below.
"""

from __future__ import annotations

import os
import time


class Backend:
    """What differs between the GPU and the simulator, behind one small interface."""

    def __init__(self, name: str, progress=None, announce_blocks=None):
        from numba import cuda

        self.name = name
        self.cuda = cuda
        self.progress = progress  # progress(n): n more blocks finished (the simulator counts them)
        self.announce_blocks = announce_blocks  # announce_blocks(n): one launch has n blocks
        self.simulator = name == "sim"
        # the Python simulator (engine/sim/): the lenses' listeners hear its launches; a backend that
        # runs the instrumented build itself (a GPU, the compiled simulator) takes the lenses' passes
        self.listens = name == "sim"
        if self.simulator:
            from visualizer.engine.sim import fastsim

            # greenlet threads, per-block shared memory; a hung kernel stops with KernelHangError,
            # and a worker stuck past that exits so the runner starts a fresh one
            fastsim.install(exit_if_stuck=True)
            fastsim.on_block_done(self._block_done)
            from visualizer.engine.compiled import simulator as compiled

            compiled.on_blocks_done(self._blocks_done)  # the compiled engine's launches count too
        elif not cuda.is_available():
            raise RuntimeError("no CUDA GPU is available to numba-cuda on this machine")

    # --- device description ---------------------------------------------------------------
    def device_info(self) -> dict:
        if self.simulator:
            return {
                "backend": "sim",
                "device_name": "CUDA simulator on CPU",
                "compute_capability": None,
                "models": "NVIDIA H200 (132 SMs)",
                "num_sms": 132,
                "max_threads_per_block": 1024,
                "smem_per_block": 48 * 1024,
                "smem_per_block_optin": 232448,
                "max_threads_per_sm": 2048,
                "max_blocks_per_sm": 32,
                "regs_per_sm": 65536,
                "smem_per_sm": 233472,
            }
        dev = self.cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        cc = dev.compute_capability
        info = {
            "backend": "gpu",
            "device_name": name,
            "compute_capability": f"{cc[0]}.{cc[1]}",
            "num_sms": dev.MULTIPROCESSOR_COUNT,
            "max_threads_per_block": dev.MAX_THREADS_PER_BLOCK,
            "smem_per_block": dev.MAX_SHARED_MEMORY_PER_BLOCK,
            "smem_per_block_optin": dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "max_threads_per_sm": dev.MAX_THREADS_PER_MULTIPROCESSOR,
            "max_blocks_per_sm": dev.MAX_BLOCKS_PER_MULTIPROCESSOR,
            "regs_per_sm": dev.MAX_REGISTERS_PER_MULTIPROCESSOR,
            "smem_per_sm": dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            "clock_khz": dev.CLOCK_RATE,
            "memory_clock_khz": dev.MEMORY_CLOCK_RATE,
            "memory_bus_bits": dev.GLOBAL_MEMORY_BUS_WIDTH,
        }
        # which GPU ran it (launch.json): the one this worker is pinned to, by the runner's
        # CUDA_VISIBLE_DEVICES entry (an index or a uuid) and by the device's own uuid
        info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        info["device_id"] = int(dev.id)
        try:
            info["uuid"] = str(dev.uuid)
        except Exception:
            info["uuid"] = None
        try:  # global memory, for the runner's admission check (catalog.check_cost)
            info["memory_bytes"] = int(self.cuda.current_context().get_memory_info()[1])
        except Exception:
            pass
        # DRAM peak: 2 transfers per clock (DDR) x bus width in bytes
        info["peak_bandwidth_gbs"] = 2 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8 / 1e9
        return info

    def _block_done(self) -> None:
        """A simulated block finished: counted, so a long run can show progress."""
        if self.progress is not None:
            self.progress(1)

    def _blocks_done(self, n: int) -> None:
        if self.progress is not None:
            self.progress(n)

    # --- timing primitives -------------------------------------------------------------------
    def sync(self) -> None:
        if not self.simulator:
            self.cuda.synchronize()

    def timed(self, fn) -> tuple[object, float]:
        """Run fn and return (its result, wall ns), synchronised with the device."""
        self.sync()
        t = time.perf_counter_ns()
        out = fn()
        self.sync()
        return out, time.perf_counter_ns() - t
