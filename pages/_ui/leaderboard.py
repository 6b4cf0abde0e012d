"""The explainer leaderboard on the Explainers page: the table as the stages fill it in, then every number, the
deletion curves, the flips and the runs, each with its download."""
from __future__ import annotations

import streamlit as st

from longviz_core.dataset import leaderboard as lb
from longviz_core.evaluation.deletion import LODDS_UNDEFINED
from longviz_core.figures import faithfulness as fig_faith
from longviz_core.figures import explainers as fig
from pages._ui import export, shell

# On screen: the columns that fit at 1,024 px (random's spread is stated beside the table, the measured cost is
# the seconds); the expander and the CSV have every column at full precision. Widths in px: "no flip ≤ 24 tokens"
# needs 150 of the ~560 the main column has at 1,024 px.
FORMATS = {c: st.column_config.NumberColumn(c, format="%.3f", width=80) for c in ("AOPC", "LOdds")}
FORMATS["first flip"] = st.column_config.TextColumn("first flip", width=150, alignment="right")
FORMATS["seconds"] = st.column_config.NumberColumn("seconds", format="%.2f", width=80)
FORMATS.update({c: None for c in ("method", "AOPC sd (seeds)", "LOdds sd (seeds)", "flip rate", "peak MB", "cost")})


# The runs tab at 1,024 px: 13 runs (8 explainers, 5 random seeds) in ~560 px, the flips in their short form
RUN_FORMATS = {"label": st.column_config.TextColumn("label", width=130),
               "seed": st.column_config.NumberColumn("seed", width=45),
               **{c: st.column_config.NumberColumn(c, format="%.3f", width=70) for c in ("aopc", "lodds")},
               "first_flip": st.column_config.TextColumn("first_flip", width=150, alignment="right"),
               "seconds": st.column_config.NumberColumn("seconds", format="%.2f", width=65)}


def flips_in_words(df, short: bool = False, unit: str = "token"):
    """The table as shown: "no flip" (or "no flip within the first N tokens", "no flip ≤ N tokens" if `short`,
    for a scan not yet at its end; N of the `unit`s removed) where first_flip is NaN, rather than an empty cell;
    for the leaderboard or its runs."""
    if "no_flip_within" in df:
        within = df["no_flip_within"]
    else:
        within = df["scanned"].where(~df["settled"].astype(bool))
    return df.assign(first_flip=[fig.flip_text(v, w, short, unit) for v, w in zip(df["first_flip"], within)])


def show_table(runs, model, meta, title, pending=None, unit: str = "token"):
    """The leaderboard itself; `pending`: the flips are still being scanned (no downloads yet); `unit`: what the
    deletion test removed."""
    table = lb.summarise(runs)
    st.subheader(title)
    view = fig.leaderboard_view(table, unit)
    if pending:
        st.dataframe(view.assign(**{"first flip": "…"}), hide_index=True, column_config=FORMATS)
        st.caption(pending)
        return table
    shell.table(view, "explainer leaderboard", model, meta, column_config=FORMATS)
    st.caption(fig.random_floor(view))
    return table


def show_leaderboard(runs, model, meta, title, pending=None, unit: str = "token"):
    """The leaderboard, every number, the curves, the flips and the runs, with their downloads; `pending`: the
    flips are still being scanned (their cells say so, no downloads yet, the flips tab waits); `unit`: what the
    deletion test removed (its counts and flips are of these)."""
    table = show_table(runs, model, meta, title, pending, unit)
    with st.expander("Every number (AOPC and LOdds at each k, sds)"):
        parts = fig.every_number(table, unit=unit)
        if pending:  # the flips are still being scanned
            parts.pop("flips and cost")
        number = st.column_config.NumberColumn(format="%.4f")
        for (name, part), where in zip(parts.items(), st.tabs(list(parts))):
            config = {c: number for c in part.columns if c not in ("explainer", "number", "first flip", "runs")}
            where.dataframe(part, hide_index=True, column_config=config)
        if not pending:  # the CSV: a row per explainer, every column at full precision
            export.download_table(table, "explainer leaderboard every number", model, meta)
    tabs = st.tabs(["AOPC", "LOdds", "first flip (exact scan)", "runs"])
    curves = lb.curves(runs)
    for tab, metric in zip(tabs, ("aopc", "lodds")):
        if metric == "lodds" and model.head.regression:
            tab.info(LODDS_UNDEFINED)
            continue
        export.chart(fig_faith.deletion_curves_chart(curves, metric, score=model.head.regression, unit=unit),
                     f"explainer deletion curve {metric}", model,
                     meta, where=tab, width="content")  # the figure's fixed aspect, not stretched past the column
    shown = ["doc"] * ("doc" in runs) + ["label", "seed", "aopc", "lodds", "first_flip", "seconds"]
    if pending:
        tabs[2].info(f"{pending} They show here when the scan ends.")
        tabs[3].dataframe(runs.assign(first_flip="…")[shown], hide_index=True, column_config=RUN_FORMATS)
        return
    open_ = runs[~runs["settled"].astype(bool)]  # scans that stopped at the bound: "no flip within the first N"
    export.chart(fig_faith.flip_chart(lb.flips(runs), bound=int(open_["scanned"].min()) if len(open_) else None,
                                      unit=unit),
                 "explainer decision flips", model, meta, where=tabs[2])
    shell.table(flips_in_words(runs, short=True, unit=unit)[shown], "explainer runs", model, meta, where=tabs[3],
                column_config=RUN_FORMATS, download=runs)  # every column, NaN for no flip, in the CSV


__all__ = ["show_leaderboard", "show_table"]
