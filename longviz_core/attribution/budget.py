"""What Integrated Gradients costs a page here: the longest input that fits a time budget, and a document's cached
attribution or, failing that, the estimated seconds of computing it."""
from __future__ import annotations

from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel


def fitting_max_tokens(model: LoadedModel, budget_s: float) -> int:
    """The model's maximum when two IG steps and two forwards at that length (more than a page's analysis costs)
    take at most `budget_s` on this machine (timed once per model and length, then cached on disk), else
    DEFAULT_MAX_TOKENS."""
    # looked up on the package at call time, so what the package exposes is what runs
    from . import estimate_ig_seconds

    seconds = estimate_ig_seconds(model, model.max_tokens, 2)
    return model.max_tokens if seconds <= budget_s else min(DEFAULT_MAX_TOKENS, model.max_tokens)


def cached_or_estimate(model: LoadedModel, analysis, steps: int):
    """(IG of the predicted class from the disk cache, None), or (None, the estimated seconds of computing it)."""
    from . import cached_attribution, estimate_ig_seconds

    hit = cached_attribution(model, analysis, None, steps)
    if hit is not None:
        return hit, None
    return None, estimate_ig_seconds(model, analysis.n, steps)
