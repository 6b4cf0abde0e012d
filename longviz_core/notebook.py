"""Notebooks (Jupyter, VS Code): each result's display as self-contained HTML, drawn by the pages' figure functions,
and any figure or result saved to a file through the app's exports.

The front door registers `html` with IPython for the result types (by name: nothing loads until a result is
shown), so a cell ending in `lv.analyze(...)`, `lv.integrated_gradients(...)`, `lv.explain(...)`, a deletion test
a leaderboard or a dataset-wide result shows it. The HTML runs no script and loads nothing: every text is escaped (the figure functions
escape theirs, pandas' to_html the tables'), a long document scrolls in a box as in the app, and a chart is the
SVG vl-convert draws offline (Altair's own engine, as the app's downloads) inside an <img>, where it is inert and
its ids cannot clash with another output's. docs/notebook.md.
"""
from __future__ import annotations

import base64
import html as markup
import math
from pathlib import Path

import altair as alt
import pandas as pd
from PIL import Image

from . import export
from ._disk import atomic_write
from .attribution.explainers import EXPLAINERS, Explanation
from .attribution.ig import Attribution
from .dataset.aggregate import DatasetAgreement, DatasetAttribution, DatasetFaithfulness
from .dataset.leaderboard import Leaderboard
from .errors import SettingsError
from .evaluation.deletion import LODDS_UNDEFINED, NO_THRESHOLD, DeletionResult
from .figures.agreement import table1, table2
from .figures.explainers import explainer_header_html, leaderboard_view
from .figures.faithfulness import deletion_curves_chart, faithfulness_summary, flip_chart
from .figures.layout import OVERLAY_HEIGHT
from .figures.text import attribution_header_html, legend_html, scale_max, token_overlay_html
from .model.analysis import DocumentAnalysis, DocumentSummary
from .views.agreement import TABLE1_METRICS, TABLE2_METRICS, mean_std_table
from .views.attribution_tables import top_attributions
from .views.masking import build_mask, special_tokens_of

TOP = 10  # rows of each top table, as on the Attribution page
_FONT = "font-family:ui-sans-serif,system-ui,sans-serif;font-size:0.85rem;color:#222"
_BOX = (f"max-height:{OVERLAY_HEIGHT}px;overflow:auto;border:1px solid #ccc;border-radius:8px;padding:4px 12px;"
        "background:#fff;margin:4px 0")


def html(result) -> str:
    """The display of a DocumentAnalysis, Attribution, Explanation, DeletionResult, Leaderboard or dataset-wide
    result (DatasetAttribution, DatasetAgreement, DatasetFaithfulness)."""
    for kind, draw in _DRAWINGS.items():
        if isinstance(result, kind):
            return draw(result)
    raise SettingsError(f"longviz shows a DocumentAnalysis, Attribution, Explanation, DeletionResult, leaderboard or "
                        f"dataset-wide result, not a {type(result).__name__}.")


def analysis_html(analysis: DocumentAnalysis) -> str:
    """The prediction and the Summed attention page's default overlay: the attention each token receives in the
    last layer, averaged over its heads, the paper's mask on (special tokens, punctuation, stopwords in grey)."""
    attention, tokens = analysis.attention, analysis.tokens
    values = attention.received([attention.num_layers - 1]) / attention.num_heads  # (n,) mean over the heads
    mask = build_mask(tokens, special_tokens=special_tokens_of(analysis.encoded))
    vmax = scale_max(tokens, values, mask)
    probs = pd.DataFrame({"class": [analysis.label_name(i) for i in range(len(analysis.probs))],
                          analysis.head.unit: analysis.probs})
    caption = (f"{analysis.n:,} tokens · colour = attention a token receives from all tokens in the last layer "
               f"(layer {attention.num_layers}), mean over its {attention.num_heads} heads · special tokens, "
               "punctuation and stopwords masked (grey)")
    return _page(f"<div><b>Prediction:</b> {markup.escape(analysis.prediction_words)}</div>",
                 _table(probs), _caption(caption),
                 legend_html("sequential", vmax=vmax, label="received attention per head"),
                 _box(token_overlay_html(tokens, values, mode="sequential", mask=mask, vmax=vmax)))


def attribution_html(attr: Attribution) -> str:
    """The Attribution page's header (paper Fig 9), overlay and top tables of Integrated Gradients' scores."""
    doc = attr.document
    caption = (f"Integrated Gradients: {attr.n_steps} steps ({attr.method}, {attr.precision}) · convergence delta "
               f"{attr.delta:+.2e} on the raw sums · token scores L2-normalised, sign kept")
    if doc is None:
        return _page(_caption(caption), _note("No tokens to show: this attribution was made from an Encoded "
                                              "input; attribute the DocumentAnalysis (integrated_gradients(model, "
                                              "analysis)) to see its overlay."))
    header = attribution_header_html(None, doc.labels[doc.predicted], doc.probs[doc.predicted],
                                     doc.labels[attr.target], attr.total, attr.prob_input, attr.prob_baseline,
                                     attr.weak_explanation)
    return _page(header, _caption(caption), *([_note(attr.warning)] if attr.warning else []),
                 *_overlay(doc, attr.scores, f"Attribution to '{doc.labels[attr.target]}' (L2-normalised)",
                           "token"))


def explanation_html(e: Explanation) -> str:
    """The overlay header naming the explainer, then its overlay and top tables, at the explanation's own unit
    (occlusion and Shapley by words, sentences or paragraphs), else by token."""
    info = EXPLAINERS.get(e.method)
    label = info.label if info else e.method
    options = ", ".join(f"{k}={v}" for k, v in e.options.items())
    caption = f"{label}: computed in {e.seconds:.2f} s" + (f" · {options}" if options else "")
    doc = e.document
    if doc is None:
        return _page(_caption(caption), _note("No tokens to show: this explanation was not made by explain(model, "
                                              "analysis, ...)."))
    header = explainer_header_html(label, info.source if info else "", doc.labels[e.target],
                                   doc.labels[doc.predicted], doc.probs[doc.predicted])
    # occlusion and Shapley by words, sentences or paragraphs: one box per unit, its value the sum of its tokens'
    # (the unit's score)
    unit = doc.segments if doc.segments is not None else "token"
    return _page(header, _caption(caption),
                 *_overlay(doc, e.scores, f"{label} scores for '{doc.labels[e.target]}'", unit))


def deletion_html(result: DeletionResult) -> str:
    """The Faithfulness page's numbers (a column per ranking) and curves: AOPC, LOdds where defined, and the first
    flips where the scan looked for them."""
    unit = "tokens" if result.unit == "token" else f"{result.unit}s"
    caption = (f"Deletion test of the class predicted on the intact input ({result.predicted}; "
               f"p = {result.p_original:.4f}) · {result.n_removable:,} removable {unit}, replaced by "
               f"{result.replacement} · {result.forward_passes:,} perturbed copies scored in {result.seconds:.1f} s")
    score = not result.lodds_defined  # a regression's score: no LOdds, its own axis
    charts = [deletion_curves_chart(result.long_curves(), "aopc", score=score)]
    notes = []
    if result.lodds_defined:
        charts.append(deletion_curves_chart(result.long_curves(), "lodds"))
    else:
        notes.append(LODDS_UNDEFINED)
    if not result.flips_defined:
        notes.append(f"Without a score threshold: {NO_THRESHOLD}.")
    elif result.flip_limit > 0:
        open_ = [r.scanned for r in result.runs if r.flip_removed is None]
        charts.append(flip_chart(result.flips(), bound=None if result.exact else min(open_)))
    else:
        notes.append("First flips not scanned (flip_bound=0): the curves alone.")
    numbers = result.numbers().T.rename_axis(index="number", columns=None).reset_index()
    return _page(_caption(caption), _table(numbers), *map(_note, notes),
                 f'<div style="display:flex;gap:1em;flex-wrap:wrap">{"".join(map(_chart, charts))}</div>')


def leaderboard_html(table: Leaderboard) -> str:
    """The Explainers page's leaderboard table (random's sds over its seeds in their own columns)."""
    return _page(_table(leaderboard_view(table)))


def dataset_attribution_html(result: DatasetAttribution) -> str:
    """The Attribution page's dataset scope (paper Fig 10e/f): what the numbers are, then the 10 token types with
    the largest positive and negative mean attribution, every column of the table."""
    caption = (f"Dataset-wide Integrated Gradients of class {result.target} over {result.n_docs:,} documents "
               f"({result.n_steps} steps, scores L2-normalised per document) · {result.description()}")
    table = result.table
    tables = [f'<div style="flex:1 1 24em;min-width:0"><b>Top {TOP} {sign}</b>{_table(rows.head(TOP))}</div>'
              for sign, rows in (("positive", table[table["mean_attribution"] > 0]),
                                 ("negative", table[table["mean_attribution"] < 0].iloc[::-1]))]
    return _page(_caption(caption), f'<div style="display:flex;gap:1.5em;flex-wrap:wrap">{"".join(tables)}</div>')


def dataset_agreement_html(result: DatasetAgreement) -> str:
    """The Agreement page's dataset scope: the paper's Tables 1 and 2 as mean ± std over the documents. The top-set
    counts and the per-head grids are the result's `set_counts` and `head_grids`
    (figures.agreement.head_agreement_heatmap draws one)."""
    return _page(_caption(f"Mean ± std over {result.n_documents:,} documents."),
                 "<b>Table 1</b>", _table(table1(mean_std_table(result.table, TABLE1_METRICS))),
                 "<b>Table 2</b>", _table(table2(mean_std_table(result.table, TABLE2_METRICS))),
                 _caption(f"Per head: head_grids, {len(result.head_grids)} grids (metric, masking); top-5 % token "
                          f"counts: set_counts, {len(result.set_counts)} configurations."))


def dataset_faithfulness_html(result: DatasetFaithfulness) -> str:
    """The Faithfulness page's dataset scope: the summary (mean ± std over documents per ranking), the AOPC and
    LOdds curves of every document with their mean, and the first flips, one dot per document."""
    per_doc = result.per_document
    score = per_doc["lodds"].isna().all()  # a regression's score: no LOdds, its own axis
    curves = result.long_curves()
    charts = [deletion_curves_chart(curves, "aopc", score=score, unit=result.unit)]
    notes = [LODDS_UNDEFINED] if score else []
    if not score:
        charts.append(deletion_curves_chart(curves, "lodds", unit=result.unit))
    charts.append(flip_chart(per_doc.rename(columns={"first_flip": "flip_fraction"}),
                             max_removed=result.max_removed, unit=result.unit))
    caption = (f"Mean ± std over {result.n_documents:,} documents; the flip fraction's mean is over the documents "
               "that flipped; each document's random row is its mean over its seeds.")
    return _page(_caption(caption), _table(faithfulness_summary(result.summary)), *map(_note, notes),
                 f'<div style="display:flex;gap:1em;flex-wrap:wrap">{"".join(map(_chart, charts))}</div>')


_DRAWINGS = {DocumentAnalysis: analysis_html, Attribution: attribution_html, Explanation: explanation_html,
             DeletionResult: deletion_html, Leaderboard: leaderboard_html, DatasetAttribution: dataset_attribution_html,
             DatasetAgreement: dataset_agreement_html, DatasetFaithfulness: dataset_faithfulness_html}


# ------------------------------------------------------------------------------------------ pieces
def _overlay(doc: DocumentSummary, scores, legend: str, unit) -> list[str]:
    """Legend, the coloured text in its scroll box, then the top positive and negative tables side by side."""
    vmax = scale_max(doc.tokens, scores, unit=unit)
    tables = [f'<div style="flex:1 1 18em;min-width:0"><b>{title}</b>'
              f"{_table(top_attributions(doc.tokens, scores, TOP, sign, unit=unit))}</div>"
              for sign, title in (("positive", f"Top {TOP} positive"), ("negative", f"Top {TOP} negative"))]
    return [legend_html("diverging", vmax=vmax, label=legend),
            _box(token_overlay_html(doc.tokens, scores, vmax=vmax, unit=unit)),
            f'<div style="display:flex;gap:1.5em;flex-wrap:wrap">{"".join(tables)}</div>']


def _page(*parts: str) -> str:
    return f'<div class="lv-nb" style="{_FONT}">' + "".join(parts) + "</div>"


def _box(body: str) -> str:
    return f'<div style="{_BOX}">{body}</div>'


def _caption(text: str) -> str:
    return f'<div style="color:#555;margin:4px 0">{markup.escape(text)}</div>'


def _note(text: str) -> str:
    return (f'<div style="background:#fff4e5;border-left:3px solid #f0a020;padding:4px 8px;margin:4px 0">'
            f"{markup.escape(text)}</div>")


def _table(df: pd.DataFrame) -> str:
    """A table as escaped HTML, numbers to 4 decimals (as the pages round them), NaN as a dash."""
    return df.to_html(index=False, escape=True, border=0, na_rep="—",
                      float_format=lambda v: f"{v:.4f}" if math.isfinite(v) else "—")


def _chart(chart) -> str:
    """An Altair chart as vl-convert's SVG in an <img>: offline, inert, its ids its own."""
    svg = base64.b64encode(export.chart_svg(chart)).decode("ascii")
    return f'<img style="margin:8px 0" alt="chart" src="data:image/svg+xml;base64,{svg}">'


# ------------------------------------------------------------------------------------------ saving
SAVE_FORMATS = {"chart": (".svg", ".png"), "raster": (".png",), "HTML": (".html",), "table": (".csv",),
                "result": (".html",)}


def save(figure, path) -> Path:
    """Write `figure` to `path` in the format its suffix names, through the app's exports (longviz_core.export):
    an Altair chart (any page's, from longviz_core.figures) as .svg or .png (at twice its size), a raster (the
    heatmap grid's image) as .png, an overlay's HTML (figures.text) as a complete .html page, a table (a leaderboard too) as .csv (spreadsheet-safe), and a result
    a notebook shows (`html`) as a .html page of that display. Returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if isinstance(figure, alt.TopLevelMixin):
        kind, data = "chart", {".svg": export.chart_svg, ".png": export.chart_png}.get(suffix)
    elif isinstance(figure, Image.Image):
        kind, data = "raster", export.image_png
    elif isinstance(figure, str):
        kind, data = "HTML", lambda body: export.standalone_html(body, title=path.stem)
    elif isinstance(figure, tuple(_DRAWINGS)) and not (isinstance(figure, pd.DataFrame) and suffix == ".csv"):
        kind, data = "result", lambda result: export.standalone_html(html(result), title=path.stem)
    elif isinstance(figure, pd.DataFrame):
        kind, data = "table", export.table_csv
    else:
        raise SettingsError(f"save writes an Altair chart, an image, an overlay's HTML, a DataFrame or a longviz "
                            f"result, not a {type(figure).__name__}.")
    if data is None or suffix not in SAVE_FORMATS[kind]:
        raise SettingsError(f"A {kind} saves as {' or '.join(SAVE_FORMATS[kind])}, not {suffix or 'no suffix'!r}: "
                            f"name the file accordingly.")
    atomic_write(path, data(figure))
    return path
