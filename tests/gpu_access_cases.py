"""``python tests/gpu_access_cases.py ENGINE OUT``: tools/crosscheck_fresh.run(ENGINE), pickled to OUT
(each engine in a process of its own: the simulator is chosen before numba is imported)."""

import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(engine: str, out_path: str) -> int:
    from visualizer.tools import crosscheck_fresh

    Path(out_path).write_bytes(pickle.dumps(crosscheck_fresh.run(engine)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
