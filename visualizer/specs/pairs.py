"""Built-in before/after pairs: the lessons that are a comparison (the Compare page's examples).

Each pair is (title, A, B, what to look at), A and B a kernel name and its parameters (the simulator's,
and bigger sizes on a GPU, where a 64x64 transpose is all launch overhead); every name is in the
catalog and every parameter in its ranges (tests/test_compare.py checks them).
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


PAIRS: dict[str, Pair] = {
    p.key: p
    for p in (
        Pair("transpose", "Transpose: naive vs shared-memory tile",
             Side("transpose_naive", {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096}),
             Side("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096}),
             "sectors per global store request: the tile turns column writes into row writes"),
        Pair("padding", "Transpose tile: unpadded vs padded",
             Side("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096}),
             Side("transpose_padded", {"rows": 64, "cols": 64, "tile": 32}, {"rows": 4096, "cols": 4096}),
             "shared wavefronts per load request: one padding column ends the 32-way bank conflict"),
        Pair("stride", "Strided copy: stride 32 vs 1",
             Side("strided_copy", {"n": 4096, "stride": 32, "block": 128}, {"n": 4194304}),
             Side("strided_copy", {"n": 4096, "stride": 1, "block": 128}, {"n": 4194304}),
             "sectors per global load request: 32 when each lane hits its own sector, 4 when coalesced"),
        Pair("vector_add", "Vector add: one vs four elements per thread",
             Side("vector_add", {"n": 4096, "block": 128}, {"n": 1 << 24}),
             Side("vector_add_x4", {"n": 4096, "block": 128}, {"n": 1 << 24}),
             "a quarter of the threads and blocks for the same bytes"),
        Pair("matmul", "Matrix multiply: naive vs shared-memory tiles",
             Side("matmul_naive", {"n": 32, "tile": 16}, {"n": 1024}),
             Side("matmul_tiled", {"n": 32, "tile": 16}, {"n": 1024}),
             "global load requests: each tile is read from global memory once per block"),
        Pair("divergence", "Branch: by lane parity vs by warp parity",
             Side("branch_lanes", {"n": 2048, "reps": 32, "block": 256}, {"n": 1 << 22, "reps": 64}),
             Side("branch_warps", {"n": 2048, "reps": 32, "block": 256}, {"n": 1 << 22, "reps": 64}),
             "time: the same work, but every warp of branch_lanes runs both sides of its branch"),
        Pair("lbm_layout", "Lattice Boltzmann step: array of structures vs structure of arrays",
             Side("lbm_aos", {"nx": 64, "ny": 16}, {"nx": 4096, "ny": 1024}),
             Side("lbm_soa", {"nx": 64, "ny": 16}, {"nx": 4096, "ny": 1024}),
             "sectors per global load request: a cell's nine values together put neighbouring threads "
             "36 bytes apart"),
    )
}  # fmt: skip
