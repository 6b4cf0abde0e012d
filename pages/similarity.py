"""Agreement between received attention and |IG|: Tables 1-2, the top-5 % sets, per-head grid, dataset-wide."""
import streamlit as st

import longviz_core as lv
from longviz_core import agreement as ag
from longviz_core import attribution as attr
from longviz_core.figures import agreement as fig
from longviz_core.similarity import DEFAULT_P, METRICS, rbo_top_weight
from longviz_core.views.importance import cached_head_importance
from pages import _common as common

K, P = common.K, "similarity"
IMPORTED = K.page("attention", "imported_importance")  # set on the heatmap page when a file is imported
MASK_LABELS = {"special": "special tokens", "nonalnum": "non-alphanumeric", "stopwords": "stopwords"}
VARIANTS = ("cosine_raw", "cosine_median", "cosine_mean", "cosine_rank")

st.title("Agreement: attention vs attribution")
with common.guard():
    model, analysis, label, description = common.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens · predicted {analysis.label_name(analysis.predicted)}; "
           "IG explains the predicted class.")

L = model.num_layers
c1, c2, c3 = st.columns(3)
scope = c1.radio("Scope", ("this document", "dataset"), key=K.page(P, "scope"), horizontal=True)
steps = attr.STEP_PRESETS[c2.selectbox("IG steps", list(attr.STEP_PRESETS), key=K.page(P, "steps"))]
p = c3.select_slider("RBO p", (0.9, 0.95, 0.98, DEFAULT_P, 0.995), value=DEFAULT_P, key=K.page(P, "p"))
kinds = st.multiselect("Mask (paper §3.4)", ag.MASK_KINDS, default=list(ag.MASK_KINDS), key=K.page(P, "mask"),
                       format_func=MASK_LABELS.get)
c1, c2 = st.columns(2)
lo, hi = c1.slider("Extra attention source: layers", 1, L, (1, L), key=K.page(P, "layers")) if L > 1 else (1, 1)
scale = c2.checkbox("Add rows scaled by head importance", value=True, key=K.page(P, "scale"))
depth = max(1, round(0.05 * analysis.n))
st.caption(f"With p = {p}, the top {depth:,} ranks (5 % of this document) carry "
           f"{100 * rbo_top_weight(p, depth):.1f} % of RBO's weight. Every metric: higher = more agreement.")
with st.expander("Masked: 'zero' (the paper) vs 'drop'"):
    st.markdown(
        "**zero** sets masked tokens to 0 before normalising and ranking: they stay in every metric as thousands "
        "of tied zeros at the bottom of *both* rankings. Kendall τ counts every pair of them as tied and every "
        "pair (masked, unmasked) as concordant whenever the unmasked token is above zero in both vectors, so τ "
        "rises no matter how the real tokens agree — likely why the paper's masked τ jumps from ~0.16 to ~0.74. "
        "**drop** removes masked tokens first, so the metrics only see the tokens that carry content.")

with common.guard():
    importance = None
    df = common.current_dataset(model)
    imported = st.session_state.get(IMPORTED)
    if scale and imported is not None and imported.shape == (L, model.num_heads):
        importance = imported  # the heatmap page's imported file wins, as on the other attention pages
    elif scale:
        if df is None or "label" not in df:
            st.info("Head importance needs a labelled dataset: only unscaled rows are shown.")
        else:
            importance = cached_head_importance(model, df, common.max_tokens(model),
                                                progress=common.progress_bar("Head importance"))
layer_range = (lo - 1, hi - 1)


def attribution_of(analysis):
    """IG of the predicted class: from the cache, or after an honest time estimate and a click."""
    hit = attr.cached_attribution(model, analysis, None, steps)
    if hit is not None:
        return hit
    seconds = attr.estimate_ig_seconds(model, analysis.n, steps)
    st.info(f"Integrated Gradients with {steps} steps on {analysis.n:,} tokens takes about {seconds:.0f} s here.")
    if not st.button("Run Integrated Gradients", key=K.page(P, "run_ig")):
        st.stop()
    return attr.integrated_gradients(model, analysis, None, steps, progress=common.progress_bar("IG"),
                                     on_wait=common.queue_notice())


if scope == "this document":
    with common.guard():
        ig = attribution_of(analysis)
        if ig.warning:
            st.warning(ig.warning)
        mask = ag.mask_for(analysis.tokens, kinds)
        table = ag.agreement_table(analysis, ig.scores, importance=importance, mask=mask, layer_range=layer_range, p=p)
    st.subheader("Table 1: similarity of attention and |IG|")
    st.dataframe(fig.table1(table), hide_index=True)
    with st.expander("The notebook's extra cosine variants"):
        st.dataframe(fig.table1(table, VARIANTS), hide_index=True)
        st.caption(" · ".join(f"**{METRICS[v]['label']}**: {METRICS[v]['description']}" for v in VARIANTS))
    st.subheader("Table 2: Jaccard of the top 5 %")
    st.dataframe(fig.table2(table), hide_index=True)

    st.subheader("Top-5 % sets")
    sources = ag.attention_sources(L, layer_range)
    c1, c2, c3 = st.columns(3)
    source = sources[c1.selectbox("Attention", range(len(sources)), format_func=lambda i: sources[i].label,
                                  key=K.page(P, "set_source"))]
    set_scaled = c2.checkbox("Scaled", key=K.page(P, "set_scaled"), disabled=importance is None)
    set_mode = c3.radio("Masked", ag.MASK_MODES if mask is not None else ("no",), horizontal=True,
                        key=K.page(P, "set_mode"))
    with common.guard():
        attention = analysis.attention.received(layers=source.layers,
                                                scale=importance if set_scaled and importance is not None else None)
        sets = ag.top_sets(analysis.tokens, attention, ig.scores, mask, set_mode)
    st.caption(f"Jaccard = {sets.jaccard:.3f}. Ranks: 1 = highest among the compared tokens.")
    tabs = st.tabs([f"{name} ({len(t)})" for name, t in zip(ag.SET_NAMES, sets.tables())] + ["counts by token"])
    for tab, t in zip(tabs, [*sets.tables(), sets.counts()]):
        tab.dataframe(t, hide_index=True)

    st.subheader("Per-head agreement with |IG|")
    c1, c2 = st.columns(2)
    metric = c1.radio("Metric", ag.HEAD_METRICS, format_func=lambda m: METRICS[m]["label"], horizontal=True,
                      key=K.page(P, "head_metric"))
    head_mode = c2.radio("Masked ", ag.MASK_MODES if mask is not None else ("no",), horizontal=True,
                         key=K.page(P, "head_mode"))
    with common.guard():
        grid = ag.head_agreement(analysis, ig.scores, metric, mask, head_mode, p=p)
    st.altair_chart(fig.head_agreement_heatmap(grid, metric))
else:
    with common.guard():
        if df is None:
            raise lv.DatasetError("Dataset-wide tables need a dataset: choose one in the sidebar.")
        count = st.slider("Documents (from the start of the dataset)", 1, len(df), min(10, len(df)),
                          key=K.page(P, "docs"))
        estimate = attr.estimate_ig_seconds(model, common.max_tokens(model), steps)
        st.info(f"Uncached documents need IG: up to about {count * estimate / 60:.1f} min for {count} documents "
                f"at {common.max_tokens(model):,} tokens (cached documents are instant).")
        # results stay on screen while other widgets change; new settings ask for a new click
        wanted = repr((model.fingerprint, lv.dataset_fingerprint(df), count, steps, kinds, layer_range, p, scale,
                       common.max_tokens(model)))
        if st.button("Compute dataset-wide tables", key=K.page(P, "run_dataset")):
            st.session_state[K.page(P, "computed")] = wanted
        if st.session_state.get(K.page(P, "computed")) != wanted:
            st.stop()
        result = ag.dataset_agreement(model, df["text"].iloc[:count], max_tokens=common.max_tokens(model),
                                      ig_steps=steps, importance=importance, mask_kinds=kinds,
                                      layer_range=layer_range, p=p, progress=common.progress_bar("Dataset"),
                                      on_wait=common.queue_notice())
    st.caption(f"{result.n_documents} documents ({result.from_cache} from the disk cache); mean ± std.")
    st.subheader("Table 1 (dataset)")
    st.dataframe(fig.table1(ag.mean_std_table(result.table, ag.TABLE1_METRICS)), hide_index=True)
    st.subheader("Table 2 (dataset)")
    st.dataframe(fig.table2(ag.mean_std_table(result.table, ag.TABLE2_METRICS)), hide_index=True)
    st.subheader("Top-5 % token counts, summed over documents")
    configs = sorted(result.set_counts)
    config = configs[st.selectbox("Configuration", range(len(configs)), key=K.page(P, "ds_config"),
                                  format_func=lambda i: f"{configs[i][0]} · scaled {configs[i][1]} · "
                                                        f"masked {configs[i][2]}")]
    st.dataframe(result.set_counts[config], hide_index=True)
    st.subheader("Per-head agreement with |IG| (mean over documents)")
    grids = sorted(result.head_grids)
    name = grids[st.selectbox("Metric and masking", range(len(grids)), key=K.page(P, "ds_grid"),
                              format_func=lambda i: f"{METRICS[grids[i][0]]['label']} · masked {grids[i][1]}")]
    st.altair_chart(fig.head_agreement_heatmap(result.head_grids[name], name[0]))
