"""Each kernel's PyTorch equivalent (timed beside it on a GPU) computes what the numpy reference does.

Checked on CPU tensors here; skipped where torch is not installed (it is optional)."""

import numpy as np
import pytest

from visualizer.analysis.capture import check_outputs
from visualizer.specs import catalog

torch = pytest.importorskip("torch")

CASES = [
    ("vector_add", {"n": 1000}),
    ("vector_add_x4", {"n": 1000}),
    ("matmul_naive", {"n": 40}),
    ("matmul_tiled", {"n": 40}),
    ("reduction", {"n": 1000}),
    ("flash_attention", {"seq_len": 40, "causal": 1}),
    ("naive_attention", {"seq_len": 40, "causal": 0}),
]


@pytest.mark.parametrize("name, params", CASES)
def test_torch_equivalent_matches_reference(name, params):
    spec, values, _ = catalog.plan_launch(name, params, "gpu")
    inputs = spec.make_inputs(values, np.random.default_rng(0))
    tensors = {k: torch.as_tensor(v.copy()) for k, v in inputs.items()}
    label, call = spec.torch_op(torch, tensors, values)
    result = call()
    assert label
    if name == "reduction":
        assert float(result) == pytest.approx(float(inputs["x"].sum()))
    elif name.endswith("attention"):
        np.testing.assert_allclose(result.numpy(), spec.reference(inputs, values)["o"], atol=1e-5)
    else:
        out = spec.outputs[0]
        assert check_outputs(spec, values, inputs, {out: tensors[out].numpy()})["correct"]
