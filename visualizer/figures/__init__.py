"""Pure Plotly figure builders: DataFrame in, go.Figure out. No Streamlit in here."""
