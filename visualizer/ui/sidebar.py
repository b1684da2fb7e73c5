"""The sidebar: kernel, backend and parameters (kept in the URL), Run, and the backend badge."""

from __future__ import annotations

import streamlit as st

from visualizer import catalog
from visualizer.ui.session import (
    RunConfig,
    backend_badge,
    config_from_query,
    run_capture,
    visible_kernels,
)

MAX_BLOCK_SLIDER = 1024  # CUDA's limit on threads per block
BACKEND_LABELS = {"auto": "auto (GPU if present)", "gpu": "GPU", "sim": "simulator"}


def _param_widget(spec: catalog.KernelSpec, prm: catalog.Param, value: int) -> int:
    key = f"param_{spec.name}_{prm.name}"
    if prm.choices:
        options = list(prm.choices)
        return st.select_slider(
            prm.name, options, value=value if value in options else prm.default, help=prm.help, key=key
        )
    if prm.hi - prm.lo <= 64:
        return st.slider(prm.name, prm.lo, prm.hi, value, help=prm.help, key=key)
    if prm.name == "block" and 0 <= value <= MAX_BLOCK_SLIDER:
        # a slider to drag (0 is there on purpose: it shows the error a zero-thread block gets);
        # a value beyond it (only from a link) falls back to the number box below
        return st.slider(prm.name, 0, MAX_BLOCK_SLIDER, value, help=prm.help, key=key)
    return int(st.number_input(prm.name, prm.lo, prm.hi, value, help=prm.help, key=key))


def sidebar() -> None:
    """Draw the sidebar; on Run (or a first visit) capture the kernel into session_state."""
    if "config" not in st.session_state:
        config, error = config_from_query(st.query_params.to_dict())
        st.session_state.config = config
        st.session_state.url_error = error
        st.session_state.pending_run = True
    config: RunConfig = st.session_state.config

    with st.sidebar:
        st.markdown("### Kernel")
        kernels = visible_kernels()
        kernel = st.selectbox(
            "kernel",
            kernels,
            index=kernels.index(config.kernel) if config.kernel in kernels else 0,
            format_func=lambda k: catalog.KERNELS[k].title,
            key="kernel_pick",
            label_visibility="collapsed",
        )
        spec = catalog.KERNELS[kernel]
        st.caption(spec.summary)
        backend = st.radio(
            "backend",
            list(BACKEND_LABELS),
            index=list(BACKEND_LABELS).index(config.backend),
            format_func=BACKEND_LABELS.get,
            horizontal=True,
            key="backend_pick",
        )
        with st.form("run_form", border=False):
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
            if launch is not None:
                st.caption(
                    f"grid {launch.grid[:2] if launch.grid[1] > 1 else launch.grid[0]} × "
                    f"block {launch.block[:2] if launch.block[1] > 1 else launch.block[0]} = "
                    f"{launch.threads:,} threads"
                )
            submitted = st.form_submit_button("Run", type="primary", use_container_width=True)

        if submitted or kernel != config.kernel or backend != config.backend:
            config = RunConfig(kernel, backend, tuple(sorted(values.items())))
            st.session_state.config = config
            st.session_state.pending_run = True

        if st.session_state.get("pending_run", False):
            st.query_params.from_dict(config.to_query())
            cap, error = run_capture(config)
            # cleared only once the run is over: a run cut short by a page switch runs again there
            st.session_state.pending_run = False
            st.session_state.run_error = error
            if cap is not None:
                st.session_state.capture = cap
                st.session_state.timing_history = []

        if st.session_state.get("url_error"):
            st.error(st.session_state.url_error)
        if st.session_state.get("run_error"):
            st.error(st.session_state.run_error)
        cap = st.session_state.get("capture")
        if cap is not None:
            st.markdown(backend_badge(cap))
            st.caption(f"showing: {cap.launch['kernel']} {cap.launch['params']}")
