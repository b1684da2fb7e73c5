"""Timing only when asked (issue #37): a capture that wants no timing launches its recording build once
and times nothing, on a GPU as on the simulator."""

from types import SimpleNamespace

import numpy as np
import pytest

from visualizer.engine.capture import pipeline


class Counting:
    """A build as the pipeline sees one (``build[config](*args)``), counting its launches."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, config):
        def launch(*args):
            self.launches += 1
            args[0][0] = 1.0  # what the kernel "writes"

        return launch


def fake_gpu():
    from numba import cuda  # the simulator's module here (conftest): arrays that copy like a GPU's

    device = SimpleNamespace(
        device_array=cuda.device_array, synchronize=lambda: None,
        current_context=lambda: SimpleNamespace(deallocations=SimpleNamespace(clear=lambda: None)),
    )  # fmt: skip
    backend = SimpleNamespace(name="gpu", simulator=False, listens=False, cuda=device, announce_blocks=None)
    backend.timed = lambda fn: (fn(), 1)
    return backend


def test_an_untimed_gpu_capture_launches_the_recording_build_once_and_times_nothing():
    traced, clean = Counting(), Counting()
    job = pipeline.Job(
        traced=traced, clean=clean, grid=(1, 1, 1), block=(32, 1, 1), arrays={"out": np.zeros(4, np.float32)},
        buffers={"trace": np.zeros((3, 32), np.int64)}, traced_args=[("array", "out")], clean_args=[("array", "out")],
    )  # fmt: skip
    ran = pipeline.run(fake_gpu(), job, repeats=20, time_clean=False)
    assert (traced.launches, clean.launches) == (1, 0), "no warm-up, no timed repeats, no clean launch"
    assert ran.after["out"][0] == 1.0
    assert "clean_ms" not in ran.timing and "instrumented_ms" not in ran.timing
    assert ran.timing["clock"].startswith("not timed")


def test_an_untimed_simulator_capture_launches_once(sim_runner):
    blocks = []
    cap = sim_runner.capture("vector_add", {"n": 64, "block": 32}, time_clean=False,
                             progress=lambda done, total: blocks.append((done, total)))  # fmt: skip
    assert "clean_ms" not in cap.timing and cap.timing["instrumented_ms"] > 0
    assert blocks and blocks[-1][1] == 2, "one launch of 2 blocks, not the clean build's too"


@pytest.mark.gpu
def test_an_untimed_gpu_capture_still_records_the_accesses(gpu_runner):
    cap = gpu_runner.capture(
        "strided_copy", {"n": 4096, "stride": 8, "block": 128}, accesses=True, time_clean=False
    )
    assert cap.check["correct"] and cap.launch["accesses"]["source"] == "measured (GPU, sampled warps)"
    assert "clean_ms" not in cap.timing and cap.timing["clock"].startswith("not timed")
