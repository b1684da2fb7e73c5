"""The Shared memory page's "run it many times" panel (issue 25), on the CUDA simulator."""

import base64
import json
import re
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def values(v):
    """A figure array as sent to the browser: a plain list, or plotly's typed {dtype, bdata}."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def test_reduction_race_run_8_times_shows_the_spread_and_the_sentence():
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
    at.query_params.update(kernel="reduction_race", backend="sim", n="512", block="128")
    at.run()
    at.switch_page("web/pages/shared_memory.py").run()
    assert not at.exception, [e.value for e in at.exception]
    before = len(at.get("plotly_chart"))
    at.number_input(key="smem_runs_seed").set_value(2).run()
    at.button(key="smem_runs_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figs) == before + 2
    strip, cells = figs[-2], figs[-1]
    assert values(strip["data"][0]["x"]) == list(range(8))  # one marker per run
    assert "simulated" in strip["layout"]["title"]["text"] and "simulated" in cells["layout"]["title"]["text"]
    # seed 2's 8 schedules of this launch lose partial sums in some runs (how many is the engine's seeded
    # schedules'): the sentence says how many, and the strip has that many red markers
    said = [
        m.value for m in at.markdown if re.match(r"\*\*(Right in \d of 8 runs|Wrong in all 8 runs)", m.value)
    ]
    assert len(said) == 1, [m.value for m in at.markdown]
    right = 0 if said[0].startswith("**Wrong") else int(re.match(r"\*\*Right in (\d)", said[0]).group(1))
    assert right < 8
    assert sum(c == "#c0392b" for c in strip["data"][0]["marker"]["color"]) == 8 - right  # red: wrong runs
    assert "cells differ across runs" in cells["layout"]["title"]["text"]


def test_memory_access_page_runs_reduction_race_and_joins_the_hazards():
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
    at.query_params.update(kernel="reduction_race", backend="sim", n="512", block="128")
    at.run()
    at.switch_page("web/pages/memory_access.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.number_input(key="mem_runs_seed").set_value(2).run()
    at.button(key="mem_runs_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Where the differing cells raced" in m.value for m in at.markdown)
    joined = at.dataframe[-1].value
    assert set(joined["kind"]) >= {"RAW"} and (joined["hazard_array"] == "s").all()
    assert (joined["space"] == "shared").all() and joined["cells"].min() >= 1


def test_a_race_free_kernel_says_its_runs_gave_one_output():
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
    at.query_params.update(kernel="histogram_global", backend="sim")
    at.run()
    at.switch_page("web/pages/memory_access.py").run()
    at.button(key="mem_runs_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.value.startswith("**Right in all 8 runs, with the same output") for m in at.markdown)
    assert any("All 8 runs gave one output, bit for bit" in c.value for c in at.caption)


def test_the_panel_runs_only_when_asked_for_the_launch_on_screen():
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=600)
    at.query_params.update(kernel="reduction_race", backend="sim", n="512", block="128")
    at.run()
    at.switch_page("web/pages/shared_memory.py").run()
    before = len(at.get("plotly_chart"))
    at.button(key="smem_runs_go").click().run()
    assert len(at.get("plotly_chart")) == before + 2
    at.number_input(key="smem_runs_runs").set_value(4).run()  # another launch: not run until asked
    assert not at.exception and len(at.get("plotly_chart")) == before
    at.button(key="smem_runs_go").click().run()
    strip = [json.loads(c.proto.spec) for c in at.get("plotly_chart")][-2]
    assert values(strip["data"][0]["x"]) == [0, 1, 2, 3]


def test_the_panels_sentence_says_how_each_backend_schedules_its_runs():
    from visualizer.engine.instrument.delays import DELAY_MAX_NS
    from visualizer.web.races import runs_caption

    assert "seeded interleaving" in runs_caption(sim=True, delays=False)
    plain = runs_caption(sim=False, delays=False)
    assert "hardware's own schedule" in plain and "perturbed" not in plain
    delayed = runs_caption(sim=False, delays=True)
    assert "loads, stores, atomics and barriers some warps wait" in delayed
    assert "up to 1, 4 or 16 µs" in delayed and DELAY_MAX_NS == (
        1_000,
        4_000,
        16_000,
    )  # the sentence's numbers
    assert "replays bit for bit" not in delayed  # the delays replay; the hardware's timing does not
