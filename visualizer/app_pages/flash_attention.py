import streamlit as st

st.title("flash_attention")
st.info("This page is being built.")
