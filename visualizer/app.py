"""Entry point: ``streamlit run visualizer/app.py``. Navigation, the sidebar, and the timing panel."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # streamlit puts only this file's folder on sys.path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from visualizer.ui.guard import guard_server  # noqa: E402
from visualizer.ui.sidebar import sidebar  # noqa: E402
from visualizer.ui.timing import timing_panel  # noqa: E402

st.set_page_config(
    page_title="GPU execution visualizer", page_icon=":material/developer_board:", layout="wide"
)
guard_server()  # remote visitors only when the operator allowed them; no tracebacks (ui/guard.py)

PAGES = [
    st.Page("app_pages/overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page("app_pages/grid.py", title="Grid layout", icon=":material/grid_on:"),
    st.Page("app_pages/scheduling.py", title="Warp & SM scheduling", icon=":material/timeline:"),
    st.Page("app_pages/shared_memory.py", title="Shared memory", icon=":material/memory:"),
    st.Page("app_pages/memory_flow.py", title="Memory flow", icon=":material/swap_horiz:"),
    st.Page("app_pages/memory_access.py", title="Memory access", icon=":material/grid_view:"),
    st.Page("app_pages/occupancy.py", title="Occupancy", icon=":material/speed:"),
    st.Page("app_pages/flash_attention.py", title="FlashAttention", icon=":material/bolt:"),
    st.Page("app_pages/your_kernel.py", title="Your kernel", icon=":material/code:"),
]
page = st.navigation(PAGES)
sidebar()
timing_panel()
page.run()
