"""Worked examples for "Your kernel": textbook Numba CUDA kernels, written as a user would (no probes).

Sources in ``kernels/examples/``:

* vector_add.py: the first kernel everyone writes.
* matmul_tiled.py: a shared-memory tiled matmul, the tile size a module constant, ``syncthreads``
  in a loop, an early ``return``.
* reduction.py: a shared-memory tree reduction with ``syncthreads`` in a ``while`` loop.

Each comes with a launch form and a numpy reference expression the page and tests start from, in
``kernels/examples/examples.toml`` (one table per example).
"""

from __future__ import annotations

import tomllib
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


def load_examples(path=HERE / "examples.toml") -> dict[str, Example]:
    """The examples of ``examples.toml``, checked: an unknown or missing field, or a source file that
    is not there, fails here at import, not on a visitor's page."""
    with open(path, "rb") as f:
        table = tomllib.load(f)
    examples = {}
    for key, row in table.items():
        try:
            ex = Example(**row)
        except TypeError as exc:
            raise ValueError(f"{path.name} [{key}]: {exc}") from None
        if not (HERE / ex.file).is_file():
            raise ValueError(f"{path.name} [{key}]: no source file {ex.file}")
        examples[key] = ex
    return examples


EXAMPLES = load_examples()
