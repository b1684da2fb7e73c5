"""Compare two captures (analysis/compare.py) and the ``compare`` CLI on bundles (tools/compare.py)."""

from __future__ import annotations

import json
import math

import pytest

from visualizer.analysis import compare as cmp
from visualizer.specs import catalog
from visualizer.specs.pairs import PAIRS
from visualizer.tools.bundle import BundleError, load, save
from visualizer.tools.cli import main


@pytest.fixture(scope="module")
def transpose_pair(sim_runner):
    pair = PAIRS["transpose"]
    return [sim_runner.capture(s.kernel, dict(s.params), accesses=True) for s in (pair.a, pair.b)]


def row(table, metric):
    return table.set_index("metric").loc[metric]


def test_pairs_name_real_kernels_in_range():
    for pair in PAIRS.values():
        for side in (pair.a, pair.b):
            spec = catalog.get(side.kernel)
            for backend in ("sim", "gpu"):
                params = side.params_for(backend)
                assert spec.resolve({k: str(v) for k, v in params.items()}) == {**spec.defaults(), **params}
            catalog.admit_capture(side.kernel, side.params_for("sim"), "sim")  # the simulator takes them


def test_compare_transpose_naive_vs_tiled(transpose_pair):
    a, b = transpose_pair
    table = cmp.compare(a, b)
    st = row(table, "global_st_sectors_per_request")
    # 64x64 float32, 32x32 blocks: a naive store writes one column (32 rows, 32 sectors); tiled: 4
    assert (st["a"], st["b"], st["ratio"]) == (32.0, 4.0, 0.125)
    assert row(table, "global_ld_sectors_per_request")[["a", "b"]].tolist() == [4.0, 4.0]
    assert row(table, "global_st_requests")[["a", "b"]].tolist() == [128.0, 128.0]
    assert row(table, "static_smem_bytes")[["a", "b"]].tolist() == [0.0, 32 * 32 * 4]
    # the unpadded tile's column reads are 32-way conflicts: 32 wavefronts per shared load request
    assert math.isnan(row(table, "shared_ld_wavefronts_per_request")["a"])
    assert row(table, "shared_ld_wavefronts_per_request")["b"] == 32.0
    # the simulator has no GPU time: the CPU time of the simulation has its own row, never ranked
    dev = row(table, "device_ms")
    assert math.isnan(dev["a"]) and dev["a_note"] == cmp.NO_GPU_TIME
    cpu = row(table, "sim_cpu_ms")
    assert cpu["a"] > 0 and cpu["a_source"] == cmp.SIM_TIME_SOURCE and "not kernel time" in cpu["what"]
    assert math.isnan(row(table, "launch_overhead_us")["a"])  # measured on a GPU only, never invented
    # modelled from the recorded sectors: naive 128 x 4 load + 128 x 32 store sectors, tiled 128 x (4 + 4)
    model = row(table, "modelled_us")
    assert model["a"] == pytest.approx((128 * 4 + 128 * 32) * 32 / cmp.H200_HBM_GBS / 1e3)
    assert model["b"] == pytest.approx((128 * 4 + 128 * 4) * 32 / cmp.H200_HBM_GBS / 1e3)
    branch = row(table, cmp.BRANCH_EFFICIENCY)
    assert math.isnan(branch["a"]) and branch["a_note"] == cmp.BRANCH_NOTE
    assert row(table, "wrong_elements")[["a", "b"]].tolist() == [0.0, 0.0]
    assert row(table, "hazards")[["a", "b"]].tolist() == [0.0, 0.0]
    diffs = cmp.differences(table)
    assert "transpose_tiled: 32 → 4 sectors per global store request" in diffs
    # the first line ranks what the simulator can count: the modelled time, its model named
    assert diffs[0].startswith("transpose_tiled: 4.50x faster (modelled time (memory traffic)"), diffs
    assert cmp.MODEL_NOTE in diffs[0]
    assert not any("CPU" in d or "wall" in d for d in diffs), diffs
    lines = cmp.lines(a, b)
    assert set(lines["side"]) == {"A", "B"}
    naive_store = lines[(lines["side"] == "A") & (lines["op"] == "store")]
    assert naive_store["sectors_per_request"].tolist() == [32.0]


def test_branch_efficiency_comes_from_the_simt_lens(sim_runner):
    small = {"n": 512, "reps": 4, "block": 64}
    a = sim_runner.capture("branch_lanes", small, branches=True, time_clean=False)
    b = sim_runner.capture("branch_warps", small, branches=True, time_clean=False)
    table = cmp.compare(a, b)
    eff = row(table, cmp.BRANCH_EFFICIENCY)
    assert eff["a"] == a.launch["branches"]["efficiency"] and eff["b"] == b.launch["branches"]["efficiency"]
    assert eff["a"] < eff["b"] == 100.0 and eff["a_note"] == ""
    assert any("branch efficiency" in d for d in cmp.differences(table))


def test_a_wrong_racy_b_is_said_before_any_speed(sim_runner, tmp_path, capsys):
    """CLI compare of a right and a racy bundle: rows for B's wrong output and B's hazards, first."""
    params = {"n": 256, "block": 64}
    a = sim_runner.capture("reduction", params, accesses=True)
    b = sim_runner.capture("reduction_race", params, accesses=True)
    save(a, tmp_path / "a")
    save(b, tmp_path / "b")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    wrong = int(sum(o["mismatches"] for o in b.check["outputs"].values()))
    hazards = sum(b.launch["accesses"]["hazards"][k] for k in ("RAW", "WAR", "WAW"))
    assert wrong > 0 and hazards > 0
    diffs = out.split("differences:")[1].strip().splitlines()
    assert diffs[0].strip() == (
        f"reduction_race's output is wrong: {wrong:,} element{'s' if wrong > 1 else ''} differ from the "
        "reference (A's is right)"
    )
    assert diffs[1].strip().startswith(f"reduction_race has {hazards:,} hazards")
    assert "output elements that differ from the reference" in out  # the table's row


def test_labels_name_what_differs(sim_runner):
    pair = PAIRS["stride"]
    a, b = (sim_runner.capture(s.kernel, dict(s.params), accesses=True) for s in (pair.a, pair.b))
    table = cmp.compare(a, b)
    assert table.attrs["labels"] == ("stride=32", "stride=1")
    assert "stride=1: 32 → 4 sectors per global load request" in cmp.differences(table)


def test_cli_compare_bundles(transpose_pair, tmp_path, capsys):
    a, b = transpose_pair
    save(a, tmp_path / "a")
    save(b, tmp_path / "b")
    back = load(tmp_path / "a")
    assert back.launch["accesses"]["global_st_sectors"] == a.launch["accesses"]["global_st_sectors"]
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "A: transpose_naive" in out and "transpose_tiled: 32 → 4 sectors per global store request" in out
    assert main(["compare", "--json", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    got = json.loads(capsys.readouterr().out)
    st = next(m for m in got["metrics"] if m["metric"] == "global_st_sectors_per_request")
    assert (st["a"], st["b"]) == (32.0, 4.0)
    from visualizer.tools.compare import beside

    back = (load(tmp_path / "a"), load(tmp_path / "b"))
    assert got["differences"] == cmp.differences(cmp.compare(*back, *beside(back)))


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: None, "no such bundle directory"),
        (lambda d: d.mkdir(), "no launch.json"),
        (lambda d: (d.mkdir(), (d / "launch.json").write_text("{not json")), "not valid JSON"),
        (lambda d: (d.mkdir(), (d / "launch.json").write_text("[1]")), "expected a JSON object"),
    ],
)
def test_cli_compare_bad_bundle_one_line(transpose_pair, tmp_path, capsys, make, words):
    save(transpose_pair[0], tmp_path / "a")
    make(tmp_path / "bad")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.startswith("error: ") and err.count("\n") == 1


def test_cli_compare_damaged_table_and_arguments(transpose_pair, tmp_path, capsys):
    save(transpose_pair[0], tmp_path / "a")
    save(transpose_pair[1], tmp_path / "b")
    (tmp_path / "b" / "threads.parquet").write_bytes(b"PAR1 broken")
    with pytest.raises(BundleError, match="not a readable Parquet table"):
        load(tmp_path / "b")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert main(["compare", str(tmp_path / "a")]) == 2
    with pytest.raises(SystemExit) as exited:  # argparse's error: one line, status 2
        main(["compare", "--pair", "nope"])
    assert exited.value.code == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 3 and all(e.startswith("error: ") for e in errs)


@pytest.mark.gpu
def test_compare_two_gpu_captures(gpu_runner):
    pair = PAIRS["transpose"]
    a, b = (gpu_runner.capture(s.kernel, s.params_for("gpu"), repeats=10) for s in (pair.a, pair.b))
    table = cmp.compare(a, b)
    dev = row(table, "device_ms")
    assert dev["a"] > 0 and dev["b"] > 0 and dev["a_source"] == cmp.MEASURED_GPU
    assert row(table, "launch_overhead_us")["a"] > 0
    assert row(table, "registers_per_thread")["a"] > 0
    assert 0 < row(table, "occupancy")["b"] <= 100 and row(table, "occupancy_limiter")["b_text"]
    assert any("measured on the GPU" in d for d in cmp.differences(table))


H200 = {
    "source": "measured on an NVIDIA H200, 2026-12-04, driver 580.159.04",
    "short": "NVIDIA H200, 2026-12-04",
}


def test_the_recording_is_beside_the_modelled_time_and_says_when_they_disagree(transpose_pair):
    """Simulator captures rank by what they count; the shipped recording's device time comes right after the
    modelled time, its device, date and launch named; the model ranking them the other way is said."""
    a, b = transpose_pair
    recorded = ({**H200, "ms": 0.00482, "exact": True, "line": "the same launch"},
                {**H200, "ms": 0.00490, "exact": True, "line": "the same launch"})  # fmt: skip
    compiled = ({"instructions": 61, "arch": "sm_90", "resources": {"registers": 20}},
                {"instructions": 93, "arch": "sm_90", "resources": {"registers": 24, "smem_bytes": 4096}})  # fmt: skip
    table = cmp.compare(a, b, compiled, recorded)
    rec = row(table, cmp.RECORDED_TIME)
    assert (rec["a"], rec["b"]) == pytest.approx((4.82, 4.90)) and rec["a_source"] == H200["source"]
    sass = row(table, cmp.SASS_INSTRUCTIONS)
    assert (sass["a"], sass["b"]) == (61, 93) and sass["a_source"].startswith("compiled (ptxas")
    assert row(table, "registers_per_thread")[["a", "b"]].tolist() == [20, 24]
    assert row(table, "occupancy")["a_source"].startswith("modelled (occupancy calculator")
    assert table.attrs["recorded"] == "NVIDIA H200, 2026-12-04" and not table.attrs["recorded_nearest"]
    diffs = cmp.differences(table)
    assert diffs[0].startswith("transpose_tiled: 4.50x faster (modelled time (memory traffic)")
    assert diffs[1].startswith(
        "transpose_tiled: 1.02x slower on the shipped recording (device time 4.82 → 4.90 µs, measured on an "
        "NVIDIA H200, 2026-12-04, driver 580.159.04; the same launches); the memory-traffic model ranks them "
        "the other way"
    ), diffs[1]
    assert (
        "transpose_tiled: 61 → 93 SASS instructions in the kernel (static count, NOP padding left out)"
        in diffs
    )
    assert not any("CPU" in d for d in diffs)
    # the nearest recorded launch is said, never taken for yours
    near = ({**recorded[0], "exact": False, "line": "nearest recorded: rows=32 (yours rows=64); not your launch"},
            recorded[1])  # fmt: skip
    table = cmp.compare(a, b, compiled, near)
    assert row(table, cmp.RECORDED_TIME)["a_source"].endswith(
        "; nearest recorded: rows=32 (yours rows=64); not your launch"
    )
    assert "the nearest recorded launches, not yours: the ratio is theirs" in cmp.differences(table)[1]
    assert table.attrs["recorded_nearest"]
    # none recorded, a set made on the simulator, hostile numbers: no row value, the reason instead
    for bad in ("histogram_global was not recorded in the shipped set", {**H200, "ms": None, "why": "simulated"},
                {**H200, "ms": float("nan")}, {**H200, "ms": -1.0}, {**H200, "ms": True}):  # fmt: skip
        r = row(cmp.compare(a, b, recorded=(bad, bad)), cmp.RECORDED_TIME)
        assert math.isnan(r["a"]) and r["a_note"] and not r["a_source"], bad
    hostile = row(
        cmp.compare(a, b, compiled=({"instructions": "9"}, {"instructions": 1 << 40})), cmp.SASS_INSTRUCTIONS
    )
    assert math.isnan(hostile["a"]) and math.isnan(hostile["b"]) and hostile["a_note"] == cmp.SASS_NOTE


def test_the_chart_draws_the_recording_with_its_device_and_the_counts_that_differ(transpose_pair):
    from visualizer.figures.compare import compare_figure

    a, b = transpose_pair
    rec = {**H200, "ms": 0.0048, "exact": False, "line": "nearest recorded"}
    table = cmp.compare(a, b, ({"instructions": 61}, {"instructions": 93}), (rec, rec))
    titles = [x.text.replace("<br>", " ") for x in compare_figure(table).layout.annotations]
    assert "device time (µs, measured on H200, 2026-12-04, nearest)" in titles, titles
    assert any(t.startswith("SASS instructions (static) (compiled)") for t in titles)
    assert any("per global store request" in t for t in titles)  # 32 vs 4: drawn
    assert not any(
        "per global load request" in t or "hazards" in t for t in titles
    )  # 4 vs 4, 0 vs 0: the table's
    assert any(t.startswith("modelled time") for t in titles)  # times are drawn even where equal


def test_cli_compare_counts_sass_and_puts_the_shipped_recording_beside(
    transpose_pair, tmp_path, capsys, monkeypatch
):
    """``compare A B`` on two simulator bundles: the kernels' SASS counted (ptxas, nvdisasm) and the device time of
    the same launches from the measured set shipped with the app, its device and date said."""
    from visualizer.analysis import measured_set as ms
    from visualizer.engine.capture import ptx

    monkeypatch.delenv(ms.SET_ENV)
    the_set, why = ms.load_set(ms.SHIPPED_DIR)
    a, b = transpose_pair
    save(a, tmp_path / "a")
    save(b, tmp_path / "b")
    assert main(["compare", "--json", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    got = json.loads(capsys.readouterr().out)
    rows = {m["metric"]: m for m in got["metrics"]}
    if ptx.tool("ptxas") and ptx.tool("nvdisasm"):
        assert (
            rows["sass_instructions"]["a"] > 10
            and rows["sass_instructions"]["b"] > rows["sass_instructions"]["a"]
        )
        assert rows["registers_per_thread"]["a_source"] == "compiled (ptxas -v, sm_90)"
    else:
        assert rows["sass_instructions"]["a_note"] == ptx.NO_SASS_TOOLS
    if (
        the_set is None
        or not the_set.measured
        or not ms.nearest(the_set, "transpose_naive", a.launch["params"])
    ):
        pytest.skip(why or "the shipped set holds no measured transpose")
    rec = rows[cmp.RECORDED_TIME]
    assert rec["a"] > 0 and rec["b"] > 0 and rec["a_source"].startswith(the_set.label())
    assert any("on the shipped recording" in d and the_set.label() in d for d in got["differences"])
    assert not any("CPU" in d for d in got["differences"])
    assert main(["compare", "--no-sass", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "device time of the shipped recording" in text and cmp.SASS_NOTE in text
