"""Overview: what ran, where, and whether it was right."""

import streamlit as st

from visualizer.analysis.chrome_trace import chrome_trace_json
from visualizer.specs import catalog
from visualizer.web.charts import table_downloads
from visualizer.web.session import require_capture

st.title("GPU execution visualizer")
st.markdown(
    "Each kernel here records, from inside the kernel, which block, warp and lane every thread was, "
    "which SM ran it and when. **Try:** run *Vector add* with `block=48` and open *Grid layout* to see "
    "the idle lanes of each block's last warp; then switch the backend to compare the simulator's modelled "
    "view with a real GPU's measured one."
)
cap = require_capture()
launch = cap.launch
st.subheader(f"{launch['kernel']} on {launch['device_name']}")
st.caption(f"Data source: {cap.source}")
c1, c2, c3, c4 = st.columns(4)
c1.metric("grid", " × ".join(str(g) for g in launch["grid"] if g > 1) or "1")
c2.metric("block", " × ".join(str(b) for b in launch["block"] if b > 1) or "1")
c3.metric("threads", f"{launch['threads']:,}")
c4.metric("SMs used", cap.threads["sm"].nunique(), help="measured on a GPU, modelled on the simulator")
for name, res in cap.check["outputs"].items():
    if res["mismatches"] == 0:
        st.success(f"`{name}` matches the numpy reference ({res['elements']:,} elements).")
    elif cap.check["expected_wrong"]:
        page = "FlashAttention" if "attention" in launch["kernel"] else "Shared memory"
        st.warning(
            f"`{name}`: {res['mismatches']:,} of {res['elements']:,} wrong, as this deliberately wrong demo "
            f"is meant to show ({catalog.get(launch['kernel']).wrong_because}): see *{page}* for why."
        )
    else:
        st.error(f"`{name}`: {res['mismatches']:,} of {res['elements']:,} differ from numpy.")
with st.expander("Trace tables: preview and export"):
    for name, df in cap.tables().items():
        st.markdown(f"**{name}** — {len(df):,} rows · {df.attrs.get('source', cap.source)}")
        st.dataframe(df.head(200), height=200)
        table_downloads(name, df, key=f"export_{name}")
    st.markdown(
        f"**Hardware timeline** — blocks and warps per SM as a Chrome trace (opens in ui.perfetto.dev or "
        f"chrome://tracing) · {cap.source}"
    )
    st.download_button(
        "timeline.trace.json", data=lambda: chrome_trace_json(cap), file_name=f"{launch['kernel']}.trace.json",
        mime="application/json", key="export_chrome_trace", on_click="ignore", icon=":material/download:",
    )  # fmt: skip
