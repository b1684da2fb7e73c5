"""``python -m visualizer.tools.attention_bench --json PATH``: the document the FlashAttention page reads.

No GPU here: the measurement itself is replaced by rows made with the bench's own ``_row`` and the
device header by a stand-in; what is checked is the document (header, rows, merging of a causal and
a non-causal run, strict JSON, atomic write)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from visualizer.figures.attention import timing_modes, timing_rows
from visualizer.tools import attention_bench as ab

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "attention_timings_sample.json"
DEVICE = {"gpu": "Stand-in GPU", "sm": "sm_90", "sm_count": 3}


def fake_rows(causal: bool, seq_lens=(64, 128), repeats: int = 3) -> list[dict]:
    """Rows as attention_timings makes them (through _row), with made-up times and errors."""
    rng = np.random.default_rng(int(causal))
    rows = []
    for seq_len in seq_lens:
        q = np.zeros((1, 2, seq_len, 16), np.float32)
        for impl in ("ours fast (clean)", "torch sdpa default fp32"):
            extra = (
                {"backend": "efficient_attention"}
                if impl.startswith("torch")
                else {"registers": np.int32(40)}
            )
            times = list(rng.uniform(0.1, 1.0, repeats))
            rows.append(ab._row(q, causal, impl, times, 2**20, float(rng.uniform()), **extra))
    rows[0]["rel_err_f64"] = float("inf")  # a kernel that wrote NaN
    return rows


@pytest.fixture
def bench(monkeypatch):
    """main() with the measurement and the device header replaced; returns the rows it was given."""
    given = []

    def attention_timings(seq_lens, batch, heads, head_dim, tile, repeats, causal, naive_max, **_):
        given.append(fake_rows(causal, seq_lens, repeats))
        return given[-1]

    monkeypatch.setattr(ab, "attention_timings", attention_timings)
    monkeypatch.setattr(ab, "_device_header", lambda: DEVICE)
    return given


def strict_json(path: Path) -> dict:
    def refuse(token):
        raise AssertionError(f"not strict JSON: {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_json_of_one_run_describes_itself(bench, tmp_path, capsys):
    out = tmp_path / "t.json"
    ab.main(["--seq-lens", "64,128", "--repeats", "3", "--json", str(out)])
    doc = strict_json(out)
    (rows,) = bench
    assert doc["kind"] == ab.JSON_KIND and list(doc["runs"]) == ["non-causal"]
    run = doc["runs"]["non-causal"]
    assert run["measured_on"] == DEVICE
    assert run["command"].endswith(f"--seq-lens 64,128 --repeats 3 --json {out}")
    assert {"numba", "numba-cuda", "numpy", "torch"} <= set(run["versions"])
    assert run["date"].count("-") == 2 and run["time_utc"].count(":") == 2
    cfg = run["config"]
    assert (cfg["batch"], cfg["heads"], cfg["head_dim"], cfg["repeats"], cfg["causal"]) == (
        1,
        8,
        64,
        3,
        False,
    )
    assert cfg["seq_lens"] == [64, 128] and cfg["dtype"] == "float32"
    for column in ("timing", "flops", "tflops", "peak_mb", "max_abs_err", "rel_err_f64", "launch_us"):
        assert isinstance(cfg[column], str) and cfg[column]
    assert "3 launches" in cfg["timing"] and "spin kernel" in cfg["timing"]
    assert len(doc["rows"]) == len(rows)
    for got, made in zip(doc["rows"], rows, strict=True):
        assert set(got) == set(made)
        assert got["ms"] == pytest.approx(made["ms"]) and got["impl"] == made["impl"]
    assert doc["rows"][0]["rel_err_f64"] is None  # inf: null in strict JSON
    assert isinstance(doc["rows"][0]["registers"], int)
    assert not list(tmp_path.glob("*.partial"))
    assert f"wrote {out}" in capsys.readouterr().out


def test_causal_run_joins_the_non_causal_one_and_a_rerun_replaces_its_own_rows(bench, tmp_path):
    out = tmp_path / "t.json"
    ab.main(["--seq-lens", "64,128", "--json", str(out)])
    ab.main(["--seq-lens", "64", "--causal", "--json", str(out)])
    doc = strict_json(out)
    non_causal, causal = bench
    assert list(doc["runs"]) == ["non-causal", "causal"] == timing_modes(doc)
    assert doc["runs"]["causal"]["config"]["causal"] is True
    assert [r["causal"] for r in doc["rows"]] == [False] * len(non_causal) + [True] * len(causal)
    assert len(timing_rows(doc, "causal")) == len(causal)
    first_command = doc["runs"]["non-causal"]["command"]

    ab.main(["--seq-lens", "128", "--json", str(out)])  # non-causal again, one length only
    again = strict_json(out)
    rerun = bench[-1]
    assert [r["seq_len"] for r in again["rows"] if not r["causal"]] == [r["seq_len"] for r in rerun]
    assert [r for r in again["rows"] if r["causal"]] == [r for r in doc["rows"] if r["causal"]]
    assert again["runs"]["causal"] == doc["runs"]["causal"]
    assert again["runs"]["non-causal"]["command"] != first_command


@pytest.mark.parametrize("old", ['{"rows": [{"causal": true}]}', "not json", '{"kind": "something else"}'])
def test_a_file_of_another_kind_is_replaced_not_merged(bench, tmp_path, old):
    out = tmp_path / "t.json"
    out.write_text(old)
    ab.main(["--seq-lens", "64", "--json", str(out)])
    doc = strict_json(out)
    assert list(doc["runs"]) == ["non-causal"] and len(doc["rows"]) == len(bench[-1])


def test_without_json_nothing_is_written(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ab.main(["--seq-lens", "64"])
    assert bench and not list(tmp_path.iterdir())


def test_sample_fixture_is_such_a_document():
    """tests/data/attention_timings_sample.json: real H200 rows converted to this format."""
    doc = strict_json(SAMPLE)
    assert doc["kind"] == ab.JSON_KIND and doc["format_version"] == ab.JSON_FORMAT_VERSION
    assert timing_modes(doc) == ["non-causal", "causal"]
    for mode in timing_modes(doc):
        cfg = doc["runs"][mode]["config"]
        rows = timing_rows(doc, mode)
        assert (
            rows["causal"].eq(mode == "causal").all()
            and len(rows) == rows[["seq_len", "impl"]].drop_duplicates().shape[0]
        )
        for r in rows.itertuples():  # the stored TFLOP/s follow from the stored times
            flops = 4 * cfg["batch"] * cfg["heads"] * r.seq_len**2 * cfg["head_dim"] / (2 if r.causal else 1)
            assert r.tflops == pytest.approx(flops / (r.ms * 1e-3) / 1e12, rel=0.01)
            assert math.isfinite(r.rel_err_f64)
