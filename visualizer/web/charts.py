"""Every chart with its export: the figure as a standalone HTML file (plotly.js inlined, works offline)."""

from __future__ import annotations

import io

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

PLOTLY_CONFIG = {"displaylogo": False}


def chart(fig: go.Figure, key: str, config: dict | None = None, **kwargs) -> None:
    st.plotly_chart(fig, key=key, config={**PLOTLY_CONFIG, **(config or {})}, **kwargs)
    st.download_button(
        "Download figure (HTML)",
        data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),  # built only when clicked
        file_name=f"{key}.html",
        mime="text/html",
        key=f"{key}__html",
        on_click="ignore",
        type="tertiary",
        icon=":material/download:",
    )


def table_downloads(name: str, df: pd.DataFrame, key: str) -> None:
    """CSV and Parquet exports of one trace table."""

    def parquet() -> bytes:
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        return buf.getvalue()

    c1, c2 = st.columns(2)
    c1.download_button(
        f"{name}.csv", data=lambda: df.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
        key=f"{key}__csv", on_click="ignore", icon=":material/download:",
    )  # fmt: skip
    c2.download_button(
        f"{name}.parquet", data=parquet, file_name=f"{name}.parquet", mime="application/octet-stream",
        key=f"{key}__parquet", on_click="ignore", icon=":material/download:",
    )  # fmt: skip
