"""Integrated Gradients on the embeddings layer, as the paper and its notebook run it (ig), and what a run
costs in time and memory (cost); both cache under cache_folder(). Every explainer (IG, gradients, attention
rollout, GAE, AttCAT, random) behind one front door: explainers. The tables built from the scores are views
(views.attribution_tables); the dataset-wide table is a result store's aggregation (dataset.store)."""
from ._inputs import PRECISIONS, cache_folder
from .cost import estimate_ig_seconds, internal_batch_size_for
from .ig import (
    DELTA_WARN,
    METHODS,
    SCORE_SCALE,
    STEP_PRESETS,
    WEAK_BASELINE_PROB,
    WEAK_OUTPUT_DIFFERENCE,
    Attribution,
    ConvergenceWarning,
    cached_attribution,
    integrated_gradients,
    normalise_scores,
)

__all__ = [
    "DELTA_WARN", "METHODS", "PRECISIONS", "SCORE_SCALE", "STEP_PRESETS", "WEAK_BASELINE_PROB",
    "WEAK_OUTPUT_DIFFERENCE", "Attribution", "ConvergenceWarning", "cache_folder", "cached_attribution",
    "estimate_ig_seconds", "integrated_gradients", "internal_batch_size_for",
    "normalise_scores",
]
