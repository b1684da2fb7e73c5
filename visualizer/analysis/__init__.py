"""Analysis: tidy pandas tables from what a kernel recorded. One analysis per module — the capture's
tables (``capture``), schedule and waves, occupancy (the exact calculator), memory requests and
hazards, the lessons' answers. DataFrames in, DataFrames (or plain numbers) out.

May import ``specs``; never numba, plotly or streamlit.
"""
