"""The overlay pages' shared pieces: the overlay's scores (Integrated Gradients', or any explainer's for the same
class, with the header naming it) and the top-10 tables of the sidebar's unit whose rows select a unit."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

import longviz_core as lv
from longviz_core import cache
from longviz_core.figures.explainers import explainer_header_html
from longviz_core.figures.text import attribution_header_html
from pages._ui import export, shell, state
from pages._ui.keys import K

# units whose text does not fit a narrow cell: their tables take the page's width, one above the other
LONG_UNITS = ("sentence", "paragraph")


class OverlayScores(NamedTuple):
    method: str
    scores: np.ndarray  # (n,) one score per token, special tokens included
    name: str  # the export's name
    column: str  # the scores' column in the exported table
    legend: str
    header: str  # HTML: the paper's header for IG, the explainer's otherwise


def overlay_scores(page: str, model: lv.LoadedModel, analysis, attr, label) -> OverlayScores:
    """A selectbox of every explainer; the chosen one's scores for the class `attr` explains (IG: `attr`'s)."""
    name = analysis.label_name
    method = st.selectbox("Overlay explainer", list(lv.EXPLAINERS), format_func=lambda m: lv.EXPLAINERS[m].label,
                          **K.option(page, "explainer"), help="Scores of the class explained above; the tables "
                                                              "below stay Integrated Gradients'. Definitions: "
                                                              "docs/methods.md, Explainers.")
    true_label = name(label) if label is not None else None
    if method == "ig":
        header = attribution_header_html(true_label, name(analysis.predicted), analysis.probs[analysis.predicted],
                                         name(attr.target), attr.total, attr.prob_input, attr.prob_baseline,
                                         attr.weak_explanation)
        return OverlayScores(method, attr.scores, "attribution overlay", "attribution",
                             f"Attribution to '{name(attr.target)}' (L2-normalised)", header)
    with shell.guard():
        shown = cache.derived(analysis, "explanation", shell.queued(lambda a, **kw: lv.explain(
            model, a, method, int(attr.target), progress=shell.progress_bar(lv.EXPLAINERS[method].label))),
            method=method, target=int(attr.target))
    st.caption(f"Overlay: {shown.label} ({lv.EXPLAINERS[method].source}), computed in {shown.seconds:.2f} s.")
    header = explainer_header_html(shown.label, lv.EXPLAINERS[method].source, name(shown.target),
                                   name(analysis.predicted), analysis.probs[analysis.predicted], true_label)
    st.html(header)
    return OverlayScores(method, shown.scores, f"{method} overlay", method,
                         f"{shown.label} scores for '{name(shown.target)}'", header)


def token_table_pair(page: str, df: pd.DataFrame, col: str, title: str, file: str, model, meta: dict,
                     selected: int | None = None) -> None:
    """Two tables side by side: the 10 largest positive and the 10 largest negative values of `col`, then every
    row as one CSV. With `selected` (a token position), a click on a row selects that row's token (a unit's: its
    first). Tables of more than three columns (the dataset's six) and tables of sentences or paragraphs go one
    above the other: in half the page their last columns, or their texts, were cut."""
    stacked = len(df.columns) > 3 or any(u in df.columns for u in LONG_UNITS)
    left, right = (st.container(), st.container()) if stacked else st.columns(2)
    # side by side at 1,024 px each table has ~270 px: the numbers get what they need and the token what is left
    # (a long one, "interpretation", is cut in its cell rather than pushing the value out of the table)
    narrow = {} if stacked else {c: st.column_config.Column(width=w) for c, w in
                                 (("position", 60), (col, 80), *((u, 100) for u in ("token", "word")))}
    with left:
        _table(page, df[df[col] > 0].head(10), f"{title}: top 10 positive", f"{file}_positive", model, meta,
               selected, narrow)
    with right:
        neg = df[df[col] < 0].iloc[::-1].head(10).reset_index(drop=True)
        _table(page, neg, f"{title}: top 10 negative", f"{file}_negative", model, meta, selected, narrow)
    export.download_table(df, f"{file}_all", model, meta, label=f"All rows: {title}")


# Headers of the dataset's token table as shown (the CSV keeps the names): at 1,024 px the full names cut its
# last column off
SHORT_HEADERS = {"mean_attribution": ("mean", "mean_attribution: the summed scores over every document (0 where "
                                              "absent) divided by the number of documents"),
                 "n_docs": ("docs", "n_docs: documents containing the type"),
                 "occurrences": ("count", "occurrences: times the type occurs in those documents"),
                 "mean_per_occurrence": ("per occurrence", "mean_per_occurrence: total_attribution / occurrences"),
                 "total_attribution": ("total", "total_attribution: the type's summed normalised scores")}


def _table(page: str, df: pd.DataFrame, title: str, file: str, model, meta: dict, selected: int | None,
           widths: dict) -> None:
    st.markdown(f"**{title}**")
    config = {c: widths[c] for c in df.columns if c in widths}
    config.update({c: st.column_config.Column(label=SHORT_HEADERS[c][0], help=SHORT_HEADERS[c][1])
                   for c in df.columns if c in SHORT_HEADERS})
    config.update({u: st.column_config.TextColumn(u, width="large", help=f"The {u}'s text on one line, cut at the "
                                                  "cell's end: a click on the row shows it whole in the overlay "
                                                  "above, the CSV holds it whole.")
                   for u in LONG_UNITS if u in df.columns})
    config = {"column_config": config} if config else {}
    if selected is None:
        shell.table(df, file, model, meta, **config)
        return
    key = K.page(page, "t_" + file)  # a click on a row picks that token
    state.table_selection(key, df["position"], selected)

    def pick_row() -> None:
        rows = st.session_state[key].selection.rows
        if rows:
            state.pick(page, df["position"].iloc[rows[0]])

    shell.table(df, file, model, meta, key=key, on_select=pick_row, selection_mode="single-row", **config)
