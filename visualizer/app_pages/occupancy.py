import streamlit as st

st.title("occupancy")
st.info("This page is being built.")
