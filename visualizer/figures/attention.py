"""FlashAttention figures: the recorded tile loop, one row's online softmax, loop orders, shared memory.

Pure builders (DataFrames in, ``go.Figure`` out, no Streamlit). ``flash_loop_figure`` and
``row_state_figure`` draw only what the kernel recorded (the ``tiles`` and ``softmax_state``
tables); ``loop_order_figure`` is a model and says so; every title names its source.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from visualizer.figures.common import CONTROLS_PX, animation_controls, place_controls, source_of, titled

FRAME_MS = 700

# states of an S tile in the loop figure (heatmap values) and their colours
OTHER, TODO, DONE, CURRENT, SKIPPED, PAIRED = 0, 1, 2, 3, 4, 5
STATE_LABELS = (
    "other blocks' Q tiles",
    "not reached yet",
    "done",
    "K/V in shared memory now",
    "skipped (causal)",
    "this block's other Q tile",  # only the fast kernel's causal blocks, which do two Q tiles
)
STATE_COLOURS = ("#f2f2f2", "#dbe7f5", "#6495ed", "#ff8c00", "#9e9e9e", "#f5deb3")
M_COLOUR, L_COLOUR, ALPHA_COLOUR = "#1f77b4", "#2ca02c", "#d62728"


def _discrete_colourscale(colours) -> list:
    n = len(colours)
    scale = []
    for i, c in enumerate(colours):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def _one_block(df: pd.DataFrame, q_tile: int, head: int, batch: int) -> pd.DataFrame:
    """Rows of one flash block: grid (q_tiles, heads, batch), so block_x is the Q tile."""
    return df[(df["block_x"] == q_tile) & (df["block_y"] == head) & (df["block_z"] == batch)]


def _block_rows(df: pd.DataFrame, block: tuple[int, int, int]) -> pd.DataFrame:
    bx, by, bz = block
    return df[(df["block_x"] == bx) & (df["block_y"] == by) & (df["block_z"] == bz)]


def fast_block(
    q_tile: int, n_q: int, head: int, batch: int, heads: int, causal: bool
) -> tuple[int, int, int]:
    """The block of flash_attention_fast that computes Q tile ``q_tile`` (of ``n_q``).

    Non-causal: grid (n_q, heads, batch), one Q tile per block. Causal: grid ((n_q+1)//2,
    batch*heads, 1), and block x computes Q tiles n_q-1-x (first) and x, so the block of Q tile
    q is x = min(q, n_q-1-q), y = batch*heads + head (kernels/attention_fast.py).
    """
    if not causal:
        return q_tile, head, batch
    return min(q_tile, n_q - 1 - q_tile), batch * heads + head, 0


def recorded_part(tiles: pd.DataFrame, block: tuple[int, int, int], q0: int) -> tuple[int, int]:
    """Record slots [first, end) of the part of ``block`` that computed the Q tile starting at query q0.

    A block records its Q tile at the part's first slot and its K/V tiles at the following ones; the
    fast kernel's causal blocks record two parts one after the other. The teaching kernel's single
    part is [0, its step count); a block without a recorded Q tile at q0 gives its whole record.
    """
    mine = _block_rows(tiles, block)
    q_rec = mine[mine["operand"].astype(str) == "Q"]
    starts = sorted(int(s) for s in q_rec["step"])
    here = q_rec[q_rec["row0"] == q0]
    end = int(mine["step"].max()) + 1 if len(mine) else 0
    if here.empty:
        return 0, end
    first = int(here["step"].iloc[0])
    later = [s for s in starts if s > first]
    return first, later[0] if later else end


def flash_loop_frames(
    tiles: pd.DataFrame,
    softmax_state: pd.DataFrame,
    q_tile: int,
    seq_len: int,
    tile: int,
    causal: bool,
    source: str,
    loop_order: str = "fa2",
    head: int = 0,
    batch: int = 0,
    block_k: int | None = None,
    block: tuple[int, int, int] | None = None,
) -> pd.DataFrame:
    """The K/V steps one flash block recorded for Q tile ``q_tile``, as a frames table (one row per
    recorded step: the S-tile states and the step's note), for :func:`flash_frames_figure`.

    The seq_len x seq_len attention matrix is drawn as S tiles of ``tile`` query rows x ``block_k``
    keys (default: square, as the teaching kernel; the fast kernel's are block_q x block_k); the last
    row and column of tiles are partial when the sizes do not divide seq_len. Each frame is one
    recorded step: the K/V tile then in shared memory, the S tiles of this Q tile already done, those
    not reached, and (causal) the tiles right of the diagonal the kernel skipped. Only recorded steps
    become frames. ``block`` is the block that computed the Q tile (default (q_tile, head, batch));
    when it recorded another Q tile as well (the fast kernel's causal pairs) only this Q tile's part
    is animated and the other is drawn as the block's other Q tile.
    """
    if loop_order != "fa2":
        raise ValueError(
            f"recorded traces come from the FA2-order kernel, not {loop_order!r}; "
            "loop_order_figure models the FA1 order"
        )
    bq, bk = tile, block_k or tile
    block = block or (q_tile, head, batch)
    q0 = q_tile * bq
    mine = _block_rows(tiles, block)
    first, end = recorded_part(tiles, block, q0)
    part = mine[(mine["step"] >= first) & (mine["step"] < end)]
    kv = part[part["operand"].astype(str) == "K"].sort_values("step")
    vrec = part[part["operand"].astype(str) == "V"].set_index("step")
    q_rec = part[(part["operand"].astype(str) == "Q") & (part["row0"] == q0)]
    if kv.empty:
        raise ValueError(f"no K/V tiles were recorded for Q tile {q_tile} (head {head}, batch {batch})")
    other_q = mine[(mine["operand"].astype(str) == "Q") & (mine["row0"] != q0)]
    paired = sorted({int(r) // bq for r in other_q["row0"]})  # this block's other Q tile(s)
    n_q, n_k = math.ceil(seq_len / bq), math.ceil(seq_len / bk)
    q_edges = [min(i * bq, seq_len) for i in range(n_q + 1)]  # the last tiles may be partial
    k_edges = [min(i * bk, seq_len) for i in range(n_k + 1)]
    q_rows = int(q_rec["rows"].iloc[0]) if len(q_rec) else min(bq, seq_len - q0)
    last_query = q0 + q_rows - 1
    reach = last_query // bk + 1 if causal else n_k  # K/V tiles up to the diagonal

    rows_state = None
    if softmax_state is not None:
        rows_state = _block_rows(softmax_state, block)
        rows_state = rows_state[(rows_state["step"] >= first) & (rows_state["step"] < end)]

    def grid_at(step_kt: int | None, done: set[int]) -> np.ndarray:
        z = np.full((n_q, n_k), OTHER, dtype=float)
        z[paired, :] = PAIRED
        for kt in range(n_k):
            if kt >= reach:
                z[q_tile, kt] = SKIPPED
            elif kt == step_kt:
                z[q_tile, kt] = CURRENT
            elif kt in done:
                z[q_tile, kt] = DONE
            else:
                z[q_tile, kt] = TODO
        return z

    hover = np.empty((n_q, n_k), dtype=object)
    for i in range(n_q):
        for kt in range(n_k):
            hover[i, kt] = (
                f"S tile (Q {i}, K/V {kt})<br>queries {q_edges[i]}–{q_edges[i + 1] - 1}, "
                f"keys {k_edges[kt]}–{k_edges[kt + 1] - 1}"
            )
    rows = []
    done: set[int] = set()
    t0 = int(part["t_ns"].min())  # times relative to this Q tile's first staged tile
    measured = source.startswith("measured")  # else the simulator's host clock: an order, not GPU time
    for _, rec in kv.iterrows():
        slot = int(rec["step"])
        step = slot - first  # the K/V step of this Q tile (the record slot in a second part)
        k0, krows = int(rec["row0"]), int(rec["rows"])
        kt = k0 // bk
        z = grid_at(kt, done)
        note = (
            f"step {step}: K/V rows {k0}–{k0 + krows - 1} in shared memory "
            f"({krows} x {int(rec['cols'])}{', partial tile' if krows < bk else ''})"
        )
        if causal and k0 + bk - 1 > q0:
            note += "; diagonal tile: keys after each query masked"
        if measured:
            note += f"<br>K staged at +{int(rec['t_ns']) - t0:,} ns"
            if slot in vrec.index:
                note += f", V at +{int(vrec.loc[slot, 't_ns']) - t0:,} ns"
            note += f" (%globaltimer, from {'the block' if not first else 'this part'}'s first tile)"
        else:  # the simulator's host clock orders the steps; its nanoseconds are no GPU time
            note += "<br>staging times: only on a GPU (the simulator's clock gives the order, not GPU time)"
        if rows_state is not None and len(rows_state):
            now = rows_state[rows_state["step"] == slot].set_index("row")["m"]
            before = rows_state[rows_state["step"] == slot - 1].set_index("row")["m"]
            if step > 0 and len(now) and len(before):
                grew = int((now.reindex(before.index) > before).sum())
                note += f"<br>row max m grew in {grew} of {len(before)} rows: their O and l were rescaled"
        rows.append({"name": f"step {step}", "label": str(step), "states": z, "note": note})
        done.add(kt)

    skipped = f"; {n_k - reach} K/V tiles skipped (causal)" if reach < n_k else ""
    shape = f"tile {bq}" if bk == bq else f"S tiles {bq} x {bk} (queries x keys)"
    where = "" if block == (q_tile, head, batch) and not paired else f"block {block}, "
    frames = pd.DataFrame(rows)
    frames.attrs.update(
        q_edges=q_edges, k_edges=k_edges, hover=hover, paired=bool(paired), seq_len=seq_len,
        title=f"FlashAttention (FA2 order), Q tile {q_tile} (queries {q0}–{last_query}, "
        f"{where}head {head}, batch {batch}):<br>{len(rows)} recorded K/V steps{skipped}",
        subtitle=f"data: {source}; {shape}, seq_len {seq_len}",
    )  # fmt: skip
    return frames


def flash_loop_figure(*args, **kwargs) -> go.Figure:
    """Animation over the K/V steps one flash block recorded for Q tile ``q_tile``: takes
    :func:`flash_loop_frames`'s arguments, drawn by :func:`flash_frames_figure`."""
    return flash_frames_figure(flash_loop_frames(*args, **kwargs))


def flash_frames_figure(frames: pd.DataFrame) -> go.Figure:
    """Draw :func:`flash_loop_frames`: the seq_len x seq_len S tiles, one animation frame per step."""
    a = frames.attrs
    q_edges, k_edges, hover, paired, seq_len = (
        a["q_edges"],
        a["k_edges"],
        a["hover"],
        a["paired"],
        a["seq_len"],
    )
    labels_shown = STATE_LABELS if paired else STATE_LABELS[:PAIRED]
    colours_shown = STATE_COLOURS[: len(labels_shown)]

    def heatmap(z: np.ndarray) -> go.Heatmap:
        return go.Heatmap(
            z=z,
            x=k_edges,
            y=q_edges,
            zmin=-0.5,
            zmax=len(labels_shown) - 0.5,
            colorscale=_discrete_colourscale(colours_shown),
            xgap=1,
            ygap=1,
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            colorbar={
                "tickvals": list(range(len(labels_shown))),
                "ticktext": list(labels_shown),
                "title": {"text": "S tile"},
            },
        )

    animated = [
        go.Frame(name=f.name, data=[heatmap(f.states)], layout={"annotations": [_note(f.note)]})
        for f in frames.itertuples(index=False)
    ]
    names, labels = list(frames["name"]), list(frames["label"])
    fig = go.Figure(data=animated[0].data, frames=animated)
    buttons, sliders = animation_controls(names, labels, "K/V step ", -0.1, FRAME_MS)
    fig.update_layout(
        title=titled(a["title"], a["subtitle"]),
        # constrain="domain": a wide chart narrows the square plot instead of widening the key range
        xaxis={
            "title": "key (K/V row)",
            "range": [0, seq_len],
            "autorange": False,
            "side": "top",
            "constrain": "domain",
        },
        yaxis={"title": "query (Q row)", "range": [seq_len, 0], "autorange": False, "scaleanchor": "x"},
        annotations=list(animated[0].layout.annotations),
        updatemenus=buttons,
        sliders=sliders,
        margin={"t": LOOP_MARGIN_T, "b": LOOP_MARGIN_B},
        height=LOOP_PLOT_PX + LOOP_MARGIN_T + LOOP_MARGIN_B,
    )
    fig.update_layout(title={"y": 0.98, "yanchor": "top", "yref": "container"})
    place_controls(fig, gap_px=LOOP_CONTROLS_GAP)  # the key axis is on top: only the controls are under it
    return fig


LOOP_PLOT_PX, LOOP_MARGIN_T = 370, 150
LOOP_CONTROLS_GAP = 24  # the key axis is on top, so the controls sit right under the plot
LOOP_MARGIN_B = LOOP_CONTROLS_GAP + CONTROLS_PX + 52  # and the step note's three lines under them


def _note(text: str) -> dict:
    return {
        "text": text,
        "xref": "paper",
        "yref": "paper",
        "x": 0.0,
        "y": -(LOOP_CONTROLS_GAP + CONTROLS_PX + 6) / LOOP_PLOT_PX,  # under the slider and its step labels
        "xanchor": "left",
        "yanchor": "top",
        "showarrow": False,
        "align": "left",
    }


def row_state_figure(
    softmax_state: pd.DataFrame,
    q_tile: int,
    row: int,
    head: int = 0,
    batch: int = 0,
    block: tuple[int, int, int] | None = None,
    slots: tuple[int, int] | None = None,
) -> go.Figure:
    """Running max m, running sum l and the rescale factor exp(m_prev - m_new) of one query row.

    ``row`` is the row within the Q tile (0 .. tile-1). m is in units of the scaled score
    q·k/sqrt(d). At step 0 there is nothing to rescale yet (O is empty), so its factor is 0.
    ``block`` is the block that computed the Q tile (default (q_tile, head, batch)) and ``slots``
    the record slots [first, end) of its part (recorded_part; default all), for the fast kernel's
    causal blocks, which record two Q tiles one after the other; steps are counted from ``first``.
    """
    mine = _block_rows(softmax_state, block or (q_tile, head, batch))
    first, end = slots or (0, None)
    mine = mine[(mine["row"] == row) & (mine["step"] >= first)]
    if end is not None:
        mine = mine[mine["step"] < end]
    mine = mine.sort_values("step")
    if mine.empty:
        raise ValueError(
            f"no softmax state recorded for Q tile {q_tile}, row {row} (only the first blocks record it)"
        )
    steps = mine["step"].to_numpy() - first
    m = mine["m"].to_numpy(dtype=np.float64)
    l = mine["l"].to_numpy(dtype=np.float64)  # noqa: E741 - the softmax row sum's usual name
    alpha = np.exp(np.concatenate([[-np.inf], m[:-1]]) - m)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            "running row max m",
            "running row sum l of exp(s − m)",
            "rescale factor exp(m_prev − m_new) applied to O and l",
        ),
    )
    fig.add_trace(go.Scatter(x=steps, y=m, mode="lines+markers", name="m", line={"color": M_COLOUR}), 1, 1)
    fig.add_trace(go.Scatter(x=steps, y=l, mode="lines+markers", name="l", line={"color": L_COLOUR}), 2, 1)
    fig.add_trace(
        go.Bar(x=steps, y=alpha, name="exp(m_prev − m_new)", marker={"color": ALPHA_COLOUR}),
        3,
        1,
    )
    fig.update_yaxes(range=[0, 1.05], row=3, col=1)
    fig.update_xaxes(title_text="K/V step", dtick=1, row=3, col=1)
    title = titled(
        f"Online softmax of query row {row} of Q tile {q_tile} (head {head}, batch {batch})",
        f"data: {source_of(softmax_state)}"
        + (
            f"; computed by block {block}, from its record slot {first}"
            if block and (block != (q_tile, head, batch) or first > 0)
            else ""
        ),
    )
    fig.update_layout(
        title=title,
        showlegend=False,
        height=620 + 18 * (title["text"].count("<br>") - 1),
        margin={"t": 100 + 18 * (title["text"].count("<br>") - 1)},  # room for each extra source line
    )
    return fig


def _visit_order(n: int, q_tile_first: bool, causal: bool) -> np.ndarray:
    """Order in which one head's S tiles are computed: FA2 = Q outer, K/V inner; FA1 the reverse."""
    order = np.full((n, n), np.nan)
    k = 0
    outer = range(n)
    for a in outer:
        for b in range(n):
            qt, kt = (a, b) if q_tile_first else (b, a)
            if causal and kt > qt:
                continue
            order[qt, kt] = k
            k += 1
    return order


def loop_order_model(seq_len: int, tile: int, causal: bool) -> dict[str, dict[str, float]]:
    """Modelled tile traffic between global and shared memory for one head, in tiles of tile x d.

    FA1 (K/V outer, Q inner): each K/V tile is loaded once; every visit loads the Q tile and reads
    and writes the partial O tile (and its m, l). FA2 (Q outer per block, K/V inner): each Q tile
    is loaded once and O written once; every visit loads a K and a V tile.
    """
    n = math.ceil(seq_len / tile)
    visits = n * (n + 1) // 2 if causal else n * n
    return {
        "FA1": {"visits": visits, "Q loads": visits, "K/V loads": 2 * n, "O reads+writes": 2 * visits},
        "FA2": {"visits": visits, "Q loads": n, "K/V loads": 2 * visits, "O reads+writes": n},
    }


def loop_order_figure(seq_len: int, tile: int, causal: bool, order: str = "both") -> go.Figure:
    """MODELLED comparison of the FA1 and FA2 loop orders over one head's S tiles (not measured).

    Each S tile shows its position in the sequence one head's work visits them: FA1 sweeps K/V
    tiles in the outer loop (so every Q/O tile is revisited), FA2 gives each Q tile to a block
    that sweeps the K/V tiles (so O stays in registers and blocks are independent).
    """
    orders = {"fa1": ["FA1"], "fa2": ["FA2"], "both": ["FA1", "FA2"]}
    if order not in orders:
        raise ValueError(f"order must be one of {list(orders)}, got {order!r}")
    shown = orders[order]
    n = math.ceil(seq_len / tile)
    edges = [min(i * tile, seq_len) for i in range(n + 1)]
    model = loop_order_model(seq_len, tile, causal)
    titles = []
    for name in shown:
        t = model[name]
        titles.append(
            f"{name}: {'K/V outer, Q inner' if name == 'FA1' else 'Q outer (one block each), K/V inner'}<br>"
            f"<sup>loads: Q {t['Q loads']}, K+V {t['K/V loads']}; O reads+writes {t['O reads+writes']} tiles</sup>"
        )
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=titles, horizontal_spacing=0.12)
    for c, name in enumerate(shown, start=1):
        z = _visit_order(n, q_tile_first=name == "FA2", causal=causal)
        text = np.where(np.isnan(z), "skipped", np.nan_to_num(z).astype(int).astype(str))
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=edges,
                y=edges,
                colorscale="Viridis",
                showscale=c == len(shown),
                colorbar={"title": {"text": "visit #"}},
                xgap=1,
                ygap=1,
                text=text,
                texttemplate="%{text}" if n <= 16 else None,
                hovertemplate="queries from %{y}, keys from %{x}: visit %{text}<extra></extra>",
            ),
            1,
            c,
        )
        fig.update_xaxes(title_text="key", range=[0, seq_len], row=1, col=c)
        fig.update_yaxes(title_text="query", range=[seq_len, 0], row=1, col=c)
    fig.update_layout(
        title=titled(
            f"Loop orders over the S tiles of one head (seq_len {seq_len}, tile {tile}"
            f"{', causal' if causal else ''})",
            "modelled: the visiting order and tile traffic follow from the loop nests, not from a run",
        ),
        height=520,
        margin={"t": 130},
    )
    return fig


def smem_gauge_figure(
    bytes_needed: int, limit_bytes: int, arch_label: str, optin_bytes: int | None = None
) -> go.Figure:
    """Static shared memory one block declares against the per-block limit.

    ``optin_bytes`` (optional) is the larger per-block maximum a kernel can opt in to with
    *dynamic* shared memory (cudaFuncSetAttribute); it is drawn as a band above the static limit.
    """
    over = bytes_needed > limit_bytes
    top = max(bytes_needed, limit_bytes, optin_bytes or 0) * 1.15 / 1024
    steps = [{"range": [limit_bytes / 1024, top], "color": "#f8d0d0"}]
    if optin_bytes and optin_bytes > limit_bytes:
        steps = [
            {"range": [limit_bytes / 1024, optin_bytes / 1024], "color": "#fdf1c7"},
            {"range": [optin_bytes / 1024, top], "color": "#f8d0d0"},
        ]
    fig = go.Figure(
        go.Indicator(
            mode="gauge+number+delta",
            value=bytes_needed / 1024,
            number={"suffix": " KB", "valueformat": ".1f"},
            delta={
                "reference": limit_bytes / 1024,
                "valueformat": ".1f",
                "suffix": " KB vs limit",
                # under the limit is good news: green going down, red going up
                "increasing": {"color": "#d62728"},
                "decreasing": {"color": "#2ca02c"},
            },
            gauge={
                "axis": {"range": [0, top]},
                "bar": {"color": "#d62728" if over else "#2ca02c"},
                "threshold": {
                    "line": {"color": "black", "width": 3},
                    "thickness": 0.9,
                    "value": limit_bytes / 1024,
                },
                "steps": steps,
            },
        )
    )
    verdict = "does NOT fit: the launch is refused" if over else "fits"
    if optin_bytes and over and bytes_needed <= optin_bytes:
        verdict += f"; as dynamic shared memory it would fit the {optin_bytes / 1024:.0f} KB opt-in"
    if optin_bytes and optin_bytes > limit_bytes:
        arch_label += f"; yellow: up to the {optin_bytes / 1024:.0f} KB opt-in maximum (dynamic smem only)"
    fig.update_layout(
        title=titled(
            f"Shared memory per block: {bytes_needed:,} of {limit_bytes:,} bytes ({verdict})",
            arch_label,
        ),
        height=320,
        margin={"t": 110, "b": 20},
    )
    return fig


# implementations visualizer.tools.attention_bench records, in legend order: the name it writes, then the
# label a student reads, colour and dash (instrumented builds: their clean build's colour, dotted)
TIMING_STYLES = {
    "ours fast (clean)": ("ours: fast kernel (tensor cores, 3xTF32)", "#d62728", "solid"),
    "ours fast (instrumented)": ("ours: fast kernel, instrumented", "#d62728", "dot"),
    "ours flash (clean)": ("ours: teaching kernel", "#ff8c00", "solid"),
    "ours flash (instrumented)": ("ours: teaching kernel, instrumented", "#ff8c00", "dot"),
    "ours naive (clean)": ("ours: naive kernel (S in global memory)", "#8c564b", "solid"),
    "torch sdpa default fp32": ("torch SDPA default", "#2ca02c", "solid"),
    "torch sdpa math fp32": ("torch SDPA math backend", "#1f77b4", "solid"),
    "torch plain fp32": ("torch unfused: matmul, softmax, matmul", "#17becf", "dash"),
    "numpy float64 (CPU)": ("numpy float64 on the CPU (wall time)", "#7f7f7f", "solid"),
}
# other spellings of the same implementations (docs/benchmarks.md's tables, earlier recordings)
TIMING_ALIASES = {
    "ours teaching (clean)": "ours flash (clean)",
    "ours teaching (instrumented)": "ours flash (instrumented)",
    "torch unfused": "torch plain fp32",
    "SDPA default": "torch sdpa default fp32",
    "SDPA math": "torch sdpa math fp32",
}
SDPA_DEFAULT = "torch sdpa default fp32"
# what attention_bench's ``backend`` column (the backend SDPA's default selection ran) means
SDPA_BACKENDS = {
    "flash_attention": "FlashAttention-2 kernel",
    "efficient_attention": "memory-efficient kernel",
    "cudnn_attention": "cuDNN kernel",
    "math": "math backend",
}
TIMING_PANELS = (
    ("ms", "time per forward (ms, log)", "log"),
    ("tflops", "throughput (TFLOP/s)", "linear"),
    ("peak_mb", "peak memory (MB, log)", "log"),
)
TIMING_ROW_COLUMNS = ("seq_len", "impl", "causal", "ms", "tflops")
TIMING_KIND = "visualizer.attention_bench timings"  # attention_bench.JSON_KIND
BENCH_MODULE = "visualizer.tools.attention_bench"  # where the benchmark lives now


def rerun_command(command: str) -> str:
    """A recorded benchmark command as it runs today: recordings made before the tools moved name
    ``-m visualizer.attention_bench``."""
    return str(command).replace("-m visualizer.attention_bench", f"-m {BENCH_MODULE}")


def timing_label(impl: str, backends=()) -> str:
    """The name a student reads for a recorded implementation; SDPA default with the backend(s) it ran."""
    key = TIMING_ALIASES.get(impl, impl)
    label = TIMING_STYLES[key][0] if key in TIMING_STYLES else impl
    if key == SDPA_DEFAULT:
        picked = [SDPA_BACKENDS.get(b, str(b)) for b in dict.fromkeys(backends) if isinstance(b, str) and b]
        label += f" ({' / '.join(picked) if picked else 'backend not recorded'})"
    return label


def timing_rows(doc: dict, mode: str) -> pd.DataFrame:
    """The rows of one mode ("non-causal" or "causal") of an attention_bench JSON document, in legend
    order, with ``implementation`` (timing_label) beside the recorded ``impl``. ValueError (one line)
    for a document this cannot read."""
    if not isinstance(doc, dict) or doc.get("kind") != TIMING_KIND:
        raise ValueError(
            f"not an attention_bench timings document (kind {doc.get('kind') if isinstance(doc, dict) else None!r})"
        )
    if mode not in doc.get("runs", {}):
        raise ValueError(f"no {mode} run recorded")
    df = pd.DataFrame(doc.get("rows") or [])
    missing = set(TIMING_ROW_COLUMNS) - set(df.columns)
    if df.empty or missing:
        raise ValueError(
            f"timing rows need {', '.join(TIMING_ROW_COLUMNS)}; missing {sorted(missing) or 'all rows'}"
        )
    df = df[df["causal"].astype(bool) == (mode == "causal")].copy()
    if df.empty:
        raise ValueError(f"no {mode} rows recorded")
    df["ms"] = pd.to_numeric(df["ms"], errors="raise")
    df["tflops"] = pd.to_numeric(df["tflops"], errors="raise")
    backends = df.loc[df["impl"].map(lambda i: TIMING_ALIASES.get(i, i)) == SDPA_DEFAULT].get(
        "backend", pd.Series()
    )
    df["implementation"] = [timing_label(i, backends.tolist()) for i in df["impl"]]
    order = {name: n for n, name in enumerate(TIMING_STYLES)}
    df["_order"] = df["impl"].map(lambda i: order.get(TIMING_ALIASES.get(i, i), len(order)))
    return (
        df.sort_values(["_order", "impl", "seq_len"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def timing_modes(doc: dict) -> list[str]:
    """The modes ("non-causal", "causal") an attention_bench document has a run of."""
    runs = doc.get("runs", {}) if isinstance(doc, dict) else {}
    return [m for m in ("non-causal", "causal") if m in runs]


def timing_source(run: dict) -> str:
    """Where and how one run of an attention_bench JSON document was measured (its ``runs`` entry)."""
    on = run["measured_on"]
    where = on["gpu"] if isinstance(on, dict) else str(on)
    if isinstance(on, dict) and on.get("sm"):
        where += f" ({on['sm']}, {on['sm_count']} SMs)" if on.get("sm_count") else f" ({on['sm']})"
    when = run["date"] + (f" {run['time_utc'][:5]} UTC" if run.get("time_utc") else "")
    repeats = run.get("config", {}).get("repeats")
    launches = f"{repeats} launches" if repeats else "launches"
    return f"measured (GPU): {where}, {when}; median device time of {launches} queued behind a spin kernel"


def timing_ms_table(df: pd.DataFrame) -> pd.DataFrame:
    """Milliseconds by implementation (rows, legend order) and seq_len (columns, "seq_len 512", ...)
    from timing_rows; NaN where an implementation was not timed at that length."""
    table = df.pivot_table(index="implementation", columns="seq_len", values="ms", aggfunc="first")
    table = table.loc[list(dict.fromkeys(df["implementation"]))]
    table.columns = [f"seq_len {int(c)}" for c in table.columns]
    return table


LEGEND_COLUMNS = 2  # legend entries per row under the panels
# an entry's width as a fraction of the plot width: plotly adds the line sample (~40 px) to it, so
# 1 / LEGEND_COLUMNS would leave room for one column fewer
LEGEND_ENTRY_FRACTION = 0.42
LEGEND_ROW_PX = 24
TIMING_PLOT_PX = 290  # the panels' own height
TITLE_PX, TITLE_LINE_PX = 64, 22  # above the panels: the title, then each line of the source under it
AXIS_TITLE_PX = 62  # x tick labels and the x-axis title under the panels


def attention_timing_figure(rows, source: str, note: str = "") -> go.Figure:
    """Time, TFLOP/s and peak memory against seq_len, one line per implementation.

    ``rows`` are ``visualizer.tools.attention_bench.attention_timings`` rows of one causal mode (dicts or a
    DataFrame with seq_len, impl, ms, tflops, and peak_mb where recorded; timing_rows adds readable
    names); ``source`` says where they were measured (timing_source); ``note`` (the configuration)
    goes under it. An implementation timed at one length (numpy) is a single marker; the memory panel
    appears only when peak memory was recorded.
    """
    df = pd.DataFrame(rows)
    missing = {"seq_len", "impl", "ms", "tflops"} - set(df.columns)
    if missing or df.empty:
        raise ValueError(f"timing rows need seq_len, impl, ms and tflops; missing {sorted(missing)}")
    if "implementation" not in df.columns:
        df["implementation"] = [timing_label(i, df.get("backend", pd.Series()).tolist()) for i in df["impl"]]
    panels = [p for p in TIMING_PANELS if p[0] in df.columns and df[p[0]].notna().any()]
    impls = list(dict.fromkeys(df["impl"]))
    order = list(TIMING_STYLES)
    impls.sort(
        key=lambda i: (
            order.index(TIMING_ALIASES.get(i, i)) if TIMING_ALIASES.get(i, i) in order else len(order)
        )
    )
    seq_lens = sorted(int(s) for s in df["seq_len"].unique())
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[t for _, t, _ in panels],
        horizontal_spacing=0.08,
    )
    for impl in impls:
        mine = df[df["impl"] == impl].sort_values("seq_len")
        name = str(mine["implementation"].iloc[0])
        _, colour, dash = TIMING_STYLES.get(TIMING_ALIASES.get(impl, impl), (None, None, "solid"))
        for c, (column, _, _) in enumerate(panels, start=1):
            fig.add_trace(
                go.Scatter(
                    x=mine["seq_len"],
                    y=mine[column],
                    mode="lines+markers",
                    name=name,
                    legendgroup=impl,
                    showlegend=c == 1,
                    line={"color": colour, "dash": dash},
                    marker={"size": 8 if len(mine) == 1 else 6},
                    hovertemplate=f"{name}<br>seq_len %{{x}}: %{{y:.4g}}<extra></extra>",
                ),
                1,
                c,
            )
    for c, (_, _, axis_type) in enumerate(panels, start=1):
        # log axes: one tick per decade (plotly's default labels 2 and 5 of every decade as well)
        fig.update_yaxes(type=axis_type, dtick=1 if axis_type == "log" else None, row=1, col=c)
        fig.update_xaxes(type="log", tickvals=seq_lens, ticktext=[str(s) for s in seq_lens], row=1, col=c)
        fig.update_xaxes(title_text="seq_len", row=1, col=c)
    # the legend in fixed-width columns under the x-axis titles: its height is known, so the bottom
    # margin holds all of it whatever the number of implementations
    legend_rows = math.ceil(len(impls) / LEGEND_COLUMNS)
    bottom = AXIS_TITLE_PX + legend_rows * LEGEND_ROW_PX + 16
    title = titled(
        "Attention forward vs seq_len: time, throughput, memory", f"{source}; {note}" if note else source
    )
    top = TITLE_PX + TITLE_LINE_PX * title["text"].count("<br>")  # the panels' titles clear the source
    title.update(yref="container", y=1, yanchor="top", pad={"t": 12})  # at the top, not mid-margin
    fig.update_layout(
        title=title,
        legend={
            "orientation": "h",
            "x": 0.0,
            "xanchor": "left",
            "y": -AXIS_TITLE_PX / TIMING_PLOT_PX,
            "yanchor": "top",
            "entrywidth": LEGEND_ENTRY_FRACTION,
            "entrywidthmode": "fraction",
        },
        height=top + TIMING_PLOT_PX + bottom,
        margin={"t": top, "b": bottom},
    )
    return fig
