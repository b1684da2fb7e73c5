"""The GPUs the modelled times use: host link and device-memory bandwidths, host latencies.

One place for these numbers: the memory flow, the CPU-vs-GPU lesson and Compare's modelled time all
read them here, so the same H200 is the same H200 on every page.
"""

from __future__ import annotations

# Host-side costs measured on the project's H200 machine (docs/hostlink_h200.json, 2026-12-01), each
# step as the worker makes it: Numba's DeviceNDArray.copy_to_device / copy_to_host of a pageable numpy
# array, cuda.device_array, a kernel launch; each synchronised, median of 50. A copy costs its
# latency (the 4 kB copy's whole time: Numba's call, the driver, the PCIe round trip) plus its bytes
# at the bandwidth of the 1 MB -> 16 MB slope. Pinned host memory reached 54 GB/s of PCIe 5.0 x16's
# nominal 64 GB/s; the worker's pageable arrays go through a staging buffer, hence 11-13 GB/s.
H200_HOST = {
    "launch_ns": 23_040.0,  # empty kernel[1, 1] launch + synchronise
    "alloc_ns": 44_260.0,  # cuda.device_array of 4 kB, per array
    "h2d_latency_ns": 120_990.0,
    "h2d_gbs": 13.2,
    "d2h_latency_ns": 37_430.0,
    "d2h_gbs": 10.9,
    "pinned_gbs": 54.0,
}
H200_HBM_GBS = 4247.0  # device-to-device copy measured on the H200 (docs/benchmarks.md)
H200_HBM_NOMINAL_GBS = 4800.0  # the data sheet's peak, never reached by a copy

# The GPUs the modelled flow offers. The H200's host link and memory are as measured here (``mem_gbs``
# is the measured copy, the one figure every model uses); the others' are nominal peaks (vendor data
# sheets: PCIe x16, one direction; device memory), so their copies and kernels are lower bounds.
MODEL_GPUS = {
    "H200": {"pcie_gbs": 64.0, "link": "PCIe 5.0 x16", "mem_gbs": H200_HBM_GBS, "mem": "HBM3e",
             "nominal_mem_gbs": H200_HBM_NOMINAL_GBS, "measured": True},
    "A100": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 2039.0, "mem": "HBM2e"},
    "RTX 4090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 1008.0, "mem": "GDDR6X"},
    "RTX 3090": {"pcie_gbs": 32.0, "link": "PCIe 4.0 x16", "mem_gbs": 936.0, "mem": "GDDR6X"},
    "T4": {"pcie_gbs": 16.0, "link": "PCIe 3.0 x16", "mem_gbs": 320.0, "mem": "GDDR6"},
}  # fmt: skip
SECTOR_BYTES = 32  # a global-memory sector: what the memory system moves per request's touched segment
