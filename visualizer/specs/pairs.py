"""Built-in before/after pairs: the lessons that are a comparison (the Compare page's examples).

Each pair is (title, A, B, what to look at), A and B a kernel name and its parameters (the simulator's,
and bigger sizes on a GPU, where a 64x64 transpose is all launch overhead); every name is in the
catalog and every parameter in its ranges (tests/tools/test_compare.py checks them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Side:
    kernel: str
    params: dict = field(default_factory=dict)  # small enough for the simulator
    gpu: dict = field(default_factory=dict)  # overrides on a GPU: sizes past launch overhead

    def params_for(self, backend: str) -> dict:
        return {**self.params, **(self.gpu if backend == "gpu" else {})}


@dataclass(frozen=True)
class Pair:
    key: str
    title: str
    a: Side
    b: Side
    look_at: str


def _same_launch(
    key: str, title: str, kernels: tuple[str, str], params: dict, gpu: dict, look_at: str
) -> Pair:
    """The pair of two kernels launched with the same parameters (most pairs: only the kernel changes)."""
    return Pair(key, title, Side(kernels[0], params, gpu), Side(kernels[1], params, gpu), look_at)


PAIRS: dict[str, Pair] = {
    p.key: p
    for p in (
        _same_launch("transpose", "Transpose: naive vs shared-memory tile",
                     ("transpose_naive", "transpose_tiled"), {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096},
                     "sectors per global store request: the tile turns column writes into row writes"),
        _same_launch("padding", "Transpose tile: unpadded vs padded",
                     ("transpose_tiled", "transpose_padded"), {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096},
                     "shared wavefronts per load request: one padding column ends the 32-way bank conflict"),
        Pair("stride", "Strided copy: stride 32 vs 1",
             Side("strided_copy", {"n": 4096, "stride": 32, "block": 128}, {"n": 4194304}),
             Side("strided_copy", {"n": 4096, "stride": 1, "block": 128}, {"n": 4194304}),
             "sectors per global load request: 32 when each lane hits its own sector, 4 when coalesced"),
        _same_launch("vector_add", "Vector add: one vs four elements per thread",
                     ("vector_add", "vector_add_x4"), {"n": 4096, "block": 128}, {"n": 1 << 24},
                     "a quarter of the threads and blocks for the same bytes"),
        _same_launch("matmul", "Matrix multiply: naive vs shared-memory tiles",
                     ("matmul_naive", "matmul_tiled"), {"n": 32, "tile": 16}, {"n": 1024},
                     "global load requests: each tile is read from global memory once per block"),
        _same_launch("divergence", "Branch: by lane parity vs by warp parity",
                     ("branch_lanes", "branch_warps"), {"n": 2048, "reps": 32, "block": 256}, {"n": 1 << 22, "reps": 64},
                     "time: the same work, but every warp of branch_lanes runs both sides of its branch"),
        # the PMPP path's before/afters (lessons_pmpp.py)
        _same_launch("convolution", "Convolution: naive vs shared-memory input tile with a halo",
                     ("conv2d_naive", "conv2d_tiled"), {"ny": 32, "nx": 32, "radius": 1, "tile": 16}, {"ny": 2048, "nx": 2048},
                     "global load requests: the tile loads each pixel once per block instead of (2R+1)² times"),
        _same_launch("reduction_trees", "Reduction: divergent tree vs divergence-free tree",
                     ("reduce_divergent", "reduce_convergent"), {"n": 1024, "block": 128}, {"n": 1 << 24, "block": 256},
                     "branch efficiency: the same additions, packed into whole warps"),
        _same_launch("reduction_shuffle", "Reduction: shared-memory tree vs warp shuffles",
                     ("reduce_convergent", "reduce_shuffle"), {"n": 1024, "block": 128}, {"n": 1 << 24, "block": 256},
                     "shared memory and barriers per block: five levels move into registers"),
        _same_launch("scan", "Scan: Kogge-Stone vs Brent-Kung",
                     ("scan_kogge_stone", "scan_brent_kung"), {"n": 1024, "block": 128}, {"n": 1 << 24, "block": 512},
                     "work vs steps: n log2 n additions in log2 n steps, or about 2n in 2 log2 n"),
        _same_launch("spmv", "Sparse matrix × vector: CSR vs ELL",
                     ("spmv_csr", "spmv_ell"), {"rows": 256, "width": 16, "long": 5, "block": 64}, {"rows": 1 << 18, "block": 256},
                     "sectors per load request and multiply-adds: ELL coalesces, and pays for its padding"),
        _same_launch("aos_soa", "Particles: array of structures vs structure of arrays",
                     ("particles_aos", "particles_soa"), {"n": 1024, "block": 128}, {"n": 1 << 24, "block": 256},
                     "sectors per global load request: 16 with a 16-byte stride between lanes, 4 when contiguous"),
        _same_launch("histogram", "Histogram at contention: global vs privatised bins",
                     ("histogram_global", "histogram_shared"), {"n": 4096, "nbins": 64, "hot": 100, "block": 256}, {"n": 1 << 22},
                     "global atomics: one per value on one address, or one per block"),
        _same_launch("lbm_layout", "Lattice Boltzmann step: array of structures vs structure of arrays",
                     ("lbm_aos", "lbm_soa"), {"nx": 64, "ny": 16}, {"nx": 4096, "ny": 1024},
                     "sectors per global load request: a cell's nine values together put neighbouring threads "
                     "36 bytes apart"),
    )
}  # fmt: skip
