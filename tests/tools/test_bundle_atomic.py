"""Bundles written atomically: ``capture --out`` killed with SIGKILL mid-save, or stopped by a full disk,
leaves the previous complete bundle (or none), never a mix; other --out files are replaced atomically."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from visualizer.tools import atomic

ROOT = Path(__file__).resolve().parents[2]
KERNEL = """from numba import cuda


@cuda.jit
def scale(a, c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = 2 * a[i]
"""
SMALL = (64, 1000)  # (threads, elements): a quick bundle
BIG = (32, 6_000_000)  # 2 x 24 MB of random floats to compress: a save that takes a while


def capture_cmd(src: Path, out: Path, threads: int, elements: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "visualizer",
        "capture",
        "--source",
        str(src),
        "--block",
        str(threads),
        "--grid",
        "1",
        "--arg",
        f"a=rand:float32:{elements}",
        "--arg",
        f"c=zeros:float32:{elements}",
        "--backend",
        "sim",
        "--out",
        str(out),
    ]


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def bundle(out: Path):
    """(threads, elements) of the complete bundle in ``out``, None if there is none; fails on a mix."""
    if not out.exists():
        return None
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return None
    assert names == ["arrays.npz", "launch.json", "threads.parquet", "timing.json"], names
    launch = json.loads((out / "launch.json").read_text())
    json.loads((out / "timing.json").read_text())
    threads = pd.read_parquet(out / "threads.parquet")
    with np.load(out / "arrays.npz") as arrays:
        sizes = {k: arrays[k].size for k in arrays.files}
    assert len(threads) == launch["threads"], (len(threads), launch["threads"])
    assert sizes["a"] == sizes["c"], sizes
    state = (launch["threads"], sizes["c"])
    assert state in (SMALL, BIG), state  # and the two halves of one run, not of two
    return state


def partials(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}{atomic.PARTIAL}*"))


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "scale.py"
    path.write_text(KERNEL)
    return path


def run_until_saving(cmd):
    """Start ``cmd`` (the CLI and its worker in a session of their own); return it once its save began,
    with the name its temporary sibling starts with."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), start_new_session=True
    )
    out = Path(cmd[-1])
    deadline = time.monotonic() + 240
    mine = f".{out.name}{atomic.PARTIAL}{proc.pid}-"  # not one a killed run left behind
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.name.startswith(mine) for p in partials(out)):
            break  # the save has begun once its temporary sibling exists
        time.sleep(0.005)
    return proc, mine


def test_sigkill_during_capture_leaves_the_previous_bundle_or_the_new_one_never_a_mix(tmp_path, src):
    out = tmp_path / "trace"
    # one uninterrupted big capture: how long its save takes here
    proc, mine = run_until_saving(capture_cmd(src, out, *BIG))
    began = time.monotonic()
    while any(p.name.startswith(mine) for p in partials(out)):
        time.sleep(0.005)  # until it is renamed into place
    save_s = time.monotonic() - began
    assert proc.wait(timeout=300) == 0
    assert bundle(out) == BIG
    res = subprocess.run(
        capture_cmd(src, out, *SMALL), capture_output=True, text=True, env=env(), timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert bundle(out) == SMALL
    rng = random.Random(20)
    outcomes = []
    for _ in range(5):
        before = bundle(out)
        proc, _ = run_until_saving(capture_cmd(src, out, *BIG))
        try:
            time.sleep(rng.uniform(0.0, 0.6 * save_s))  # somewhere in the save
            finished = proc.poll() is not None
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            finished = True
        finally:
            proc.wait(timeout=60)
        after = bundle(out)
        assert after in (before, BIG), (before, after)  # the previous bundle, or the complete new one
        if finished:
            assert after == BIG
        outcomes.append((before, after, bool(partials(out))))
    assert any(left for *_, left in outcomes), f"no kill landed mid-save: {outcomes}"
    # the killed runs' temporary siblings go with the next save, which swaps in over whatever is there
    res = subprocess.run(
        capture_cmd(src, out, *SMALL), capture_output=True, text=True, env=env(), timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert bundle(out) == SMALL
    assert partials(out) == [], partials(out)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (a full disk on demand); root only, as in CI."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills up) needs root; CI runs as root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_is_one_line_and_the_previous_bundle_survives(small_disk, src):
    out = small_disk / "trace"
    res = subprocess.run(
        capture_cmd(src, out, *SMALL), capture_output=True, text=True, env=env(), timeout=300
    )
    assert res.returncode == 0, res.stderr
    res = subprocess.run(capture_cmd(src, out, *BIG), capture_output=True, text=True, env=env(), timeout=300)
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not save the capture" in lines[0], res.stderr
    assert "No space left on device" in lines[0] and "Traceback" not in res.stderr
    assert bundle(out) == SMALL  # untouched
    assert partials(out) == []  # and nothing half-written is left beside it
    # the built-in kernels' path says the same
    res = subprocess.run(
        [sys.executable, "-m", "visualizer", "capture", "vector_add", "--backend", "sim"]
        + ["--param", "n=400000", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert res.returncode == 1 and "No space left on device" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert bundle(out) == SMALL and partials(out) == []


def test_out_must_be_new_empty_or_a_bundle(tmp_path):
    from visualizer.tools.cli import writable_dir

    assert writable_dir(str(tmp_path / "new")) is None
    assert writable_dir(str(tmp_path)) is None  # empty
    (tmp_path / "notes.txt").write_text("mine")
    problem = writable_dir(str(tmp_path))
    assert problem and "notes.txt" in problem and "replaces the whole directory" in problem
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_write_dir_keeps_the_old_bundle_when_filling_fails(tmp_path):
    out = tmp_path / "b"

    def fill(value):
        def write(d: Path):
            (d / "launch.json").write_text(json.dumps({"v": value}))
            if value == "broken":
                raise OSError(28, "No space left on device")
            (d / "timing.json").write_text("{}")

        return write

    atomic.write_dir(out, fill("one"))
    assert sorted(p.name for p in out.iterdir()) == ["launch.json", "timing.json"]
    with pytest.raises(OSError):
        atomic.write_dir(out, fill("broken"))
    assert json.loads((out / "launch.json").read_text()) == {"v": "one"}
    assert partials(out) == []
    atomic.write_dir(out, fill("two"))
    assert json.loads((out / "launch.json").read_text()) == {"v": "two"}
    ref = tmp_path / "plain"
    ref.mkdir()  # the bundle gets the mode a plain mkdir would give it, not a private temp dir's 0o700
    assert out.stat().st_mode & 0o777 == ref.stat().st_mode & 0o777


def test_write_text_replaces_whole_files_only(tmp_path, monkeypatch):
    path = tmp_path / "bench.json"
    atomic.write_text(path, "old\n")

    class Boom(Exception):
        pass

    def explode(*a):
        raise Boom

    with monkeypatch.context() as m:
        m.setattr(atomic.os, "replace", explode)  # killed between writing and renaming
        with pytest.raises(Boom):
            atomic.write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]
    atomic.write_text(path, "new\n")
    assert path.read_text() == "new\n"
