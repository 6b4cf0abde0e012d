"""The Faithfulness page's rankings scored by the deletion test (evaluation.deletion): received attention, |IG|,
|IG| x attention and the random baseline.

A ranking orders the document's text tokens from most to least important. Deleting its top tokens should hurt
the prediction more than deleting random ones if the ranking is faithful. Four rankings are compared:
received attention (any layers, optionally scaled by head importance), |IG|, |IG| x attention (Serrano & Smith
2019's "attention x gradient" ordering) and random permutations, one per seed (default five, as Song et al.
2024's random baseline: mean and population sd over the seeds; the flip fraction's mean and sd over the seeds
that flipped, `flip_rate` the share that did).

The definitions (AOPC, LOdds, the exact first-flip scan, deletion by `<mask>` or `<pad>`), the stages and the
sharing of copies are evaluation.deletion's; `faithfulness` builds the three score-based orders and calls
evaluation.deletion_engine.deletion_test once for all of them. Dataset-wide numbers: the precompute's
"faithfulness" kind stores every document's runs and a result store summarises them (evaluation.deletion.summarise).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model.analysis import DocumentAnalysis
from ..model.loading import LoadedModel
from ..model.segments import segment
from ..progress import Progress
from .deletion import (
    BATCH_SIZE, DEFAULT_SEEDS, FLIP_BOUND, KS, LODDS_UNDEFINED, NO_THRESHOLD, RANDOM, REPLACEMENTS, DeletionError,
    DeletionResult, DeletionSettings,
    RandomBaseline, RankingCurve, bound_of, check_vector, default_batch_size, random_order,
    removal_order, removed_count, scan_bound,
)
from .deletion_engine import deletion_test

RANKINGS: tuple[str, ...] = ("attention", "ig", "ig_x_attention", RANDOM)
RANKING_LABELS = {
    "attention": "Attention",
    "ig": "|IG|",
    "ig_x_attention": "|IG| × attention",
    RANDOM: "Random",
}
FaithfulnessError = DeletionError
FaithfulnessResult = DeletionResult


def ranking_scores(analysis: DocumentAnalysis, attribution, layers=None, scale=None) -> dict[str, np.ndarray]:
    """The three score-based rankings' scores, each (n,): received attention over `layers` (None = all; `scale`
    an optional (layers, heads) weight such as head importance), |attribution|, and their product."""
    attribution = check_vector(attribution, analysis.n, "attribution")
    attention = np.asarray(analysis.attention.received(layers=layers, scale=scale), dtype=np.float64)
    ig = np.abs(attribution)
    return {"attention": attention, "ig": ig, "ig_x_attention": ig * attention}


def ranking_orders(analysis: DocumentAnalysis, attribution, rankings: Sequence[str] = RANKINGS, layers=None,
                   scale=None, unit: str = "token") -> dict[str, np.ndarray]:
    """The removal orders of the score-based `rankings` (random's come from the settings' seeds): text-token
    positions, or by `unit` the unit indices by their summed scores (removal_order)."""
    scored = [r for r in rankings if r != RANDOM]
    scores = ranking_scores(analysis, attribution, layers, scale) if scored else {}
    enc = analysis.encoded
    segments = None if unit == "token" else segment(analysis, unit)
    return {r: removal_order(scores[r], prefix=enc.prefix, suffix=enc.suffix, segments=segments) for r in scored}


def faithfulness(
    model: LoadedModel,
    analysis: DocumentAnalysis,
    attribution,
    *,
    layers=None,
    scale=None,
    rankings: Sequence[str] = RANKINGS,
    ks: Sequence[float] = KS,
    replacement: str = "mask",
    seeds: Sequence[int] = DEFAULT_SEEDS,
    max_removed: float = 1.0,
    flip_bound: int | None = None,
    batch_size: int | None = None,
    threshold: float | None = None,
    resume: bool = False,
    cache_dir=None,
    progress: Progress | None = None,
    stop=None,
    unit: str = "token",
) -> DeletionResult:
    """Deletion curves and first decision flips of `rankings` for one document (the deletion test of
    evaluation.deletion_engine with the three score-based orders and the random seeds).

    attribution: signed IG scores (n,) of the predicted class (Attribution.scores); rankings use |scores|.
    layers / scale: the attention ranking's source, as AttentionBands.received (None = all layers, unscaled).
    rankings: any of RANKINGS. ks: fractions of the removable tokens, each in (0, 1].
    max_removed / flip_bound: the flip scan's bound, a fraction of the removable tokens and a number of tokens
    (the smaller applies; 1.0 and None: every count, exact to the end; flip_bound=0: the curves alone).
    threshold: a regression head's decision (score >= threshold); without one it has no flips to find.
    unit: what is deleted (DeletionSettings.unit): "token", or whole words, sentences or paragraphs ranked by
    their summed scores; ks, max_removed and flip_bound then count units. Other options as deletion_test."""
    attribution = check_vector(attribution, analysis.n, "attribution")  # checked even when only random uses none
    seeds = check_settings(rankings, batch_size, seeds, max_removed)
    unit = DeletionSettings(seeds=(), unit=unit).unit
    m = len(analysis.encoded.text_positions) if unit == "token" else len(segment(analysis, unit))
    settings = DeletionSettings(ks=check_ks(ks), replacement=replacement,
                                seeds=seeds if RANDOM in rankings else (),
                                flip_bound=scan_bound(max_removed, flip_bound, m),
                                batch_size=batch_size, threshold=threshold, unit=unit)
    return deletion_test(model, analysis, ranking_orders(analysis, attribution, rankings, layers, scale, unit), settings,
                         progress, labels=RANKING_LABELS, resume=resume, cache_dir=cache_dir,
                         stop=stop)


def check_ks(ks) -> tuple[float, ...]:
    """The fractions `ks` as a tuple; FaithfulnessError unless increasing, distinct and in (0, 1]."""
    return DeletionSettings(ks=ks, seeds=()).ks


def check_settings(rankings, batch_size, seeds, max_removed) -> tuple[int, ...]:
    """Validates the options shared by faithfulness and the precompute's faithfulness settings; returns the seeds
    as ints."""
    if not rankings:
        raise FaithfulnessError("choose at least one ranking")
    unknown = [r for r in rankings if r not in RANKINGS]
    if unknown:
        raise FaithfulnessError(f"unknown ranking(s) {unknown}; choose from {list(RANKINGS)}")
    bound_of(max_removed, 1)
    seeds = DeletionSettings(seeds=seeds, batch_size=batch_size).seeds
    if RANDOM in rankings and not seeds:
        raise FaithfulnessError(f"the random ranking needs at least one seed, distinct and >= 0; got {seeds}")
    return seeds


__all__ = [
    "BATCH_SIZE", "DEFAULT_SEEDS", "FLIP_BOUND", "FaithfulnessError", "FaithfulnessResult", "KS", "LODDS_UNDEFINED",
    "NO_THRESHOLD", "RANKINGS",
    "RANKING_LABELS", "REPLACEMENTS", "RandomBaseline", "RankingCurve", "check_ks", "check_settings",
    "default_batch_size", "faithfulness", "random_order", "ranking_orders",
    "ranking_scores", "removal_order", "removed_count",
]
