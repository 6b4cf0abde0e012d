"""Layers x heads grid of every head's attention map, for this document or averaged over the dataset (paper
§3.1.1, Figs. 2 and 4), with a zoomable view of one head."""
import streamlit as st

from longviz_core import cache
from longviz_core.figures import attention as fig
from longviz_core.tokens import readable_token
from longviz_core.evaluation import importance as imp
from longviz_core.views import pooling
from pages._ui import current, dataset, export, hosting, labels, shell
from pages._ui.importance import computed_importance, importance_method, imported_importance
from pages._ui.keys import K

shell.run_through_app()

K, P = K, "heatmap"
IMPORTED = K.IMPORTED_IMPORTANCE

st.title("Attention heatmap grid")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens · rows = layers, columns = heads; each map is pooled onto "
           "blocks of consecutive tokens and divided by its head's largest cell.")

c1, c2, c3 = st.columns(3)
scope = hosting.scope(c1, "Scope", ("this document", "dataset"), P, horizontal=True)
grid = c2.select_slider("Cells per axis", pooling.GRID_SIZES, value=pooling.DEFAULT_GRID, **K.option(P, "grid"))
colour = c3.radio("Colour scale", fig.SCALES, horizontal=True, **K.option(P, "colour"))
# a row of its own: a fourth column cut its label to "Scale by he…" at 1,024 px
scale = st.checkbox("Scale by head importance", **K.option(P, "scale"),
                    help="Multiply each head by its importance on the dataset (Taylor, as T3-Vis and the paper, "
                         "or Michel et al.'s gate gradient), or by an imported head_importance file.")

importance = None
if scale:
    c1, c2 = st.columns(2)
    # an imported file is a user's bytes: offered only where uploads are (hosted: allow_upload = true)
    sources = ("computed on the dataset",) + (("imported file",) if hosting.uploads_allowed() else ())
    source = c1.radio("Head importance", sources, horizontal=True, **K.option(P, "importance_source"))
    with shell.guard():
        if source == "imported file":
            upload = hosting.uploader("head_importance (.npy or .pt, shape layers x heads)", ["npy", "pt", "pth"],
                                      K.page(P, "importance_file"))
            if upload is not None:
                st.session_state[IMPORTED] = imp.load_head_importance(
                    upload.getvalue(), model.num_layers, model.num_heads, filename=upload.name)
            importance = imported_importance(model)
            if importance is None:
                st.info("Upload a head-importance file to scale the maps.")
        else:
            st.session_state.pop(IMPORTED, None)  # the other attention pages follow this choice
            importance = computed_importance(model, importance_method(c2, P))

with shell.guard():
    if scope == "this document":
        pooled = cache.derived(analysis, "pooled", lambda a, grid: pooling.pool_attention(a.attention, grid), grid=grid)
    else:
        df = current.required_dataset(model, "The dataset-wide grid")
        store = dataset.store(model, df, P, "attention", dataset.settings(model, grid=grid),
                              "Compute the dataset-wide grid", only=("grid", "pooling"), default_docs=8)
        pooled = dataset.store_view(store, "store_pooled", store.pooled_attention)
    maps = pooling.normalised_maps(pooled, None if importance is None else importance.values)

what = "this document" if scope == "this document" else f"the average of {pooled.n_documents} documents"
settings = current.export_settings(model, description, scope=scope, documents=pooled.n_documents, grid=grid,
                                  colour=colour, scaled_by_head_importance=importance is not None,
                                  head_importance=None if importance is None else importance.name)
export.image(fig.grid_image(maps, colour, title=f"Attention of every head, {what}"
                            + (f" (scaled by head importance: {importance.name})" if importance is not None else "")),
             "heatmap grid", model, settings, width="stretch")
if importance is not None:
    labels.caption(labels.importance(importance), "heads are multiplied by importance / the largest importance, "
                   "so unimportant heads fade", sections=("importance",))

st.subheader("One head")
c1, c2 = st.columns(2)
layer = c1.selectbox("Layer", range(model.num_layers), format_func=lambda i: f"layer {i + 1}", **K.option(P, "layer"))
head = c2.selectbox("Head", range(model.num_heads), format_func=lambda i: f"head {i + 1}", **K.option(P, "head"))
value_title = "attention / head max" + (" × importance / max importance" if importance is not None else "")
chart = fig.head_zoom_chart(maps[layer, head], pooled.edges, colour, title=f"Layer {layer + 1}, head {head + 1}",
                            relative=pooled.relative, select=not pooled.relative, value_title=value_title)
zoom_name, zoom_settings = f"heatmap layer {layer + 1} head {head + 1}", {**settings, "layer": layer, "head": head}
if pooled.relative:
    export.chart(chart, zoom_name, model, zoom_settings)
    st.caption("Axes are fractions of each document's length.")
else:
    event = export.chart(chart, zoom_name, model, zoom_settings, on_select="rerun", key=K.page(P, "zoom"))
    picked = ((event or {}).get("selection", {}).get("cell") or [{}])[0]
    qb, kb = int(picked.get("query_block", -1)), int(picked.get("key_block", -1))
    if 0 <= qb < pooled.grid and 0 <= kb < pooled.grid:  # a selection from a coarser grid is dropped
        (q0, q1), (k0, k1) = pooling.block_tokens(pooled, qb), pooling.block_tokens(pooled, kb)
        st.markdown(f"**Queries {q0}–{q1 - 1}** attend to **keys {k0}–{k1 - 1}**: {value_title} "
                    f"{fig.zoom_value_text(maps[layer, head, qb, kb])} (as in the tooltip).")
        text = lambda a, b: "".join(map(readable_token, analysis.tokens[a:b]))  # noqa: E731
        st.text(f"queries: {text(q0, q1)}\nkeys:    {text(k0, k1)}")
    else:
        band = model.family.attention_patterns(analysis.n)[layer].describe(layer)
        st.caption(f"Click a cell to see which tokens it covers. {band}")
