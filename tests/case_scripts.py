"""Run a cases script (tests/*_cases.py) in a child process on one engine and read back its results.

The kernels of those scripts run in a process of their own so that the simulator and the GPU (and
the stock simulator and fastsim) never share a numba import: ``python SCRIPT sim|gpu OUT.pkl``.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path


def run_case_script(script: Path, tmp_path: Path, engine: str) -> dict:
    out = tmp_path / f"{engine}.pkl"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0" if engine == "gpu" else "1"}
    proc = subprocess.run(
        [sys.executable, str(script), engine, str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pickle.loads(out.read_bytes())
