"""The run configuration: sidebar widgets <-> URL query parameters <-> cached captures.

A configuration is plain data (kernel, backend, params); the URL holds it so a teacher can share
a link that reproduces the view. Nothing here executes anything a visitor typed: parameters are
integers checked against each kernel's declared ranges before any launch.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import streamlit as st
from streamlit.errors import StreamlitAPIException

from visualizer.analysis.capture import Capture
from visualizer.engine.run.cluster import capture_queue, gpu_for_captures
from visualizer.engine.run.runner import BACKENDS, KernelError, default_sim_engine
from visualizer.specs import catalog
from visualizer.specs.catalog import LaunchError

DEFAULT_KERNEL = "vector_add"
HIDDEN_KERNELS = ("out_of_bounds_write",)  # the fault demo is for tests and the CLI
CACHE_MAX_BYTES = 512 * 2**20  # captures kept for every visitor (each capture's tables and arrays)
MESSAGE_MAX_CHARS = 300
LINK_VALUE_CHARS = 40  # a link's bad value is quoted up to this many characters
# a link's value longer than this is refused before it is parsed (no control or parameter takes more;
# a kernel's packed source travels in ``yk``, bounded by current_kernel.LINK_MAX_CHARS instead)
LINK_VALUE_MAX_CHARS = 1000

_AUTOLINK = re.compile(r"([:@])")
# Characters that start Markdown, HTML or Streamlit markup (links, images, emphasis, code, colour
# and icon directives, LaTeX, tables, headings); each is shown literally once backslash-escaped.
_MARKUP = re.compile(r"([\\`*_{}\[\]()<>#+!|~$:&=-])")


def as_text(message: str, limit: int = MESSAGE_MAX_CHARS) -> str:
    """A message that may quote a visitor's input, made safe for st.error/st.markdown: one line,
    at most ``limit`` characters, and every markup character escaped so it is shown, not rendered."""
    line = " ".join(str(message).split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    # GFM turns bare addresses (http://…, www.…, a@b.c) into links even when escaped: a zero-width
    # space after each ':' and '@' and before each '.' keeps them plain text and looks the same (after
    # a '.' it would not do: Streamlit's markdown links "www.\u200bevil.example", checked in Chromium)
    line = _AUTOLINK.sub("\\1\u200b", line).replace(".", "\u200b.")
    return _MARKUP.sub(r"\\\1", line)


# Query keys that are a page's own choices (widgets bound to the URL), not kernel parameters: a link
# carries them so it reproduces the view, and config_from_query does not mistake them for parameters.
PAGE_QUERY_KEYS = frozenset(
    {
        "page",
        "grid_color_by", "grid_animate",
        "sched_gpu", "sched_regs", "sm",
        "smem_block_x", "smem_block_y", "smem_tree_block",
        "flow_view", "flow_animate", "flow_gpu",
        "occ_arch", "occ_threads", "occ_regs", "occ_smem_kb", "occ_static",
        "mem_kernel", "mem_layout", "mem_stride", "mem_line", "mem_block", "mem_warp", "mem_exec",
        "q_tile", "row", "fa_head", "fa_batch", "fa_fa1", "fa_arch", "fa_smem_tile", "fa_smem_head_dim",
        "fa_fast_head_dim",
        "fa_break", "fa_break_variant", "fa_break_scale_no_rescale", "fa_break_scale_no_max",
        "fa_timing_mode",
        "lesson", "q", "teacher",
        "cmp_pair", "cmp_backend", "cmp_a", "cmp_b", "cmp_a_params", "cmp_b_params", "asm_arch", "asm_line",
        "yk",  # a visitor's kernel, packed (web/current_kernel.py)
        # a lesson's launch controls, as LESSON_LINK_PREFIX + the control's key (lessons/catalog.py)
        "l_n", "l_block", "l_gpu", "l_regs", "l_kernel", "l_stride", "l_tile", "l_size", "l_nbins", "l_hot",
        "l_seq_len", "l_seed", "l_reps", "l_radius", "l_per_thread", "l_width", "l_long", "l_obstacle",
        "simt_block", "simt_warp", "simt_visit", "simt_view", "simt_bar_block",  # the SIMT lens page
    }
)  # fmt: skip
LESSON_LINK_PREFIX = "l_"  # not the bare name: n, block, stride... are the sidebar kernel's parameters
# Which page owns a page choice (by its key's prefix, or the whole key): the link carries only the shown
# page's choices and the global ones (page, kernel, backend, parameters, yk); the others wait in the session
# and come back into the link when their page is shown again.
_KEY_OWNERS = (
    ("grid_", "grid"), ("sched_", "scheduling"), ("sm", "scheduling"), ("smem_", "shared_memory"),
    ("flow_", "memory_flow"), ("occ_", "occupancy"), ("mem_", "memory_access"), ("q_tile", "flash_attention"),
    ("row", "flash_attention"), ("fa_", "flash_attention"), ("lesson", "lessons"), ("q", "lessons"),
    ("teacher", "lessons"), (LESSON_LINK_PREFIX, "lessons"), ("cmp_", "compare"), ("asm_", "under_the_hood"),
    ("simt_", "simt"),
)  # fmt: skip


def page_of_key(key: str) -> str | None:
    """The page whose choice ``key`` is (None: a global key, or not a page choice)."""
    if key not in PAGE_QUERY_KEYS:
        return None
    for prefix, page in _KEY_OWNERS:
        if key == prefix or (prefix.endswith("_") and key.startswith(prefix)):
            return page
    return None


def keep_page_keys(page: str | None) -> None:
    """The link keeps the shown page's choices and the global keys: other pages' choices move into the
    session (so the link does not grow with every page visited) and come back when their page shows."""
    if not page:
        return
    kept: dict = st.session_state.setdefault("_other_pages_links", {})
    for key in list(st.query_params):
        owner = page_of_key(key)
        if owner is not None and owner != page:
            kept[key] = st.query_params[key]
            try:
                del st.query_params[key]
            except StreamlitAPIException:  # a widget bound to the URL owns this key
                kept.pop(key)
    for key in [k for k in kept if page_of_key(k) == page]:
        raw = kept.pop(key)
        if key not in st.query_params:
            st.query_params[key] = raw


@dataclass(frozen=True)
class RunConfig:
    kernel: str = DEFAULT_KERNEL
    backend: str = "auto"
    params: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    def to_query(self) -> dict[str, str]:
        return {"kernel": self.kernel, "backend": self.backend, **{k: str(v) for k, v in self.params}}


def box_label(title: str, name: str, limit: int) -> str:
    """What a select box shows for an option: its title when the box holds it whole, else its short
    name (the box is a text input: a longer title is cut mid-word, as "Matrix multiply (shared-memory")."""
    return title if len(title) <= limit else name


def kernel_label(kernel: str, limit: int) -> str:
    spec = catalog.KERNELS.get(kernel)
    return box_label(spec.title, kernel, limit) if spec is not None else kernel


def visible_kernels() -> list[str]:
    return [k for k in catalog.KERNELS if k not in HIDDEN_KERNELS]


def config_from_query(query: dict[str, str]) -> tuple[RunConfig, str | None]:
    """The configuration a URL asks for, or the defaults plus a one-line error for a malformed one."""
    kernel = query.get("kernel", DEFAULT_KERNEL)
    backend = query.get("backend", "auto")
    try:
        for key, value in query.items():
            if key not in PAGE_QUERY_KEYS and len(str(key)) + len(str(value)) > LINK_VALUE_MAX_CHARS:
                raise LaunchError(
                    f"{catalog.quoted(key)}={catalog.quoted(value)} is over {LINK_VALUE_MAX_CHARS:,} characters"
                )
        spec = catalog.get(kernel)
        if kernel in HIDDEN_KERNELS:
            raise LaunchError(f"kernel {catalog.quoted(kernel)} cannot be run from the app")
        if backend not in BACKENDS:
            raise LaunchError(
                f"unknown backend {catalog.quoted(backend)} in the link; choose one of {', '.join(BACKENDS)}"
            )
        given = {
            k: v for k, v in query.items() if k not in ("kernel", "backend") and k not in PAGE_QUERY_KEYS
        }
        values = spec.resolve(given)
        return RunConfig(kernel, backend, tuple(sorted(values.items()))), None
    except LaunchError as exc:
        spec = catalog.get(DEFAULT_KERNEL)
        return RunConfig(DEFAULT_KERNEL, "auto", tuple(sorted(spec.defaults().items()))), as_text(
            f"Bad link: {exc}"
        )


@st.cache_resource(show_spinner=False)
def runner_for(backend: str):
    """One queue of workers per backend, shared by every browser session (runner.RunQueue, or the
    Dask cluster's: engine/run/cluster.py)."""
    return capture_queue(backend)


def capture_nbytes(cap: Capture) -> int:
    """Host memory a capture holds: its arrays and its tables (deep, so strings count)."""
    arrays = sum(a.nbytes for a in (*cap.inputs.values(), *cap.outputs.values()))
    tables = sum(int(df.memory_usage(deep=True, index=True).sum()) for df in cap.tables().values())
    return int(arrays + tables)


class _Flight:
    """A capture being computed for one key; later askers wait for it instead of queueing again."""

    def __init__(self):
        self.done = threading.Event()
        self.result: Capture | None = None
        self.error: Exception | None = None


class CaptureCache:
    """Captures shared by every browser session, bounded in bytes, least recently used dropped first.

    Not st.cache_data: a miss must drive a progress bar while the simulator runs, and cache_data
    cannot replay Streamlit elements created outside the cached function. Captures are read-only.
    Only a capture that finished for the request that asked for it is ever stored.
    """

    def __init__(self, max_bytes: int = CACHE_MAX_BYTES):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict = OrderedDict()  # key -> (capture, its bytes)
        self._inflight: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        return None

    def put(self, key, value) -> None:
        size = capture_nbytes(value)
        with self._lock:
            if key in self._items:
                self.nbytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return  # bigger than the whole cache: its visitor keeps it, nobody else
            self._items[key] = (value, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.nbytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = 0

    def get_or_run(self, key, run, wait=None) -> Capture:
        """The cached capture for ``key``, or ``run()``'s; one run per key at a time.

        A second visitor asking for a key being computed waits for that run (``wait()`` is called
        about once a second meanwhile and may raise to leave). If the first visitor leaves, its run
        is cancelled and a waiting visitor runs it again.
        """
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
                flight = self._inflight.get(key)
                leader = flight is None
                if leader:
                    flight = self._inflight[key] = _Flight()
            if leader:
                try:
                    cap = run()
                    self.put(key, cap)
                    flight.result = cap
                    return cap
                except (LaunchError, KernelError) as exc:
                    flight.error = exc
                    raise
                finally:
                    with self._lock:
                        self._inflight.pop(key, None)
                    flight.done.set()
            while not flight.done.wait(1.0):
                if wait is not None:
                    wait()
            if flight.result is not None:
                return flight.result
            if flight.error is not None:
                raise flight.error
            # the visitor who ran it left before it finished: run it (or wait for whoever does)


@st.cache_resource(show_spinner=False)
def capture_cache() -> CaptureCache:
    return CaptureCache()


def capture_key(kernel: str, params: tuple, backend: str, seed: int = 0, **options) -> tuple:
    """The shared cache's key of a capture; ``options`` (e.g. accesses=True) are part of it."""
    return (kernel, tuple(sorted(params)), backend, seed, *sorted(options.items()))


def cached_capture(
    kernel: str, params: tuple, backend: str, seed: int = 0, progress=None, waiting=None, **options
) -> Capture:
    """The capture of (kernel, params, backend, seed), launched only the first time it is asked for.

    ``progress(done, total)``: blocks simulated; ``waiting(ahead, running)``: runs ahead in the
    queue (ahead is None while another visitor's identical run is computing). Either may raise
    (Streamlit does when the visitor leaves): the run is then cancelled and nothing is cached.
    ``options`` (e.g. ``accesses=True``) go to the runner and are part of the cache key.
    """
    key = capture_key(kernel, params, backend, seed, **options)

    def run() -> Capture:
        cap = runner_for(backend).capture(
            kernel, dict(params), seed=seed, progress=progress, waiting=waiting, **options
        )
        got = cap.launch["params"]
        if cap.launch["kernel"] != kernel or any(got.get(k) != v for k, v in params):
            # the runner's request ids make this impossible; never show or cache it if it happens
            raise KernelError(f"the worker answered a different request than {kernel}; please run again")
        return cap

    return capture_cache().get_or_run(key, run, wait=(lambda: waiting(None, None)) if waiting else None)


def backend_badge(cap: Capture) -> str:
    launch = cap.launch
    if launch["backend"] == "gpu":
        return (
            f":green-badge[GPU: {launch['device_name']} · sm_{launch['compute_capability'].replace('.', '')}]"
        )
    return ":orange-badge[CUDA simulator on CPU]\n\nSM ids and times are modelled, not measured." + (
        f"\n\n{engine_caption(launch)}" if launch.get("sim_engine") else ""
    )


def engine_caption(launch: dict) -> str:
    """Which simulator engine ran the capture, in one short line (and why not the compiled one)."""
    if launch.get("sim_engine") == "compiled":
        return "Engine: compiled (the kernel compiled for the CPU)."
    note = launch.get("sim_engine_note")
    return f"Engine: fastsim ({as_text(note, limit=160)})." if note else "Engine: fastsim."


def queue_text(ahead: int | None, running: int | None, backend: str) -> str:
    if ahead is None:
        return "another visitor is running this same launch: its capture will be shown here too"
    worker = "GPU" if backend == "gpu" else "simulator worker"
    runs = "1 run" if ahead == 1 else f"{ahead} runs"
    return f"in line: {runs} ahead of yours ({running} running); waiting for a free {worker}"


def run_capture(config: RunConfig, seed: int = 0) -> tuple[Capture | None, str | None]:
    """Capture (from cache when possible), with progress for slow simulator runs; errors as one line."""
    try:
        backend = "gpu" if config.backend == "auto" and gpu_for_captures() else config.backend
        backend = "sim" if backend == "auto" else backend
        # at the limits of the engine the simulator's worker will run it on (the compiled one admits a
        # 1M-thread tiled matmul that fastsim's limits refuse: docs/compiled-engine.md "Caps")
        sim = backend == "sim"
        catalog.admit_capture(config.kernel, config.param_dict, "sim" if sim else "gpu",
                              sim_engine=default_sim_engine() if sim else "fastsim")  # fmt: skip
        label = (
            "Running on the GPU…"
            if backend == "gpu"
            else "Running on the CUDA simulator (every CUDA thread simulated in Python on the CPU)…"
        )
        with st.status(label, expanded=False) as status:
            bar = st.progress(0.0, text="starting the worker")

            # The place in line goes in a toast (top right, seen whatever the scroll) and the status label.
            queued: dict = {}

            def done_waiting(text: str, icon: str) -> None:
                toast = queued.pop("toast", None)
                if toast is not None:  # replace the waiting toast by one that goes away by itself
                    toast.toast(text, icon=icon, duration="short")

            def progress(done, total):
                if "toast" in queued:
                    status.update(label=label)
                    done_waiting("Your run has started.", ":material/play_arrow:")
                bar.progress(min(done / total, 1.0), text=f"{done} of {total} blocks simulated")

            def waiting(ahead, running):
                text = queue_text(ahead, running, backend)
                text = text[0].upper() + text[1:]
                if queued.get("text") != text:
                    queued["text"] = text
                    icon = ":material/hourglass_top:"
                    if "toast" not in queued:
                        queued["toast"] = st.toast(text, icon=icon, duration="infinite")
                    else:
                        queued["toast"].toast(text, icon=icon, duration="infinite")
                    status.update(label=text)
                bar.progress(0.0, text=text)

            cap = cached_capture(
                config.kernel, config.params, backend, seed, progress=progress, waiting=waiting
            )
            done_waiting("Your capture is ready.", ":material/check:")
            status.update(label=f"Ran {config.kernel} on {cap.launch['device_name']}", state="complete")
        return cap, None
    except (LaunchError, KernelError) as exc:
        return None, as_text(str(exc))


def sync_query(config: RunConfig, page: str | None = None) -> None:
    """Put the run configuration in the address bar, keeping the page's own choices (PAGE_QUERY_KEYS).

    Called on every run, so the link in the address bar always reproduces what is on screen. Keys of
    another kernel's parameters are dropped; only keys whose value differs are written.
    """
    wanted = config.to_query() | ({"page": page} if page else {})
    for key in [k for k in st.query_params if k not in wanted and k not in PAGE_QUERY_KEYS]:
        try:
            del st.query_params[key]
        except StreamlitAPIException:  # a widget bound to the URL owns this key: it is a page choice
            pass
    for key, value in wanted.items():
        if st.query_params.get(key) != value:
            st.query_params[key] = value
    keep_page_keys(page)


def _parse_query_value(raw: str, like):
    """``raw`` from a link as the type of ``like`` (bool as 0/1, int, float or str)."""
    if isinstance(like, bool):
        if raw not in ("0", "1"):
            raise ValueError(raw)
        return raw == "1"
    return type(like)(raw)


def _allowed_text(allowed) -> str:
    if isinstance(allowed, list):
        shown = ", ".join(str(a) for a in allowed[:8]) + (", …" if len(allowed) > 8 else "")
        return f"one of {shown}"
    return f"from {allowed[0]} to {allowed[1]}"


def link_value(key: str, default, allowed=None, raw: str | None = None) -> tuple[object, str | None]:
    """The value the link gives for ``key`` (``raw``, else the address bar's), checked; or the default.

    ``default`` gives the type; ``allowed`` is a list of valid values or a (lo, hi) range. Returns
    (value, None), or (default, a one-line notice, already escaped) when the link's value is malformed
    or out of range, so a bad link never breaks a page: the page shows the notice and goes on.
    """
    if raw is None:
        raw = st.query_params.get(key)
    if raw is None:
        return default, None
    try:
        if len(raw) > LINK_VALUE_MAX_CHARS:
            raise ValueError("too long to be read")
        parsed = _parse_query_value(raw, default)
    except ValueError:
        parsed, why = None, "not a value this control takes"
    else:
        ok = allowed is None or (
            parsed in allowed if isinstance(allowed, list) else allowed[0] <= parsed <= allowed[1]
        )
        why = None if ok else _allowed_text(allowed)
    if why is None:
        return parsed, None
    shown = raw if len(raw) <= LINK_VALUE_CHARS else raw[: LINK_VALUE_CHARS - 1] + "…"
    used = ("on (1)" if default else "off (0)") if isinstance(default, bool) else default
    if isinstance(default, bool) and why == "not a value this control takes":
        why = "1 for on, 0 for off"
    return default, as_text(f"The link's {key}={shown} was ignored ({why}); showing {used} instead.")


def question_from_link(raw: str | None, count: int) -> tuple[int, str | None]:
    """A lesson's question a link's ``q`` names (1..count; 0 or none: all of them), and a one-line
    notice (escaped) when the link's value was ignored."""
    if raw is None or raw == "0":
        return 0, None
    # ASCII digits only: str.isdigit is true for '²', which int() refuses
    if raw.isascii() and raw.isdigit() and len(raw) <= 6 and 1 <= int(raw) <= count:
        return int(raw), None
    shown = raw if len(raw) <= LINK_VALUE_CHARS else raw[: LINK_VALUE_CHARS - 1] + "…"
    return 0, as_text(
        f"The link's q={shown} was ignored (this lesson's questions are "
        + ("1" if count == 1 else f"1 to {count}")
        + "); showing all its questions instead."
    )


def from_link(key: str, default, allowed=None) -> str | None:
    """Seed the page widget ``key`` from the link, when the widget has no state yet.

    ``default`` gives the type; ``allowed`` is a list of valid values or a (lo, hi) range. A value the
    widget could not take is ignored (the widget keeps its default) and a one-line notice returned
    for the page to show (None otherwise), so a bad link never breaks a page. The widget must then be
    created without ``value=`` (it reads its state). ``key`` must be one of PAGE_QUERY_KEYS.
    """
    if key in st.session_state:
        return None
    value, notice = link_value(key, default, allowed)
    st.session_state[key] = value
    return notice


def show_link_notices(*notices: str | None) -> None:
    """The link's ignored values, one line each, where the page's controls are."""
    for notice in notices:
        if notice:
            st.warning(notice, icon=":material/link_off:")


def to_link(*keys: str) -> None:
    """Write the current value of page widgets ``keys`` into the link (the address bar)."""
    for key in keys:
        if key in st.session_state:
            set_link(key, st.session_state[key])


def set_link(key: str, value) -> None:
    """Write ``value`` into the link under ``key`` (one of PAGE_QUERY_KEYS); bools as 0/1."""
    text = str(int(value)) if isinstance(value, bool) else str(value)
    if st.query_params.get(key) != text:
        st.query_params[key] = text


def drop_link(*keys: str) -> None:
    """Remove page choices from the link (for a callback whose change makes them stale)."""
    for key in keys:
        if key in st.query_params:
            del st.query_params[key]


def current_capture() -> Capture | None:
    """The capture the sidebar's Run produced for this session (pages read it, never re-run)."""
    return st.session_state.get("capture")


def shown_config(cap: Capture) -> RunConfig:
    """The run configuration a capture came from (its backend as the sidebar named it)."""
    launch = cap.launch
    return RunConfig(launch["kernel"], st.session_state.get("shown_backend", launch["backend"]),
                     tuple(sorted(launch["params"].items())))  # fmt: skip


def run_problem() -> str | None:
    """The one-line error of the link or of the last Run, if any (shown in the main area)."""
    return st.session_state.get("run_error") or st.session_state.get("url_error")


def show_run_problems() -> None:
    """The link's or the last Run's error, in the main area, for pages that draw without a capture."""
    if st.session_state.get("run_error"):
        st.error(f"**This configuration did not run:** {st.session_state.run_error}", icon=":material/error:")
    if st.session_state.get("url_error"):
        st.error(st.session_state.url_error, icon=":material/link_off:")


def require_capture(source=None) -> Capture:
    """The capture to draw, or stop the page with the reason in the main area, where the chart would be.

    A failed Run never leaves the previous chart under the new configuration: the page shows the error
    instead. A configuration changed in the sidebar but not yet run is named above the old chart.
    """
    show_run_problems()
    if st.session_state.get("run_error"):
        st.caption("Change the parameters in the sidebar and press **Run** again.")
        st.stop()
    cap = current_capture()
    if cap is None:
        st.info("Pick a kernel in the sidebar and press **Run**.")
        st.stop()
    show_unrun_notice(cap)
    # ``source``: the page's data-source line, joined to the kernel's (one caption, not two, above the chart)
    st.caption(kernel_named(cap) + (f" · Data source: {source(cap)}" if source is not None else ""))
    return cap


def dims_text(dims) -> str:
    """Launch dimensions as people write them: (64, 1, 1) -> "64", (8, 8, 1) -> "8 × 8"."""
    dims = [int(d) for d in dims]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return " × ".join(str(d) for d in dims)


def kernel_named(cap: Capture) -> str:
    """One line naming the kernel a page draws, a visitor's own or a built-in one, and its launch."""
    launch = cap.launch
    shape = ""
    if "grid" in launch and "block" in launch:
        shape = (
            f" · grid {dims_text(launch['grid'])} × block {dims_text(launch['block'])}"
            f" = {int(launch['threads']):,} threads"
        )
    if launch.get("user_kernel"):
        return "Kernel: " + as_text(f"{launch['kernel']}, from the Your kernel page{shape}", limit=400)
    spec = catalog.KERNELS.get(launch["kernel"])
    title = f"{spec.title} ({launch['kernel']})" if spec is not None else launch["kernel"]
    return "Kernel: " + as_text(f"{title}{shape}", limit=400)


def show_unrun_notice(cap: Capture) -> None:
    """Name sidebar parameters that have not run yet above charts of the previous run, with a Run."""
    pending = st.session_state.get("unrun_config")
    if pending is not None:
        params = ", ".join(f"{k}={v}" for k, v in pending.params)
        c1, c2 = st.columns([4, 1], vertical_alignment="center")
        c1.warning(
            f"The sidebar now says **{pending.kernel}** ({params}), but the charts below are still the "
            f"previous run ({cap.launch['kernel']}, "
            # a visitor's own kernel has their argument texts (upload names) here: shown as text
            + as_text(", ".join(f"{k}={v}" for k, v in sorted(cap.launch["params"].items())))
            + "). Press **Run** to see the new one.",
            icon=":material/pending:",
        )
        c2.button("Run", type="primary", key="main_run", on_click=_request_run, use_container_width=True)


def _request_run() -> None:
    st.session_state.run_requested = True
