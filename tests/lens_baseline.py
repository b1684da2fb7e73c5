"""The captures the engine redesign (issue #37) must keep: for the built-in kernels and the visitors'
examples, small simulator launches with every lens on, and the tables that say what the kernel did
(ids, accesses, requests, hazards, branches, the runs' schedules). ``tests/data/lens_baseline/`` holds
them as the engine wrote them BEFORE the redesign (``python3 tests/lens_baseline.py`` wrote them, at
aad10a5); tests/engine/test_lens_baseline.py captures again and compares. Regenerate only for a change
meant to alter these tables, and say so in the commit."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lens_baseline"

# name -> (kernel, params, options): small launches, every lens the simulator has
LENSES = {"accesses": True, "branches": True}
CASES = {
    "vector_add": ("vector_add", {"n": 40, "block": 32}, LENSES),
    "vector_add_x4": ("vector_add_x4", {"n": 100, "block": 32}, LENSES),
    "matmul_naive": ("matmul_naive", {"n": 8, "tile": 4}, LENSES),
    "matmul_tiled": ("matmul_tiled", {"n": 8, "tile": 4}, LENSES),
    "reduction": ("reduction", {"n": 64, "block": 32}, LENSES),
    "reduction_race": ("reduction_race", {"n": 64, "block": 32}, LENSES),
    "flash_attention": (
        "flash_attention",
        {"batch": 1, "heads": 1, "seq_len": 16, "head_dim": 16, "tile": 8, "causal": 1},
        LENSES,
    ),
    "naive_attention": (
        "naive_attention",
        {"batch": 1, "heads": 1, "seq_len": 8, "head_dim": 16, "tile": 8, "causal": 0},
        LENSES,
    ),
    "flash_attention_fast": (
        "flash_attention_fast",
        {"batch": 1, "heads": 1, "seq_len": 16, "head_dim": 32, "causal": 0},
        {"branches": True},
    ),
    "transpose_tiled": ("transpose_tiled", {"rows": 16, "cols": 8, "tile": 8}, LENSES),
    "transpose_padded": ("transpose_padded", {"rows": 8, "cols": 16, "tile": 8}, LENSES),
    "strided_copy": ("strided_copy", {"n": 64, "stride": 2, "block": 32}, LENSES),
    "heat_stencil": ("heat_stencil", {"ny": 10, "nx": 12, "tile": 8}, LENSES),
    "histogram_global": ("histogram_global", {"n": 64, "nbins": 8, "hot": 50, "block": 32}, LENSES),
    "histogram_shared": ("histogram_shared", {"n": 64, "nbins": 8, "hot": 50, "block": 32}, LENSES),
    "branch_lanes": ("branch_lanes", {"n": 64, "reps": 2, "block": 32}, LENSES),
    # the access pass (a GPU's accesses) run on the simulator, and seeded runs with delays
    "matmul_tiled_pass": ("matmul_tiled", {"n": 8, "tile": 4}, {"accesses": True, "access_engine": "pass"}),
    "reduction_race_runs": (
        "reduction_race",
        {"n": 64, "block": 32},
        {"runs": 3, "schedule_seed": 5, "delays": True, "accesses": True},
    ),
}
# the visitors' examples (web/examples.py), through the sandboxed worker
SOURCE_CASES = {
    "yours_matmul_tiled": (
        "matmul_tiled",
        LENSES,
        {
            "grid": "1,1",
            "args": {"A": "rand:float32:16x16", "B": "rand:float32:16x16", "C": "zeros:float32:16x16"},
        },
    ),
    "yours_reduction_runs": (
        "reduction",
        {"runs": 2, "schedule_seed": 3, "delays": True, "branches": True},
        {"args": {"x": "rand:float32:300", "partial": "zeros:float32:2"}, "threads_for_n": 300},
    ),
}

ID_COLUMNS = ["block_x", "block_y", "block_z", "thread_x", "thread_y", "thread_z", "block", "thread", "warp",
              "lane", "global_id", "active"]  # fmt: skip


def tables(cap) -> dict[str, pd.DataFrame]:
    """What a capture must keep: the threads' ids (not their wall-clock times), every lens's table,
    and the runs' schedules (seeded: deterministic) as a table."""
    out = {"ids": cap.threads[ID_COLUMNS].reset_index(drop=True)}
    for name in ("accesses", "requests", "hazards", "branches", "barriers"):
        df = getattr(cap, name, None)
        if df is not None:
            out[name] = df.reset_index(drop=True)
    runs = cap.launch.get("runs")
    if runs:
        out["schedules"] = pd.DataFrame([{k: str(v) for k, v in s.items()} for s in runs["schedules"]])
    return out


def capture_case(name: str, runner=None, user_runner=None):
    if name in CASES:
        kernel, params, options = CASES[name]
        # fastsim: the engine the baseline was written on (the compiled engine's tables are held to
        # fastsim's in tests/engine/test_compiled_lenses.py, its pc being the pass's site, not a bytecode offset)
        return runner.capture(
            kernel, params, seed=1, repeats=1, time_clean=False, sim_engine="fastsim", **options
        )
    from visualizer.specs.source import plan_source_launch
    from visualizer.web.examples import EXAMPLES

    example, options, overrides = SOURCE_CASES[name]
    ex = EXAMPLES[example]
    plan = dict(grid=ex.grid, block=ex.block, args=ex.args, threads_for_n=ex.threads_for,
                reference=[ex.reference.replace(" = ", "=", 1)], filename=ex.file)  # fmt: skip
    launch = plan_source_launch(ex.source, ex.kernel, **{**plan, **overrides})
    return user_runner.capture_source(
        launch, seed=1, repeats=1, time_clean=False, sim_engine="fastsim", **options
    )


def main() -> None:
    from visualizer.engine.run.runner import Runner
    from visualizer.engine.run.user_runner import UserRunner

    with Runner("sim") as runner, UserRunner("sim") as user_runner:
        for name in [*CASES, *SOURCE_CASES]:
            cap = capture_case(name, runner, user_runner)
            out = DATA / name
            out.mkdir(parents=True, exist_ok=True)
            for table, df in tables(cap).items():
                df.to_parquet(out / f"{table}.parquet", index=False)
            print(name, {k: len(v) for k, v in tables(cap).items()}, file=sys.stderr)


if __name__ == "__main__":
    main()
