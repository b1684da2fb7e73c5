import streamlit as st

st.title("scheduling")
st.info("This page is being built.")
