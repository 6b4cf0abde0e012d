"""longviz — why did the long-document classifier decide that?  `streamlit run app.py`"""
import streamlit as st

from pages import _common as common

st.set_page_config(page_title="longviz", page_icon="🔎", layout="wide")
common.sidebar()
pages = [
    st.Page("pages/document.py", title="Document", icon="📄", default=True),
]
st.navigation(pages).run()
