"""Each lesson's answer is computed from the run's capture: change the launch and the answer follows."""

import math

import pytest

from visualizer.analysis import lesson_answers as A
from visualizer.analysis.occupancy import ARCHS
from visualizer.web.lessons import LESSONS


def run(sim_runner, kernel, params, accesses=False, **options):
    return sim_runner.capture(kernel, params, accesses=accesses, time_clean=False, **options)


@pytest.mark.parametrize(
    "n,block,warps,idle",
    [
        (1000, 128, 4, 24),  # 8 blocks x 4 warps = 1024 lanes, 24 threads past n
        (1000, 100, 4, 10 * 28 + 0),  # 10 blocks of 100 threads: 28 lanes without a thread each
        (200, 48, 2, 5 * 16 + 40),  # 5 blocks of 2 warps (16 empty lanes each), 240 - 200 past n
        (64, 32, 1, 0),
    ],
)
def test_warps_and_idle_lanes_follow_the_launch(sim_runner, n, block, warps, idle):
    cap = run(sim_runner, "vector_add", {"n": n, "block": block})
    assert A.warps_per_block(cap).value == warps == math.ceil(block / 32)
    lanes = A.idle_lanes(cap)
    assert lanes.value == idle
    assert lanes.facts["lanes"] - lanes.facts["active"] == idle


@pytest.mark.parametrize("gpu", ["H200", "T4"])
@pytest.mark.parametrize("n,block", [(100_000, 256), (400_000, 256), (400_000, 1024)])
def test_waves_follow_the_grid_and_the_gpu(sim_runner, gpu, n, block):
    cap = run(sim_runner, "vector_add", {"n": n, "block": block})
    w = A.waves(cap, gpu, 32)
    blocks = math.ceil(n / block)
    assert w.facts["blocks"] == blocks
    assert w.facts["sms"] == ARCHS[A.GPU_ARCHS[gpu]].num_sms
    assert w.value == math.ceil(blocks / w.facts["per_wave"])
    assert 0 < w.facts["tail_blocks"] <= w.facts["per_wave"]


def test_occupancy_limiter_changes_with_block_and_registers(sim_runner):
    small = run(sim_runner, "vector_add", {"n": 128, "block": 32})
    mid = run(sim_runner, "vector_add", {"n": 1024, "block": 256})
    occ_small, lim_small = A.occupancy_answer(small, "H200", 32)
    assert lim_small.value == "blocks"  # 32 block slots x 1 warp: half the warp slots
    assert occ_small.value == 50.0
    occ, lim = A.occupancy_answer(mid, "H200", 32)
    assert occ.value == 100.0 and set(lim.facts["accepted"]) == {"warps", "registers"}  # a tie
    assert A.grade("registers", lim.value, 0, lim.facts["accepted"])[0]
    assert not A.grade("blocks", lim.value, 0, lim.facts["accepted"])[0]
    occ_regs, lim_regs = A.occupancy_answer(mid, "H200", 128)
    assert lim_regs.value == "registers" and occ_regs.value < occ.value


def test_cpu_vs_gpu_models_the_whole_flow_with_the_memory_flows_bandwidth(sim_runner):
    """The GPU side is what a numpy caller pays: allocate, copies in, launch + kernel, copy back, with the
    one H200 bandwidth of specs/gpus.py (the memory flow's), never a bare kernel at the nominal 4,800 GB/s."""
    from visualizer.analysis.transfers import flow_model
    from visualizer.specs.gpus import H200_HBM_GBS, H200_HOST, MODEL_GPUS

    assert MODEL_GPUS["H200"]["mem_gbs"] == H200_HBM_GBS == flow_model("H200")["mem_gbs"] == 4247.0
    cap = run(sim_runner, "vector_add", {"n": 1000, "block": 256})
    g_us, source = A.gpu_time_us(cap)
    assert source.startswith("modelled, not measured") and "4,247 GB/s" in source and "copy" in source
    h = H200_HOST
    want_ns = (
        3 * h["alloc_ns"]
        + 2 * h["h2d_latency_ns"] + 8000 / h["h2d_gbs"]
        + h["launch_ns"] + 12000 / H200_HBM_GBS
        + h["d2h_latency_ns"] + 4000 / h["d2h_gbs"]
    )  # fmt: skip
    assert g_us == pytest.approx(want_ns / 1e3)
    assert A.kernel_only_us(cap) == pytest.approx((h["launch_ns"] + 12000 / H200_HBM_GBS) / 1e3)
    ans = A.faster_side(cap, numpy_us=g_us / 2)
    assert ans.value == "numpy (CPU)" and ans.facts["kernel_us"] < ans.facts["gpu_us"]
    assert A.faster_side(cap, numpy_us=g_us * 2).value == "GPU kernel"
    assert A.numpy_time_us(cap) > 0


def test_cpu_vs_gpu_sentence_follows_the_numbers(sim_runner):
    from visualizer.web.lessons import _cpu_gpu_verdict

    cap = run(sim_runner, "vector_add", {"n": 1000, "block": 256})
    g_us, _ = A.gpu_time_us(cap)
    k_us = A.kernel_only_us(cap)
    between = A.faster_side(cap, numpy_us=(g_us + k_us) / 2)  # the kernel beats numpy, the copies lose
    assert "copying a and b in" in _cpu_gpu_verdict(between, {})
    assert "wins even with its copies" in _cpu_gpu_verdict(A.faster_side(cap, numpy_us=g_us * 2), {})
    assert "small arrays lose" in _cpu_gpu_verdict(A.faster_side(cap, numpy_us=k_us / 2), {})


def test_race_kinds_are_said_in_words():
    from visualizer.web.lessons import kinds_text

    assert kinds_text({"RAW": 124}) == "124 read-after-write hazards (RAW)"
    assert "{" not in kinds_text({"RAW": 1, "WAR": 2}) and kinds_text({}) == "no hazards"


def test_copy_share_is_latency_plus_bytes_over_the_link(sim_runner):
    from visualizer.analysis.transfers import H200_HOST as H

    small = A.copy_share(run(sim_runner, "vector_add", {"n": 1000, "block": 256}))
    big = A.copy_share(run(sim_runner, "vector_add", {"n": 100_000, "block": 256}))
    assert small.facts["bytes_in"] == 8 * 1000 and big.facts["bytes_in"] == 8 * 100_000
    # the extra bytes cross the host link once; the per-array latencies are the same for both
    extra = (8 * 99_000 / H["h2d_gbs"] + 4 * 99_000 / H["d2h_gbs"]) / 1e3
    assert big.facts["copies_us"] - small.facts["copies_us"] == pytest.approx(extra)
    assert small.facts["copies_us"] > 2 * H["h2d_latency_ns"] / 1e3  # a and b each pay the latency
    assert small.facts["copies_us"] > 10 * small.facts["kernel_us"]  # the copies dominate even when tiny
    assert small.value < big.value < 100
    assert "latencies measured on the H200 host" in big.source


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (4, 16), (8, 32), (32, 32)])
def test_sectors_per_request_follow_the_stride(sim_runner, stride, sectors):
    cap = run(sim_runner, "strided_copy", {"n": 256, "stride": stride, "block": 128}, accesses=True)
    assert A.worst_sectors_per_request(cap).value == sectors
    assert A.worst_bank_ways(cap).value == 0  # no shared memory


@pytest.mark.parametrize("kernel,ways", [("transpose_tiled", 32), ("transpose_padded", 1)])
def test_bank_ways_of_the_transposes(sim_runner, kernel, ways):
    cap = run(sim_runner, kernel, {"rows": 64, "cols": 64, "tile": 32}, accesses=True)
    assert A.worst_bank_ways(cap).value == ways
    assert A.worst_sectors_per_request(cap).value == 4


def test_race_answers(sim_runner):
    race = run(sim_runner, "reduction_race", {"n": 128, "block": 32}, accesses=True)
    ok = run(sim_runner, "reduction", {"n": 128, "block": 32}, accesses=True)
    assert A.any_race(race).value == "yes" and A.raced_words(race).value > 0
    assert A.any_race(ok).value == "no" and A.raced_words(ok).value == 0


@pytest.mark.parametrize("tile", [8, 16])
def test_halo_loads_follow_the_tile(sim_runner, tile):
    cap = run(sim_runner, "heat_stencil", {"ny": 48, "nx": 48, "tile": tile}, accesses=True)
    a = A.halo_loads_per_block(cap)
    assert a.value == tile * tile + 4 * tile
    assert a.facts["uninit"] == 0


@pytest.mark.parametrize("nbins,hot", [(64, 0), (8, 100), (1, 0)])
def test_busiest_bin_atomics(sim_runner, nbins, hot):
    params = {"n": 1024, "nbins": nbins, "hot": hot, "block": 256}
    naive = run(sim_runner, "histogram_global", params, accesses=True)
    private = run(sim_runner, "histogram_shared", params, accesses=True)
    counts = naive.outputs["bins"]
    assert A.busiest_bin_atomics(naive).value == counts.max()  # one global atomic per value
    assert A.busiest_bin_atomics(private).value <= naive.launch["blocks"] == 4


@pytest.mark.parametrize("seq_len", [32, 64])
def test_flash_bytes(sim_runner, seq_len):
    p = {"seq_len": seq_len, "tile": 16, "heads": 1, "head_dim": 32}
    naive, flash = run(sim_runner, "naive_attention", p), run(sim_runner, "flash_attention", p)
    assert A.score_matrix_kib(naive).value == pytest.approx(seq_len * seq_len * 4 / 1024, abs=0.05)
    smem = A.flash_smem_kib(flash)
    assert smem.facts["bytes"] == flash.launch["static_smem_bytes"] > 0
    assert smem.facts["extra_outputs"] == []  # the flash kernel writes no S


def test_grade():
    assert A.grade(4, 4) == (True, "exactly")
    assert A.grade(5, 4)[0] is False
    assert A.grade(104, 100, 0.05)[0] is True
    assert A.grade("no", "yes") == (False, "the run says yes")


def assert_answers_and_draws(lesson, caps: dict, v: dict) -> None:
    """Every question of the lesson answers from these captures (a choice among its choices, with its source
    and explanation), and its charts are drawn, each titled."""
    got = [q.answer(caps, v) for q in lesson.questions]
    for q, a in zip(lesson.questions, got, strict=True):
        if q.kind == "choice":
            assert a.value in q.choices, (lesson.name, a.value)
        assert a.source and q.explain(a, v)
    figs = lesson.charts(caps, v, got)
    assert figs and all(f.layout.title.text for _, f in figs), lesson.name


# one test per lesson: the workers share them out
@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.name)
def test_every_lesson_answers_and_draws_from_its_default_run(sim_runner, lesson):
    v = lesson.defaults()
    caps = {
        role: run(sim_runner, r.kernel, r.params, accesses=r.accesses, **r.options())
        for role, r in lesson.runs(v).items()
    }
    assert_answers_and_draws(lesson, caps, v)


@pytest.mark.gpu
def test_every_lesson_answers_and_draws_from_a_gpu_run(gpu_runner, sim_runner):
    """On a GPU, every lesson of the path answers and draws from its default launches as the page makes them:
    launches (and the SIMT lens) on the GPU; recorded accesses and runs in seeded schedules on the simulator."""
    for lesson in LESSONS:
        v = lesson.defaults()
        caps, on_gpu = {}, []
        for role, r in lesson.runs(v).items():
            where = sim_runner if (r.accesses or r.runs > 1) else gpu_runner
            caps[role] = run(where, r.kernel, r.params, accesses=r.accesses, **r.options())
            if where is gpu_runner:
                on_gpu.append(role)
        assert all(caps[role].launch["backend"] == "gpu" for role in on_gpu), lesson.name
        assert_answers_and_draws(lesson, caps, v)


@pytest.mark.gpu
def test_gpu_captures_answer_with_measured_times_and_compiled_registers(gpu_runner):
    cap = gpu_runner.capture("vector_add", {"n": 1 << 20, "block": 256})
    g_us, source = A.gpu_time_us(cap)
    steps = cap.timing["host_steps_ns"]  # the whole flow a numpy caller pays, each step measured
    assert source.startswith("measured") and g_us == pytest.approx(sum(steps[k] for k in A.FLOW_STEPS) / 1e3)
    assert g_us > cap.timing["clean_ms"] * 1e3  # the copies and the launch come on top of the kernel
    share = A.copy_share(cap)
    assert share.source == cap.source and 0 < share.value < 100
    regs, why = A.regs_of(cap, 999)
    assert regs != 999 and "compiled" in why
    assert A.warps_per_block(cap).value == 8


def test_cpu_vs_gpu_bars_show_the_shorter_time_as_a_bar_with_a_level_label():
    from visualizer.figures.lessons import time_bars_figure

    fig = time_bars_figure([("numpy", 0.52, "measured: numpy"), ("kernel", 4.0, "modelled: H200")], "t")
    lo, hi = fig.layout.xaxis.range
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.autorange is False
    # on a log axis a bar runs from the axis' left edge: the shorter one must still be a visible bar
    assert (math.log10(0.52) - lo) / (hi - lo) > 0.25
    assert hi >= math.log10(4.0)
    assert fig.data[0].textangle == 0  # never turned sideways into a sliver of a bar
    assert list(fig.layout.xaxis.ticktext) == ["0.1", "0.2", "0.5", "1", "2", "5"]


@pytest.mark.parametrize(
    ("n", "gpu", "words", "frame"),
    [
        (286_720, "H200", "the other 68 of 132 SMs sit idle", "64 blocks on 64 of 132 SMs: 68 SMs idle"),
        (400_000, "H200", "no SM is idle, but 549 of 1,056", "every SM busy, 549 of 1,056 slots empty"),
    ],
)
def test_waves_lesson_says_idle_sms_only_when_its_chart_shows_them(sim_runner, n, gpu, words, frame):
    from visualizer.web.lessons import SCHEDULER

    values = {"n": n, "block": 256, "gpu": gpu}
    cap = run(sim_runner, "vector_add", {"n": n, "block": 256})
    answer = SCHEDULER.questions[0].answer({"main": cap}, values)
    text = SCHEDULER.questions[0].explain(answer, values)
    assert words in text
    ((_, fig),) = SCHEDULER.charts({"main": cap}, values, [answer])
    last = fig.frames[-1].layout.title.text
    assert frame in last and f"Wave {answer.value} of {answer.value} (the tail)" in last


def test_waves_lesson_default_launch_idles_sms_in_its_tail():
    from visualizer.web.lessons import SCHEDULER

    assert SCHEDULER.defaults()["n"] == 286_720 and SCHEDULER.defaults()["gpu"] == "H200"


def test_histogram_lesson_default_can_be_reasoned_out_and_a_random_draw_is_graded_fairly(sim_runner):
    from visualizer.web.lessons import HISTOGRAM

    values = HISTOGRAM.defaults()
    assert values["hot"] == 100  # every value in bin 0: the busiest bin is exactly n
    q = HISTOGRAM.questions[0]
    caps = {
        role: run(sim_runner, r.kernel, r.params, r.accesses) for role, r in HISTOGRAM.runs(values).items()
    }
    answer = q.answer(caps, values)
    assert answer.value == 4096 and "every one of the 4,096 values falls in bin 0" in q.explain(
        answer, values
    )
    # uniform values: the busiest bin is a random maximum; the reasoned n / nbins is graded right
    uniform = {**values, "hot": 0}
    caps = {
        role: run(sim_runner, r.kernel, r.params, r.accesses) for role, r in HISTOGRAM.runs(uniform).items()
    }
    answer = q.answer(caps, uniform)
    assert answer.value > 64 and "4,096 ÷ 64 bins ≈ 64" in q.explain(answer, uniform)
    assert A.grade(64, answer.value, q.tolerance)[0]


@pytest.mark.parametrize(("block", "words"), [(128, "no lane is without a thread"), (48, "pale yellow")])
def test_threads_lesson_names_only_the_cells_its_chart_draws(sim_runner, block, words):
    from visualizer.web.lessons import THREADS

    values = {"n": 200, "block": block}
    cap = run(sim_runner, "vector_add", values)
    q = THREADS.questions[1]
    answer = q.answer({"main": cap}, values)
    assert words in q.explain(answer, values)
    ((_, fig),) = THREADS.charts({"main": cap}, values, [answer])
    drawn = [t for t in fig.data if t.type == "heatmap" and t.name == "no thread"]
    assert bool(drawn) == bool(answer.facts["no_thread"])
    if drawn:  # one cell per lane without a thread
        assert sum(len(row) for row in drawn[0].z) == answer.facts["no_thread"]
