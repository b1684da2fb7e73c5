"""docs/notebook.ipynb runs from top to bottom (nbclient, the notebook's own kernel), so the Python API
it shows (``from visualizer import capture``) works as written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="pip install nbclient nbformat ipykernel")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]


def test_notebook_runs(tmp_path, monkeypatch):
    nb = nbformat.read(ROOT / "docs" / "notebook.ipynb", as_version=4)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "matmul_tiled: 2,048 → 0" not in text  # A is the naive kernel: differences name B
    assert "matmul_tiled: 0 → 2,048 B static shared memory per block" in text
    assert "slices" in text
    grid = nb.cells[3].outputs[0]["data"]
    assert "application/vnd.plotly.v1+json" in grid  # the figure, drawn by Jupyter's plotly renderer
