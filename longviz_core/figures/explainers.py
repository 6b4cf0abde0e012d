"""Figures and display tables for the explainer leaderboard (Altair + pandas + HTML strings; no Streamlit).

- `leaderboard_view`: the leaderboard as shown: explainer, AOPC, LOdds and first flip with random's ± sd, cost.
- `every_number`: every number of the leaderboard in parts that read whole at 1,024 px.
- `agreement_heatmap`: explainers x explainers Kendall tau / RBO of their token rankings.
- `scores_table`: every explainer's score per token, for the CSV export.
- `explainer_header_html`: the overlay header naming the explainer, the class explained and the prediction.
The deletion curves (Song et al. 2024 Fig. 3) and the first-flip chart reuse figures.faithfulness's
deletion_curves_chart and flip_chart with leaderboard.curves() / leaderboard.flips().
"""
from __future__ import annotations

import html

import altair as alt
import numpy as np
import pandas as pd

from ..tokens import token_label
from .layout import layered, require_columns

METRIC_TITLES = {"kendall_tau": "Kendall τ-b", "rbo": "RBO (extrapolated)"}
_HEADER_STYLE = "font-family:ui-sans-serif,system-ui,sans-serif;font-size:0.8rem;color:#333;margin:4px 0"


def leaderboard_view(table: pd.DataFrame, unit: str = "token") -> pd.DataFrame:
    """leaderboard.summarise's table for display: explainer (★ on the best AOPC), AOPC and LOdds with their sd
    over random seeds (blank for the deterministic explainers), first flip (flip_text: "no flip" where the
    decision never changed within the scan limit) and flip rate, seconds per explanation, peak extra memory in
    MB, and the cost class. The other numbers keep full precision (format them in the widget), so a displayed
    table equals the exported one. `unit`: what the deletion test removed (its flips count these)."""
    require_columns(table, ("method", "label", "aopc", "aopc_sd", "lodds", "lodds_sd", "first_flip", "flip_rate",
                            "seconds", "peak_bytes", "cost", "best"))
    return pd.DataFrame({
        "explainer": [("★ " if best else "") + label for label, best in zip(table["label"], table["best"])],
        "method": table["method"].to_numpy(),
        "AOPC": table["aopc"].to_numpy(),
        "AOPC sd (seeds)": table["aopc_sd"].to_numpy(),
        "LOdds": table["lodds"].to_numpy(),
        "LOdds sd (seeds)": table["lodds_sd"].to_numpy(),
        "first flip": [flip_text(v, w, short=True, unit=unit) for v, w in zip(table["first_flip"], _within(table))],
        "flip rate": table["flip_rate"].to_numpy(),
        "seconds": table["seconds"].to_numpy(),
        "peak MB": table["peak_bytes"].to_numpy() / 2**20,
        "cost": table["cost"].to_numpy(),
    })


def every_number(table: pd.DataFrame, unit: str = "token") -> dict[str, pd.DataFrame]:
    """Every number of leaderboard.summarise's table, split so that each part reads whole at 1,024 px whatever the
    number of explainers (a row per explainer and a column per number was 3,377 px wide; a column per explainer,
    808 px for ten): "AOPC" and "LOdds", a row per explainer (its label) and a column per k and their mean; "flips
    and cost", the first flip in words (flip_text), the flip rate, seconds, peak MB and runs; "sd over seeds", a
    row per number and a column per seeded explainer (random): the sd of each number over its seeds. Numbers stay
    numbers (the widget formats them); "—" nowhere: a missing sd is NaN, shown blank."""
    require_columns(table, ("method", "label", "first_flip", "flip_rate", "seconds", "peak_bytes"))
    names = {"explainer": table["label"].to_numpy()}

    def at_k(metric: str) -> pd.DataFrame:
        columns = [c for c in table.columns if c.startswith(f"{metric}@") and not c.endswith("_sd")]
        return pd.DataFrame({**names, **{c.split("@")[1]: table[c].to_numpy() for c in columns},
                             "mean": table[metric].to_numpy()})

    flips = pd.DataFrame({**names, "first flip": [flip_text(v, w, short=True, unit=unit) for v, w in
                                                  zip(table["first_flip"], _within(table))],
                          "flip rate": table["flip_rate"].to_numpy(), "seconds": table["seconds"].to_numpy(),
                          "peak MB": table["peak_bytes"].to_numpy() / 2**20,
                          **{c: table[c].to_numpy() for c in ("runs",) if c in table}})
    sd_columns = [c for c in table.columns if c.endswith("_sd")]
    seeded = table[table[sd_columns].notna().any(axis=1)] if sd_columns else table.iloc[:0]
    sds = pd.DataFrame({label: seeded.loc[i, sd_columns].to_numpy(dtype=float) for i, label in
                        zip(seeded.index, seeded["label"])}, index=[c[: -len("_sd")] for c in sd_columns])
    return {"AOPC": at_k("aopc"), "LOdds": at_k("lodds"), "flips and cost": flips,
            "sd over seeds": sds.rename_axis("number").reset_index()}


NO_FLIP = "no flip"


def flip_text(fraction, within=None, short: bool = False, unit: str = "token") -> str:
    """A first flip as shown: the fraction of text tokens (or `unit`s) removed to 4 decimals (one token of a
    4,096-token document is 0.0002); for NaN, NO_FLIP when the scan reached the end, "no flip within the first N
    tokens" when it stopped at `within` = N (a bounded scan, evaluation.deletion.summarise's no_flip_within);
    `short`: "no flip ≤ N tokens", for the leaderboard's narrow column (random_floor's caption says it in full)."""
    if fraction is not None and not np.isnan(fraction):
        return f"{float(fraction):.4f}"
    if within is None or np.isnan(within):
        return NO_FLIP
    return f"{NO_FLIP} {'≤' if short else 'within the first'} {int(within):,} {unit}s"


def _within(table: pd.DataFrame):
    return table["no_flip_within"] if "no_flip_within" in table else [None] * len(table)


def random_floor(view: pd.DataFrame) -> str:
    """The floor to beat, in words, from leaderboard_view's table: random's mean ± sd over its seeds."""
    rows = view[view["method"] == "random"]
    if rows.empty:
        return "Random was not run: there is no floor to compare with."
    r = rows.iloc[0]
    flip = r["first flip"].replace("≤", "within the first")
    return (f"Random, the floor to beat (mean ± sd over seeds): AOPC {r['AOPC']:.3f} ± {r['AOPC sd (seeds)']:.3f}, "
            f"LOdds {r['LOdds']:.3f} ± {r['LOdds sd (seeds)']:.3f}, "
            f"{flip if flip.startswith(NO_FLIP) else 'first flip ' + flip}. Peak memory, "
            "flip rates and every sd: 'Every number' below and the CSV.")


def agreement_heatmap(matrix: pd.DataFrame, metric: str = "kendall_tau", title: str | None = None,
                      labels: dict[str, str] | None = None, unit: str = "token") -> alt.Chart:
    """A square heatmap of leaderboard.agreement_matrix (rows and columns: explainers, named by `labels`, method
    -> label, where given), values printed in the cells; NaN (a constant ranking) grey; `unit`: what the
    rankings order (leaderboard.agreement_matrix's segments)."""
    if metric not in METRIC_TITLES:
        raise ValueError(f"metric must be one of {list(METRIC_TITLES)}, got {metric!r}")
    if list(matrix.index) != list(matrix.columns):
        raise ValueError("the agreement matrix must be square with the same explainers on both axes")
    names = [(labels or {}).get(m, m) for m in matrix.index]
    values = matrix.to_numpy(dtype=np.float64)
    rows, cols = np.meshgrid(np.arange(len(names)), np.arange(len(names)), indexing="ij")
    data = pd.DataFrame({"a": np.asarray(names)[rows.ravel()], "b": np.asarray(names)[cols.ravel()],
                         "value": values.ravel()})
    data["text"] = [f"{v:.2f}" if np.isfinite(v) else "—" for v in data["value"]]
    lo = -1.0 if metric == "kendall_tau" else 0.0
    # explainer names are long: never cut; the columns' names upright, so each stays within its cell's width
    base = alt.Chart().encode(  # the data goes on the layer (`layered`)
        x=alt.X("b:N", sort=names, title=None, axis=alt.Axis(labelLimit=0, labelAngle=-90, labelOverlap=False)),
        y=alt.Y("a:N", sort=names, title=None, axis=alt.Axis(labelLimit=0)))
    rect = base.mark_rect().encode(
        color=alt.ColorValue(**alt.condition(
            "isValid(datum.value) && isFinite(datum.value)",
            alt.Color("value:Q", title=METRIC_TITLES[metric], scale=alt.Scale(scheme="viridis", domain=[lo, 1.0])),
            alt.value("#dddddd"))),
        tooltip=[alt.Tooltip("a:N"), alt.Tooltip("b:N"),
                 alt.Tooltip("value:Q", format=".4f", title=METRIC_TITLES[metric])])
    text = base.mark_text(fontSize=11).encode(
        text=alt.Text("text:N"),
        color=alt.ColorValue(**alt.condition(f"datum.value > {(lo + 1.0) / 2}", alt.value("black"),
                                             alt.value("white"))))
    side = max(200, 48 * len(names))
    return layered(data, rect, text).properties(
        title=title or f"Agreement between explainers: {METRIC_TITLES[metric]} of their {unit} rankings",
        width=side, height=side)


def scores_table(tokens, explanations: dict) -> pd.DataFrame:
    """position, token, then one column per explanation (its method name) with its score per token."""
    n = len(tokens)
    out = pd.DataFrame({"position": np.arange(n), "token": [token_label(t) for t in tokens]})
    for name, e in explanations.items():
        if e.scores.shape != (n,):
            raise ValueError(f"{name} has {e.scores.size} scores for {n} tokens")
        out[name] = e.scores
    return out


def explainer_header_html(explainer: str, source: str, target_label: str, predicted_label: str,
                          predicted_prob: float, true_label: str | None = None) -> str:
    """The overlay header for an explainer other than Integrated Gradients: which explainer (and its source),
    the class explained, the true and the predicted label."""
    cells = [
        ("Explainer", explainer),
        ("True label", "—" if true_label is None else str(true_label)),
        ("Predicted label", f"{predicted_label} ({float(predicted_prob):.2f})"),
        ("Class explained", str(target_label)),
    ]
    th = "".join(f'<th style="text-align:left;padding:2px 10px 2px 0">{html.escape(h)}</th>' for h, _ in cells)
    td = "".join(f'<td style="padding:2px 10px 2px 0">{html.escape(v)}</td>' for _, v in cells)
    return (f'<div style="{_HEADER_STYLE}"><table style="border-collapse:collapse"><tr>{th}</tr><tr>{td}</tr></table>'
            f'<div style="color:#666">{html.escape(source)}</div></div>')
