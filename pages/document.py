"""The current document: text, true and predicted label, probabilities, token count and truncation."""
import pandas as pd
import streamlit as st

from pages._ui import current, shell

shell.run_through_app()

st.title("Document")
with shell.guard():
    model, analysis, label, description = current.current_analysis()

enc = analysis.encoded
cols = st.columns(4)
cols[0].metric("True label", shell.wrappable(analysis.label_name(label)) if label is not None else "—")
cols[1].metric("Predicted", shell.wrappable(analysis.label_name(analysis.predicted)),
               f"p = {analysis.probs[analysis.predicted]:.3f}", **shell.NO_ARROW)
cols[2].metric("Tokens analysed", f"{enc.n:,}")
cols[3].metric("Text tokens", f"{enc.n_text_tokens_original:,}")
st.caption(f"{description} · model {model.source} · fingerprint {model.fingerprint}")
st.dataframe(
    pd.DataFrame({"class": [analysis.label_name(i) for i in range(len(analysis.probs))], "probability": analysis.probs}),
    hide_index=True,
)
st.text_area("Text", analysis.text, height=420, disabled=True)
