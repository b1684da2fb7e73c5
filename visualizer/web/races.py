"""The "run it N times" panel: the same launch in N schedules, its outputs compared cell by cell."""

from __future__ import annotations

import streamlit as st

from visualizer.analysis import races
from visualizer.engine.run.runner import KernelError
from visualizer.figures.races import cells_heatmap, runs_strip
from visualizer.specs.catalog import MAX_RUNS, LaunchError
from visualizer.web.charts import chart
from visualizer.web.session import cached_capture

DEFAULT_RUNS = 8


def runs_caption(sim: bool, delays: bool) -> str:
    """The sentence beside the controls: how the runs are scheduled, true of the backend and the choice."""
    head = "The same launch from the same inputs, run again and again. "
    if sim:
        return head + (
            "On the simulator each run is one seeded interleaving of the warps (on the compiled engine warps "
            "take turns between barriers in a seeded order, one running statements ahead of another; on "
            "fastsim lockstep lanes with seeded stalls): run i of seed S replays bit for bit, another seed "
            "explores other orders."
        )
    if delays:
        return head + (
            "On the GPU each run is the hardware's own schedule, perturbed: before the kernel's loads, "
            "stores, atomics and barriers some warps wait (which kinds of site, how many warps and how "
            "long, up to 1, 4 or 16 µs, drawn from the seed and the run), so the warps meet in other "
            "orders. Run i of seed S waits the same delays again; the hardware's timing around them "
            "still varies."
        )
    return (
        head
        + "On the GPU each run is the hardware's own schedule (seeded delays move warps against each other)."
    )


def runs_panel(
    kernel: str, params: dict, backend: str, seed: int, output: str, key: str, run_many=None, identity=None
) -> None:
    """Widgets (runs, schedule seed, a Run button), then the heat map, the strip and the verdict.

    ``run_many(n, schedule_seed, delays)`` captures the N runs when the kernel is not a built-in one
    (a visitor's, in its sandbox: web/visitor_runs.py); it raises LaunchError or KernelError."""
    st.subheader(f"Run {kernel} many times")
    sim = backend == "sim"
    c1, c2, c3 = st.columns([1, 1, 2])
    with c1:
        n = int(st.number_input("runs", 2, MAX_RUNS, DEFAULT_RUNS, key=f"{key}_runs"))
    with c2:
        delays = False if sim else st.checkbox("seeded delays", key=f"{key}_delays")
        label = "schedule seed" if sim else "delay seed"
        sched = int(st.number_input(label, 0, 2**31 - 1, 1, key=f"{key}_seed", disabled=not (sim or delays)))
    with c3:
        st.caption(runs_caption(sim, delays))
    # what a click asked for (``identity``: which visitor's run, when the kernel is theirs)
    want = (
        kernel,
        tuple(sorted((k, str(v)) for k, v in params.items())),
        backend,
        seed,
        n,
        sched,
        delays,
        identity,
    )
    if st.button(f"Run {n} times", key=f"{key}_go"):
        st.session_state[f"{key}_ran"] = want
    if st.session_state.get(f"{key}_ran") != want:  # N runs cost N launches: only when asked, for this launch
        return
    try:
        with st.spinner(f"Running {kernel} {n} times…"):
            if run_many is not None:
                cap = run_many(n, sched if sim or delays else None, delays)
            else:
                cap = cached_capture(
                    kernel, tuple(sorted(params.items())), backend, seed, runs=n,
                    schedule_seed=sched if sim or delays else None, time_clean=False,
                    **({"accesses": True} if sim else {}), **({"delays": True} if delays else {}),
                )  # fmt: skip
    except (LaunchError, KernelError) as exc:
        st.error(f"Could not run {kernel} {n} times: {exc}")
        return
    info = cap.launch["runs"]
    table = races.runs_table(cap.runs, info["correct"], info.get("schedules"), cap.source)
    st.markdown(f"**{races.verdict(table)}**")
    free = races.race_free_sentence(info)
    if free:
        st.caption(free)
    chart(runs_strip(table, output), key=f"{key}_strip")
    cells = races.cells(cap.runs, output, cap.source)
    chart(cells_heatmap(cells), key=f"{key}_cells")
    if cap.hazards is None:
        return
    joined = races.hazard_summary(races.hazards_at(cells, cap.hazards, cap.accesses))
    if joined.empty:
        if cells["differs"].any():
            st.caption(
                "No recorded hazard is on these cells or in the shared memory of the blocks that stored them."
            )
        return
    st.markdown(
        f"**Where the differing cells raced** (recorded addresses of run 0, simulator): the hazards on "
        f"each differing cell of `{output}` itself, and in the shared memory of the block that stored it."
    )
    st.dataframe(joined.drop(columns="source", errors="ignore"), hide_index=True)
