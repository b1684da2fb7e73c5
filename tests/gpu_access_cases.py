"""``python tests/gpu_access_cases.py ENGINE OUT``: devtools/crosscheck_fresh.run(ENGINE), pickled to OUT
(each engine in a process of its own: the simulator is chosen before numba is imported)."""

import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(engine: str, out_path: str) -> int:
    from devtools import crosscheck_fresh

    if engine == "sim-small":  # buffers too small on purpose: what overflows is counted and said
        results = crosscheck_fresh.run("sim", names=["tree_sum", "matmul_tiled"], records=32 * 8 * 20)
    else:
        results = crosscheck_fresh.run(engine)
    Path(out_path).write_bytes(pickle.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
