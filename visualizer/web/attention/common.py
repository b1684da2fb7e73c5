"""The FlashAttention page's shared pieces: which kernels it draws, the example launches, tile sizes."""

import os
from pathlib import Path

import streamlit as st

from visualizer import DATA_DIR
from visualizer.analysis.capture import Capture
from visualizer.analysis.occupancy import ARCHS
from visualizer.specs.attention import BROKEN_FLASH, fast_config
from visualizer.web.current_kernel import YOURS_REPLACED
from visualizer.web.session import (
    RunConfig,
    from_link,
    show_link_notices,
    to_link,
)
from visualizer.web.sidebar import load_config

ROOT = Path(__file__).resolve().parents[3]


# python -m visualizer.tools.attention_bench ... --json docs/attention_timings_h200.json (and --causal); an
# operator (or a test) may point the page at another recording
def timings_file() -> Path:
    """Read at every run (the page script reruns; this module is imported once per server)."""
    recorded = ROOT / "docs" / "attention_timings_h200.json"
    if not recorded.is_file():  # an installed wheel: setup.py ships the file in visualizer/_data/
        recorded = DATA_DIR / "attention_timings_h200.json"
    return Path(os.environ.get("VISUALIZER_ATTENTION_TIMINGS", recorded))


EXAMPLE = (("batch", 1), ("causal", 1), ("head_dim", 32), ("heads", 1), ("seq_len", 80), ("tile", 16))


# the fast kernel's smallest causal launch with two Q tiles (one block computes both): ~11 s on the
# simulator of a 2-core machine, which multiplies its tensor-core tiles in Python
FAST_EXAMPLE = (("batch", 1), ("causal", 1), ("head_dim", 64), ("heads", 1), ("seq_len", 200))


FAST = "flash_attention_fast"


FLASH_KERNELS = ("flash_attention", FAST)  # kernels that record their tiles and softmax state


BROKEN = {spec.name: variant for variant, spec in BROKEN_FLASH.items()}  # "break it" builds by kernel


ATTENTION_KERNELS = ("flash_attention", "naive_attention", FAST)


DEFAULT_ARCH = "sm_90"


def _load_example() -> None:
    """Button callback: the example becomes the whole run configuration (sidebar included) and runs."""
    load_config(RunConfig("flash_attention", st.session_state.config.backend, EXAMPLE))


def _load_fast_example() -> None:
    """Button callback: the fast kernel's example becomes the run configuration and runs."""
    load_config(RunConfig(FAST, st.session_state.config.backend, FAST_EXAMPLE))


def example_buttons() -> None:
    """Both examples side by side."""
    c1, c2, _ = st.columns([2, 2, 3])
    c1.button("Load FlashAttention example", key="fa_load_example", on_click=_load_example)
    c2.button(
        "Load fast kernel example",
        key="fa_load_fast_example",
        on_click=_load_fast_example,
        help="flash_attention_fast, seq_len 200, head_dim 64, causal: two Q tiles of 128 rows computed by "
        "one block. The simulator multiplies its tensor-core tiles in Python: about 10 s on a small machine.",
    )


def tile_sizes(cap: Capture) -> tuple[int, int]:
    """(query rows, keys) of one S tile: the teaching kernel's tile x tile, the fast one's block_q x block_k."""
    p = cap.launch["params"]
    if cap.launch["kernel"] == FAST:
        block_q, block_k, _ = fast_config(p["head_dim"])
        return block_q, block_k
    return p["tile"], p["tile"]


def _index_input(label: str, key: str, hi: int, default: int, help_text: str) -> int:
    """A number input over 0..hi, kept in the link, that falls back to its default when a new launch
    shrinks the grid."""
    show_link_notices(from_link(key, min(default, hi), (0, hi)))
    if st.session_state.get(key, 0) > hi:
        st.session_state[key] = min(default, hi)
    value = int(st.number_input(label, min_value=0, max_value=hi, step=1, key=key, help=help_text))
    to_link(key)
    return value


def _arch_of(cap: Capture) -> str:
    """The captured GPU's generation when the calculator knows it; the H200's otherwise."""
    if not cap.measured:
        return DEFAULT_ARCH
    name = "sm_" + str(cap.launch["compute_capability"]).replace(".", "")
    return name if name in ARCHS else DEFAULT_ARCH


def other_kernel(cap: Capture) -> None:
    kernel = cap.launch["kernel"]
    why = (
        "is the baseline this page compares against: it writes the whole score matrix S to global memory and "
        "records no tiles or softmax state"
        if kernel == "naive_attention"
        else "is not FlashAttention"
    )
    st.info(  # two lines at 1280 px: the recorded timings' chart below must start above a 720-px fold
        f"`{kernel}` {why}: the tile loop and online softmax need **flash_attention** (example: seq_len 80, "
        "tile 16, causal) or **flash_attention_fast** (seq_len 200, head_dim 64, causal)."
    )
    if cap.launch.get("user_kernel"):  # an example is a built-in kernel: it replaces theirs as current
        st.caption(YOURS_REPLACED)
    example_buttons()
