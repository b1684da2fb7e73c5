"""Tools only maintainers run, from a checkout; not part of the installed package (setup.py ships
``visualizer`` alone, and nothing under ``visualizer/`` imports this folder).

    python -m devtools.crosscheck gpu|compare ...   the access engine vs Nsight Compute / compute-sanitizer
    python -m devtools.access_cost [--json FILE]    what recording accesses costs on the GPU
    python -m devtools.ship_h200 --out DIR ...      record the measured set the app ships (on the GPU)
    python -m devtools.stock_suite ...              numba-cuda's own simulator tests, per engine
    python -m devtools.sim_bench ...                the compiled engine against fastsim, CPU time
    python -m devtools.slow_tests LOG ... > tests/slow_tests.txt   the quick tier's cut (docs/install.md)

Each imports the package as ``visualizer.*``; run them from the repository root (or with it on
``PYTHONPATH``) so that ``devtools`` is importable.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the checkout first on ``PYTHONPATH``: a child ``python -m devtools.X`` started in
    another directory still finds this folder (and this checkout's ``visualizer``)."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), rest] if rest else [str(ROOT)])}
