"""Access-recording captures for the pages, cached apart from plain captures: on the simulator (every
thread's accesses) or on a GPU (the kernel's own, in sampled warps: engine/lenses/accesses.py)."""

from __future__ import annotations

import streamlit as st

from visualizer.analysis.capture import Capture
from visualizer.engine.run.runner import KernelError
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError
from visualizer.web.session import as_text, cached_capture, capture_cache, capture_key


def sampled_on_sim(kernel: str, params: dict) -> bool:
    """Whether the simulator records this launch's accesses in sampled warps, as a GPU does: its
    every-thread recording would pass the recorder's limit (specs' estimate), so it is never started."""
    try:
        estimate = catalog.access_estimate(kernel, params)
    except LaunchError:
        return False  # the run says what is wrong with the parameters
    return estimate is not None and estimate > catalog.ACCESS_RECORD_LIMIT


def access_capture(
    kernel: str, params: dict, seed: int = 0, backend: str = "sim"
) -> tuple[Capture | None, str | None]:
    """(capture with accesses/requests/hazards, None) or (None, one-line error); cached per launch.

    Runs through the shared cache's one-run-per-key path with a progress bar, so a visitor who leaves
    mid-run (Streamlit raises from the bar's next update) cancels the run instead of leaving it behind.
    """
    options = {"accesses": True, "time_clean": False}
    if backend == "sim" and sampled_on_sim(kernel, params):
        options["access_engine"] = "pass"  # too many to record every thread: sampled warps, as a GPU does
    cap = capture_cache().get(capture_key(kernel, tuple(params.items()), backend, seed, **options))
    if cap is not None:  # no progress bar for a capture already made
        return cap, None
    where = (
        "on the GPU, in sampled warps"
        if backend != "sim"
        else (
            "on the CUDA simulator, in sampled warps"
            if options.get("access_engine")
            else "on the CUDA simulator"
        )
    )
    bar = st.progress(0.0, text=f"Recording the loads and stores of {kernel} {where}…")

    def progress(done, total):
        bar.progress(min(done / total, 1.0), text=f"Recording {kernel}: {done} of {total} blocks simulated")

    try:
        cap = cached_capture(kernel, tuple(params.items()), backend, seed, progress=progress, **options)
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc))
    finally:
        bar.empty()
    return cap, None


def race_words_panel(params: dict, seed: int = 0) -> None:
    """The exact shared words reduction_race raced on, and the thread pairs, from recorded accesses."""
    from visualizer.analysis.memory import race_pairs
    from visualizer.figures.memory import raced_words_figure
    from visualizer.web.charts import chart

    cap, error = access_capture("reduction_race", params, seed)
    if error:
        st.error(f"Could not record reduction_race's accesses: {error}")
        return
    summ = cap.launch["accesses"]
    st.markdown(
        f"**The raced words** (recorded addresses, simulator): {summ['raced_words']} shared words in "
        f"{summ['raced_blocks']} of {cap.launch['blocks']} blocks were read by one thread and written by "
        "another with no barrier between them. The same every run: found from which thread touched which "
        "word in which barrier epoch, not from the order the simulator ran them in (a fixed order, one of "
        "many a GPU could take)."
    )
    if cap.hazards[cap.hazards["kind"] != "UNINIT"].empty:
        st.info("No races recorded for this launch.")
        return
    left, right = st.columns([3, 2])
    with left:
        chart(raced_words_figure(cap.hazards), key="smem_raced_words_chart")
    with right:
        st.dataframe(race_pairs(cap.hazards), hide_index=True, height=300)
        st.caption(
            "RAW: the first thread (t = threadIdx.x) wrote the word, the second read it later in its own program order."
        )
