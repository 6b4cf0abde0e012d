"""longviz — why did the long-document classifier decide that?  `streamlit run app.py`"""
from pathlib import Path

import streamlit as st

from pages._ui import hosting, imports, links, login, shell, sidebar, url

st.set_page_config(page_title="longviz", page_icon=":material/search:", layout="wide")
shell.page_style()
HERE = Path(__file__).parent
PAGES = [  # (file, title, icon): Material Symbols, a font Streamlit serves itself (emoji need a system font)
    ("pages/document.py", "Document", ":material/description:"),
    ("pages/heatmap_grid.py", "Heatmap grid", ":material/grid_on:"),
    ("pages/token_counts.py", "Token counts", ":material/bar_chart:"),
    ("pages/attention_overlay.py", "Attention overlay", ":material/format_color_text:"),
    ("pages/attribution.py", "Attribution", ":material/insights:"),
    ("pages/agreement.py", "Agreement", ":material/compare_arrows:"),
    ("pages/faithfulness.py", "Faithfulness", ":material/content_cut:"),
    ("pages/explainers.py", "Explainers", ":material/leaderboard:"),
]
pages = [
    st.Page(str(HERE / f), title=title, icon=icon, default=(i == 0), url_path=Path(f).stem)
    for i, (f, title, icon) in enumerate(PAGES)
]
with shell.guard():  # one error contract (pages/_ui/shell.py) for the sign-in, the sidebar and every page
    hosting.apply_host_config()
    login.login_gate()
navigation = st.navigation(pages)
with shell.guard():
    url.sweep()  # before any widget seeds itself from the URL
    sidebar.sidebar()
    links.sync()
    imports.settle()  # once per process, before a page loads a model: the libraries out of every run's full GC
    navigation.run()
