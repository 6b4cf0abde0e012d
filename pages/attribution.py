"""Attribution (paper Figs 9-10): Integrated Gradients overlay with the paper's header, token details, tables."""
import pandas as pd
import streamlit as st

from longviz_core import attribution as ig
from longviz_core.attribution.cost import estimate_basis
from longviz_core.figures.text import legend_html, scale_max, token_overlay_html
from longviz_core.progress import format_seconds
from longviz_core.views import attribution_tables as tables
from longviz_core.views.masking import build_mask
from longviz_core.views.units import overlay_table, unit_start, units
from pages._ui import current, dataset, document_map, export, hosting, labels, overlay, shell, state
from pages._ui.ig import ig_steps_picker, max_ig_steps
from pages._ui.keys import UNIT_NAMES, K

shell.run_through_app()

P = "attribution"
st.title("Attribution")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
ss = st.session_state
name = analysis.label_name
changed = state.new_document(P, analysis)  # the class and the selected token start afresh on a new document


c1, c2, c3 = st.columns(3)
target = state.class_target(c1, P, analysis, changed, help="Default: the predicted class. " + labels.doc_link("class"))
n_steps = ig_steps_picker(c2, P, custom=True, label="Steps")
with c3.expander("Integration settings"):
    method = st.selectbox("Method", ig.METHODS, **K.option(P, "method"))
    precision = st.selectbox("Precision (autocast)", list(ig.PRECISIONS), **K.option(P, "precision"))
    adaptive = st.toggle("Adaptive: double the steps until converged", **K.option(P, "adaptive"))
    tolerance = st.number_input("Tolerance (|delta| / |F(x) - F(baseline)|)", 0.001, 0.5, ig.DELTA_WARN,
                                **K.option(P, "tol"), disabled=not adaptive)
settings = dict(target=int(target), n_steps=n_steps, method=method, precision=precision, adaptive=adaptive,
                tolerance=tolerance, max_steps=max(n_steps, min(1600, max_ig_steps())))

meta = current.export_settings(model, description, **settings)
with shell.guard():
    attr = ig.cached_attribution(model, analysis, **settings)
    if attr is None:
        with st.spinner("Timing one step of the model (once per model and length)…"):
            with shell.queue_notice():
                eta = ig.estimate_ig_seconds(model, analysis.n, n_steps, precision)
        shell.run_when_clicked(f"Not computed yet for these settings: {n_steps} steps on {analysis.n:,} tokens "
                                f"take about {format_seconds(eta)} on this machine ({model.device.type}; "
                                f"{estimate_basis(model, analysis.n, precision)}).",
                                "Compute attributions", K.page(P, "run"), type="primary")
        with shell.queue_notice():
            attr = ig.integrated_gradients(model, analysis, **settings,
                                           progress=shell.progress_bar("Integrated Gradients"))

# ---- header row (Fig 9)
h = st.columns(5)
h[0].metric("True label", shell.wrappable(name(label)) if label is not None else "—")
if model.head.regression:  # a score, not a probability
    h[1].metric("Score", f"{analysis.probs[0]:.4f}", "the regression head's output", **shell.NO_ARROW)
else:
    h[1].metric("Predicted label", shell.wrappable(name(analysis.predicted)),
                f"p = {analysis.probs[analysis.predicted]:.3f}", **shell.NO_ARROW)
h[2].metric("Attribution label", shell.wrappable(name(attr.target)))
h[3].metric("Attribution score", f"{attr.total:+.3f}",
            help="Sum of the L2-normalised token scores (paper §2, captum's summarize_attributions and "
                 "VisualizationDataRecord.attr_score).")
h[4].metric("F(x) − F(baseline)", f"{attr.expected:+.4f}",
            f"{'score' if model.head.regression else 'p'}(baseline) = {attr.prob_baseline:.4f}",
            **shell.NO_ARROW, help=f"What the raw attributions add up to (completeness): "
                                   f"{analysis.explained_name(attr.target)} for the text minus for the <s> <pad>… </s> "
                                   "baseline. The normalised scores hide this scale.")
map_slot = st.container()  # the document map, under the header (on the first screen), drawn once its scores are known
st.caption(f"Explained: {analysis.explained_name(attr.target)} · the model is {model.head.words}.")
if attr.weak_explanation:
    st.warning(attr.weak_explanation)
st.caption(
    f"{description} · token scores: IG summed over the embedding dimension, divided by their L2 norm (sign kept) · "
    f"{attr.n_steps} steps ({attr.method}, {attr.precision}) · convergence delta {attr.delta:+.2e} on the raw sums "
    f"(F(x) − F(baseline) = {attr.prob_input:.4f} − {attr.prob_baseline:.4f} = {attr.expected:+.4f}) · "
    + ("loaded from cache" if attr.from_cache else f"computed in {format_seconds(attr.seconds)}")
)
if attr.warning:
    st.warning(attr.warning)

labels.caption(labels.explained(name(attr.target)), labels.scores(), sections=("class", "scores"))
masked = st.toggle("Mask special tokens, punctuation and stopwords", **K.option(P, "mask"))
unit, segments = current.unit(), current.segments(analysis)  # the sidebar's unit
by_unit = {**meta, "unit": unit}  # the exports read by units (the token-type tables stay by type)
mask = build_mask(analysis.tokens, **current.mask_options(analysis)) if masked else None
# ---- the overlay: Integrated Gradients, or any explainer of the Explainers page for the same class
shown = overlay.overlay_scores(P, model, analysis, attr, label)
vmax = scale_max(analysis.tokens, shown.scores, mask, segments)
pos = state.selected_token(st, P, analysis.n, int(attr.scores.argmax()))
box = unit_start(units(analysis.tokens, shown.scores, mask, segments), int(pos))  # a unit's box: its first token
values = overlay_table(analysis.tokens, shown.scores, shown.column, mask, segments)
with map_slot:  # passages: sentences, or paragraphs when the sidebar's unit is paragraph
    document_map.show(P, model, analysis, shown.scores, meta, mask=mask, score_name=shown.column, selected=int(pos))
export.overlay(token_overlay_html(analysis.tokens, shown.scores, mask=mask, vmax=vmax, selected=int(pos),
                                  unit=segments),
               values, shown.name, model, {**by_unit, "masked": masked, "explainer": shown.method},
               header_html=shown.header, legend_html=legend_html("diverging", vmax=vmax, label=shown.legend),
               selected=box, on_pick=lambda position: state.pick(P, position), n=analysis.n)  # a click selects

# ---- the selected token
d = tables.token_detail(analysis, attr, int(pos))
t = st.columns(4)
t[0].metric("Token", repr(d["token"]), f"position {d['position']:,} of {d['n']:,}", **shell.NO_ARROW)
t[1].metric("Attribution", f"{d['attribution']:+.4f}", f"rank {d['attribution_rank']:,}", **shell.NO_ARROW)
t[2].metric("|Attribution| rank", f"{d['abs_attribution_rank']:,}")
t[3].metric("Received attention (all layers, heads)", f"{d['received_attention']:.3f}",
            f"rank {d['attention_rank']:,}", **shell.NO_ARROW)

# ---- tables (Fig 10)
labels.caption(labels.explained(name(attr.target)), labels.scores(), "tables below", sections=("tables", "scores"))
ranked = tables.top_attributions(analysis.tokens, attr.scores, analysis.n, "positive", mask, segments)
negative = tables.top_attributions(analysis.tokens, attr.scores, analysis.n, "negative", mask, segments)
overlay.token_table_pair(P, pd.concat([ranked, negative.iloc[::-1]], ignore_index=True), "attribution",
                         UNIT_NAMES[unit].capitalize(), UNIT_NAMES[unit], model, by_unit, selected=box)
overlay.token_table_pair(P, tables.attribution_by_token(analysis.tokens, attr.scores, mask), "attribution",
                         "Token types (sum over the document)", "token_types", model, meta)

# ---- dataset-wide average by token type
st.subheader("Dataset-wide attribution by token type")
with shell.guard():
    df = current.current_dataset(model)
if df is None:
    st.info(hosting.dataset_needed("The dataset-wide table"))
    st.stop()
d1, d2 = st.columns(2)
ds_steps = ig_steps_picker(d1, P, "ds_steps", custom=True, label="Steps")
# a binary model's store of predicted-class IG serves either class (IG of the other class is the negation);
# another model's store serves the class it was made for
binary = model.num_labels == 2
ds_settings = dict(n_steps=ds_steps, ig_method=method, precision=precision,
                   target="predicted" if binary else str(int(target)))
with shell.guard():
    store = dataset.store(model, df, P, "attribution", dataset.settings(model, **ds_settings),
                          "Compute the dataset-wide table", default_docs=20,
                          only=("n_steps", "method", "precision", "scores") + (() if binary else ("target",)))
n_docs = store.count("attribution")
if ss.get(K.page(P, "ds_min_docs"), 1) > n_docs:  # fewer documents chosen since
    ss[K.page(P, "ds_min_docs")] = n_docs
min_docs = int(d2.number_input("Minimum documents containing a type", 1, n_docs, **K.option(P, "ds_min_docs"),
                               help="Hide token types found in fewer documents. Every type's mean is taken over all "
                                    "the documents (0 where it is absent), whatever this filter."))
with shell.guard():  # the mask toggle above applies here too
    ds = dataset.store_view(store, "store_attributions", lambda: store.dataset_attributions(
        int(target), masked=bool(masked), min_docs=min_docs), int(target), masked, min_docs)
meta = {**meta, "dataset_documents": ds.n_docs, "dataset_steps": ds_steps, "masked": masked, "min_docs": min_docs}
st.caption(ds.description())
overlay.token_table_pair(P, ds.table, "mean_attribution", ds.title(name(ds.target)), "dataset_token_types", model,
                         meta)
