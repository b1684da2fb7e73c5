import streamlit as st

st.title("memory_flow")
st.info("This page is being built.")
