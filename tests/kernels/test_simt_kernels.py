"""The SIMT lesson's kernel pair on the simulator: numpy's answer, and the branch visits each warp must
make (a model written from the kernels' text: lane parity splits every warp, warp parity none)."""

import pytest

from visualizer.specs import catalog
from visualizer.specs.pairs import PAIRS

FULL = 0xFFFFFFFF
EVEN_LANES = 0x55555555


@pytest.mark.parametrize("kernel", ["branch_lanes", "branch_warps"])
def test_pair_matches_numpy_and_its_visits(sim_runner, kernel):
    n, reps, block = 512, 5, 128
    cap = sim_runner.capture(kernel, {"n": n, "reps": reps, "block": block}, branches=True)
    assert cap.check["correct"], cap.check
    sites = cap.launch["lens"]["branches"]["sites"]
    assert [s["kind"] for s in sites] == ["if", "if", "for", "for"]  # i < n, the parity test, two sides
    got = {}
    for r in cap.branches.itertuples():
        got.setdefault((r.block, r.warp, r.site), []).append((r.active_mask, r.taken_mask))
    want = {}
    for b in range(n // block):
        for w in range(block // 32):
            want[(b, w, 0)] = [(FULL, FULL)]
            if kernel == "branch_lanes":  # even lanes run side A, odd side B: both sides in every warp
                want[(b, w, 1)] = [(FULL, EVEN_LANES)]
                want[(b, w, 2)] = [(EVEN_LANES, EVEN_LANES)] * reps + [(EVEN_LANES, 0)]
                want[(b, w, 3)] = [(~EVEN_LANES & FULL, ~EVEN_LANES & FULL)] * reps + [
                    (~EVEN_LANES & FULL, 0)
                ]
            else:  # whole warps: even warps side A, odd warps side B
                want[(b, w, 1)] = [(FULL, FULL if w % 2 == 0 else 0)]
                want[(b, w, 3 - (w % 2 == 0))] = [(FULL, FULL)] * reps + [(FULL, 0)]
    assert got == want
    s = cap.launch["branches"]
    warps = n // 32
    if kernel == "branch_lanes":
        assert s["divergent_warps"] == warps and s["divergent_visits"] == warps
        assert s["efficiency"] == pytest.approx(100 * (1 - 1 / (2 + 2 * (reps + 1))), abs=1e-3)
    else:
        assert s["divergent_warps"] == 0 and s["efficiency"] == 100.0


def test_the_pair_is_registered_for_compare():
    pair = PAIRS["divergence"]
    for side in (pair.a, pair.b):
        for backend in ("sim", "gpu"):
            catalog.get(side.kernel).resolve(side.params_for(backend))


def test_divergence_lesson_answers_from_its_runs(sim_runner):
    from visualizer.analysis import lesson_answers as A
    from visualizer.web.lessons import BY_NAME

    lesson = BY_NAME["divergence"]
    v = lesson.defaults()
    caps = {role: sim_runner.capture(r.kernel, r.params, **r.options()) for role, r in lesson.runs(v).items()}
    lanes, warps, slow = (q.answer(caps, v) for q in lesson.questions)
    reps, warps_n = v["reps"], v["n"] // 32
    # one divergent visit per warp (the parity test) among 2 + 2 (reps + 1) visits
    assert lanes.value == pytest.approx(round(100 * (1 - 1 / (2 + 2 * (reps + 1))), 1))
    assert lanes.facts["divergent_warps"] == warps_n and lanes.facts["mean_active"] < 17
    assert warps.value == 100.0 and warps.facts["mean_active"] == 32
    # simulator: modelled from the bodies each warp runs: the guard's, the parity if's (taken in every
    # warp of branch_lanes, in the even warps of branch_warps) and both loops' against one
    modelled = (2 + 2 * reps) / (1.5 + reps)
    assert slow.source.startswith("modelled") and slow.value == pytest.approx(modelled, abs=0.01)
    assert "modelled" in lesson.questions[2].explain(slow, v)
    figs = lesson.charts(caps, v, [lanes, warps, slow])
    assert [f.layout.title.text.split(":")[0] for _, f in figs] == ["branch_lanes", "branch_warps"]
    assert A.grade(lanes.value * 1.01, lanes.value, lesson.questions[0].tolerance)[0]
