"""Every page rendered from a real GPU run (marked gpu; run on the H200)."""

import json
from pathlib import Path

import pytest

from tests.conftest import open_app

pytestmark = pytest.mark.gpu

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")
PAGES = ["grid", "scheduling", "shared_memory", "memory_flow", "occupancy", "flash_attention"]


@pytest.mark.parametrize(
    "query",
    [
        {"kernel": "vector_add", "n": str(1 << 20), "block": "256"},
        {"kernel": "matmul_tiled", "n": "256", "tile": "16"},
        {"kernel": "reduction", "n": "65536", "block": "256"},
        {"kernel": "flash_attention", "seq_len": "256", "head_dim": "64", "tile": "32", "causal": "1"},
        {"kernel": "flash_attention_fast", "seq_len": "1000", "head_dim": "64", "heads": "2", "causal": "1"},
    ],
)
def test_pages_render_from_gpu_capture(query):
    at = open_app(timeout=300, **{**query, "backend": "gpu"})
    assert "GPU" in " ".join(m.value for m in at.sidebar.markdown)
    assert at.session_state.capture.measured
    titles = []
    for page in PAGES:
        at.switch_page(f"web/pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        for chart in at.get("plotly_chart"):
            spec = json.loads(chart.proto.spec)
            titles.append((page, json.dumps(spec.get("layout", {}).get("title", ""))))
    if "attention" in query["kernel"]:  # the recorded K/V loop, from this (measured) capture
        loops = [t for p, t in titles if p == "flash_attention" and "recorded K/V steps" in t]
        assert loops and all("measured" in t.lower() for t in loops), titles
    flow = [t for p, t in titles if p == "memory_flow"]  # the measured steps, and the model beside them
    assert any("measured (GPU)" in t for t in flow) and any(
        "modelled (not measured) for a H200" in t for t in flow
    )
    sched = [t for p, t in titles if p == "scheduling"]
    assert sched and any("measured" in t.lower() for t in sched), sched
    print(f"{query['kernel']}: {len(titles)} charts across {len(PAGES)} pages")
