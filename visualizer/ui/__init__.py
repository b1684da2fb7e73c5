"""Streamlit glue shared by the pages: the run configuration, the URL, cached captures, timing."""
