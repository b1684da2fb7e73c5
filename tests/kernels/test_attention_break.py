"""The "break it" builds of the FlashAttention teaching kernel: each departs from numpy where its
missing invariant says it must, and the real kernel does not (simulator; the same on a GPU)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from visualizer.engine.capture.builds import pair
from visualizer.engine.capture.builtin import launch_args, record_buffers
from visualizer.figures.attention_break import break_figure, break_rows, break_summary
from visualizer.kernels.attention import flash_attention_kernel
from visualizer.specs.attention import OVERFLOW_SCORE, attention_reference
from visualizer.specs.catalog import plan_launch

PARAMS = {"batch": 1, "heads": 2, "seq_len": 48, "head_dim": 16, "tile": 16, "causal": 0}
TOL = {"rtol": 1e-4, "atol": 1e-4}
# on the simulator no timed clean run: these tests read outputs only, and the clean build is a second
# FlashAttention compile (cold engine cache: about 20-40 s each)


def rows_of(cap):
    x, p = cap.inputs, cap.launch["params"]
    return break_rows(x["q"], x["k"], x["v"], cap.outputs["o"], bool(p["causal"]), p["tile"], **TOL)


@pytest.mark.parametrize("causal", [0, 1])
def test_no_rescale_is_wrong_exactly_where_the_running_max_grew(sim_runner, causal):
    params = {**PARAMS, "causal": causal}
    good = sim_runner.capture("flash_attention", params, time_clean=False)
    bad = sim_runner.capture("flash_attention_no_rescale", params, time_clean=False)
    for a in ("q", "k", "v"):  # logit_scale 1 and the same seed: the same inputs as the real kernel's
        np.testing.assert_array_equal(good.inputs[a], bad.inputs[a])
    assert good.check["correct"], good.check
    assert not bad.check["correct"] and bad.check["expected_wrong"]
    rows = rows_of(bad)
    still = rows["growth"] == 0
    assert still.any() and (~still).any()
    assert not rows["wrong"][still].any()  # the max was in the first K/V tile: no rescale was needed
    assert rows["wrong"][~still & (rows["growth"] > 1e-2)].all()
    if causal:  # the first Q tile sees only K/V tile 0 under the mask: never a rescale
        assert not rows["wrong"][rows["row"] < PARAMS["tile"]].any()
    # the rows the kernel got right are bit for bit the real kernel's
    right = ~rows["wrong"].to_numpy().reshape(bad.outputs["o"].shape[:3])
    np.testing.assert_array_equal(bad.outputs["o"][right], good.outputs["o"][right])
    assert f"{int(rows['wrong'].sum()):,} of {len(rows):,} query rows are wrong" in break_summary(
        rows, "no_rescale"
    )


def test_no_max_overflows_only_at_large_scores(sim_runner):
    bad = sim_runner.capture("flash_attention_no_max", {**PARAMS, "logit_scale": 30}, time_clean=False)
    assert bad.check["expected_wrong"] and not bad.check["correct"]
    rows = rows_of(bad)
    over = rows["max_score"] > OVERFLOW_SCORE
    assert over.any() and (~over).any()
    assert rows["nonfinite"][over].all()  # exp(score) = inf in float32
    assert bad.check["outputs"]["o"]["nonfinite"] >= int(over.sum()) * PARAMS["head_dim"]
    # without large scores the missing max subtraction changes nothing (softmax is shift-invariant)
    small = sim_runner.capture("flash_attention_no_max", {**PARAMS, "logit_scale": 1}, time_clean=False)
    assert small.check["correct"], small.check


def test_the_real_kernel_survives_the_scores_that_break_the_no_max_build():
    """The teaching kernel itself (no logit_scale parameter) on the same scaled inputs, in process."""
    spec, values, launch = plan_launch("flash_attention_no_max", {**PARAMS, "heads": 1, "logit_scale": 30})
    x = spec.make_inputs(values, np.random.default_rng(0))
    scores = np.einsum("bhid,bhjd->bhij", x["q"], x["k"]) / np.sqrt(values["head_dim"])
    assert scores.max() > OVERFLOW_SCORE
    traced, _ = pair(flash_attention_kernel(values["tile"], values["head_dim"]), spec.active_when)
    bufs = record_buffers(spec, launch)
    args = launch_args(spec, launch, {**x, **bufs})[0]
    traced[launch.grid, launch.block](*args)
    np.testing.assert_allclose(x["o"], attention_reference(x["q"], x["k"], x["v"], False), **TOL)


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="broken must be None or one of"):
        flash_attention_kernel(16, 16, broken="no_softmax")


def test_break_figure_draws_every_row_and_names_its_sources():
    rng = np.random.default_rng(1)
    shape = (1, 2, 20, 16)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    o = attention_reference(q, k, v, False)
    o[0, 1, 3] = np.nan  # one row inf/NaN, one row off
    o[0, 0, 5] += 1.0
    rows = break_rows(q, k, v, o, False, 8, **TOL)
    assert rows["wrong"].sum() == 2 and rows["nonfinite"].sum() == 1
    fig = break_figure(rows, "no_max", "data: simulated", "Broken: test")
    assert "simulated" in fig.layout.title.text
    assert [t.name for t in fig.data] == ["error", "inf/NaN", "max_score"]
    assert len(fig.data[0].x) == 39 and list(fig.data[1].x) == [20 + 3]
    assert list(fig.layout.xaxis2.ticktext) == ["head 0", "head 1"]
    assert any(s.y0 == OVERFLOW_SCORE for s in fig.layout.shapes)  # the overflow line
    with pytest.raises(ValueError, match="variant must be one of"):
        break_figure(rows, "nope", "s", "t")


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args], capture_output=True, text=True, timeout=300
    )


def test_cli_lists_the_broken_builds_and_reports_their_wrong_answer(tmp_path):
    listed = json.loads(run_cli("kernels", "--json").stdout)
    assert listed["flash_attention_no_max"]["params"]["logit_scale"] == 30
    assert listed["flash_attention_no_rescale"]["params"]["logit_scale"] == 1
    res = run_cli(
        "capture", "flash_attention_no_max", "--backend", "sim", "--out", str(tmp_path),
        *[f"--param={k}={v}" for k, v in PARAMS.items()],
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "output is WRONG, as this demo is meant to show (exp(S) without subtracting" in res.stdout
    assert "inf/NaN" in res.stdout
    assert "Warning" not in res.stderr  # numpy's overflow warnings stay out of the terminal


@pytest.mark.gpu
def test_broken_builds_on_gpu(gpu_runner):
    """On a GPU too: no_rescale is wrong exactly where m grew, no_max overflows at large scores."""
    params = {**PARAMS, "heads": 4, "seq_len": 512, "head_dim": 64, "tile": 32}
    good = gpu_runner.capture("flash_attention", params)
    assert good.check["correct"], good.check
    bad = gpu_runner.capture("flash_attention_no_rescale", params)
    assert bad.check["expected_wrong"] and not bad.check["correct"]
    rows = rows_of(bad)
    still = rows["growth"] == 0
    assert still.any() and not rows["wrong"][still].any()
    assert rows["wrong"][rows["growth"] > 1e-2].all()
    over = gpu_runner.capture("flash_attention_no_max", {**params, "logit_scale": 30})
    rows = rows_of(over)
    big = rows["max_score"] > OVERFLOW_SCORE
    assert big.any() and rows["wrong"][big].all()
    assert not rows["wrong"][rows["max_score"] < OVERFLOW_SCORE - 10].any()
    print(
        "GPU no_rescale:",
        break_summary(rows_of(bad), "no_rescale"),
        "| no_max:",
        break_summary(rows, "no_max"),
    )


@pytest.mark.gpu
def test_break_it_toggle_on_a_gpu_capture():
    import json
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(
        str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py"), default_timeout=300
    )
    for k, v in {**PARAMS, "kernel": "flash_attention", "backend": "gpu", "seq_len": 256}.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page("web/pages/flash_attention.py").run()
    at.toggle(key="fa_break").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    (broken,) = [t for t in titles if t.startswith("Broken")]
    assert "measured (GPU)" in broken and "rows wrong" in broken
    print("GPU break-it chart:", broken.split("<br>")[0])
