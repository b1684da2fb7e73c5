"""Figures: pure Plotly builders. Tables in, ``go.Figure`` out; no Streamlit.

May import ``analysis`` and ``specs``; never numba or the engine.
"""
