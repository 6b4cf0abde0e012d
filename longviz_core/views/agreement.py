"""Agreement between received attention and |IG| laid out as the paper's tables (§3.3, §5.2.3, Tables 1-2).

For one document:
  - `agreement_table`: attention source (final layer; all layers; an optional layer range) x scaled by head
    importance (yes / no) x masked (no / zero / drop), with every metric of `similarity.compare` as columns.
    Table 1 is the cosine / Kendall tau / RBO columns, Table 2 the `jaccard_top` column.
  - `top_sets`: the positions in the top 5 % of attention only, of attribution only, and of both (the notebook's
    "Examining the Specifics"), with normalised values and ranks, and counts per token type.
  - `head_agreement`: one metric between each head's received attention and |IG|, (layers, heads).
`document_numbers` is one document's share of the dataset-wide numbers (every configuration); the
precompute stores it and a result store's aggregation turns it into means and sums over documents.

By units (`segments`, model.segments.segment: words, sentences, paragraphs), both vectors are summed per unit
before any metric (received attention and |IG| per unit, model.segments.aggregate), the special tokens, which
belong to no unit, left out; a unit is masked only if all its tokens are (as the overlays show it). The dataset
numbers stay by tokens.

Head-importance scaling multiplies each head's received attention by its importance before the heads are
summed (the notebook's scale_by_importance). It does not apply to the per-head grid: every metric min-max
normalises or ranks each head on its own, so multiplying one head by a positive number changes nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import SelectionError, items, whole_number
from ..model.analysis import DocumentAnalysis
from ..model.segments import Segments, aggregate
from ..tokens import text_label, token_label
from .masking import build_mask
from .similarity import (
    DEFAULT_P,
    DEFAULT_TOP,
    METRICS,
    SimilarityError,
    check_p,
    check_top,
    compare,
    compare_many,
    minmax,
    rank_order,
    top_set,
)

MASK_MODES: tuple[str, ...] = ("no", "zero", "drop")
MASK_KINDS: tuple[str, ...] = ("special", "nonalnum", "stopwords")
HEAD_METRICS: tuple[str, ...] = ("rbo", "kendall_tau")
TABLE1_METRICS: tuple[str, ...] = ("cosine", "kendall_tau", "rbo")
TABLE2_METRICS: tuple[str, ...] = ("jaccard_top",)
SET_NAMES: tuple[str, ...] = ("attention only", "attribution only", "both")


@dataclass(frozen=True)
class AttentionSource:
    label: str  # for tables, with 1-based layer numbers as in the paper ("layer 12 (final)")
    layers: tuple[int, ...]  # 0-based layer indices summed over


def attention_sources(num_layers: int, layer_range: tuple[int, int] | None = None) -> list[AttentionSource]:
    """The final layer, all layers and, when given, the 0-based inclusive `layer_range` (lo, hi)."""
    if num_layers < 1:
        raise SimilarityError(f"num_layers must be positive, got {num_layers}.")
    out = [AttentionSource(f"layer {num_layers} (final)", (num_layers - 1,)),
           AttentionSource("all layers", tuple(range(num_layers)))]
    if layer_range is not None:
        lo, hi = (whole_number(v, "the layer range's ends (0-based layers)", error=SelectionError)
                  for v in items(layer_range, "the layer range (lo, hi)", SelectionError))
        if not (0 <= lo <= hi < num_layers):
            raise SelectionError(f"The layer range must satisfy 0 <= lo <= hi < {num_layers} (0-based, inclusive), "
                                 f"got ({lo}, {hi}).")
        layers = tuple(range(lo, hi + 1))
        if layers not in {s.layers for s in out}:
            out.append(AttentionSource(f"layers {lo + 1}-{hi + 1}" if hi > lo else f"layer {lo + 1}", layers))
    return out


def mask_for(tokens: Sequence[str], kinds: Sequence[str], **options) -> np.ndarray | None:
    """build_mask over the chosen kinds (any of MASK_KINDS) and build_mask's `options` (numbers,
    extra_stopwords), True = masked; None when no kind is chosen."""
    unknown = set(kinds) - set(MASK_KINDS)
    if unknown:
        raise SimilarityError(f"Unknown mask kind(s) {sorted(unknown)}; choose from {list(MASK_KINDS)}.")
    if not kinds:
        return None
    return build_mask(tokens, special="special" in kinds, nonalnum="nonalnum" in kinds,
                      stopwords="stopwords" in kinds, **options)


# ------------------------------------------------------------------------------------------- Tables 1-2
def agreement_table(
    analysis: DocumentAnalysis,
    attribution,
    *,
    importance=None,
    mask=None,
    layer_range: tuple[int, int] | None = None,
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
    segments: Segments | None = None,
) -> pd.DataFrame:
    """Tables 1-2 for one document: columns source, scaled, masked, every METRICS key, note.

    importance: (layers, heads) head importance, or None (then only unscaled rows). mask: bool (n,) True =
    masked, or None (then only unmasked rows). segments: compare per unit (module docstring), None = per token.
    A configuration where a metric is undefined (e.g. constant attention) gets NaN metrics and the reason in
    `note`."""
    attribution = _attribution(attribution, analysis.n)
    by_unit = _PerUnit(segments, analysis.n)
    attribution, mask = by_unit.magnitudes(attribution), by_unit.mask(mask)
    check_p(p)  # checked here: a setting that fits no configuration is not a note on every row
    check_top(top)
    bands = analysis.attention
    rows = []
    for source in attention_sources(bands.num_layers, layer_range):
        for scaled in ((True, False) if importance is not None else (False,)):
            attention = by_unit(bands.received(layers=source.layers, scale=importance if scaled else None))
            for masked in (MASK_MODES if mask is not None else ("no",)):
                row = {"source": source.label, "scaled": scaled, "masked": masked}
                try:
                    row.update(compare(attention, attribution, mask=None if masked == "no" else mask,
                                       mode="zero" if masked == "no" else masked, p=p, top=top))
                    row["note"] = ""
                except SimilarityError as exc:
                    row.update({name: math.nan for name in METRICS})
                    row["note"] = str(exc)
                rows.append(row)
    return pd.DataFrame(rows, columns=["source", "scaled", "masked", *METRICS, "note"])


# ------------------------------------------------------------------------------------------- top-5 % sets
@dataclass(frozen=True)
class TopSets:
    attention_only: pd.DataFrame  # token, position, attention_norm, attention_rank, attribution_norm, attribution_rank
    attribution_only: pd.DataFrame  # same columns
    both: pd.DataFrame  # same columns
    jaccard: float  # |both| / |union|: equals compare(...)["jaccard_top"]
    unit: str = "token"  # the first column's name: token, or the unit compared (its text), at its first token

    def counts(self) -> pd.DataFrame:
        """Token types (units' texts) in each set: columns token (the unit), attention only, attribution only,
        both, total (descending)."""
        return _counts({name: df[self.unit] for name, df in zip(SET_NAMES, self.tables())}, self.unit)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return self.attention_only, self.attribution_only, self.both


def top_sets(tokens: Sequence[str], attention, attribution, mask=None, mode: str = "no",
             top: float = DEFAULT_TOP, segments: Segments | None = None) -> TopSets:
    """The positions at or above each vector's (1 - top) quantile, split into attention only / attribution only
    / both, normalised and thresholded exactly as `compare` does for the same mask and mode ('no', 'zero',
    'drop'). Ranks are 1 = highest among the compared tokens (ties: lower position first); masked tokens have
    no value or rank in 'drop' mode (NaN). segments: the units compared instead (module docstring): a row per
    unit, its text and its first token's position."""
    attribution = _attribution(attribution, len(tokens))
    attention = _attribution(attention, len(tokens))
    _check_mode(mode)
    if mask is not None and np.asarray(mask).shape != (len(tokens),):
        raise SimilarityError(f"The mask must have one entry per token, shape ({len(tokens)},), got "
                              f"{np.asarray(mask).shape}: build it from these tokens (mask_for or build_mask).")
    by_unit = _PerUnit(segments, len(tokens))
    att, attr, mask = by_unit(attention).copy(), np.abs(by_unit.magnitudes(attribution)), by_unit.mask(mask)
    labels, starts = by_unit.labels(tokens)
    n = att.size
    keep = np.arange(n)
    excluded = None
    if mode != "no" and mask is not None:
        if mode == "zero":
            att[mask], attr[mask], excluded = 0.0, 0.0, mask
        else:
            keep = np.flatnonzero(~mask)
    att_n, attr_n = minmax(att[keep]), minmax(attr[keep])
    sides = {}
    for name, values in (("attention", att_n), ("attribution", attr_n)):
        norm = np.full(n, np.nan)
        rank = np.full(n, np.nan)
        norm[keep] = values
        rank[keep[rank_order(values)]] = np.arange(1, keep.size + 1)
        chosen = top_set(values, top, exclude=None if excluded is None else excluded[keep])
        sides[name] = (norm, rank, {int(keep[i]) for i in chosen})
    a_top, b_top = sides["attention"][2], sides["attribution"][2]

    def table(positions) -> pd.DataFrame:
        pos = np.asarray(sorted(positions), dtype=np.int64)
        return pd.DataFrame({
            by_unit.unit: [labels[i] for i in pos], "position": starts[pos],
            "attention_norm": sides["attention"][0][pos],
            "attention_rank": pd.array(sides["attention"][1][pos], dtype="Int64"),
            "attribution_norm": sides["attribution"][0][pos],
            "attribution_rank": pd.array(sides["attribution"][1][pos], dtype="Int64"),
        })

    union = a_top | b_top
    return TopSets(table(a_top - b_top), table(b_top - a_top), table(a_top & b_top),
                   len(a_top & b_top) / len(union) if union else math.nan, by_unit.unit)


# ------------------------------------------------------------------------------------------- per head
def head_agreement(analysis: DocumentAnalysis, attribution, metric: str = "rbo", mask=None, mode: str = "no",
                   p: float = DEFAULT_P, top: float = DEFAULT_TOP, segments: Segments | None = None) -> np.ndarray:
    """(layers, heads): `metric` between each head's received attention and |attribution|; NaN for a head whose
    attention is constant after masking. mode: 'no', 'zero' or 'drop'. segments: per unit (module docstring)."""
    _check_mode(mode)
    attribution = _attribution(attribution, analysis.n)
    by_unit = _PerUnit(segments, analysis.n)
    per_head = analysis.attention.received_per_head()  # (layers, heads, n)
    if segments is not None:
        per_head = np.stack([by_unit(v) for v in per_head.reshape(-1, analysis.n)]).reshape(
            *per_head.shape[:2], len(segments))  # (layers, heads, units)
    mask = by_unit.mask(mask)
    return compare_many(per_head, by_unit.magnitudes(attribution), metric=metric, mask=None if mode == "no" else mask,
                        mode="zero" if mode == "no" else mode, p=p, top=top)


# ------------------------------------------------------------------------------------------- per document, for the dataset
def document_numbers(analysis, attribution, importance, mask, layer_range, p, top) -> dict:
    """Everything the dataset view needs from one document: `table` (the agreement_table), `grids`
    ("metric|masked" -> (layers, heads) array, NaN for a dead head) and `counts` ("source|scaled|masked" -> token
    -> counts per top-5 % set): what the precompute's "agreement" kind stores for a document (a result store then
    aggregates them). Values are kept as computed (float64), never rounded."""
    table = agreement_table(analysis, attribution, importance=importance, mask=mask, layer_range=layer_range,
                            p=p, top=top)
    bands = analysis.attention
    counts = {}
    for source in attention_sources(bands.num_layers, layer_range):
        for scaled in ((True, False) if importance is not None else (False,)):
            attention = bands.received(layers=source.layers, scale=importance if scaled else None)
            for masked in (MASK_MODES if mask is not None else ("no",)):
                try:
                    sets = top_sets(analysis.tokens, attention, attribution, mask, masked, top)
                except (SimilarityError, ValueError):
                    continue  # the table row already carries the reason
                c = sets.counts()
                counts[f"{source.label}|{int(scaled)}|{masked}"] = {
                    t: [int(v) for v in vals] for t, *vals in c[["token", *SET_NAMES]].itertuples(index=False)}
    grids = {}
    for metric in HEAD_METRICS:
        for masked in (MASK_MODES if mask is not None else ("no",)):
            try:
                grid = head_agreement(analysis, attribution, metric, mask, masked, p, top)
            except SimilarityError:
                continue
            grids[f"{metric}|{masked}"] = grid
    return {"table": table, "grids": grids, "counts": counts}


def mean_std_table(summary: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """A dataset summary (dataset.aggregate.summarise_agreement) with one 'mean ± std' text column per metric,
    for display."""
    out = summary[["source", "scaled", "masked", "documents"]].copy()
    for name in metrics:
        out[name] = [f"{m:.3f} ± {s:.3f}" if np.isfinite(m) else "—"
                     for m, s in zip(summary[f"{name} mean"], summary[f"{name} std"])]
    return out


# ------------------------------------------------------------------------------------------- workers
def _attribution(values, n: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (n,):
        raise SimilarityError(f"Expected one value per token of this document, shape ({n},), got {v.shape}: "
                              "compare an attribution of the same analysis.")
    return v


@dataclass(frozen=True)
class _PerUnit:
    """Token vectors as the vectors compared: unchanged (segments None), or summed per unit of `segments`."""

    segments: Segments | None
    n: int

    def __post_init__(self):
        if self.segments is not None and self.segments.n != self.n:
            raise SimilarityError(f"The units cover {self.segments.n} tokens, the document has {self.n}: segment "
                                  "this document (segment(analysis, unit)).")

    @property
    def unit(self) -> str:
        return "token" if self.segments is None else self.segments.unit

    def __call__(self, values) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)  # (n,)
        return values if self.segments is None else aggregate(values, self.segments)  # (units,)

    def magnitudes(self, attribution) -> np.ndarray:
        """The attribution compared: signed per token (every metric takes its magnitude; cosine_raw reads the
        sign), |attribution| summed per unit (a unit's magnitude, the deletion test's |IG| ranking by units)."""
        attribution = np.asarray(attribution, dtype=np.float64)  # (n,)
        return attribution if self.segments is None else aggregate(np.abs(attribution), self.segments)

    def mask(self, mask) -> np.ndarray | None:
        """A unit is masked only if all its tokens are."""
        if mask is None or self.segments is None:
            return mask
        return self.segments.masked(mask)  # (units,)

    def labels(self, tokens) -> tuple[list[str], np.ndarray]:
        """(each compared entry's one-line text, the position it stands at: its first token)."""
        if self.segments is None:
            return [token_label(t) for t in tokens], np.arange(len(tokens))
        return ([text_label(t) for t in self.segments.texts],
                np.array([a for a, _ in self.segments.spans], dtype=np.int64))


def _check_mode(mode) -> None:
    if mode not in MASK_MODES:
        raise SimilarityError(f"mode must be one of {', '.join(MASK_MODES)}; got {mode!r}.")


def _counts(sets: dict, unit: str = "token") -> pd.DataFrame:
    frame = pd.DataFrame({name: pd.Series(col, dtype=object).value_counts() for name, col in sets.items()})
    frame = frame.reindex(columns=list(SET_NAMES)).fillna(0).astype(np.int64)
    frame["total"] = frame.sum(axis=1)
    frame = frame.rename_axis(unit).reset_index()
    return frame.sort_values(["total", unit], ascending=[False, True], kind="stable").reset_index(drop=True)


__all__ = [
    "AttentionSource", "HEAD_METRICS", "MASK_KINDS", "MASK_MODES", "SET_NAMES", "TABLE1_METRICS", "TABLE2_METRICS",
    "TopSets", "agreement_table", "attention_sources", "document_numbers", "head_agreement", "mask_for",
    "mean_std_table", "top_sets",
]
