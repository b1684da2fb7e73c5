import os

# In-process kernel imports in tests use the simulator; GPU tests go through the runner, whose
# worker process chooses its own backend. Must be set before numba is imported anywhere.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import pytest  # noqa: E402

from visualizer.engine.runner import Runner, gpu_present  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sim_runner():
    with Runner("sim") as runner:
        yield runner


@pytest.fixture(scope="session")
def gpu_runner():
    with Runner("gpu") as runner:
        yield runner
