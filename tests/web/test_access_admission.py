"""A built-in kernel at its defaults works on the Memory access page: a launch too big to record every
thread of is recorded in sampled warps on the simulator (as a GPU does), and a request for every thread
of it is refused before anything runs, naming what to lower."""

from __future__ import annotations

import re

import pytest

from tests.conftest import open_app
from visualizer.analysis.provenance import SIMULATED_SAMPLED
from visualizer.engine.run.runner import Runner
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError


@pytest.mark.parametrize("kernel", ["flash_attention", "naive_attention", "flash_attention_fast"])
def test_every_thread_of_an_attention_default_is_refused_before_the_run_naming_what_to_lower(kernel):
    with pytest.raises(LaunchError) as refused:
        catalog.admit_accesses(kernel, {})
    text = str(refused.value)
    assert "\n" not in text and "seq_len to at most" in text and "--access-engine pass" in text, text


def test_the_runner_refuses_it_before_any_worker_starts(monkeypatch):
    runner = Runner("sim")

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was asked to run a launch that must be refused first")

    monkeypatch.setattr(runner, "_exchange", no_worker)
    with pytest.raises(
        LaunchError, match=r"about 3,\d{3},\d{3} memory accesses.*lower heads to 1, or seq_len"
    ):
        runner.capture("flash_attention", {}, accesses=True, time_clean=False)


@pytest.mark.parametrize(
    "kernel, params",
    [
        ("flash_attention", {"heads": 1, "seq_len": 16}),
        ("naive_attention", {"heads": 1, "seq_len": 20, "causal": 1}),
    ],
)
def test_the_estimate_is_at_or_a_little_above_what_the_recorder_counts(kernel, params):
    with Runner("sim") as runner:  # the recorder (fastsim's listener: local arrays too) is what it bounds
        cap = runner.capture(kernel, params, accesses=True, time_clean=False, sim_engine="fastsim")
    recorded = cap.launch["accesses"]["accesses"]
    estimate = catalog.access_estimate(kernel, params)
    assert recorded <= estimate <= 1.1 * recorded, (recorded, estimate)


def test_memory_access_page_records_flash_attention_at_its_defaults_in_sampled_warps():
    at = open_app("memory_access", kernel="flash_attention", backend="sim", timeout=600)  # a hang guard
    assert not at.error, [e.value for e in at.error]
    cap = at.session_state["capture"] if "capture" in at.session_state else None
    captions = " ".join(c.value for c in at.caption)
    # the caption escapes its parentheses for markdown: "the simulator \(compiled engine\)"
    said = re.search(r"recorded on the simulator( \\?\(compiled engine\\?\))? by 3 sampled warps", captions)
    assert said, captions
    assert SIMULATED_SAMPLED in captions and "measured" not in captions.split("Data source:")[1][:80]
    assert at.get("plotly_chart"), "the page draws the sampled warps' requests"
    assert cap is None or cap.launch["kernel"] == "flash_attention"
