"""CLI: --out is checked before any work, bad numbers exit 2, a failed kernel exits 1, and serve
starts the app with the safety settings from any directory."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args, cwd=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # found from any directory, as an install would be
    )


def one_line_error(res, code, words):
    assert res.returncode == code, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture
def not_a_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    return blocker


def test_capture_out_checked_before_the_kernel_runs(not_a_dir):
    # a kernel that would take minutes if it ran: the answer must come before it does
    res = run("capture", "vector_add", "--backend", "sim", "--out", str(not_a_dir / "sub"), timeout=30)
    one_line_error(res, 2, "--out")
    res = run("capture", "vector_add", "--backend", "sim", "--out", str(not_a_dir))
    one_line_error(res, 2, "is not a directory")


def test_bench_out_checked_before_benchmarking(not_a_dir):
    res = run("bench", "--backend", "sim", "--out", str(not_a_dir / "r.json"), timeout=30)
    one_line_error(res, 2, "--out")
    res = run("bench", "--backend", "sim", "--out", str(not_a_dir.parent), timeout=30)
    one_line_error(res, 2, "is a directory")


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--seed", "-1"], "--seed: must be at least 0"),
        (["--repeats", "-1"], "--repeats: must be at least 1"),
        (["--repeats", "0"], "--repeats: must be at least 1"),
        (["--seed", "x"], "expected an integer"),
    ],
)
def test_bad_numbers_exit_2(tmp_path, flags, words):
    res = run("capture", "vector_add", "--backend", "sim", "--out", str(tmp_path), *flags)
    one_line_error(res, 2, words)


def test_a_failing_kernel_exits_1(tmp_path):
    res = run("capture", "out_of_bounds_write", "--backend", "sim", "--param", "n=64", "--out", str(tmp_path))
    one_line_error(res, 1, "out_of_bounds_write failed")


def test_serve_passes_the_safety_settings_from_any_directory(tmp_path):
    res = run("serve", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    cmd = res.stdout.split()
    flags = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert cmd[4] == str(ROOT / "visualizer" / "app.py")
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert flags["--client.showErrorDetails"] == "none"


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.168.1.10"])
def test_serving_other_machines_needs_an_explicit_opt_in(address):
    one_line_error(run("serve", "--address", address, "--dry-run"), 2, "--allow-remote")
    res = run("serve", "--address", address, "--allow-remote", "--dry-run")
    assert res.returncode == 0 and f"--server.address {address}" in res.stdout


def test_serve_rejects_a_bad_port():
    one_line_error(run("serve", "--port", "70000", "--dry-run"), 2, "not a TCP port")
