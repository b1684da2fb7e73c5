import streamlit as st

st.title("grid")
st.info("This page is being built.")
