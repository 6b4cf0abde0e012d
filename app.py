"""longviz — why did the long-document classifier decide that?  `streamlit run app.py`"""
from pathlib import Path

import streamlit as st

from pages._ui import common, hosting, links

st.set_page_config(page_title="longviz", page_icon="🔎", layout="wide")
common.page_style()
HERE = Path(__file__).parent
PAGES = [  # (file, title, icon)
    ("pages/document.py", "Document", "📄"),
    ("pages/heatmap_grid.py", "Heatmap grid", "🟥"),
    ("pages/token_counts.py", "Token counts", "📊"),
    ("pages/attention_overlay.py", "Attention overlay", "🖍️"),
    ("pages/attribution.py", "Attribution", "🟩"),
    ("pages/similarity.py", "Agreement", "🤝"),
    ("pages/faithfulness.py", "Faithfulness", "✂️"),
    ("pages/explainers.py", "Explainers", "🏆"),
]
pages = [
    st.Page(str(HERE / f), title=title, icon=icon, default=(i == 0), url_path=Path(f).stem)
    for i, (f, title, icon) in enumerate(PAGES)
]
with common.guard():  # one error contract (pages/_ui/common.py) for the sign-in, the sidebar and every page
    hosting.apply_host_config()
    hosting.login_gate()
navigation = st.navigation(pages)
with common.guard():
    common.sidebar()
    links.sync()
    navigation.run()
