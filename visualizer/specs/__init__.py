"""Specs: what can run. Kernel parameters, launch geometry, cost and admission, numpy references, the
kernel registry (``catalog``), and the launch/argument specs of a visitor's source (``source``).

Pure Python + numpy: imports nothing above it (no numba, pandas, plotly or streamlit).
"""
