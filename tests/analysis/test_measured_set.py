"""The measured set: recorded by devtools/ship_h200.py (here on the simulator, labelled so), read back by
analysis/measured_set.py: the same launch or the nearest, said as such; damaged sets are absent with a line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import ship_h200
from visualizer.analysis import measured_set as ms

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """vector_add and reduction's default launches, recorded on the simulator (the suite's fixture set)."""
    out = tmp_path_factory.mktemp("set") / "sim_set"
    rc = ship_h200.main(
        ["--out", str(out), "--kernels", "vector_add,reduction", "--no-lessons", "--backend", "sim"]
    )
    assert rc == 0
    return out


def copy_of(recorded: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "set"
    shutil.copytree(recorded, dest)
    return dest


def test_the_index_names_the_device_versions_and_every_file_with_its_size(recorded):
    index = json.loads((recorded / "index.json").read_text())
    assert index["format"] == ms.FORMAT and index["version"] == ms.VERSION
    assert index["device"]["name"] == "CUDA simulator on CPU" and index["device"]["backend"] == "sim"
    assert index["versions"]["numba_cuda"] and index["versions"]["visualizer"]
    assert index["recorded_at"].endswith("Z") and index["tool"].startswith("devtools.ship_h200")
    ids = sorted(r["id"] for r in index["launches"])
    assert ids == ["reduction.block-128.n-1000", "vector_add.block-128.n-1000"]
    total = 0
    for r in index["launches"]:
        assert r["roles"] == ["default"] and "accesses" in r["lenses"] and "branches" in r["lenses"]
        on_disk = {p.name: p.stat().st_size for p in (recorded / r["id"]).iterdir()}
        assert on_disk == r["files"]  # every file listed, with its size; no arrays.npz
        assert "threads.parquet" in on_disk and "arrays.npz" not in on_disk
        label = json.loads((recorded / r["id"] / "launch.json").read_text())["recorded"]
        assert label["device"] == "CUDA simulator on CPU" and label["recorded_at"] == index["recorded_at"]
        total += sum(r["files"].values())
    assert index["total_bytes"] == total < 2 * 2**20  # two small launches: well under a MiB each


def test_a_simulator_set_is_never_labelled_measured(recorded):
    the_set, why = ms.load_set(recorded)
    assert why is None and not the_set.measured
    assert the_set.label().endswith("simulated, not measured") and "H200" not in the_set.label()
    match, _ = ms.find("vector_add", {"n": 1000, "block": 128}, recorded)
    assert "simulated" in match.heading() and "measured on" not in match.heading()


def test_expect_device_refuses_the_simulator_and_writes_nothing(tmp_path):
    out = tmp_path / "h200"
    res = subprocess.run(
        [sys.executable, "-m", "devtools.ship_h200", "--out", str(out), "--kernels", "vector_add",
         "--no-lessons", "--backend", "sim", "--expect-device", "H200"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "never labelled as a GPU" in lines[0]
    assert not (out / "index.json").exists()


def test_a_set_of_another_device_is_not_added_to(recorded, tmp_path):
    dest = copy_of(recorded, tmp_path)
    index = json.loads((dest / "index.json").read_text())
    index["device"].update(name="NVIDIA H200", backend="gpu")
    (dest / "index.json").write_text(json.dumps(index))
    args = ["--out", str(dest), "--kernels", "vector_add", "--no-lessons", "--backend", "sim", "--again"]
    assert ship_h200.main(args) == 2
    assert json.loads((dest / "index.json").read_text())["device"]["name"] == "NVIDIA H200"  # untouched


def test_an_unknown_kernel_is_one_line_exit_2(tmp_path, capsys):
    assert ship_h200.main(["--out", str(tmp_path / "s"), "--backend", "sim", "--kernels", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown kernel 'nope'" in err[0]


def test_a_bad_flag_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        ship_h200.main(["--out", str(tmp_path / "s"), "--max-mb", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be at least 1" in err[0]


def test_the_package_folder_with_its_readme_takes_a_set():
    assert ship_h200.out_problem(ms.SHIPPED_DIR) is None or (ms.SHIPPED_DIR / "index.json").exists()


def test_a_foreign_directory_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert ship_h200.main(["--out", str(tmp_path), "--kernels", "vector_add", "--backend", "sim"]) == 2
    assert "neither empty nor a measured set" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_same_launch_and_the_nearest_one(recorded):
    match, why = ms.find("vector_add", {"n": 1000, "block": 128}, recorded)
    assert why is None and match.exact and match.line() == "the same launch (block=128, n=1000)"
    cap = match.capture()
    assert len(cap.threads) == 1024 and cap.launch["kernel"] == "vector_add"
    near, _ = ms.find("vector_add", {"n": 4096, "block": 128}, recorded)
    assert not near.exact and near.launch.params == {"n": 1000, "block": 128}
    assert near.line() == "nearest recorded: n=1000 (yours n=4096); not your launch"
    assert near.heading().startswith("The nearest recorded launch")
    none, why = ms.find("matmul_tiled", {"n": 48, "tile": 16}, recorded)
    assert none is None and why.startswith("matmul_tiled was not recorded")


def test_nearest_prefers_the_closer_size_and_a_matching_choice():
    a = ms.Recorded("a", "k", {"n": 1000, "block": 128}, {"threads.parquet": 1})
    b = ms.Recorded("b", "k", {"n": 100000, "block": 256}, {"threads.parquet": 1})
    the_set = ms.MeasuredSet(
        Path("."), {"name": "NVIDIA H200", "backend": "gpu"}, {}, "2026-12-04T10:00:00Z", "t", (a, b)
    )
    assert ms.nearest(the_set, "k", {"n": 50000, "block": 256}).launch.id == "b"
    assert ms.nearest(the_set, "k", {"n": 4000, "block": 128}).launch.id == "a"
    assert the_set.label() == "measured on an NVIDIA H200, 2026-12-04"
    assert ms.nearest(the_set, "other", {}) is None


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda i: i.update(format="something else"), "not a measured set"),
        (lambda i: i.update(version=99), "set version 99"),
        (lambda i: i["launches"][0].update(id="../../etc"), "not a valid name"),
        (lambda i: i["launches"][0]["files"].update({"x.parquet": 2**40}), "file size must be a count"),
        (lambda i: i["device"].update(backend="tpu"), "backend must be"),
        (lambda i: i["launches"][0].update(params={"n": [1, 2]}), "must be a number or text"),
        (lambda i: i.update(launches=[i["launches"][0]] * 2), "twice"),
    ],
)
def test_a_damaged_index_is_absent_with_one_line(recorded, tmp_path, mutate, words):
    dest = copy_of(recorded, tmp_path)
    index = json.loads((dest / "index.json").read_text())
    mutate(index)
    (dest / "index.json").write_text(json.dumps(index))
    the_set, why = ms.load_set(dest)
    assert the_set is None and words in why and "\n" not in why


def test_index_that_is_not_json_is_absent(recorded, tmp_path):
    dest = copy_of(recorded, tmp_path)
    (dest / "index.json").write_bytes(b"\xff{" * 10)
    the_set, why = ms.load_set(dest)
    assert the_set is None and "not valid JSON" in why


def test_a_damaged_bundle_is_a_one_line_error_not_a_traceback(recorded, tmp_path):
    dest = copy_of(recorded, tmp_path)
    match, _ = ms.find("reduction", {"n": 1000, "block": 128}, dest)
    threads = dest / match.launch.id / "threads.parquet"
    data = bytearray(threads.read_bytes())
    data[-4:] = b"JUNK"  # the footer's magic: same size, unreadable
    threads.write_bytes(bytes(data))
    with pytest.raises(ms.SetError, match="not a readable Parquet table"):
        match.capture()
    threads.write_bytes(bytes(data[:100]))  # a different size than the index says
    with pytest.raises(ms.SetError, match="the index says"):
        match.capture()


def test_a_bundle_of_another_device_or_launch_is_refused(recorded, tmp_path):
    dest = copy_of(recorded, tmp_path)
    match, _ = ms.find("vector_add", {"n": 1000, "block": 128}, dest)
    launch_json = dest / match.launch.id / "launch.json"
    launch = json.loads(launch_json.read_text())
    launch["device_name"] = "NVIDIA H200"  # a simulated bundle passed off as the GPU's
    text = json.dumps(launch, separators=(",", ":")) + "\n"
    launch_json.write_text(text)
    index = json.loads((dest / "index.json").read_text())
    for r in index["launches"]:
        if r["id"] == match.launch.id:
            r["files"]["launch.json"] = len(text.encode())
    (dest / "index.json").write_text(json.dumps(index))
    match, _ = ms.find("vector_add", {"n": 1000, "block": 128}, dest)
    with pytest.raises(ms.SetError, match="not the set's device"):
        match.capture()


def test_the_shipped_set_if_any_is_a_gpu_recording():
    """What the package ships is measured on a GPU, never a simulator's run (absent until recorded)."""
    the_set, why = ms.load_set(ms.SHIPPED_DIR)
    if the_set is None:
        assert why.startswith("no measured set")
        return
    assert the_set.measured and the_set.device["backend"] == "gpu"
    assert sum(r.bytes for r in the_set.launches) <= ms.SET_MAX_BYTES


def test_the_shipped_set_holds_every_planned_launch_but_the_faulting_one():
    """Every built-in kernel's default launch and every lesson's launches (the CPU-vs-GPU and memory-flow lessons
    at each setting) are in the shipped set, so a GPU-less machine has the H200's run beside each of them; only
    out_of_bounds_write, which faults by design, is not."""
    from visualizer.specs.catalog import KERNELS

    the_set, why = ms.load_set(ms.SHIPPED_DIR)
    assert the_set is not None, why
    plan = ship_h200.planned_launches(list(KERNELS), True, ("cpu_gpu", "memory_flow"))
    held = {r.id for r in the_set.launches}
    missing = sorted(e["id"] for e in plan if e["id"] not in held)
    assert [m.split(".")[0] for m in missing] == ["out_of_bounds_write"], missing


def test_launch_ids_are_plain_names():
    assert ship_h200.launch_id("vector_add", {"n": 1000, "block": 128}) == "vector_add.block-128.n-1000"
    long = ship_h200.launch_id("flash_attention", {f"p{i}": 10**9 for i in range(20)})
    assert len(long) <= 120 and ms.LAUNCH_ID.fullmatch(long)
    assert ship_h200.launch_id("k", {"x": 0.5}) == "k.x-0.5" and ms.LAUNCH_ID.fullmatch("k.x-0.5")


def test_the_same_command_again_keeps_what_the_set_holds_and_records_the_rest(recorded, tmp_path, capsys):
    dest = copy_of(recorded, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in (dest / "vector_add.block-128.n-1000").iterdir()}
    rc = ship_h200.main(
        ["--out", str(dest), "--kernels", "vector_add,reduction", "--no-lessons", "--backend", "sim"]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "2 of them are in the set already" in out and "set: 2 launches" in out
    after = {p.name: p.stat().st_mtime_ns for p in (dest / "vector_add.block-128.n-1000").iterdir()}
    assert after == before  # not recorded again
    the_set, why = ms.load_set(dest)
    assert why is None and len(the_set.launches) == 2


def test_two_captures_of_one_launch_merge_into_one_bundle(sim_runner, tmp_path):
    """The GPU's two captures (timed timeline; lenses), merged as the set keeps them: here on the simulator."""
    timed = sim_runner.capture("reduction", {"n": 1000, "block": 128})
    lensed = sim_runner.capture("reduction", {"n": 1000, "block": 128}, accesses=True, branches=True)
    assert timed.requests is None and timed.branches is None
    ship_h200.merge_lenses(timed, lensed)
    assert timed.requests is lensed.requests and timed.branches is lensed.branches
    assert timed.launch["accesses"] == lensed.launch["accesses"] and "branches" in timed.launch["lens"]
    tables, capped = ship_h200.compact_tables(timed)
    files = ship_h200.write_bundle(timed, tmp_path / "b", capped, tables, {"device": "CUDA simulator on CPU"})
    assert {"threads.parquet", "requests.parquet", "branches.parquet", "launch.json", "timing.json"} <= set(
        files
    )
    from visualizer.analysis.bundle_read import load

    back = load(tmp_path / "b")
    assert len(back.requests) == len(lensed.requests) and len(back.threads) == len(timed.threads)


@pytest.mark.gpu
def test_recording_on_the_gpu_keeps_barrier_waits_accesses_and_device_time(tmp_path):
    out = tmp_path / "h200"
    args = [
        "--out",
        str(out),
        "--kernels",
        "reduction",
        "--no-lessons",
        "--backend",
        "gpu",
        "--expect-device",
        "H200",
    ]
    assert ship_h200.main(args) == 0
    the_set, why = ms.load_set(out)
    assert why is None and the_set.measured and the_set.label().startswith("measured on an NVIDIA H200, ")
    assert the_set.device["driver"] and the_set.device["compute_capability"] == "9.0"
    (rec,) = the_set.launches
    assert set(rec.lenses) == {"barriers", "accesses", "branches"}
    cap = ms.Match(the_set, rec, True, rec.params).capture()
    assert cap.timing["clean_ms"] > 0 and cap.timing["launch_overhead_us"] > 0
    assert len(cap.barriers) and len(cap.requests) and len(cap.branches)
    assert cap.launch["recorded"]["device"] == "NVIDIA H200"


def test_a_lesson_sweep_plans_each_option_of_each_control():
    plan = ship_h200.planned_launches(["vector_add"], True, ("cpu_gpu",))
    cpu_gpu = {e["params"]["n"] for e in plan if any(r.startswith("lesson cpu_gpu") for r in e["roles"])}
    assert cpu_gpu == {1000, 10_000, 100_000, 524_288}  # the lesson's n control, every option
    assert len({e["id"] for e in plan}) == len(plan)  # each launch once, with all its reasons
    plain = ship_h200.planned_launches(["vector_add"], True)
    assert {e["params"]["n"] for e in plain if any(r.startswith("lesson cpu_gpu") for r in e["roles"])} == {
        1000
    }


def test_an_unknown_lesson_to_sweep_is_one_line_exit_2(tmp_path, capsys):
    assert ship_h200.main(["--out", str(tmp_path / "s"), "--backend", "sim", "--lesson-sweep", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no lesson 'nope'" in err[0]
