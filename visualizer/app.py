"""Entry point: ``streamlit run visualizer/app.py``. Navigation, the sidebar, and the timing panel."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # streamlit puts only this file's folder on sys.path
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import streamlit as st  # noqa: E402
from PIL import Image  # noqa: E402

from visualizer.web.current_kernel import take_kernel_link  # noqa: E402
from visualizer.web.guard import guard_server  # noqa: E402
from visualizer.web.sidebar import navigate, sidebar  # noqa: E402
from visualizer.web.timing import timing_panel  # noqa: E402


def _favicon() -> Image.Image:
    """A 32x32 grid-of-blocks icon drawn here: the app fetches nothing from outside the machine
    (a :material/...: page icon is downloaded from a font host by the browser)."""
    icon = np.full((32, 32, 3), 255, np.uint8)
    for i in range(4):
        for j in range(4):
            icon[2 + 7 * i : 8 + 7 * i, 2 + 7 * j : 8 + 7 * j] = (
                (11, 95, 255) if (i + j) % 3 else (17, 17, 17)
            )
    return Image.fromarray(icon)


st.set_page_config(page_title="GPU execution visualizer", page_icon=_favicon(), layout="wide")
guard_server()  # remote visitors only when the operator allowed them; no tracebacks (ui/guard.py)

PAGES = [
    st.Page("web/pages/overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page("web/pages/grid.py", title="Grid layout", icon=":material/grid_on:"),
    st.Page("web/pages/scheduling.py", title="Warp & SM scheduling", icon=":material/timeline:"),
    st.Page("web/pages/simt.py", title="SIMT lens: branches, barriers", icon=":material/call_split:"),
    st.Page("web/pages/shared_memory.py", title="Shared memory", icon=":material/memory:"),
    st.Page("web/pages/memory_flow.py", title="Memory flow", icon=":material/swap_horiz:"),
    st.Page("web/pages/memory_access.py", title="Memory access", icon=":material/grid_view:"),
    st.Page("web/pages/occupancy.py", title="Occupancy", icon=":material/speed:"),
    st.Page("web/pages/flash_attention.py", title="FlashAttention", icon=":material/bolt:"),
    st.Page("web/pages/your_kernel.py", title="Your kernel", icon=":material/code:"),
    st.Page("web/pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("web/pages/under_the_hood.py", title="Under the hood", icon=":material/memory_alt:"),
]
# its own group (a radio of its own), titled in its one entry: a header line would push the sidebar's
# parameters under the sticky Run at 720 px
LESSON_PAGES = [
    st.Page("web/pages/lessons.py", title="Lessons: predict, run, compare", icon=":material/school:")
]
take_kernel_link()  # a shared link's kernel fills the Your kernel page (runs only where code may run)
page = navigate({"": PAGES, "Lessons": LESSON_PAGES})
sidebar()
timing_panel()
page.run()
