"""The sidebar: page choice, kernel, backend and parameters (all kept in the URL), Run, the backend badge.

Pages are chosen by a ``page`` query parameter on the app's root URL rather than by URL path: a
browser then never asks a page path for the server's health and host-config endpoints (404s), and
every choice a page makes lives in the same query string, so a copied link reproduces the view.
"""

from __future__ import annotations

import streamlit as st

from visualizer.specs import catalog
from visualizer.web.current_kernel import settle, visitor_sidebar
from visualizer.web.session import (
    RunConfig,
    as_text,
    backend_badge,
    capture_cache,
    capture_key,
    config_from_query,
    kernel_label,
    run_capture,
    sync_query,
    visible_kernels,
)

MAX_BLOCK_SLIDER = 1024  # CUDA's limit on threads per block
BACKEND_LABELS = {"auto": "auto", "gpu": "GPU", "sim": "simulator"}
BACKEND_HELP = "auto: the GPU if this machine has one, else the CUDA simulator on the CPU"
# Projector fit (our own fixed CSS, no visitor text): Streamlit leaves ~130 px blank above every page's
# title and ~80 px above the sidebar's first line, and its page title is 44 px tall, which pushed charts
# and the sidebar's parameters below a 720-px screen's edge. (A select box's chosen option is an input's
# text and cannot wrap: session.box_label keeps it whole instead.)
LAYOUT_CSS = (
    "<style>[data-testid='stMainBlockContainer']{padding-top:2.5rem}"
    "[data-testid='stMain'] h1{font-size:2rem;padding-top:0.25rem;padding-bottom:0.5rem}"
    "[data-testid='stMain'] h2{font-size:1.5rem;padding-top:0.5rem;padding-bottom:0.25rem}"
    "[data-testid='stMain'] h3{font-size:1.25rem;padding-top:0.5rem;padding-bottom:0.25rem}"
    "[data-testid='stSidebarHeader']{height:2.5rem;margin-bottom:0}"
    "[data-testid='stSidebarCollapseButton']{margin-top:-0.5rem}</style>"
)
KERNEL_BOX_CHARS = (
    27  # a title longer than this is cut in its box (an input): the box shows the kernel's name,
)
# and the title is written out below it


ROOT_PAGE = "view"  # the url_path the chosen page runs under: one page id whatever page is shown
# Pages with launch controls of their own: the sidebar's kernel, backend, parameters and Run (and the
# timing of the sidebar's run) would do nothing there, so they are not drawn.
OWN_LAUNCH_PAGES = frozenset({"lessons", "your_kernel"})


def kernel_controls_shown() -> bool:
    """Whether the page being shown uses the sidebar's kernel controls and its capture."""
    return st.session_state.get("page") not in OWN_LAUNCH_PAGES


def _page_key(page) -> str:
    return page._url_path  # the name a page has in ?page=... (its file name unless given)


def navigate(pages: list | dict) -> st.Page:
    """The page to run: the one ``?page=`` names (the sidebar's page list), as the app's root page.

    The chosen page is registered as the default page under one fixed id, so the browser stays on the
    root URL and its reruns always land on the sidebar's choice. The other pages stay registered
    (hidden) under their own names, so a direct path such as ``/grid`` from an older link, or a
    test's ``switch_page``, still finds its page; the sidebar then follows that page.
    """
    groups = pages if isinstance(pages, dict) else {"": pages}  # {group title: pages}; "" = no title
    pages = [p for group in groups.values() for p in group]
    keys = [_page_key(p) for p in pages]
    chosen = st.session_state.get("page")
    if chosen is None:
        chosen = st.query_params.get("page", keys[0])
    if chosen not in keys:
        chosen = keys[0]
    st.session_state.page = chosen  # before the sidebar's page list exists, as Streamlit requires
    registered = {
        key: st.Page(p._page, title=p.title, icon=p.icon, url_path=ROOT_PAGE if key == chosen else key,
                     default=key == chosen)
        for p, key in zip(pages, keys, strict=True)
    }  # fmt: skip
    page = st.navigation(list(registered.values()), position="hidden")
    asked = next(key for key, p in registered.items() if p is page)
    if asked != chosen:
        # asked for by path or page id (an older /grid link, a test's switch_page): show that page
        st.session_state.page = asked
        st.rerun()
    st.session_state._page_titles = {key: (p.title, p.icon) for p, key in zip(pages, keys, strict=True)}
    st.session_state._page_keys = keys
    st.session_state._page_groups = [
        (title, [_page_key(p) for p in group]) for title, group in groups.items()
    ]
    return page


def _page_list() -> None:
    keys = st.session_state.get("_page_keys")
    if not keys:
        return
    titles = st.session_state._page_titles

    def label(key: str) -> str:
        title, icon = titles[key]
        return f"{icon} {title}" if icon else title

    # not bind="query-params": that would write the label into the URL; sync_query writes the key.
    # One radio per group (the Lessons are their own group); "page" itself is plain state they set.
    groups = st.session_state.get("_page_groups") or [("", keys)]
    for title, group in groups:
        widget = f"_nav_{title or 'pages'}"
        st.session_state[widget] = st.session_state.page if st.session_state.page in group else None
        st.radio(
            title or "page", group, format_func=label, key=widget, index=None, label_visibility="collapsed",
            on_change=_choose_page, args=(widget,),
        )  # fmt: skip


def _choose_page(widget: str) -> None:
    if st.session_state.get(widget) is not None:
        st.session_state.page = st.session_state[widget]


def _param_widget(spec: catalog.KernelSpec, prm: catalog.Param, value: int) -> int:
    """One parameter's widget; its state is seeded from ``value`` once, then the widget owns it."""
    key = f"param_{spec.name}_{prm.name}"
    if prm.choices:
        options = list(prm.choices)
        if st.session_state.get(key) not in options:
            st.session_state[key] = value if value in options else prm.default
        return st.select_slider(prm.name, options, help=prm.help, key=key)
    if key not in st.session_state:
        st.session_state[key] = value
    current = st.session_state[key]
    if prm.hi - prm.lo <= 64:
        return st.slider(prm.name, prm.lo, prm.hi, help=prm.help, key=key)
    if prm.name == "block" and 1 <= current <= MAX_BLOCK_SLIDER:
        # a slider to drag over the block sizes CUDA can launch; a value beyond it (only from a link,
        # e.g. block=0 to see the error a zero-thread block gets) falls back to the number box below
        return st.slider(prm.name, 1, MAX_BLOCK_SLIDER, help=prm.help, key=key)
    return int(st.number_input(prm.name, prm.lo, prm.hi, help=prm.help, key=key))


def load_config(config: RunConfig) -> None:
    """Make ``config`` the whole run configuration and run it: sidebar widgets included.

    For button callbacks (a callback runs before the script, so it may still set widget state): the
    kernel box, backend and every parameter widget then show the configuration that runs.
    """
    values = catalog.get(config.kernel).resolve(dict(config.params))  # every parameter, defaults filled in
    config = RunConfig(config.kernel, config.backend, tuple(sorted(values.items())))
    st.session_state.config = config
    st.session_state.kernel_pick = config.kernel
    st.session_state.backend_pick = config.backend
    for name, value in config.params:
        st.session_state[f"param_{config.kernel}_{name}"] = value
    st.session_state.pending_run = True


def _is_cached(config: RunConfig) -> bool:
    """Whether this configuration has run before (then showing it costs nothing: no Run needed)."""
    backends = ("sim", "gpu") if config.backend == "auto" else (config.backend,)
    return any(
        capture_cache().get(capture_key(config.kernel, config.params, b)) is not None for b in backends
    )


def sidebar() -> None:
    """Draw the sidebar; on Run (or a first visit, or an already-run configuration) capture the kernel."""
    settle()  # a visitor's new capture gets its link (and a link's run goes back to its page)
    first_visit = "config" not in st.session_state
    if first_visit:
        config, error = config_from_query(st.query_params.to_dict())
        st.session_state.config = config
        st.session_state.url_error = error
        st.session_state.pending_run = True
    config: RunConfig = st.session_state.config
    # main-area notice while a run that is not cached yet goes on: its progress sits under Run in the
    # sidebar, below a 720-px screen's edge for kernels with many parameters, and the page itself
    # draws only after the run, so without this the main area stayed blank for the whole run
    running_notice = st.empty()

    with st.sidebar:
        st.html(LAYOUT_CSS)
        _page_list()
        if visitor_sidebar(st.session_state.get("page"), kernel_controls_shown()):
            return  # the visitor's kernel is current: named, and in the link, instead of the controls
        if not kernel_controls_shown():
            # nothing runs here: a first visit's run waits for a page that shows it (pending_run stays)
            sync_query(config, page=st.session_state.get("page"))
            return
        kernels = visible_kernels()
        if st.session_state.get("kernel_pick") not in kernels:
            st.session_state.kernel_pick = config.kernel if config.kernel in kernels else kernels[0]
        kernel = st.selectbox(
            "Kernel",
            kernels,
            format_func=lambda k: kernel_label(k, KERNEL_BOX_CHARS),
            key="kernel_pick",
            help=catalog.KERNELS[st.session_state.kernel_pick].summary,
        )
        spec = catalog.KERNELS[kernel]
        if len(spec.title) > KERNEL_BOX_CHARS:
            st.caption(spec.title)
        if st.session_state.get("backend_pick") not in BACKEND_LABELS:
            st.session_state.backend_pick = config.backend
        backend = st.radio(
            "backend",
            list(BACKEND_LABELS),
            format_func=BACKEND_LABELS.get,
            horizontal=True,
            key="backend_pick",
            help=BACKEND_HELP,
        )
        # Run above the parameters, in the sidebar's flow: below them it fell under a 720-px screen's edge
        # for kernels with many parameters, and kept sticky there it covered the control under it. A
        # parameter changed and not run yet is named above the charts with a Run of its own.
        submitted = st.button("Run", type="primary", use_container_width=True, key="sidebar_run")
        current = config.param_dict if config.kernel == kernel else spec.defaults()
        values = {p.name: _param_widget(spec, p, current.get(p.name, p.default)) for p in spec.params}
        try:
            launch = (
                spec.plan(spec.resolve(values))
                if min(values.get(k, 1) for k in ("block", "tile")) > 0
                else None
            )
        except catalog.LaunchError:
            launch = None
        wanted = RunConfig(kernel, backend, tuple(sorted(values.items())))
        submitted = submitted or st.session_state.pop("run_requested", False)
        if launch is not None:
            st.caption(
                f"grid {launch.grid[:2] if launch.grid[1] > 1 else launch.grid[0]} × "
                f"block {launch.block[:2] if launch.block[1] > 1 else launch.block[0]} = "
                f"{launch.threads:,} threads"
            )

        if wanted != config and (
            submitted or kernel != config.kernel or backend != config.backend or _is_cached(wanted)
        ):
            config = wanted
            st.session_state.config = config
            st.session_state.pending_run = True
        elif submitted:
            st.session_state.pending_run = True  # run the same configuration again (e.g. after an error)
        st.session_state.unrun_config = None if wanted == config else wanted

        sync_query(config, page=st.session_state.get("page"))
        if st.session_state.get("pending_run", False):
            if not _is_cached(config):
                running_notice.info(
                    f"Running **{config.kernel}**… the page appears when the run is done "
                    "(progress under Run in the sidebar).",
                    icon=":material/hourglass_top:",
                )
            cap, error = run_capture(config)
            running_notice.empty()
            # cleared only once the run is over: a run cut short by a page switch runs again there
            st.session_state.pending_run = False
            st.session_state.run_error = error
            if cap is not None:
                st.session_state.capture = cap
                st.session_state.timing_history = []
                if not first_visit:
                    st.session_state.url_error = None  # the link's problem is behind us

        for error in (st.session_state.get("url_error"), st.session_state.get("run_error")):
            if error:
                st.error(error)
        cap = st.session_state.get("capture")
        if cap is not None:
            st.markdown(backend_badge(cap))
            shown = ", ".join(f"{k}={v}" for k, v in cap.launch["params"].items())
            shown = (
                f"showing: {cap.launch['kernel']} ({shown})" if shown else f"showing: {cap.launch['kernel']}"
            )
            # a visitor's own kernel: its argument texts (upload names) are shown as text, never linked
            st.caption(as_text(shown, limit=600) if cap.launch.get("user_kernel") else shown)
