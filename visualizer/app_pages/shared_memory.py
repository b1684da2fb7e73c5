import streamlit as st

st.title("shared_memory")
st.info("This page is being built.")
