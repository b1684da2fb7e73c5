"""One Streamlit page per file, run by ``visualizer/app.py``'s navigation."""
