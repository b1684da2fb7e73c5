"""Worked examples for "Your kernel": textbook Numba CUDA kernels, written as a user would (no probes).

Sources in ``kernels/examples/``:

* vector_add.py: the first kernel everyone writes.
* matmul_tiled.py: a shared-memory tiled matmul, the tile size a module constant, ``syncthreads``
  in a loop, an early ``return``.
* reduction.py: a shared-memory tree reduction with ``syncthreads`` in a ``while`` loop.

Each comes with a launch spec and a numpy reference expression the page and tests start from.
"""

from __future__ import annotations

from dataclasses import dataclass

from visualizer import KERNELS_DIR

HERE = KERNELS_DIR / "examples"  # sources read as text, never imported


@dataclass(frozen=True)
class Example:
    title: str
    file: str
    kernel: str
    block: str
    args: dict[str, str]
    reference: str
    grid: str | None = None
    threads_for: int | None = None  # one thread per element of this many

    @property
    def source(self) -> str:
        return (HERE / self.file).read_text()


EXAMPLES = {
    "vector_add": Example(
        title="Vector add",
        file="vector_add.py",
        kernel="vector_add",
        block="128",
        threads_for=1000,
        args={"a": "rand:float32:1000", "b": "rand:float32:1000", "c": "zeros:float32:1000"},
        reference="c = a + b",
    ),
    "matmul_tiled": Example(
        title="Tiled matmul (shared memory, TILE a module constant)",
        file="matmul_tiled.py",
        kernel="matmul_tiled",
        grid="3,3",
        block="16,16",
        args={"A": "rand:float32:48x48", "B": "rand:float32:48x48", "C": "zeros:float32:48x48"},
        reference="C = A @ B",
    ),
    "reduction": Example(
        title="Tree reduction (shared memory, syncthreads in a loop)",
        file="reduction.py",
        kernel="block_sum",
        block="256",
        threads_for=2000,
        args={"x": "rand:float32:2000", "partial": "zeros:float32:8"},
        reference="partial = np.add.reduceat(x, np.arange(0, x.size, THREADS_PER_BLOCK))",
    ),
}
