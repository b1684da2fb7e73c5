"""One GPU worker per visible GPU, pinned with CUDA_VISIBLE_DEVICES (marked gpu; skipped without one):
launch.json names the GPU that ran it, a fault restarts that GPU's worker alone, and a Dask worker
started with --resources GPU=1 runs GPU captures (skipped without Dask). Runs on one GPU: each case
pins its workers to the first visible one."""

import os

import numpy as np
import pytest

from visualizer.engine.run.runner import KernelError, RunQueue, visible_gpus

pytestmark = pytest.mark.gpu


def test_each_gpu_worker_is_pinned_and_launch_json_names_its_gpu():
    gpus = visible_gpus()
    assert gpus, "a GPU test without a visible GPU"
    with RunQueue("gpu") as queue:
        assert [r.device for r in queue.runners] == gpus  # one worker per visible GPU
        cap = queue.capture("vector_add", {"n": 4096, "block": 128})
        assert cap.check["correct"], cap.check
        np.testing.assert_allclose(cap.outputs["c"], cap.inputs["a"] + cap.inputs["b"], rtol=1e-6)
        launch = cap.launch
        assert launch["backend"] == "gpu" and cap.measured
        assert launch["cuda_visible_devices"] in gpus  # the entry its worker was pinned to
        assert launch["device_id"] == 0  # the only device that worker sees
        assert str(launch["uuid"]).startswith("GPU-")


def test_a_gpu_fault_restarts_that_gpus_worker_alone():
    """Two workers (on one GPU here, as two GPUs would each have one): the one that ran the faulting
    kernel is replaced, the other keeps its process and its CUDA context."""
    with RunQueue("gpu", workers=2) as queue:
        for r in queue.runners:
            r._warm_up()
        pids = {id(r): r._proc.pid for r in queue.runners}
        with pytest.raises(KernelError, match="faulted on the GPU"):
            queue.capture("out_of_bounds_write", {"n": 256, "block": 128})
        faulted = [r for r in queue.runners if r.restarts]
        kept = [r for r in queue.runners if not r.restarts]
        assert len(faulted) == 1 and len(kept) == 1
        assert kept[0].warm and kept[0]._proc.pid == pids[id(kept[0])]
        again = queue.capture("vector_add", {"n": 1000, "block": 64})
        assert again.check["correct"] and str(again.launch["uuid"]).startswith("GPU-")


def test_a_dask_gpu_worker_runs_gpu_captures(tmp_path):
    pytest.importorskip("distributed")
    from visualizer.engine.run.cluster import Cluster, ClusterQueue
    from visualizer.tools.localcluster import LocalCluster

    first = visible_gpus()[0]
    with LocalCluster(workers=0, gpu_workers=1, log_dir=tmp_path, gpu_ids=[first]) as cluster:
        link = Cluster(cluster.address)
        try:
            assert link.has_gpu()
            queue = ClusterQueue(link, "auto")
            assert queue.backend == "gpu"
            cap = queue.capture("vector_add", {"n": 1 << 16, "block": 256}, seed=0)
            assert cap.check["correct"] and cap.measured
            assert cap.launch["cuda_visible_devices"] == first and str(cap.launch["uuid"]).startswith("GPU-")
            assert cap.timing["clean_ms"] > 0
        finally:
            link.close()
    assert os.environ.get("VISUALIZER_CLUSTER", "") == ""  # nothing leaked into this process
