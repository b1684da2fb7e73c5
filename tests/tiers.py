"""The suite's two tiers.

The README's test command runs the quick tier; ``--full`` runs the whole suite, and CI runs ``--full``
(.ci/run), so nothing goes unchecked before a change lands. The quick tier leaves out the tests marked
``slow`` (tests/conftest.py marks them):

* the test functions listed in tests/slow_tests.txt, measured over 4.5 s each on a 2-core machine's
  fresh run (devtools/slow_tests.py writes the list), except those in KEEP below;
* each check repeated over every built-in kernel, past QUICK_BUILTINS: a few kernels that between them
  cover what the rest do (a plain elementwise kernel, a 2-D tiled kernel with shared memory and
  barriers, a shared-memory tree, warp shuffles, atomics, divergent branches, the out-of-bounds demo).
"""

import re
from pathlib import Path

import pytest

SLOW_LIST = Path(__file__).with_name("slow_tests.txt")

QUICK_BUILTINS = frozenset(
    {
        "vector_add",
        "matmul_tiled",
        "reduction",
        "reduce_shuffle",
        "histogram_shared",
        "branch_lanes",
        "out_of_bounds_write",  # the fault demo: the engines' error path
    }
)


def every_builtin(names, quick=QUICK_BUILTINS):
    """``names`` as parametrize values: those in ``quick`` in the quick tier, the rest marked slow."""
    return [n if n in quick else pytest.param(n, marks=pytest.mark.slow) for n in names]


def function_of(nodeid: str) -> str:
    """``tests/f.py::test_x[a-b]`` -> ``tests/f.py::test_x``: the list names test functions."""
    return re.sub(r"\[.*$", "", nodeid)


def listed_slow() -> set[str]:
    """The test functions tests/slow_tests.txt names (each line: a name, then a comment)."""
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines()
    return {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}


# Test functions that stay in the quick tier however long they take (devtools/slow_tests.py leaves
# them out of tests/slow_tests.txt): the one check of an area that would otherwise have none there.
KEEP = frozenset(
    {
        # a real browser: every page renders at 1280x720 and fetches nothing from outside
        "tests/e2e/test_browser.py::test_every_page_renders_fits_1280_and_fetches_nothing_from_outside",
        # the sandbox: the visitor's code sees no file of the server
        "tests/engine/test_sandbox.py::test_the_sandbox_sees_no_file_of_the_server",
        # the FlashAttention page (FlashAttention's builds are the simulator's costliest)
        "tests/web/test_app_flash_attention.py::test_flash_page_renders_loop_row_state_smem_and_timing",
        # the tiers themselves
        "tests/project/test_tiers.py::test_the_quick_tier_leaves_slow_tests_out_and_full_runs_them",
    }
)
