"""The document map above an overlay (docs/methods.md, "Document map"): the strip of passage scores by position
and the top passages with their scores; a click on a passage (its row, or its rectangle in the strip) selects its
first token, which the overlay outlines and scrolls into view. It reads the scores the page already has."""
from __future__ import annotations

import numpy as np
import streamlit as st

import longviz_core as lv
from longviz_core.figures.document_map import SELECT, document_map_chart
from longviz_core.figures.text import legend_html, scale_max, token_overlay_html
from longviz_core.views.document_map import document_map
from longviz_core.views.units import overlay_table
from pages._ui import current, export, shell, state
from pages._ui.keys import K


def show(page: str, model: lv.LoadedModel, analysis, scores, meta: dict, *, unit: str | None = None, mask=None,
         mode: str = "diverging", rank_by: str = "signed", score_name: str = "score",
         selected: int | None = None) -> int | None:
    """The map of `scores` ((n,) per token, as the overlay shows them, `mask` as the overlay's) by `unit`
    ("sentence" or "paragraph"; None: paragraphs when the sidebar's unit is paragraph, else sentences: the map is
    of passages whatever the overlay's unit), `mode` the overlay's colours; a passage chosen selects its first token
    (state.pick: the page's selected token). Returns the selected token: `selected` (the page's own, where it
    has one), else the one a passage chose on this page for this document, else None."""
    ss = st.session_state
    unit = unit or ("paragraph" if current.unit() == "paragraph" else "sentence")
    if selected is None:  # a page without a token box of its own: the map's choice, for this document only
        state.new_document(page, analysis)
        chosen = ss.get(K.page(page, "pos"))
        selected = chosen if isinstance(chosen, int) and 0 <= chosen < analysis.n else None
    with shell.guard():
        segments = current.segments(analysis, unit)
        dmap = document_map(scores, segments, mask, rank_by=rank_by)
    shown = None if selected is None else dmap.passage_of(selected)
    strip_key, rows_key = K.page(page, "map_strip"), K.page(page, "map_top")

    def clicked() -> None:
        points = ss[strip_key].selection.get(SELECT) or []
        if points and isinstance(points[0].get("start"), (int, float)):
            state.pick(page, int(points[0]["start"]))

    chart = document_map_chart(dmap, mode, shown, score_name)
    st.altair_chart(chart, key=strip_key, on_select=clicked, selection_mode=SELECT)
    top = dmap.table()
    # the top passage holding the selected token shows as the selected row
    state.table_selection(rows_key, top["position"], -1 if shown is None else int(dmap.starts[shown]))

    def picked() -> None:
        rows = ss[rows_key].selection.rows
        if rows:
            state.pick(page, int(top["position"].iloc[rows[0]]))

    what = "score, high to low" if rank_by == "signed" else "|score|"
    st.markdown(f"**Top {unit}s by {what}** · click one to bring the overlay to it")
    if top.empty:
        st.caption(f"No {unit} has a score above 0.")
    else:
        st.dataframe(top.drop(columns=["position", "tokens"]), hide_index=True, key=rows_key, on_select=picked,
                     selection_mode="single-row", column_config=_columns(unit, score_name, mode))
    # one row of downloads under both (the first screen holds the strip and the table): the strip's PNG and SVG,
    # every passage's numbers as CSV with the run's metadata
    row = st.container(horizontal=True, gap="small")
    export.download_chart(chart, "document map", where=row)
    export.download_table(dmap.table(np.arange(len(dmap))), f"document map {unit}s", model,
                          {**meta, "map_unit": unit, "map_rank_by": rank_by}, where=row)
    return selected


def _columns(unit: str, score_name: str, mode: str) -> dict:
    """The top passages' columns in pixels, 513 with the row's checkbox: they fit the 528 px of the content
    column at 1,024 px (a text column sized by its text ran past it) and stretch to fill a wider one."""
    column = st.column_config
    return {"rank": column.NumberColumn("#", width=30),
            # "score" in the 70 px header ("Integrated Gradients" was cut); its help names what is summed
            "score": column.NumberColumn("score", format="%+.4g" if mode == "diverging" else "%.4g", width=70,
                                         help=f"the {unit}'s summed {score_name} scores"),
            "share": column.NumberColumn("share", format="percent", width=60, help="of Σ |score| over every passage"),
            unit: column.TextColumn(unit, width=320)}


def explainers(page: str, model: lv.LoadedModel, analysis, explanations: dict, rank_by: str, meta: dict) -> None:
    """The Explainers page's overlay of one explainer's scores (chosen among `explanations`, random left out)
    under its document map; a passage chosen scrolls the overlay to it."""
    methods = [m for m in explanations if m != "random"]
    if not methods:
        return
    st.subheader("Where in the document?")
    method = st.radio("Explainer shown", methods, format_func=lambda m: lv.EXPLAINERS[m].label, horizontal=True,
                      **K.option(page, "map_method"))
    shown = explanations[method]
    name = analysis.label_name(shown.target)
    selected = show(page, model, analysis, shown.scores, meta, rank_by=rank_by,
                    score_name=shown.label)
    segments = current.segments(analysis)  # the overlay in the sidebar's unit, as on the other overlay pages
    vmax = scale_max(analysis.tokens, shown.scores, unit=segments)
    export.overlay(token_overlay_html(analysis.tokens, shown.scores, vmax=vmax, selected=selected, unit=segments),
                   overlay_table(analysis.tokens, shown.scores, method, unit=segments),
                   f"{method} explainer overlay", model, {**meta, "explainer": method, "unit": segments.unit},
                   selected=selected, n=analysis.n,
                   legend_html=legend_html("diverging", vmax=vmax, label=f"{shown.label} scores for '{name}'"))
