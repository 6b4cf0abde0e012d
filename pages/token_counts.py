"""Top-k attended and attending tokens counted by type and by position, their intersection and the instances
of one token along the document (paper §3.1.2, Algorithms 1-3, Figs. 5-7)."""
import streamlit as st

from longviz_core import cache
from longviz_core.dataset.kinds import COUNTS
from longviz_core.figures import attention as fig
from longviz_core.model import topk as tk
from longviz_core.views import counts as tc
from longviz_core.views.masking import build_mask
from pages._ui import current, dataset, export, hosting, labels, shell
from pages._ui.keys import K

shell.run_through_app()

K, P = K, "counts"
SCOPES = ("all layers and heads", "one layer", "one head")
SHORT_NAMES = {"count_attended": "attended", "count_attending": "attending"}
GROUP_NAMES = {"type": "token type", "word": "word"}
GROUP_HELP = ("Token type: the lower-cased token, so the pieces of a cut word count apart. Word: a word counts when "
              "any of its pieces is listed, once per token (or head list); masked only if all its pieces are. ")
MASK_LABEL, MASK_HELP = "Mask (§3.4)", ("Special tokens, punctuation and stopwords: masked tokens neither count nor "
                                         "are counted; the top-k lists themselves are the model's.")


def dataset_counts(group: str) -> None:
    """The dataset scope: every document's paper-rule counts by `group` (token type or word) at the store's fixed
    settings (k = 10, all layers and heads), summed over the documents (dataset.aggregate.dataset_type_counts, by the
    store)."""
    c1, c2 = st.columns(2)
    top_n = c1.slider("N (bars shown)", 3, 50, 10, **K.option(P, "n"))
    masked = c2.toggle(MASK_LABEL, **K.option(P, "mask"), help=MASK_HELP)  # short: a column is narrow at 1,024 px
    k, rule, name = COUNTS["k"], COUNTS["rule"], GROUP_NAMES[group]
    st.caption(f"Fixed for the dataset: k = {k}, all layers and heads, counted {tc.COUNT_RULES[rule]}. A {name}'s "
               "count is the sum over the documents of its count in each; `documents`: how many count it.")
    with shell.guard():
        df = current.required_dataset(model, "Dataset-wide counts", "need")
        store = dataset.store(model, df, P, "attention", dataset.settings(model), "Count over the dataset",
                              only=("counts",))
        read = store.word_counts if group == "word" else store.type_counts
        tables = {d: dataset.store_view(store, "store_counts", lambda d=d: read(d, masked), group, d, masked)
                  for d in tc.DIRECTIONS}
    settings = current.export_settings(model, "dataset", documents=store.count("attention"), k=k, bars=top_n,
                                      scope="all layers and heads", masked=masked, count=tc.COUNT_RULES[rule],
                                      group_by=name)
    meaning = tc.COUNT_MEANINGS[rule].replace("top-k", f"top-{k}")
    st.subheader(f"Top {top_n} by {meaning}, summed over {store.count('attention')} documents")
    cols = st.columns(2)
    for col, d, colour in zip(cols, tc.DIRECTIONS, ("#2171b5", "#cb181d")):
        # the subheader says "summed over N documents": a half-width chart's title stays short at 1,024 px
        export.chart(fig.counts_bar_chart(tables[d], f"{d} · by {group}", top_n, colour,
                                          rule=rule), f"dataset {d} by {group}", model, settings, where=col)
        export.table(tables[d], f"dataset {d} counts by {group}", model, settings, where=col)
    st.stop()


st.title("Token counts")
with shell.guard():
    model, analysis, label, description = current.current_analysis()
st.caption(f"{description} · {analysis.n:,} tokens. For every token and head: its top-k **attended** keys (what it "
           "attends to most) and its top-k **attending** queries (who attends to it most); ties go to the lower "
           "position. **Once per token** (the paper's Algorithm 2): a token's set is its top-k over all the "
           "selected layers and heads together, and a key's count is the number of tokens whose set contains it, "
           "so no count exceeds the number of tokens. **Once per head list**: every (token, head) list counts "
           "separately.")

over = hosting.scope(st, "Counted over", ("this document", "dataset"), P, "over", horizontal=True)
group = st.radio("Group by", tc.GROUPS, format_func=GROUP_NAMES.get, horizontal=True, **K.option(P, "group"),
                 help=GROUP_HELP + labels.doc_link("words"))
if over == "dataset":
    dataset_counts(group)
bys = (group, "position")
c1, c2, c3, c4 = st.columns(4)
k = c1.slider("k (list length)", 1, tk.TOPK_MAX, 10, **K.option(P, "k"))
top_n = c2.slider("N (bars shown)", 3, 50, 10, **K.option(P, "n"))
scope = c3.radio("Scope", SCOPES, **K.option(P, "scope"))
rule = c4.radio("Count", tc.RULES, format_func=tc.COUNT_RULES.get, **K.option(P, "rule"),
                help="Once per token: the paper's count (appendix A.5, Algorithm 2). Once per head list: each "
                     "token's list in each selected head counts on its own, summed over the heads. "
                     + labels.doc_link("count"))
masked = c4.toggle(MASK_LABEL, **K.option(P, "mask"), help=MASK_HELP)  # short: a column is narrow at 1,024 px
layers = heads = None
if scope != SCOPES[0]:
    c1, c2 = st.columns(2)
    layers = [c1.selectbox("Layer", range(model.num_layers), format_func=lambda i: f"layer {i + 1}",
                           **K.option(P, "layer"))]
    if scope == "one head":
        heads = [c2.selectbox("Head", range(model.num_heads), format_func=lambda i: f"head {i + 1}",
                              **K.option(P, "head"))]

with shell.guard():
    with st.spinner("Finding every token's top-k lists (once per document)…"):
        topk = cache.derived(analysis, "topk", lambda a, k: tk.topk_indices(a.attention, k), k=tk.TOPK_MAX)
        options = current.mask_options(analysis)
        tallies = cache.derived(analysis, "tallies", lambda a, masked, **options: tc.tally(
            topk, a.tokens, build_mask(a.tokens, **options) if masked else None), masked=masked, **options)
    mask = tallies.mask
    tables = {(d, by): tc.token_counts(analysis, k, d, by, layers, heads, mask, tallies=tallies, rule=rule)
              for d in tc.DIRECTIONS for by in dict.fromkeys((*bys, "type"))}  # by type also for the instances

where = "all layers and heads" if layers is None else f"layer {layers[0] + 1}" + (
    "" if heads is None else f", head {heads[0] + 1}")
settings = current.export_settings(model, description, k=k, bars=top_n, scope=where, masked=masked,
                                  count=tc.COUNT_RULES[rule], group_by=GROUP_NAMES[group])
st.subheader(f"Top {top_n} by {tc.COUNT_MEANINGS[rule].replace('top-k', f'top-{k}')} — {where}")
labels.caption(labels.count_rule(rule), sections=("count",))
for d, colour in zip(tc.DIRECTIONS, ("#2171b5", "#cb181d")):
    cols = st.columns(2)
    for col, by in zip(cols, bys):
        export.chart(fig.counts_bar_chart(tables[d, by], f"{d} · by {by}", top_n, colour, rule=rule),
                     f"{d} by {by}", model, settings, where=col)

st.subheader("Both attended and attending (Fig. 7)")
for by in bys:  # one under the other: side by side, the position table's columns are cut at 1,024 px
    col = st.container()
    both = tc.count_intersection(tables["attended", by], tables["attending", by], top_n)
    col.markdown(f"**By {by}**: {len(both)} of the top {top_n} in common (counted {tc.COUNT_RULES[rule]})")
    shell.table(both, f"attended and attending by {by}", model, settings, where=col, column_config=SHORT_NAMES)

st.subheader("Instances of one token (Fig. 6)")
by_type = tables["attended", "type"]
choices = list(dict.fromkeys([*by_type["token"].head(top_n), *tables["attending", "type"]["token"].head(top_n)]))
if not choices:
    st.info("No token is counted in this scope (everything is masked?).")
    st.stop()
c1, c2 = st.columns(2)
words = ~build_mask(choices)  # the default is the most counted real word, not <s> or "the"
token = c1.selectbox("Token", choices, index=int(words.argmax()) if words.any() else 0, **K.option(P, "token"),
                     help="Default: the most counted word (not a special token, punctuation or a stopword).")
direction = c2.radio("Lists", tc.DIRECTIONS, horizontal=True, **K.option(P, "instance_direction"))
with shell.guard():
    inst = tc.instance_counts(analysis, token, k, direction, layers, heads, mask, tallies=tallies, rule=rule)
export.chart(fig.instances_chart(inst, f"'{token}': {len(inst)} instances, {direction} counts along the document",
                                 rule=rule, n=analysis.n),
             f"instances of {token} {direction}", model, {**settings, "token": token, "lists": direction})
labels.caption(labels.count_rule(rule), sections=("count",))
with st.expander(f"All counts (tables; count = {tc.COUNT_MEANINGS[rule]})"):
    shown = {(d, by): tables[d, by] for d in tc.DIRECTIONS for by in bys}
    tabs = st.tabs([f"{d} by {by}" for d, by in shown])
    for tab, ((d, by), table) in zip(tabs, shown.items()):
        shell.table(table, f"{d} counts by {by}", model, settings, where=tab)
