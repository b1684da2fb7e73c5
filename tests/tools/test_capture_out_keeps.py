"""``capture --out DIR`` never deletes a file the user made: DIR is checked before the kernel runs, and
at the swap only the previous bundle's files as they were then are deleted. A file that appeared in DIR
while the kernel ran is kept beside the new bundle; one that takes a bundle file's name stops the save
(one line, exit 1, DIR left as it is). The write stays atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from visualizer.engine.run.runner import Runner
from visualizer.engine.run.user_runner import UserRunner
from visualizer.tools import atomic
from visualizer.tools.cli import main

KERNEL = """from numba import cuda


@cuda.jit
def scale(a, c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = 2 * a[i]
"""


def capture_args(out: Path, n: int) -> list[str]:
    return ["capture", "vector_add", "--backend", "sim", "--param", f"n={n}", "--out", str(out)]


def bundle_n(out: Path) -> int:
    return json.loads((out / "launch.json").read_text())["params"]["n"]


def partials(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}{atomic.PARTIAL}*"))


@pytest.fixture
def during_the_run(monkeypatch):
    """``during_the_run(do)``: ``do()`` runs while the kernel runs (after --out was checked, before the
    bundle is saved), in the built-in path (Runner.capture) and the --source path (capture_source)."""

    def install(do):
        for cls, name in ((Runner, "capture"), (UserRunner, "capture_source")):
            real = getattr(cls, name)

            def wrapped(self, *a, _real=real, **kw):
                cap = _real(self, *a, **kw)
                do()
                return cap

            monkeypatch.setattr(cls, name, wrapped)

    return install


def test_a_file_made_in_out_during_the_run_survives(tmp_path, capsys, during_the_run):
    out = tmp_path / "trace"
    assert main(capture_args(out, 1000)) == 0  # a previous bundle there
    old = atomic.bundle_files(out)

    def user_writes():
        (out / "notes.txt").write_text("my notes")
        (out / "plots").mkdir()
        (out / "plots" / "fig.txt").write_text("a figure")
        (out / "mine.parquet").write_bytes(b"mine")  # a bundle-like name the new bundle does not take

    during_the_run(user_writes)
    assert main(capture_args(out, 2000)) == 0, capsys.readouterr().err
    assert bundle_n(out) == 2000  # the new bundle is in place
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "plots" / "fig.txt").read_text() == "a figure"
    assert (out / "mine.parquet").read_bytes() == b"mine"
    assert atomic.bundle_files(out).keys() - {"mine.parquet"} == old.keys()  # the old files were replaced
    assert partials(out) == []


def test_a_directory_made_during_the_run_is_kept_with_its_files(tmp_path, capsys, during_the_run):
    out = tmp_path / "new"  # absent when checked

    def user_writes():
        out.mkdir()
        (out / "readme.md").write_text("mine")

    during_the_run(user_writes)
    assert main(capture_args(out, 1000)) == 0, capsys.readouterr().err
    assert bundle_n(out) == 1000 and (out / "readme.md").read_text() == "mine"


def test_a_file_taking_a_bundle_name_stops_the_save_and_nothing_is_deleted(tmp_path, capsys, during_the_run):
    out = tmp_path / "trace"
    assert main(capture_args(out, 1000)) == 0
    capsys.readouterr()

    def user_edits():
        (out / "launch.json").write_text('{"edited": "by hand"}\n')  # the old bundle's file, changed
        (out / "notes.txt").write_text("my notes")

    during_the_run(user_edits)
    assert main(capture_args(out, 2000)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "launch.json appeared or changed in it while the kernel ran" in err, err
    assert json.loads((out / "launch.json").read_text()) == {"edited": "by hand"}
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "threads.parquet").is_file() and partials(out) == []


def test_the_source_path_keeps_them_too(tmp_path, capsys, during_the_run):
    src = tmp_path / "scale.py"
    src.write_text(KERNEL)
    out = tmp_path / "trace"
    args = ["capture", "--source", str(src), "--block", "64", "--grid", "1", "--arg", "a=rand:float32:64"]
    args += ["--arg", "c=zeros:float32:64", "--backend", "sim", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    during_the_run(lambda: (out / "notes.txt").write_text("kept"))
    assert main(args) == 0, capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "kept" and (out / "launch.json").is_file()


def test_a_file_made_in_the_instant_of_the_swap_is_kept(tmp_path, monkeypatch):
    """The last window: a file made after the clash check, just before the directories are exchanged."""
    out = tmp_path / "b"

    def fill(value):
        return lambda d: (d / "launch.json").write_text(json.dumps({"v": value}))

    atomic.write_dir(out, fill(1))
    before = atomic.bundle_files(out)
    real = atomic._exchange

    def late(a, b):
        (out / "late.txt").write_text("late")
        (out / "launch.json").write_text("the user's")  # a name the new bundle takes, after the check
        return real(a, b)

    monkeypatch.setattr(atomic, "_exchange", late)
    atomic.write_dir(out, fill(2), before)
    assert json.loads((out / "launch.json").read_text()) == {"v": 2}
    assert (out / "late.txt").read_text() == "late"
    (kept,) = out.glob("launch.json.kept-*")  # never overwritten, never deleted: kept under a new name
    assert kept.read_text() == "the user's"
    assert partials(out) == []


def test_a_killed_runs_leftovers_are_cleared_but_a_users_file_in_them_is_not(tmp_path):
    """A run killed mid-swap can leave the user's file in its hidden sibling: the next write clears the
    sibling's bundle files only, and leaves the directory while it holds anything else."""
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "b"
    stale = tmp_path / f".b{atomic.PARTIAL}{dead.pid}-0000abcd"
    stale.mkdir()
    (stale / "launch.json").write_text("{}")
    (stale / "notes.txt").write_text("mine")
    empty = tmp_path / f".b{atomic.PARTIAL}{dead.pid}-0000abce"
    (empty / "old").mkdir(parents=True)
    (empty / "old" / "threads.parquet").write_bytes(b"x")
    atomic.write_dir(out, lambda d: (d / "launch.json").write_text("{}"))
    assert (stale / "notes.txt").read_text() == "mine" and not (stale / "launch.json").exists()
    assert not empty.exists()
