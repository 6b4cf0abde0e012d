"""The current document: text, true and predicted label, the head's outputs (probabilities or the score), token
count and truncation."""
import pandas as pd
import streamlit as st

from longviz_core.model.heads import MULTI_LABEL
from pages._ui import current, shell

shell.run_through_app()

st.title("Document")
with shell.guard():
    model, analysis, label, description = current.current_analysis()

enc = analysis.encoded
cols = st.columns(4)
cols[0].metric("True label", shell.wrappable(analysis.label_name(label)) if label is not None else "—")
if model.head.regression:  # a score, not a probability: no "p ="
    cols[1].metric("Score", f"{analysis.probs[0]:.4f}", "the regression head's output", **shell.NO_ARROW)
elif model.head.kind == MULTI_LABEL:
    cols[1].metric("Predicted labels", shell.wrappable(", ".join(map(analysis.label_name, analysis.predicted_set))
                                                         or "none"), "every label with p ≥ 0.5", **shell.NO_ARROW)
else:
    cols[1].metric("Predicted", shell.wrappable(analysis.label_name(analysis.predicted)),
                   f"p = {analysis.probs[analysis.predicted]:.3f}", **shell.NO_ARROW)
cols[2].metric("Tokens analysed", f"{enc.n:,}")
cols[3].metric("Text tokens", f"{enc.n_text_tokens_original:,}")
st.caption(f"{description} · model {model.source} ({model.head.words}; its head reads {model.family.reads()}) · "
           f"fingerprint {model.fingerprint}")
if not model.head.regression:
    table = pd.DataFrame({"class": [analysis.label_name(i) for i in range(len(analysis.probs))],
                          "probability": analysis.probs})
    if model.head.kind == MULTI_LABEL:  # independent sigmoids: each label is predicted on its own
        table["predicted"] = [i in analysis.predicted_set for i in range(len(analysis.probs))]
    st.dataframe(table, hide_index=True)
st.text_area("Text", analysis.text, height=420, disabled=True)
