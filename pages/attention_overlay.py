"""The document's text coloured by the attention each token receives, summed over the chosen layers and heads
(paper §3.1.3, Algorithm 4, Fig. 8)."""
import numpy as np
import streamlit as st

from longviz_core.figures.text import legend_html, scale_max, token_overlay_html
from longviz_core.views.masking import build_mask
from longviz_core.views.units import overlay_table
from pages._ui import current, document_map, export, labels, shell
from pages._ui.importance import head_importance
from pages._ui.keys import UNIT_NAMES, K

shell.run_through_app()

K, P = K, "overlay"
PRESETS = ("last layer", "all layers (averaged)", "choose layers and heads")

st.title("Summed attention")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens · colour = attention a token receives from all tokens "
           "(column sums), over the chosen heads, divided by the largest unmasked value.")

L, H = model.num_layers, model.num_heads
c1, c2, c3 = st.columns(3)
preset = c1.radio("Heads", PRESETS, **K.option(P, "preset"))
scale = c2.checkbox("Scale by head importance", **K.option(P, "scale"))
masked = c3.toggle("Mask (§3.4)", value=True, **K.option(P, "mask"),  # short: a column is narrow at 1,024 px
                   help="Special tokens, punctuation and stopwords shown grey and left out of the colour scale. On "
                        "by default, as the paper shows it.")
unit, segments = current.unit(), current.segments(analysis)  # the sidebar's unit
layers, heads = None, None
if preset == PRESETS[0]:
    layers = [L - 1]
elif preset == PRESETS[2]:
    c1, c2 = st.columns(2)
    layers = c1.multiselect("Layers", range(L), default=[L - 1], format_func=lambda i: f"layer {i + 1}",
                            **K.option(P, "layers"))
    heads = c2.multiselect("Heads", range(H), default=list(range(H)), format_func=lambda i: f"head {i + 1}",
                           **K.option(P, "heads"))
    if not layers or not heads:
        st.info("Choose at least one layer and one head.")
        st.stop()

with shell.guard():
    importance = head_importance(model, P, c2) if scale else None
    values = analysis.attention.received(layers, heads, None if importance is None else importance.values)
    n_heads = (L if layers is None else len(layers)) * (H if heads is None else len(heads))
    values = values / n_heads  # averaged over the chosen heads; the colours are relative anyway
    mask = build_mask(analysis.tokens, **current.mask_options(analysis)) if masked else None

vmax = scale_max(analysis.tokens, values, mask, segments)
settings = current.export_settings(model, description, heads=preset, layers=layers, head_indices=heads,
                                  scaled_by_head_importance=importance is not None, masked=masked,
                                  head_importance=None if importance is None else importance.name, unit=unit)
values_df = overlay_table(analysis.tokens, values, "received", mask, segments)  # a unit receives what its tokens do
live = values_df["received"].where(~values_df["masked"]).to_numpy()
scale_note = "" if mask is not None else " (special tokens outside the scale, drawn at its top)"
# passages: sentences, or paragraphs when the sidebar's unit is paragraph
selected = document_map.show(P, model, analysis, values, settings, mask=mask, mode="sequential",
                             score_name="received")
export.overlay(token_overlay_html(analysis.tokens, values, mode="sequential", mask=mask, vmax=vmax, unit=segments,
                                  selected=selected),
               values_df, "summed attention", model, settings, n=analysis.n, selected=selected,
               legend_html=legend_html("sequential", vmax=vmax, label=f"received attention per head{scale_note}"))
if mask is not None:
    st.caption(f"{int(mask.sum()):,} masked tokens shown in grey.")
if importance is not None:
    labels.caption(labels.importance(importance), "heads weighted by it", sections=("importance",))

with st.expander(f"{UNIT_NAMES[unit].capitalize()} receiving the most attention"):
    order = np.argsort(-np.nan_to_num(live, nan=-np.inf), kind="stable")[:25]
    shell.table(values_df.iloc[order][["position", unit, "received"]], f"most attended {UNIT_NAMES[unit]}",
                model, settings)
