"""Faithfulness by deletion: AOPC / LOdds curves (Song et al. 2024) and decision flips (Serrano & Smith 2019) for
attention, |IG|, |IG| x attention and random rankings, for the current document or dataset-wide
(docs/methods.md#faithfulness)."""
import streamlit as st

from longviz_core import cache
from longviz_core.figures import faithfulness as fig
from longviz_core.evaluation import faithfulness as fa
from pages._ui import current, dataset, deletion, export, hosting, labels, shell
from pages._ui.ig import attribution_after_click, ig_steps_picker
from pages._ui.importance import head_importance
from pages._ui.keys import UNIT_NAMES, K

shell.run_through_app()

K, P = K, "faithfulness"
SCAN_LIMITS = {"100 % (every count)": 1.0, "50 %": 0.5, "20 %": 0.2, "10 %": 0.1}  # the dataset scope's stores

unit = current.unit()  # the sidebar's: what is deleted
units = UNIT_NAMES[unit]
st.title(f"Faithfulness: deleting the top-ranked {units}")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens · predicted {analysis.prediction_words}")
labels.caption(labels.explained("the predicted class y, per document") + f" (AOPC, LOdds and flips follow "
               f"{analysis.explained_name()}; the |IG| rankings explain it)", labels.scores(),
               sections=("faithfulness", "scores"))
st.markdown(
    (f"{units.capitalize()} are removed in ranking order, each ranked by the sum of its tokens' scores (every token "
     "of a unit replaced by the chosen token" if unit != "token" else
     "Tokens are removed in ranking order (replaced by the chosen token")
    + "; `<s>`, `</s>`, positions and masks kept). "
    "**AOPC(k)** = p(y|x) − p(y|x without the top k %): higher = the ranking found what the prediction rests on. "
    "**LOdds(k)** = log p(y|x without the top k %) − log p(y|x): lower is better. **Flip fraction**: share of "
    f"{'text tokens' if unit == 'token' else units} removed when the predicted class first changes, found by an "
    "exact scan of every count in order (lower is better). The curves come first, then the flips within the first "
    f"{fa.FLIP_BOUND} {units}; *Scan to the end* settles the rest in the background. **Random**: mean ± sd over "
    "its seeds; its flip fraction is the mean over the seeds that flipped. The unit is the sidebar's.")

L = model.num_layers
c1, c2, c3 = st.columns(3)
scope = hosting.scope(c1, "Scope", ("this document", "dataset"), P, horizontal=True)
steps = ig_steps_picker(c2, P)
replacement = deletion.replacement_picker(model, P, c3)
c1, c2, c3 = st.columns(3)
lo, hi = c1.slider("Attention ranking: layers", 1, L, (1, L), **K.option(P, "layers")) if L > 1 else (1, 1)
scale = c2.checkbox("Head importance", **K.option(P, "scale"),  # a third of 528 px at 1,024 px, beside its help
                    help="Scale the attention ranking's heads by their importance before summing them.")
n_seeds = c3.number_input("Random ranking: seeds (0 .. N−1)", 2, 20, len(fa.DEFAULT_SEEDS), **K.option(P, "seeds"))
seeds = list(range(int(n_seeds)))
layers = list(range(lo - 1, hi))
threshold = deletion.head_settings(model, P, analysis)

with shell.guard():
    scaling = head_importance(model, P, c2) if scale else None
    importance = None if scaling is None else scaling.values
    if scaling is not None:
        labels.caption(labels.importance(scaling), "scales the attention ranking", sections=("importance",))
settings = dict(layers=layers, scale=None if importance is None else importance.round(12).tolist(),
                replacement=replacement, seeds=seeds, unit=unit,
                **({} if threshold is None else {"threshold": threshold}))

if scope == "this document":
    with shell.guard():
        ig = attribution_after_click(model, analysis, steps, P, "Run Integrated Gradients and the deletion test")

    def scan(bound, **more):
        return fa.faithfulness(model, analysis, ig.scores, layers=layers, scale=importance, replacement=replacement,
                               seeds=seeds, flip_bound=bound, threshold=threshold, unit=unit, **more)

    meta = current.export_settings(model, description, scope=scope, ig_steps=steps, **settings)
    key = repr((model.fingerprint, analysis.key, ig.key, settings))
    slot = st.empty()
    with shell.guard():  # the curves first, drawn at once; the flips within the bound fill in from the background
        result = cache.derived(analysis, "faithfulness", shell.queued(lambda a, **kw: scan(0)), ig=ig.key, bound=0,
                               **settings)
        bounded = deletion.flips_stage(P, key, lambda progress, stop: scan(
            fa.FLIP_BOUND, resume=True, progress=progress, stop=stop), unit)
        exact = None if bounded is None else deletion.exact_stage(
            P, key, lambda progress, stop: scan(None, resume=True, progress=progress, stop=stop),
            *deletion.left_of(bounded))
    result = exact or bounded or result
    with slot.container():
        deletion.numbers(result, "faithfulness", model, meta,
                         None if bounded else f"First flips within the first {fa.FLIP_BOUND} {units}: scanning …")
    curves = result.long_curves()
    metrics = [m for m in ("aopc", "lodds", "probability") if result.lodds_defined or m != "lodds"]
    tabs = st.tabs([{"aopc": "AOPC", "lodds": "LOdds", "probability": model.head.unit}[m] for m in metrics]
                   + ["first flip (exact scan)"])
    for tab, metric in zip(tabs, metrics):
        export.chart(fig.deletion_curves_chart(curves, metric, score=model.head.regression, unit=unit),
                     f"deletion curve {metric}",
                     model, meta, where=tab,
                     width="content")
    if bounded is None:
        tabs[-1].info(f"The first flips within the first {fa.FLIP_BOUND} {units} are being scanned (progress above); "
                      "they show here when the scan ends.")
    elif result.flips_defined:
        export.chart(fig.flip_chart(result.flips(), bound=None if result.exact else min(
            r.scanned for r in result.runs if r.flip_removed is None), unit=unit), "decision flips", model, meta,
                     where=tabs[-1])
    else:
        tabs[-1].info(f"{fa.NO_THRESHOLD[0].upper()}{fa.NO_THRESHOLD[1:]}: give a score threshold above.")
    export.download_table(curves, "deletion curves", model, meta, label="Every ranking's curves (Random: mean and sd)")
    export.download_table(result.seed_curves(), "deletion curves per random seed", model, meta,
                          label="Random's curve for each seed")
else:
    max_removed = SCAN_LIMITS[st.selectbox(
        "First flip: scan up to", list(SCAN_LIMITS), **K.option(P, "max_removed"),
        help=f"Every count of removed {units} is scored in order until the decision flips, in every document. A "
             "lower limit is faster and reports 'no flip within the first X %' when the decision holds that long.")]
    with shell.guard():
        df = current.required_dataset(model, "The dataset-wide summary")
        store = dataset.store(model, df, P, "faithfulness", dataset.settings(
            model, n_steps=steps, replacement=replacement, seeds=tuple(seeds), max_removed=max_removed,
            faithfulness_layers=None if (lo, hi) == (1, L) else tuple(layers), faithfulness_scaled=scaling is not None,
            unit=unit,
            **({} if scaling is None else scaling.settings())), "Compute the dataset-wide summary")
        result = dataset.store_view(store, "store_faithfulness", store.dataset_faithfulness)
    st.caption(f"Mean ± std over {result.n_documents} documents; the flip fraction's mean is over the documents that "
               f"flipped; each document's random row is its mean over {len(seeds)} seeds.")
    meta = current.export_settings(model, description, scope=scope, ig_steps=steps, documents=result.n_documents,
                                  **settings)
    export.table(fig.faithfulness_summary(result.summary), "dataset faithfulness", model, meta)
    with st.expander("Every number (mean and std per k)"):
        export.table(result.summary.round(4), "dataset faithfulness every number", model, meta)
    curves = result.long_curves()
    tabs = st.tabs(["AOPC", "LOdds", "first flip (exact scan)", "per document"])
    for tab, metric in zip(tabs, ("aopc", "lodds")):
        if metric == "lodds" and model.head.regression:
            tab.info(fa.LODDS_UNDEFINED)
            continue
        export.chart(fig.deletion_curves_chart(curves, metric, score=model.head.regression, unit=unit),
                     f"dataset deletion curve {metric}", model, meta,
                     where=tab)
    export.chart(fig.flip_chart(result.per_document.rename(columns={"first_flip": "flip_fraction"}),
                                max_removed=max_removed, unit=unit), "dataset decision flips", model,
                 meta, where=tabs[2])
    export.table(result.per_document.round(4), "dataset faithfulness per document", model, meta, where=tabs[3])
