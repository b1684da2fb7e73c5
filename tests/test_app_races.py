"""The Shared memory page's "run it many times" panel (issue 25), on the CUDA simulator."""

import base64
import json
import re
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]


def values(v):
    """A figure array as sent to the browser: a plain list, or plotly's typed {dtype, bdata}."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def test_reduction_race_run_8_times_shows_the_spread_and_the_sentence():
    at = AppTest.from_file(str(ROOT / "visualizer/app.py"), default_timeout=180)
    at.query_params.update(kernel="reduction_race", backend="sim", n="512", block="128")
    at.run()
    at.switch_page("web/pages/shared_memory.py").run()
    assert not at.exception, [e.value for e in at.exception]
    before = len(at.get("plotly_chart"))
    at.button(key="smem_runs_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figs) == before + 2
    strip, cells = figs[-2], figs[-1]
    assert values(strip["data"][0]["x"]) == list(range(8))  # one marker per run
    assert "simulated" in strip["layout"]["title"]["text"] and "simulated" in cells["layout"]["title"]["text"]
    (verdict,) = [
        m.value for m in at.markdown if m.value.startswith("**Right in") or m.value.startswith("**Wrong")
    ]
    m = re.match(r"\*\*(Right in (\d+) of 8 runs|Wrong in all 8 runs)", verdict)
    assert m, verdict
    wrong_markers = sum(c == "#c0392b" for c in strip["data"][0]["marker"]["color"])
    assert wrong_markers == (8 - int(m.group(2)) if m.group(2) else 8)
