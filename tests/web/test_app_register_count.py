"""One register count on every page: before ptxas has counted, the pages say what they assume; once it has
(Under the hood, Occupancy's button, or a visitor's kernel compiled before the simulator ran it), every
page models with ptxas's count and says it came from ptxas."""

from __future__ import annotations

import math
from types import SimpleNamespace

from tests.conftest import open_app
from visualizer.analysis import compare


def _metric(at, label: str):
    return next(m for m in at.metric if m.label == label)


def test_once_ptxas_has_counted_occupancy_and_scheduling_use_its_count():
    at = open_app("occupancy", backend="sim", kernel="vector_add", n="512", block="128")
    assert at.slider(key="occ_regs").value == 32  # nothing compiled yet: assumed, and said so
    assert any("assumes 32 registers" in c.value for c in at.caption)
    at.switch_page("web/pages/scheduling.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="sched_regs").value == 32
    assert any("32 registers/thread, assumed: nothing is compiled yet" in c.value for c in at.caption)

    at.switch_page("web/pages/under_the_hood.py").run()  # numba -> NVVM -> PTX, ptxas -v
    assert not at.exception, [e.value for e in at.exception]
    regs = int(_metric(at, "registers").value)
    assert regs != 32  # vector_add needs far fewer: the assumption would have been wrong

    at.switch_page("web/pages/occupancy.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="occ_regs").value == regs
    assert any(
        f"counted by ptxas -v for sm_90, clean build: {regs} registers/thread" in c.value for c in at.caption
    )
    assert not any("assumes 32" in c.value for c in at.caption)
    theoretical = _metric(at, "theoretical")
    assert f"at {regs} regs/thread (counted by ptxas -v for sm_90, clean build)" in theoretical.help

    at.switch_page("web/pages/scheduling.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="sched_regs").value == regs
    assert any(f"{regs} registers/thread, counted by ptxas -v for sm_90" in c.value for c in at.caption)


def test_compare_models_a_visitors_simulated_kernel_with_ptxas_count():
    launch = {
        "backend": "sim", "threads_per_block": 256, "dynamic_smem_bytes": 0, "compute_capability": "9.0",
        "gpu_compile": {"checked": True, "arch": "sm_90", "build": "clean",
                        "resources": {"registers": 40, "smem_bytes": 0}},
    }  # fmt: skip
    occ, limiter, note = compare._occupancy(SimpleNamespace(launch=launch))
    assert occ == 75.0 and limiter == "registers" and "ptxas -v (sm_90, clean build)" in note
    # Compare's registers row shows the count its occupancy row used (it once read only Compare's own compile)
    row = compare._registers_row(launch, None)
    assert row["value"] == 40 and row["source"] == "compiled (ptxas -v, sm_90, in its sandbox)"
    own = {"resources": {"registers": 24, "smem_bytes": 0}, "arch": "sm_90"}  # Compare's own compile wins
    assert compare._registers_row(launch, own)["value"] == 24
    assert compare._occupancy(SimpleNamespace(launch=launch), own)[0] == 100.0
    occ, _, note = compare._occupancy(SimpleNamespace(launch={**launch, "gpu_compile": {"checked": False}}))
    assert occ is None and "compiles nothing" in note
    assert math.isnan(compare._registers_row({**launch, "gpu_compile": {"checked": False}}, None)["value"])


def test_a_loaded_bundles_count_is_held_to_its_form():
    from visualizer.web.asm import ptxas_count

    good = {"registers": 40, "spill_stores_bytes": 0, "spill_loads_bytes": 0, "smem_bytes": 0}
    launch = {
        "backend": "sim",
        "kernel": "k",
        "params": {},
        "gpu_compile": {"arch": "sm_90", "resources": good},
    }
    assert ptxas_count(SimpleNamespace(launch=launch)) == good
    for bad in ({**good, "registers": "40"}, {**good, "registers": 999}, {"registers": 40}, [40]):
        hostile = {**launch, "gpu_compile": {"arch": "sm_90", "resources": bad}}
        assert ptxas_count(SimpleNamespace(launch=hostile)) is None, bad
    hostile = {**launch, "gpu_compile": {"arch": "sm_90", "resources": {**good, "registers": "x"}}}
    assert compare._occupancy(SimpleNamespace(launch={**hostile, "threads_per_block": 64}))[0] is None
