"""Agreement between received attention and |IG|: Tables 1-2, the top-5 % sets, per-head grid, dataset-wide."""
import streamlit as st

from longviz_core.dataset import aggregate
from longviz_core.figures import agreement as fig
from longviz_core.views import agreement as ag
from longviz_core.views.similarity import DEFAULT_P, METRICS, rbo_top_weight
from pages._ui import current, dataset, export, hosting, labels, shell
from pages._ui.ig import attribution_after_click, ig_steps_picker
from pages._ui.importance import head_importance
from pages._ui.keys import UNIT_NAMES, K

shell.run_through_app()

K, P = K, "similarity"
MASK_LABELS = {"special": "special tokens", "nonalnum": "non-alphanumeric", "stopwords": "stopwords"}
VARIANTS = ("cosine_raw", "cosine_median", "cosine_mean", "cosine_rank")
# shorter column headers on screen, so the tables fit a 1,024 px window (files keep the full names)
SHORT_NAMES = {"Scaled by head importance": "Scaled", "Cosine similarity": "Cosine", "Rank-biased overlap": "RBO",
               "Jaccard of the top 5%": "Jaccard (top 5 %)", "attention_norm": "attention", "attention_rank": "rank",
               "attribution_norm": "|IG|", "attribution_rank": "|IG| rank", "position": "pos",
               **{METRICS[v]["label"]: v.removeprefix("cosine_") for v in VARIANTS}}

st.title("Agreement: attention vs attribution")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens · predicted {analysis.label_name(analysis.predicted)}")

L = model.num_layers
c1, c2, c3 = st.columns(3)
scope = hosting.scope(c1, "Scope", ("this document", "dataset"), P, horizontal=True)
labels.caption(labels.explained(f"the predicted class ({analysis.label_name(analysis.predicted)})"
                                if scope == "this document" else "the predicted class of each document"),
               labels.scores(), "|IG| compared with received attention", sections=("agreement", "scores"))
steps = ig_steps_picker(c2, P)
p = c3.select_slider("RBO p", (0.9, 0.95, 0.98, DEFAULT_P, 0.995), value=DEFAULT_P, **K.option(P, "p"))
kinds = st.multiselect("Mask (paper §3.4)", ag.MASK_KINDS, default=list(ag.MASK_KINDS), **K.option(P, "mask"),
                       format_func=MASK_LABELS.get)
c1, c2 = st.columns(2)
lo, hi = c1.slider("Extra attention source: layers", 1, L, (1, L), **K.option(P, "layers")) if L > 1 else (1, 1)
scale = c2.checkbox("Add rows scaled by head importance", value=True, **K.option(P, "scale"))
# the sidebar's unit: this document's vectors are summed per unit before every metric; the dataset's stay by tokens
unit = current.unit() if scope == "this document" else "token"
segments = current.segments(analysis) if unit != "token" else None
if scope == "dataset" and current.unit() != "token":
    st.caption("Dataset-wide numbers compare tokens (the result stores hold them by token), whatever the sidebar's "
               "unit.")
depth = max(1, round(0.05 * (analysis.n if segments is None else len(segments))))
st.caption(f"With p = {p}, the top {depth:,} ranks (5 % of this document's {UNIT_NAMES[unit]}) carry "
           f"{100 * rbo_top_weight(p, depth):.1f} % of RBO's weight. Every metric: higher = more agreement.")
with st.expander("Masked: 'zero' (the paper) vs 'drop'"):
    st.markdown(
        "**zero** sets masked tokens to 0 before normalising and ranking: they stay in every metric as thousands "
        "of tied zeros at the bottom of *both* rankings. Kendall τ counts every pair of them as tied and every "
        "pair (masked, unmasked) as concordant whenever the unmasked token is above zero in both vectors, so τ "
        "rises no matter how the real tokens agree — likely why the paper's masked τ jumps from ~0.16 to ~0.74. "
        "**drop** removes masked tokens first, so the metrics only see the tokens that carry content.")

with shell.guard():
    scaling = head_importance(model, P, c2, required=False) if scale else None
importance = None if scaling is None else scaling.values
layer_range = (lo - 1, hi - 1)
if scaling is not None:
    labels.caption(labels.importance(scaling), "scales the rows marked 'scaled'",
                   sections=("importance",))


meta = current.export_settings(model, description, scope=scope, unit=unit, ig_steps=steps, rbo_p=p, mask=kinds,
                              layer_range=[lo, hi], scaled_by_head_importance=importance is not None,
                              head_importance=None if scaling is None else scaling.name)


if scope == "this document":
    with shell.guard():
        ig = attribution_after_click(model, analysis, steps, P, "Run Integrated Gradients")
        if ig.warning:
            st.warning(ig.warning)
        mask = ag.mask_for(analysis.tokens, kinds, **current.mask_options(analysis))
        table = ag.agreement_table(analysis, ig.scores, importance=importance, mask=mask, layer_range=layer_range, p=p,
                                   segments=segments)
    if segments is not None:
        st.caption(f"Compared per {unit}: received attention and |IG| summed over each {unit}'s tokens "
                   f"({len(segments):,} {UNIT_NAMES[unit]}; <s> and </s> belong to none); a {unit} is masked only "
                   "if all its tokens are.")
    st.subheader("Table 1: similarity of attention and |IG|")
    shell.table(fig.table1(table), "table 1", model, meta, column_config=SHORT_NAMES)
    with st.expander("The notebook's extra cosine variants"):
        shell.table(fig.table1(table, VARIANTS), "cosine variants", model, meta, column_config=SHORT_NAMES)
        st.caption(" · ".join(f"**{SHORT_NAMES[METRICS[v]['label']]}**: {METRICS[v]['description']}"
                              for v in VARIANTS))
    st.subheader("Table 2: Jaccard of the top 5 %")
    shell.table(fig.table2(table), "table 2", model, meta, column_config=SHORT_NAMES)

    st.subheader("Top-5 % sets")
    sources = ag.attention_sources(L, layer_range)
    c1, c2, c3 = st.columns(3)
    source = sources[c1.selectbox("Attention", range(len(sources)), format_func=lambda i: sources[i].label,
                                  **K.option(P, "set_source"))]
    set_scaled = c2.checkbox("Scaled", **K.option(P, "set_scaled"), disabled=importance is None)
    set_mode = c3.radio("Masked", ag.MASK_MODES if mask is not None else ("no",), horizontal=True,
                        **K.option(P, "set_mode"))
    with shell.guard():
        attention = analysis.attention.received(layers=source.layers,
                                                scale=importance if set_scaled and importance is not None else None)
        sets = ag.top_sets(analysis.tokens, attention, ig.scores, mask, set_mode, segments=segments)
    st.caption(f"Jaccard = {sets.jaccard:.3f}. Ranks: 1 = highest among the compared tokens.")
    set_meta = {**meta, "set_source": source.label, "set_scaled": set_scaled, "set_masked": set_mode}
    names = [*ag.SET_NAMES, f"counts by {unit}"]
    tabs = st.tabs([f"{name} ({len(t)})" for name, t in zip(ag.SET_NAMES, sets.tables())] + [names[-1]])
    for tab, name, t in zip(tabs, names, [*sets.tables(), sets.counts()]):
        shell.table(t, f"top 5 percent {name}", model, set_meta, where=tab, column_config=SHORT_NAMES)

    st.subheader("Per-head agreement with |IG|")
    c1, c2 = st.columns(2)
    metric = c1.radio("Metric", ag.HEAD_METRICS, format_func=lambda m: METRICS[m]["label"], horizontal=True,
                      **K.option(P, "head_metric"))
    head_mode = c2.radio("Masked ", ag.MASK_MODES if mask is not None else ("no",), horizontal=True,
                         **K.option(P, "head_mode"))
    with shell.guard():
        grid = ag.head_agreement(analysis, ig.scores, metric, mask, head_mode, p=p, segments=segments)
    export.chart(fig.head_agreement_heatmap(grid, metric), f"per-head {metric}", model,
                 {**meta, "head_metric": metric, "head_masked": head_mode})
else:
    with shell.guard():
        df = current.required_dataset(model, "Dataset-wide tables", "need")
        # an extra source equal to all layers or the final layer adds no row: the same store as none
        extra = layer_range if len(ag.attention_sources(L, layer_range)) > 2 else None
        settings = dataset.settings(model, n_steps=steps, rbo_p=p, mask_kinds=tuple(kinds), layer_range=extra,
                                    **({} if scaling is None else scaling.settings()))
        store = dataset.store(model, df, P, "agreement", settings, "Compute dataset-wide tables")
        result = dataset.store_view(store, "store_agreement", store.dataset_agreement)
        if scaling is None:  # the store of a labelled dataset also holds the scaled rows
            result = aggregate.without_scaled(result)
    st.caption(f"Mean ± std over {result.n_documents} documents.")
    meta = {**meta, "documents": result.n_documents}
    st.subheader("Table 1 (dataset)")
    export.table(fig.table1(ag.mean_std_table(result.table, ag.TABLE1_METRICS)), "dataset table 1", model, meta)
    st.subheader("Table 2 (dataset)")
    export.table(fig.table2(ag.mean_std_table(result.table, ag.TABLE2_METRICS)), "dataset table 2", model, meta)
    with st.expander("Every document's numbers"):
        export.table(result.per_document, "dataset agreement per document", model, meta)
    st.subheader("Top-5 % token counts, summed over documents")
    configs = sorted(result.set_counts)
    config = configs[st.selectbox("Configuration", range(len(configs)), **K.option(P, "ds_config"),
                                  format_func=lambda i: f"{configs[i][0]} · scaled {configs[i][1]} · "
                                                        f"masked {configs[i][2]}")]
    export.table(result.set_counts[config], "dataset top 5 percent counts", model, {**meta, "configuration": config})
    st.subheader("Per-head agreement with |IG| (mean over documents)")
    grids = sorted(result.head_grids)
    name = grids[st.selectbox("Metric and masking", range(len(grids)), **K.option(P, "ds_grid"),
                              format_func=lambda i: f"{METRICS[grids[i][0]]['label']} · masked {grids[i][1]}")]
    export.chart(fig.head_agreement_heatmap(result.head_grids[name], name[0]), f"dataset per-head {name[0]}", model,
                 {**meta, "head_metric": name[0], "head_masked": name[1]})
