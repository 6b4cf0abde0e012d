"""Charts and display tables for faithfulness (Altair + pandas; no Streamlit).

- `deletion_curves_chart`: AOPC / LOdds / probability against the share of tokens removed, one line per ranking
  with the random ranking's mean +-1 sd band over its seeds (one document), or mean lines with a +-1 std band
  over documents (dataset).
- `flip_chart`: the fraction of tokens removed at the first decision flip, per ranking (in the style of Serrano &
  Smith 2019, Fig. 5: one dot per random seed or per document), the mean +-1 sd, and "no flip" counts in the row
  labels.
- `faithfulness_summary`: the dataset-wide faithfulness summary as 'mean ± std' text columns.
- `document_numbers`: one document's numbers, a column per ranking, as the page shows them (text: "—" where none).
"""
from __future__ import annotations

from typing import Sequence

import altair as alt
import numpy as np
import pandas as pd

from .explainers import NO_FLIP
from .layout import FIT_WIDTH, PAD, layered, require_columns

CURVE_METRICS = {
    "aopc": ("AOPC(k) = p(y|x) − p(y|x without top k%)", "higher = more faithful"),
    "lodds": ("LOdds(k) = log p(y|x without top k%) − log p(y|x)", "lower = more faithful"),
    "probability": ("p(y | x without the top k%)", "lower = more faithful"),
}
# a regression head's deletion test compares its score s(x), not a probability (model.heads)
SCORE_METRICS = {
    "aopc": ("AOPC(k) = s(x) − s(x without top k%)", "higher = more faithful"),
    "probability": ("s(x without the top k%)", "lower = more faithful"),
}
_RANKING_ORDER = ["Attention", "|IG|", "|IG| × attention", "Random"]


CURVE_SIZE = (440, 300)  # width, height in pixels: a fixed aspect, the same for every curve chart


def deletion_curves_chart(curves: pd.DataFrame, metric: str = "aopc", title: str | None = None,
                          score: bool = False, unit: str = "token") -> alt.Chart:
    """Lines of `metric` against the fraction of text tokens (words, sentences, paragraphs: `unit`, what the
    deletion test removed) removed (0 to 1), one colour per ranking with its own legend entry, at a fixed size
    (CURVE_SIZE). A probability axis runs 0 to 1; AOPC and LOdds axes include 0. `score`: the curves are a
    regression head's score (its "probability" column holds the score, on an axis of its own range; no LOdds).

    curves: tidy rows with columns ranking, k (fraction) and `metric` (FaithfulnessResult.long_curves()); when
    several rows share (ranking, k) — one per document — the chart shows their mean and a +-1 std band.
    Otherwise rows with finite `<metric>_lo` / `<metric>_hi` (the random ranking's mean -+ sd over its seeds)
    get a shaded band."""
    metrics = SCORE_METRICS if score else CURVE_METRICS
    if metric not in metrics:
        raise ValueError(f"metric must be one of {sorted(metrics)}, got {metric!r}")
    require_columns(curves, ["ranking", "k", metric])
    data = curves.assign(k=curves["k"].astype(float))
    label, direction = metrics[metric]
    # the axis ends where the curves do (the largest k, up to the next tenth): KS stops at 50 %, and an axis to
    # 100 % left half the chart empty
    end = min(1.0, float(np.ceil(np.round(data["k"].max() * 10, 9))) / 10) if len(data) else 1.0
    ticks = [round(t, 2) for t in np.arange(0, end + 1e-9, 0.1 if end <= 0.5 else 0.2)]
    x = alt.X("k:Q", title=f"fraction of {_removed(unit)} removed", scale=alt.Scale(domain=[0, end], nice=False),
              axis=alt.Axis(format=".0%", values=ticks))
    y_scale = alt.Scale(domain=[0, 1], nice=False) if metric == "probability" and not score else alt.Scale(zero=True)
    colour = alt.Color("ranking:N", sort=_order(data["ranking"]), title="ranking",
                       legend=alt.Legend(orient="bottom", direction="horizontal", columns=2, labelLimit=0,
                                         symbolType="stroke", symbolOpacity=1, symbolStrokeWidth=3))
    several = data.duplicated(["ranking", "k"]).any()
    y_title = f"{metric.upper() if metric != 'probability' else 'score' if score else 'probability'} ({direction})"
    subtitle = label
    if several:
        line = alt.Chart().mark_line(point=True, clip=True).encode(
            x=x, y=alt.Y(f"mean({metric}):Q", title=y_title, scale=y_scale), color=colour,
            tooltip=[alt.Tooltip("ranking:N"), alt.Tooltip("k:Q", title="fraction removed", format=".0%"),
                     alt.Tooltip(f"mean({metric}):Q", format=".4f", title="mean"),
                     alt.Tooltip(f"stdev({metric}):Q", format=".4f", title="std"),
                     alt.Tooltip(f"count({metric}):Q", title="documents")])
        band = alt.Chart().mark_errorband(extent="stdev", opacity=0.15, clip=True).encode(
            x=x, y=alt.Y(f"{metric}:Q", title=y_title, scale=y_scale), color=colour)
        chart = layered(data, band, line)
        subtitle += " · mean over documents, band ± 1 std"
    else:
        lo, hi, sd = f"{metric}_lo", f"{metric}_hi", f"{metric}_sd"
        chart = alt.Chart(data).mark_line(point=True, clip=True).encode(
            x=x, y=alt.Y(f"{metric}:Q", title=y_title, scale=y_scale), color=colour,
            tooltip=[alt.Tooltip("ranking:N"), alt.Tooltip("k:Q", title="fraction removed", format=".0%"),
                     alt.Tooltip(f"{metric}:Q", format=".4f")]
            + ([alt.Tooltip(f"{sd}:Q", format=".4f", title="sd over seeds")] if sd in data else [])
            + ([alt.Tooltip("removed:Q")] if "removed" in data else []))
        if lo in data and hi in data and data[lo].notna().any():
            band = alt.Chart(data[data[lo].notna() & data[hi].notna()]).mark_area(opacity=0.2, clip=True).encode(
                x=x, y=alt.Y(f"{lo}:Q", title=y_title, scale=y_scale), y2=alt.Y2(f"{hi}:Q"), color=colour)
            chart = band + chart
            subtitle += " · Random: mean ± sd over seeds (band)"
    width, height = CURVE_SIZE
    return chart.properties(title=alt.TitleParams(title or label.split(" = ")[0], subtitle=subtitle, anchor="start"),
                            width=width, height=height, autosize=PAD)


def flip_chart(flips: pd.DataFrame, title: str | None = None, max_removed: float = 1.0, bound: int | None = None,
               unit: str = "token") -> alt.Chart:
    """One dot per row at its flip fraction (a random seed, or a document), a black tick at each ranking's mean
    and a bar over mean -+ sd (population, over the rows that flipped); rows with flip_fraction NaN are 'no
    flip': not drawn, counted in the ranking's label ("Random (2 no flip)", "... no flip within 20 %" when the
    scan stopped at max_removed < 1; "... within the first N tokens" for a scan stopped at `bound` tokens).
    `unit`: what the deletion test removed (token, word, sentence, paragraph), named in the title and axis;
    title: default "First decision flip (exact scan): fraction of text tokens removed".

    flips: columns ranking, flip_fraction (NaN = no flip) and optionally doc or seed
    (FaithfulnessResult.flips(), DatasetFaithfulness.per_document)."""
    require_columns(flips, ["ranking", "flip_fraction"])
    data = flips.copy()
    no_flip = data["flip_fraction"].isna().groupby(data["ranking"], sort=False).sum()
    title = title or f"First decision flip (exact scan): fraction of {_removed(unit)} removed"
    within = (f" within the first {bound:,} {unit}s" if bound is not None else
              f" within {100 * max_removed:g} %" if max_removed < 1 else "")
    names = {r: f"{r} ({int(k)} no flip{within})" if k else r for r, k in no_flip.items()}
    data["row"] = data["ranking"].map(names)
    order = [names[r] for r in _order(data["ranking"])]
    drawn = data[data["flip_fraction"].notna()]
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=0))  # ranking names are never cut
    x = alt.X("flip_fraction:Q", scale=alt.Scale(domain=[0, 1]),
              title=f"fraction of {_removed(unit)} removed (lower = the ranking finds the decision faster)")
    dots = alt.Chart(drawn).mark_circle(size=60, opacity=0.6).encode(
        x=x, y=y, color=alt.Color("ranking:N", sort=_order(data["ranking"]), legend=None),
        tooltip=[alt.Tooltip("ranking:N"), alt.Tooltip("flip_fraction:Q", format=".3f", title="fraction removed")]
        + [alt.Tooltip(f"{c}:Q") for c in ("doc", "seed") if c in data])
    grouped = drawn.groupby("row", sort=False)["flip_fraction"]
    stats = pd.DataFrame({"mean": grouped.mean(), "sd": grouped.std(ddof=0), "flipped": grouped.size()})
    stats = stats.reset_index().assign(lo=lambda s: s["mean"] - s["sd"], hi=lambda s: s["mean"] + s["sd"])
    tooltip = [alt.Tooltip("row:N"), alt.Tooltip("mean:Q", format=".3f"), alt.Tooltip("sd:Q", format=".3f", title="sd"),
               alt.Tooltip("flipped:Q", title="flipped")]
    bars = alt.Chart(stats).mark_rule(color="black").encode(x=alt.X("lo:Q"), x2=alt.X2("hi:Q"), y=y,
                                                                tooltip=tooltip)
    ticks = alt.Chart(stats).mark_tick(color="black", thickness=2, size=24).encode(x=alt.X("mean:Q"), y=y,
                                                                                           tooltip=tooltip)
    return (dots + bars + ticks).properties(title=title, height=40 * max(1, len(order)), autosize=FIT_WIDTH)


def faithfulness_summary(summary: pd.DataFrame, columns: Sequence[str] = ("aopc", "aopc@10%", "lodds",
                                                                             "first_flip")) -> pd.DataFrame:
    """A compact dataset summary: ranking, documents, 'mean ± std' per chosen number, flipped and no-flip counts
    (from faithfulness.summarise)."""
    require_columns(summary, ["ranking", "documents", "flipped", "no flip", *(f"{c} mean" for c in columns)])
    out = summary[["ranking", "documents"]].copy()
    for c in columns:
        out[c] = [f"{m:.3f} ± {s:.3f}" if np.isfinite(m) else "—"
                  for m, s in zip(summary[f"{c} mean"], summary[f"{c} std"])]
    out["flipped"], out["no flip"] = summary["flipped"].to_numpy(), summary["no flip"].to_numpy()
    return out


MISSING = "—"  # a number that does not exist: an sd of a ranking without seeds, a flip count where none flipped


def document_numbers(numbers: pd.DataFrame, no_flip_within: pd.Series | None = None,
                     unit: str = "token") -> pd.DataFrame:
    """DeletionResult.numbers() (a row per ranking) as the Faithfulness page shows it: a column per ranking and a
    row per number, as text (the widget would print "None" for a missing number; the CSV keeps the numbers): every
    number to 4 decimals as computed (trailing zeros dropped), MISSING where one does not exist, and the first flip
    of a ranking that held: "> 24 tokens" when a bounded scan stopped at 24 (`no_flip_within`, the table's column
    of that name indexed by ranking; short enough for a ranking's column at 1,024 px, where the leaderboard's
    "no flip ≤ 24 tokens" was cut), "no flip" when the scan reached the end."""
    out = pd.DataFrame({"number": list(numbers.columns)})
    for ranking, row in numbers.iterrows():
        within = None if no_flip_within is None else no_flip_within.get(ranking)
        held = NO_FLIP if within is None or np.isnan(within) else f"> {int(within):,} {unit}s"
        out[ranking] = [_decimals(v) if not np.isnan(v) else held if name == "first_flip" else MISSING
                        for name, v in row.items()]
    return out


def _decimals(value: float) -> str:
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _order(rankings: pd.Series) -> list[str]:
    present = list(dict.fromkeys(rankings))
    return [r for r in _RANKING_ORDER if r in present] + [r for r in present if r not in _RANKING_ORDER]


def _removed(unit: str) -> str:
    """What a deletion test removes, in words: text tokens, or units."""
    return "text tokens" if unit == "token" else f"{unit}s"
