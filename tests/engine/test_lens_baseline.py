"""The engine redesign (issue #37) keeps every capture's tables: for the built-in kernels and the
visitors' examples, a simulator capture's ids, accesses, requests, hazards, branches and the runs'
schedules equal the ones the engine wrote before it (tests/data/lens_baseline/, tests/lens_baseline.py)."""

import pandas as pd
import pytest

from tests.lens_baseline import CASES, DATA, SOURCE_CASES, capture_case, tables


@pytest.fixture(scope="module")
def runners():
    from visualizer.engine.run.runner import Runner
    from visualizer.engine.run.user_runner import UserRunner

    with Runner("sim") as runner, UserRunner("sim") as user_runner:
        yield runner, user_runner


@pytest.mark.parametrize("name", [*CASES, *SOURCE_CASES])
def test_a_capture_has_the_tables_it_had_before_the_redesign(runners, name):
    got = tables(capture_case(name, *runners))
    saved = sorted(p.stem for p in (DATA / name).glob("*.parquet"))
    assert sorted(got) == saved, "the same tables, no more and no fewer"
    for table in saved:
        want = pd.read_parquet(DATA / name / f"{table}.parquet")
        pd.testing.assert_frame_equal(got[table].reset_index(drop=True), want, check_dtype=False,
                                      check_categorical=False, obj=f"{name}/{table}")  # fmt: skip
