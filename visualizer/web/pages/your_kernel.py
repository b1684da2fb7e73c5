"""Your kernel: paste a Numba CUDA kernel, give its launch and arguments, run it, see every page for it.

The source is only parsed here (``ast``, for a syntax check and the kernel's parameter names); it
runs in a fresh sandboxed process for each run (engine/run/sandbox.py: bubblewrap where it
works, hard rlimits always), and only for a visitor the operator allowed (the key from ``serve``'s
link, or VISUALIZER_ALLOW_USER_CODE=1; engine/run/user_runner.py). The page says which isolation is in force.
"""

import importlib.util

import numpy as np
import streamlit as st

from visualizer.engine.run import sandbox
from visualizer.engine.run.runner import KernelError, gpu_present
from visualizer.engine.run.user_runner import (
    RUN_TIMEOUT_S,
    arrays_after,
    get_user_runner,
    user_code_allowed,
)
from visualizer.specs import source as uspec
from visualizer.specs.catalog import LaunchError
from visualizer.web import upload_gate
from visualizer.web.current_kernel import (
    kept_uploads,
    link_run_requested,
    restore_form,
    show_kept_uploads,
    show_link_notice,
)
from visualizer.web.did_work import did_work
from visualizer.web.examples import EXAMPLES
from visualizer.web.guard import visitor_has_key
from visualizer.web.session import as_text, queue_text
from visualizer.web.uploads import SESSION_UPLOAD_BYTES, SESSION_UPLOAD_FILES, UPLOAD_MAX_MB
from visualizer.web.visitor_runs import plan_visitor_launch

BACKENDS = {"auto": "auto (GPU if present)", "gpu": "GPU", "sim": "simulator"}
MODES = ("one thread per element", "grid")
ERROR_MAX_CHARS = 1000  # an error quoting the visitor's source or arguments, shown escaped (no links)


@st.cache_resource(show_spinner=False)
def runner_for(backend: str):
    """The queue for user code on a backend, shared by the sessions of this server; every run in it
    gets a fresh sandboxed process, never one another visitor's code ran in."""
    return get_user_runner(backend)


def load_example(key: str) -> None:
    """Put an example into the widgets (a callback: runs before the widgets are drawn)."""
    ex = EXAMPLES[key]
    st.session_state.uk_source = ex.source
    st.session_state.uk_kernel = ex.kernel
    st.session_state.uk_block = ex.block
    st.session_state.uk_mode = MODES[0] if ex.threads_for else MODES[1]
    st.session_state.uk_n = ex.threads_for or 1000
    st.session_state.uk_grid = ex.grid or "1"
    st.session_state.uk_reference = ex.reference
    st.session_state.uk_example_reference = ex.reference  # cleared below once the source no longer fits it
    for name, value in ex.args.items():
        st.session_state[f"uk_arg_{name}"] = value


def _on_example() -> None:
    load_example(st.session_state.uk_example)


if "uk_source" not in st.session_state and not restore_form():  # back here: the current kernel's form
    st.session_state.uk_example = "vector_add"
    load_example("vector_add")

st.title("Your kernel")
# the source box reads as code (monospace)
st.html("<style>.st-key-uk_source textarea {font-family: ui-monospace, Menlo, Consolas, monospace;}</style>")
st.markdown(
    "Paste a Numba CUDA kernel as you would write it (`@cuda.jit`, module constants, device functions, "
    "`syncthreads`, early `return`s: no probes needed). **Run your kernel** instruments it automatically and every page "
    "(grid layout, scheduling, occupancy, overview and exports) then shows **your** kernel. "
    "**Try:** pick the tiled matmul, change `TILE` to 8, the block to `8,8` and the grid to `6,6`, and run "
    "again: four times the blocks, each staging smaller tiles."
)

show_link_notice()  # a shared link's kernel: filled in, run or not, and why
allowed, why = user_code_allowed(visitor_has_key())
# the server's upload store takes files only from a session that may run code (web/upload_gate.py)
(upload_gate.allow if allowed else upload_gate.forbid)(upload_gate.current_session_id())
if not allowed:
    st.warning(
        f"Running your own code is {why}.\n\nOr run your kernel from the command line: "
        "`python -m visualizer capture --source FILE.py --kernel NAME ...` (see the README)."
    )

left, right = st.columns([3, 2], gap="medium")
with left:
    st.selectbox(
        "Start from an example",
        list(EXAMPLES),
        format_func=lambda k: EXAMPLES[k].title,
        key="uk_example",
        on_change=_on_example,
    )
    source = st.text_area(
        "Kernel source (Python, Numba CUDA)", key="uk_source", height=420, max_chars=uspec.MAX_SOURCE_BYTES
    )

with right:
    syntax_error = None
    try:
        uspec.syntax_check(source, "your_kernel.py")
    except LaunchError as exc:
        syntax_error = as_text(str(exc), limit=ERROR_MAX_CHARS)
    found = uspec.kernel_names(source)
    if st.session_state.get("uk_kernel") not in found and found:
        st.session_state.uk_kernel = found[0]
    if found:
        kernel = st.selectbox("kernel", found, key="uk_kernel", help="@cuda.jit functions in the source")
    else:
        kernel = st.text_input("kernel (function name)", key="uk_kernel")
    params: list[str] = []
    if syntax_error:
        st.error(syntax_error)
    elif kernel:
        try:
            params = uspec.kernel_params(source, kernel, "your_kernel.py")
        except LaunchError as exc:
            st.error(as_text(str(exc), limit=ERROR_MAX_CHARS))

    mode = st.radio("launch", MODES, key="uk_mode", horizontal=True)
    c1, c2 = st.columns(2)
    block = c1.text_input("block (X[,Y[,Z]])", key="uk_block")
    if mode == MODES[0]:
        n = c2.number_input("elements n", 1, 1 << 30, key="uk_n")
        grid = None
    else:
        grid = c2.text_input("grid (X[,Y[,Z]])", key="uk_grid")
        n = None

    st.markdown("**Arguments**")
    st.caption(
        "`rand|zeros|ones|arange:DTYPE:SHAPE` (SHAPE like `1000` or `64x64`), a number, "
        "or `file:NAME.npy` for an uploaded file."
    )
    arg_texts = {}
    for name in params:
        key = f"uk_arg_{name}"
        st.session_state.setdefault(key, "zeros:float32:1000")
        arg_texts[name] = st.text_input(name, key=key)
    uploads = []
    if allowed:  # an upload is read only by a run: where nothing may run, nothing is taken
        fresh = st.file_uploader(
            f"upload .npy arrays (optional; this session holds up to {SESSION_UPLOAD_FILES} files, "
            f"{SESSION_UPLOAD_BYTES >> 20} MiB in all)",
            type=["npy"],
            accept_multiple_files=True,
            key="uk_upload",
            max_upload_size=UPLOAD_MAX_MB,
        )
        uploads, upload_problem = kept_uploads(fresh)  # with those kept from before (page switches)
        if upload_problem:
            st.error(upload_problem)
        show_kept_uploads(fresh)
    else:
        st.caption("Uploading `.npy` arrays comes with running your own code (off in this session).")
    example_ref = st.session_state.get("uk_example_reference")
    if params and example_ref and st.session_state.get("uk_reference") == example_ref:
        # an example's reference left behind under a pasted kernel names arrays it does not have: it was the
        # example's, not the visitor's, so it goes (with a word) instead of failing their first run
        named = {line.split("=", 1)[0].strip() for line in example_ref.splitlines() if "=" in line}
        if not named <= set(params):
            st.session_state.uk_reference = ""
            st.session_state.uk_example_reference = None
            st.caption(
                f"The example's numpy reference was cleared: `{kernel}` has no argument "
                f"{', '.join(sorted(named - set(params)))}."
            )
    reference = st.text_area(
        "numpy reference (optional): one `NAME = EXPR` per line over the argument names, or `fn:NAME`",
        key="uk_reference",
        height=80,
    )
    backend = st.radio("backend", list(BACKENDS), format_func=BACKENDS.get, horizontal=True, key="uk_backend")
    engine = importlib.util.find_spec("visualizer.engine.sim.access_record") is not None
    accesses = st.checkbox(
        "record memory accesses",
        key="uk_accesses",
        disabled=not engine,
        help="for the Memory access page: on the simulator every load and store of every thread; on a GPU "
        "your kernel records its own, in the warps of a few blocks (the first, middle and last)"
        if engine
        else "needs the memory-access engine (visualizer/engine/sim/access_record.py), not in this build",
    )
    if allowed and not syntax_error and not params:  # say why Run is greyed out (the others are said above)
        st.caption(
            "Run needs a kernel with parameters: no function decorated with `@cuda.jit` was found in the "
            "source (a pasted source counts once the box loses focus, or after Ctrl+Enter)."
            if not found
            else f"Run needs `{as_text(str(kernel), limit=80)}` to take the arrays it works on as parameters."
        )
    run = st.button(
        "Run your kernel",
        type="primary",
        use_container_width=True,
        disabled=not allowed or bool(syntax_error) or not params,
    )
    # a shared link (or Memory access's "record") asks for a run: as a click would, where it could click
    run = link_run_requested() and allowed and not syntax_error and bool(params) or run

    on = "gpu" if backend == "gpu" or (backend == "auto" and gpu_present()) else "sim"
    st.caption(
        f"Each run gets a fresh process of its own, never this server, and nothing of it stays. "
        f"Isolation in force: **{sandbox.isolation(on)}**. The run in it is stopped after {RUN_TIMEOUT_S:.0f} "
        f"s (wall clock); hard limits: {sandbox.limits_text()}. Its tables are built here after it."
    )

if run and not allowed:  # a disabled button is a hint to the browser; the server decides
    st.session_state.uk_error = as_text(f"Running your own code is {why}.", limit=ERROR_MAX_CHARS)
elif run:
    try:
        chosen = "gpu" if backend == "auto" and gpu_present() else ("sim" if backend == "auto" else backend)
        form = {"grid": grid, "block": block, "args": arg_texts, "threads_for_n": n, "reference": reference}
        files = {f.name: f.getvalue() for f in uploads or []}  # never files of the server (the helper's rule)
        launch = plan_visitor_launch(source, kernel, chosen, files, **form)
        with st.status(f"Running {kernel} on the {BACKENDS[chosen]}…", expanded=False) as status:
            bar = st.progress(0.0, text="starting the worker")

            def progress(done, total):  # after the last block: the copy back and the tables, here
                text = (
                    f"{done} of {total} blocks"
                    if done < total
                    else f"all {total} blocks ran; building the tables"
                )
                bar.progress(min(done / total, 1.0), text=text)

            def waiting(ahead, running):  # another visitor's code holds every sandbox slot
                text = queue_text(ahead, running, chosen)
                status.update(label=text[0].upper() + text[1:])
                bar.progress(0.0, text=text)

            cap = runner_for(chosen).capture_source(
                launch, progress=progress, waiting=waiting, accesses=accesses
            )
            status.update(label=f"Ran {kernel} on {cap.launch['device_name']}", state="complete")
        st.session_state.capture = cap
        st.session_state.uk_launch = launch  # what Under the hood compiles, in a sandbox of its own
        st.session_state.timing_history = []
        st.session_state.pending_run = False  # the sidebar's first run must not replace it later
        st.session_state.uk_error = None
    except (LaunchError, KernelError) as exc:
        st.session_state.uk_error = as_text(str(exc), limit=ERROR_MAX_CHARS)  # may quote visitor text
    st.rerun()  # the sidebar and the timing panel show the new capture

if st.session_state.get("uk_error"):
    st.error(st.session_state.uk_error)

cap = st.session_state.get("capture")
if cap is not None and cap.launch.get("user_kernel"):
    launch = cap.launch
    stale = bool(st.session_state.get("uk_error"))  # the last Run failed: what follows is the one before
    st.subheader(
        ("Your previous run: " if stale else "") + f"{launch['kernel_name']} on {launch['device_name']}"
    )
    if stale:
        st.caption(
            "The run above failed, so everything below is from your previous successful run, not of the "
            "code on this page."
        )
    st.caption(f"Data source: {cap.source}")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("grid", " × ".join(str(g) for g in launch["grid"] if g > 1) or "1")
    m2.metric("block", " × ".join(str(b) for b in launch["block"] if b > 1) or "1")
    m3.metric("threads", f"{launch['threads']:,}")
    work_label, work_count, work_help = did_work(cap)
    m4.metric(f"threads: {work_label}", f"{work_count:,}", help=work_help)
    check = cap.check
    if check.get("correct") is None:
        st.info("No numpy reference given: the outputs were not checked.")
    for name, res in check.get("outputs", {}).items():
        if res["mismatches"] == 0:
            st.success(
                ("Previous run: " if stale else "")
                + f"`{name}` matches the numpy reference ({res['elements']:,} elements)."
            )
        else:
            st.error(
                ("Previous run: " if stale else "")
                + f"`{name}`: {res['mismatches']:,} of {res['elements']:,} differ from the numpy reference "
                f"(max abs error {res['max_abs_error']:.3g})."
            )
    res = launch.get("clean") or {}
    if "registers_per_thread" in res:
        st.caption(
            f"Clean build: {res['registers_per_thread']} registers/thread, {res['static_smem_bytes']} B static "
            f"shared memory, {res['driver_blocks_per_sm']} blocks/SM (CUDA driver)."
        )
    else:
        counted = (launch.get("gpu_compile") or {}).get("resources")
        st.caption(
            f"Static shared memory seen on the simulator: {launch['static_smem_bytes']:,} B per block. "
            + (
                f"Compiled for a GPU before it ran: {counted['registers']} registers/thread, "
                f"{counted['spill_stores_bytes'] + counted['spill_loads_bytes']} B spilled (ptxas -v, "
                f"{launch['gpu_compile']['arch']}, clean build); every page uses this count."
                if counted
                else "Registers: not counted ("
                + as_text((launch.get("gpu_compile") or {}).get("why") or "compiled on a GPU only")
                + ")."
            )
        )
    with st.expander("Arrays after the launch", expanded=True):
        for name, arr in arrays_after(cap).items():
            written = "written by the kernel" if name in launch["written"] else "unchanged"
            st.markdown(f"**{name}** `{arr.dtype}` {tuple(arr.shape)} · {written}")
            st.code(np.array2string(arr, threshold=24, edgeitems=3, precision=4), language=None)
    st.markdown("**See it:**")
    links = st.columns(4)
    links[0].page_link("web/pages/grid.py", label="Grid layout", icon=":material/grid_on:")
    links[1].page_link("web/pages/scheduling.py", label="Warp & SM scheduling", icon=":material/timeline:")
    links[2].page_link("web/pages/occupancy.py", label="Occupancy", icon=":material/speed:")
    links[3].page_link("web/pages/overview.py", label="Overview & exports", icon=":material/home:")
