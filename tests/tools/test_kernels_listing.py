"""``python -m visualizer kernels`` advertises, for each parameter, only values that launch: both ends
of every block and tile range it prints plan on the GPU's limits, one step past either end does not."""

import re

import pytest

from visualizer.specs.catalog import KERNELS, LaunchError, plan_launch
from visualizer.tools.cli import main


def advertised(capsys) -> list[tuple[str, str, int, int]]:
    assert main(["kernels"]) == 0
    rows, kernel = [], None
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith(" "):
            kernel = line.split(":")[0]
        found = re.match(r"\s+--param (\w+)=\S+.*\((-?\d+)\.\.(-?\d+)\)$", line)
        if found:
            rows.append((kernel, found[1], int(found[2]), int(found[3])))
    return rows


def test_block_and_tile_ranges_listed_are_the_ones_that_launch(capsys):
    rows = [r for r in advertised(capsys) if r[1] in ("block", "tile")]
    assert len(rows) >= 6, rows
    for kernel, name, lo, hi in rows:
        for value in (lo, hi):
            plan_launch(kernel, {name: value}, "gpu")  # raises if the listing promised too much
        for value in (lo - 1, hi + 1):
            with pytest.raises(LaunchError):
                plan_launch(kernel, {name: value}, "gpu")
    assert all(k in KERNELS for k, *_ in rows)
