"""A capture bundle from someone else is untrusted: ``compare`` and the bundle reader are bounded.

A corpus generator corrupts real bundles (written by ``python -m visualizer capture``) in many ways:
truncation, byte flips, wrong types in launch.json, missing files, huge numbers, NaN/Infinity,
symbolic links, paths out of the bundle, Parquet bombs, deep and oversized JSON. Every deliberate
corruption is one line and exit 2 from ``compare``, never a traceback; random byte flips are either
that or a normal comparison; the good bundles still compare.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from visualizer.tools import bundle
from visualizer.tools.bundle import BundleError, load
from visualizer.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
THREAD_COLUMNS = ("sm", "block", "warp", "t_start_ns", "t_end_ns")


def cli(*args: str, limit_gib: int | None = None) -> subprocess.CompletedProcess:
    """``python -m visualizer ARGS`` as a user runs it; ``limit_gib``: its address space capped (so a
    reader that believes a bomb fails here instead of filling the machine)."""

    def cap():
        import resource

        size = limit_gib * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return subprocess.run(
        [sys.executable, "-m", "visualizer", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
        preexec_fn=cap if limit_gib else None,
    )


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    """Three real bundles: transpose naive and tiled with accesses, a reduction (it has a row table)."""
    root = tmp_path_factory.mktemp("bundles")
    runs = {
        "a": ["transpose_naive", "--accesses"],
        "b": ["transpose_tiled", "--accesses"],
        "r": ["reduction", "--param", "n=256"],
    }
    out = {}
    for name, args in runs.items():
        res = cli("capture", *args, "--backend", "sim", "--out", str(root / name))
        assert res.returncode == 0, res.stderr
        out[name] = root / name
    return out


# --- the corpus: each entry mutates a copy of a good bundle -------------------------------------


def edit_json(name: str, change):
    def mutate(d: Path):
        obj = json.loads((d / name).read_text())
        change(obj)
        (d / name).write_text(json.dumps(obj))

    return mutate


def set_launch(key, value):
    def change(obj):
        target, *path = key.split(".")
        node = obj
        for part in [target, *path][:-1]:
            node = node[part]
        node[[target, *path][-1]] = value

    return edit_json("launch.json", change)


def raw_launch_field(key: str, raw: str):
    """launch.json with ``key``'s value written as raw text (numbers JSON can write but Python cannot hold)."""

    def mutate(d: Path):
        obj = json.loads((d / "launch.json").read_text())
        obj[key] = "@@"
        (d / "launch.json").write_text(json.dumps(obj).replace('"@@"', raw))

    return mutate


def truncate(name: str, keep):
    def mutate(d: Path):
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: keep(len(data))])

    return mutate


def remove(name: str):
    return lambda d: (d / name).unlink()


def replace_with_link(name: str, target):
    def mutate(d: Path):
        (d / name).unlink()
        os.symlink(target(d), d / name)

    return mutate


def write_table(name: str, table: pa.Table, **kw):
    return lambda d: pq.write_table(table, d / f"{name}.parquet", **kw)


_BOMB: list[Path] = []  # made once (it takes a while on a busy machine), copied after


def thread_bomb(d: Path):
    """threads.parquet of 2^26 + 2^20 rows of zeros (more than BUNDLE_MAX_ROWS): ~1.5 MB on disk,
    ~2.9 GB decoded."""
    if _BOMB:
        shutil.copy(_BOMB[0], d / "threads.parquet")
        return
    n = 1 << 20
    zeros = pa.array(np.zeros(n, np.int64))
    chunk = pa.table({c: zeros for c in THREAD_COLUMNS})
    with pq.ParquetWriter(d / "threads.parquet", chunk.schema, compression="zstd") as writer:
        for _ in range(65):
            writer.write_table(chunk)
    keep = d.parent.parent / "bomb.parquet"
    shutil.copy(d / "threads.parquet", keep)
    _BOMB.append(keep)


def text_bomb(d: Path):
    """requests.parquet whose text column repeats one 1 MB string 4,096 times: 4 GB as plain strings
    (and 16 GB once compare's ``astype(str)`` made it a numpy text array)."""
    n = 4096
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["x" * 2**20]))
    ints = pa.array(np.ones(n, np.int64))
    table = pa.table({"space": text, "op": text, "wavefronts": ints, "bank_ways": ints})
    pq.write_table(table, d / "requests.parquet", compression="zstd")


def wide_table(d: Path):
    cols = {f"c{i}": pa.array([0]) for i in range(5000)}
    pq.write_table(pa.table({**{c: pa.array([0]) for c in THREAD_COLUMNS}, **cols}), d / "threads.parquet")


def nested_column(d: Path):
    sm = pa.array([[1, 2]] * 4)
    rest = {c: pa.array([0] * 4) for c in THREAD_COLUMNS[1:]}
    pq.write_table(pa.table({"sm": sm, **rest}), d / "threads.parquet")


def deep_json(d: Path):
    (d / "launch.json").write_text("[" * 200_000 + "]" * 200_000)


def deep_valid_json(d: Path):
    obj = json.loads((d / "launch.json").read_text())
    node = obj["params"]
    for _ in range(60):  # within json's recursion, beyond any real bundle
        node["x"] = {}
        node = node["x"]
    (d / "launch.json").write_text(json.dumps(obj))


def oversized_json(d: Path):
    with open(d / "timing.json", "w") as fh:
        fh.write("{" + " " * (bundle.BUNDLE_MAX_JSON_BYTES + 10) + "}")


def fifo(name: str):
    def mutate(d: Path):
        (d / name).unlink()
        os.mkfifo(d / name)

    return mutate


def directory(name: str):
    def mutate(d: Path):
        (d / name).unlink()
        (d / name).mkdir()

    return mutate


def outside_table(d: Path):
    """row_table naming a Parquet file outside the bundle (one that really exists there)."""
    shutil.copy(d / "threads.parquet", d.parent / "secret.parquet")
    set_launch("row_table", ["../secret", ["sm"]])(d)


def row_table_link_out(d: Path):
    """row_table naming the bundle's own file name, which is a link to a file outside the bundle."""
    shutil.copy(d / "threads.parquet", d.parent / "secret2.parquet")
    os.symlink(d.parent / "secret2.parquet", d / "stolen.parquet")
    set_launch("row_table", ["stolen", ["sm"]])(d)


# (id, mutate, words in the one line); every one must exit 2
CORPUS = [
    ("no-launch", remove("launch.json"), "no launch.json"),
    ("no-timing", remove("timing.json"), "no timing.json"),
    ("no-threads", remove("threads.parquet"), "no threads.parquet"),
    ("launch-truncated", truncate("launch.json", lambda n: n // 2), "not valid JSON"),
    ("launch-empty", truncate("launch.json", lambda n: 0), "not valid JSON"),
    ("timing-truncated", truncate("timing.json", lambda n: 10), "not valid JSON"),
    ("threads-truncated-half", truncate("threads.parquet", lambda n: n // 2), "not a readable Parquet"),
    ("threads-truncated-8", truncate("threads.parquet", lambda n: 8), "not a readable Parquet"),
    ("threads-empty", truncate("threads.parquet", lambda n: 0), "not a readable Parquet"),
    ("requests-truncated", truncate("requests.parquet", lambda n: n - 100), "not a readable Parquet"),
    (
        "launch-not-utf8",
        lambda d: (d / "launch.json").write_bytes(b'{"kernel": "\xff\xfe"}'),
        "not valid JSON",
    ),
    ("launch-list", lambda d: (d / "launch.json").write_text("[1, 2]"), "expected a JSON object"),
    ("launch-missing-grid", edit_json("launch.json", lambda o: o.pop("grid")), "missing 'grid'"),
    ("grid-text", set_launch("grid", "abc"), "'grid' must be three positive integers"),
    ("grid-zero", set_launch("grid", [0, 1, 1]), "'grid' must be"),
    ("block-floats", set_launch("block", [1.5, 1, 1]), "'block' must be"),
    ("tpb-text", set_launch("threads_per_block", "1024"), "'threads_per_block' must be an integer"),
    ("tpb-huge", set_launch("threads_per_block", 10**30), "'threads_per_block' must be"),
    ("tpb-1e400", raw_launch_field("threads_per_block", "1e400"), "'threads_per_block' must be"),
    ("tpb-5000-digits", raw_launch_field("threads_per_block", "9" * 5000), "not valid JSON"),
    ("tpb-nan", raw_launch_field("threads_per_block", "NaN"), "'threads_per_block' must be"),
    ("threads-infinity", raw_launch_field("threads", "Infinity"), "'threads' must be"),
    ("threads-neg-infinity", raw_launch_field("threads", "-Infinity"), "'threads' must be"),
    ("blocks-list", set_launch("blocks", [4]), "'blocks' must be"),
    ("smem-huge-int", raw_launch_field("static_smem_bytes", "1" + "0" * 400), "'static_smem_bytes' must be"),
    ("kernel-number", set_launch("kernel", 5), "'kernel' must be a string"),
    ("source-null", set_launch("source", None), "'source' must be a string"),
    ("backend-list", set_launch("backend", ["gpu"]), "'backend' must be a string"),
    ("params-list", set_launch("params", [1, 2]), "'params' must be an object"),
    ("param-dict", set_launch("params.rows", {"a": 1}), "parameter 'rows' must be"),
    ("cc-object", set_launch("compute_capability", {"x": 1}), "'compute_capability' must be"),
    ("clean-number", set_launch("clean", 5), "'clean' must be an object"),
    ("regs-negative", set_launch("clean", {"registers_per_thread": -1}), "'registers_per_thread' must be"),
    ("regs-text", set_launch("clean", {"registers_per_thread": "32"}), "'registers_per_thread' must be"),
    ("accesses-list", set_launch("accesses", [1]), "'accesses' must be an object"),
    ("accesses-text-count", set_launch("accesses.global_st_sectors", "4096"), "'global_st_sectors' must be"),
    (
        "accesses-missing-count",
        edit_json("launch.json", lambda o: o["accesses"].pop("global_ld_sectors")),
        "'global_ld_sectors' must be",
    ),  # fmt: skip
    ("branch-efficiency-text", set_launch("branch_efficiency", "high"), "'branch_efficiency' must be"),
    ("check-list", set_launch("check", [1]), "'check' must be an object"),
    ("check-correct-text", set_launch("check.correct", "yes"), "'correct' must be"),
    ("check-mismatches-text", set_launch("check.outputs.out", {"mismatches": "3"}), "'mismatches' must be"),
    ("check-output-list", set_launch("check.outputs.out", [3]), "check output 'out' must be an object"),
    ("hazards-list", set_launch("accesses.hazards", [1]), "'hazards' must be an object"),
    ("hazards-raw-text", set_launch("accesses.hazards.RAW", "many"), "'RAW' must be"),
    ("branches-efficiency-text", set_launch("branches", {"efficiency": "high"}), "'efficiency' must be"),
    (
        "timing-clean-text",
        edit_json("timing.json", lambda o: o.update(clean_ms="fast")),
        "'clean_ms' must be a number",
    ),  # fmt: skip
    (
        "timing-infinity",
        lambda d: (d / "timing.json").write_text('{"clean_ms": Infinity}'),
        "'clean_ms' must be",
    ),
    ("timing-list", lambda d: (d / "timing.json").write_text("[]"), "expected a JSON object"),
    ("row-table-traversal", outside_table, "'row_table' must be"),
    ("row-table-absolute", set_launch("row_table", ["/etc/passwd", ["x"]]), "'row_table' must be"),
    ("row-table-dotdot", set_launch("row_table", ["..", ["x"]]), "'row_table' must be"),
    ("row-table-text", set_launch("row_table", "threads"), "'row_table' must be"),
    ("row-table-link-out", row_table_link_out, "a symbolic link"),
    (
        "launch-link-absolute",
        replace_with_link("launch.json", lambda d: d.parent / "b" / "launch.json"),
        "a symbolic link",
    ),  # fmt: skip
    (
        "threads-link-out",
        replace_with_link("threads.parquet", lambda d: Path("/etc/hostname")),
        "a symbolic link",
    ),  # fmt: skip
    (
        "threads-link-relative",
        replace_with_link("threads.parquet", lambda d: "../b/threads.parquet"),
        "a symbolic link",
    ),  # fmt: skip
    ("threads-fifo", fifo("threads.parquet"), "not a regular file"),
    ("launch-fifo", fifo("launch.json"), "not a regular file"),
    ("threads-directory", directory("threads.parquet"), "not a regular file"),
    ("threads-bomb", thread_bomb, "rows; a bundle's table holds at most"),
    ("requests-text-bomb", text_bomb, "holds a text of 1,048,576 characters"),
    ("threads-5000-columns", wide_table, "columns; at most"),
    ("threads-nested-column", nested_column, "a bundle's tables hold numbers and text"),
    (
        "threads-other-table",
        lambda d: shutil.copy(d / "hazards.parquet", d / "threads.parquet"),
        "missing the block/warp/sm/time columns",
    ),  # fmt: skip
    (
        "requests-missing-columns",
        write_table("requests", pa.table({"x": [1]})),
        "missing the space/op/wavefronts",
    ),  # fmt: skip
    ("launch-deep", deep_json, "nested too deeply"),
    ("launch-deep-valid", deep_valid_json, "nests deeper than"),
    ("timing-oversized", oversized_json, "MiB"),
]


def corrupted(good: dict[str, Path], tmp_path: Path, mutate) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(good["a"], bad)
    shutil.copytree(good["b"], tmp_path / "b")  # a sibling bundle that links may point at
    mutate(bad)
    return bad


NOT_READ_BY_COMPARE = {"row-table-link-out"}  # compare reads threads and requests only


@pytest.mark.parametrize("case, mutate, words", CORPUS, ids=[c[0] for c in CORPUS])
def test_every_corrupted_bundle_is_one_line_exit_2(good, tmp_path, capsys, case, mutate, words):
    bad = corrupted(good, tmp_path, mutate)
    try:  # the whole bundle read, every table (what a page or an export would read)
        load(bad)
        assert words is None, f"{case}: read without complaint"
    except BundleError as exc:
        assert "\n" not in str(exc) and (words is None or words in str(exc)), str(exc)
    for pair in ([str(good["b"]), str(bad)], [str(bad), str(good["b"])]):
        rc = main(["compare", *pair])  # an exception here is the traceback a user would see
        out, err = capsys.readouterr()
        if (words is None or case in NOT_READ_BY_COMPARE) and rc == 0:
            assert "A: " in out
            continue
        assert rc == 2, (case, out, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and len(err) < 600, err
        if words:
            assert words in err, err


def test_the_bomb_and_the_traversal_from_the_command_line(good, tmp_path):
    """As a user meets them: a separate process, its address space capped at 2 GiB (the bomb decodes
    to ~2.9 GB), one line, exit 2, no traceback."""
    bad = corrupted(good, tmp_path, thread_bomb)
    assert bad.joinpath("threads.parquet").stat().st_size < 4 * 2**20
    res = cli("compare", str(good["a"]), str(bad), limit_gib=2)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and "rows; a bundle's table holds at most" in res.stderr
    shutil.rmtree(bad)
    bad = corrupted(good, tmp_path / "t", outside_table)
    res = cli("compare", str(good["a"]), str(bad), limit_gib=2)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "'row_table' must be" in res.stderr


def test_random_byte_flips_are_a_comparison_or_one_line(good, tmp_path, capsys):
    """Seeded flips anywhere in each file (no checksums in Parquet pages: some flips go unnoticed)."""
    rng = random.Random(36)
    outcomes = {0: 0, 2: 0}
    names = ["launch.json", "timing.json", "threads.parquet", "requests.parquet"]
    for i in range(48):
        bad = tmp_path / f"flip{i}"
        shutil.copytree(good["a"], bad)
        path = bad / names[i % len(names)]
        data = bytearray(path.read_bytes())
        region = range(len(data)) if i % 3 else range(max(0, len(data) - 300), len(data))  # the footer
        for _ in range(rng.choice([1, 4, 32])):
            data[rng.choice(region)] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        rc = main(["compare", str(good["b"]), str(bad)])
        out, err = capsys.readouterr()
        assert rc in (0, 2), (path.name, err)
        if rc == 2:
            assert err.startswith("error: ") and err.count("\n") == 1, err
        outcomes[rc] += 1
    assert outcomes[2] > 0, outcomes  # the flips did damage something


def test_good_bundles_still_compare_and_load_whole(good, capsys):
    assert main(["compare", str(good["a"]), str(good["b"])]) == 0
    out = capsys.readouterr().out
    assert "transpose_tiled: 32 → 4 sectors per global store request" in out
    red = load(good["r"])  # every table, every column; the row table is the bundle's own file
    assert red.row_state is not None and len(red.row_state) and "value" in red.row_state.columns
    assert set(red.threads.columns) >= set(THREAD_COLUMNS)
    only = load(good["a"], only=bundle.COMPARE_READS)
    assert list(only.threads.columns) == ["sm"] and only.accesses is None and only.requests is not None


def test_the_read_budget_is_checked_before_decoding(good, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "BUNDLE_READ_BUDGET", 1000)
    with pytest.raises(BundleError, match="budget is 0 MiB"):
        load(good["a"])


def test_compare_into_a_closed_pipe_is_quiet(good):
    """``compare A B | head -1``: the reader leaves early (here at once: ``| true``, gone long before
    the table is printed); no BrokenPipeError traceback."""
    cmd = f"{sys.executable} -m visualizer compare {good['a']} {good['b']} | true"
    res = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr
