"""Explainers: which explanation can you trust on this long document? Every explainer scored by deleting its
top tokens (AOPC / LOdds, Song et al. 2024; first decision flip, Serrano & Smith 2019) with its cost, side by side, for the current
document or over the dataset; their agreement; every score exported."""
import streamlit as st

import longviz_core as lv
from longviz_core import attribution as attr
from longviz_core.attribution.explainers import DEFAULT_METHODS
from longviz_core import cache
from longviz_core.dataset import leaderboard as lb
from longviz_core.dataset import run
from longviz_core.figures import explainers as fig
from longviz_core.progress import format_seconds
from longviz_core.evaluation import faithfulness as fa
from pages._ui import current, dataset, deletion, document_map, export, hosting, shell
from pages._ui.ig import ig_steps_picker
from pages._ui.keys import UNIT_NAMES, K
from pages._ui.leaderboard import show_leaderboard

shell.run_through_app()

K, P = K, "explainers"
def stop_until_clicked(label: str, wanted) -> None:
    """Results stay on screen while other widgets change: the page stops until `label` is clicked for these
    settings (`wanted`, any value with a stable repr); other settings ask for a new click."""
    key = K.page(P, "computed")
    if st.button(label, key=K.page(P, "run")):
        st.session_state[key] = repr(wanted)
    if st.session_state.get(key) != repr(wanted):
        st.stop()


st.title("Explainers: which explanation can you trust?")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
name = analysis.label_name
unit = current.unit()  # the sidebar's: what the deletion test removes and the agreement compares
units = UNIT_NAMES[unit]
removed = "text tokens" if unit == "token" else units
st.caption(f"{description} · {analysis.n:,} tokens · predicted {analysis.prediction_words}")
st.markdown(
    f"Each explainer ranks the {removed}"
    + ("" if unit == "token" else f" (a {unit} by the sum of its tokens' scores)")
    + f"; deleting its top {units} (replaced by the chosen token, `<s>`, `</s>`, positions and masks kept) should "
    "hurt the prediction more than deleting random ones. **AOPC** = mean over "
    "k ∈ {1, 5, 10, 20, 50} % of p(y|x) − p(y|x without the top k %) (higher is better); **LOdds** = the mean of "
    f"log p(y|x without the top k %) − log p(y|x) (lower is better); **first flip** = share of {removed} removed "
    "when the predicted class first changes (exact scan; lower is better): the table comes with the curves, the "
    f"flips within the first {fa.FLIP_BOUND} {units} follow, *Scan to the end* settles the rest in the background. "
    "**Random**: mean ± sd over its seeds, the floor to beat. The unit is the sidebar's. Definitions: "
    "docs/methods.md, *Explainers*.")

methods_all = list(lv.EXPLAINERS)
# pills, not a multiselect: every name stays in sight (a multiselect cuts its chips to one line); chosen at first:
# DEFAULT_METHODS, every explainer but Shapley sampling (1 + 25 x sentences copies, over the page's budget)
methods = st.pills("Explainers", methods_all, selection_mode="multi", default=list(DEFAULT_METHODS),
                   format_func=lambda m: lv.EXPLAINERS[m].label, **K.option(P, "methods"))
c1, c2, c3 = st.columns(3)
scope = hosting.scope(c1, "Scope", ("this document", "dataset"), P, horizontal=True)
steps = ig_steps_picker(c2, P) if "ig" in methods else None
c1, c2, c3 = st.columns(3)
target_choice = c1.selectbox("Class explained", ["predicted", *range(model.num_labels)], **K.option(P, "target"),
                             format_func=lambda t: "the predicted class" if t == "predicted" else name(t),
                             help=f"The deletion test always scores {analysis.explained_name()}.")
target = None if target_choice == "predicted" else int(target_choice)
rank_by = c2.radio(f"Delete {units} by", lb.RANK_BY, **K.option(P, "rank_by"), horizontal=True,
                   format_func={"signed": "score (high to low)", "magnitude": "|score|"}.get,
                   help="score: a token pushing towards the class explained goes first, one pushing against it "
                        "last. |score|: the Faithfulness page's |IG| ranking.")
replacement = deletion.replacement_picker(model, P, c3)
n_seeds = int(c1.number_input("Random: seeds (mean ± sd over seeds 0 .. N−1)", lb.MIN_SEEDS, 20,
                              len(fa.DEFAULT_SEEDS), **K.option(P, "seeds")))
seeds = list(range(n_seeds))
threshold = deletion.head_settings(model, P, analysis)
if not methods:
    st.info("Choose at least one explainer.")
    st.stop()
options = {"ig": {"n_steps": steps}} if "ig" in methods else None
settings = dict(methods=methods, target=target, rank_by=rank_by, replacement=replacement, seeds=seeds,
                ig_steps=steps, unit=unit, **({} if threshold is None else {"threshold": threshold}))


if scope == "this document":
    meta = current.export_settings(model, description, scope=scope, **settings)
    rankings = len([m for m in methods if m != "random"]) + (len(seeds) if "random" in methods else 0)
    note = (f"The deletion test scores first its curves ({1 + rankings * len(fa.KS):,} perturbed copies at most), "
            f"then every count up to {fa.FLIP_BOUND} {units} for the first flips (up to {rankings * fa.FLIP_BOUND:,} "
            "more); the gradient explainers take one forward and backward each")
    if "ig" in methods and attr.cached_attribution(model, analysis, target, steps) is None:
        with shell.queue_notice():
            seconds = attr.estimate_ig_seconds(model, analysis.n, steps)
        note += f", Integrated Gradients about {format_seconds(seconds)} ({steps} steps)"
    st.info(note + ".")
    stop_until_clicked("Run the explainers and the deletion test", (
        model.fingerprint, analysis.key, settings))

    def explanation(method):
        opts = (options or {}).get(method, {})
        return cache.derived(analysis, "explanation", shell.queued(lambda a, **kw: lv.explain(
            model, a, method, target, progress=shell.progress_bar(lv.EXPLAINERS[method].label), **opts)),
            method=method, target=target, **opts)

    def stage(bound, **more):  # no queue notice here: the flip scans run it in a worker, off the page
        return lambda a, **kw: lb.document_leaderboard(
            model, a, methods, target, seeds=seeds, replacement=replacement, flip_bound=bound, rank_by=rank_by,
            options=options, explanations=explanations, threshold=threshold, unit=unit, **more)

    key = repr((model.fingerprint, analysis.key, settings))
    with shell.guard():  # the curves first, drawn at once; the flips within the bound fill in from the background
        explanations = {m: explanation(m) for m in methods if m != "random"}
        if "random" in methods:
            explanations["random"] = lv.explain(model, analysis, "random", seed=0)
        runs = cache.derived(analysis, "leaderboard", shell.queued(stage(0)), bound=0, **settings)
        slot = st.container()  # the leaderboard above the flips' progress and the exact scan's offer
        bounded = deletion.flips_stage(P, key, lambda progress, stop: stage(
            fa.FLIP_BOUND, resume=True, progress=progress, stop=stop)(analysis), unit)
        exact = None if bounded is None else deletion.exact_stage(
            P, key, lambda progress, stop: stage(None, resume=True, progress=progress, stop=stop)(analysis),
            *deletion.left_of(bounded))
    pending = None if bounded is not None else f"First flips within the first {fa.FLIP_BOUND} {units}: scanning …"
    with slot:
        show_leaderboard(next(r for r in (exact, bounded, runs) if r is not None), model, meta,
                         "Leaderboard for this document", pending, unit)
    st.subheader("How much do the explainers agree?")
    if len(explanations) >= 2:
        metric = st.radio("Agreement", list(lb.AGREEMENT_METRICS), format_func=lb.AGREEMENT_METRICS.get,
                          **K.option(P, "agreement"), horizontal=True)
        with shell.guard():
            matrix = lb.agreement_matrix(explanations, metric, rank_by=rank_by,
                                         segments=None if unit == "token" else current.segments(analysis))
        st.caption(f"Rankings of the {removed} (<s> and </s> left out) by each explainer's deletion key"
                   + ("" if unit == "token" else f" summed over the {unit}'s tokens")
                   + "; random is its seed 0. RBO: extrapolated, p = 0.99.")
        labels = {m: lv.EXPLAINERS[m].label for m in matrix.index}
        export.chart(fig.agreement_heatmap(matrix, metric, labels=labels, unit=unit),
                     f"explainer agreement {metric}", model, meta)
    export.download_table(fig.scores_table(analysis.tokens, explanations), "explainer scores per token", model,
                          meta, label="Every explainer's score per token")
    document_map.explainers(P, model, analysis, explanations, rank_by, meta)  # a map over one explainer's overlay
else:
    with shell.guard():
        df = current.required_dataset(model, "The dataset leaderboard")
        store_settings = run.leaderboard_settings(methods, target, max_tokens=current.max_tokens(model), seeds=seeds,
                                                  replacement=replacement, rank_by=rank_by,
                                                  options=options, unit=unit)
    store = dataset.store(model, df, P, "leaderboard", store_settings, "Compute the dataset leaderboard")
    with shell.guard():
        runs = store.leaderboard_runs()
    count = runs["doc"].nunique()
    meta = current.export_settings(model, description, scope=scope, documents=count, **settings)
    st.caption("Explainers: mean over documents (first flip over those that flipped); random: each seed's mean over "
               "documents, then mean ± sd over seeds.")
    show_leaderboard(runs, model, meta, f"Leaderboard over {count} documents", unit=unit)
