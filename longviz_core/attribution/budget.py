"""What Integrated Gradients costs a page here: the longest input that fits a time budget, and a document's cached
attribution or, failing that, the estimated seconds of computing it."""
from __future__ import annotations

from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel


TIMED_MAX = 8192  # longest maximum timed directly; a longer one is extrapolated from DEFAULT_MAX_TOKENS


def fitting_max_tokens(model: LoadedModel, budget_s: float) -> int:
    """The model's maximum when two IG steps and two forwards at that length (more than a page's analysis costs)
    take at most `budget_s` on this machine (timed once per model and length, then cached on disk), else
    DEFAULT_MAX_TOKENS. A maximum beyond TIMED_MAX (a decoder's 32,768) is not run just to decide a default (a
    forward and backward that long take minutes on a CPU): its time is the DEFAULT_MAX_TOKENS timing scaled by
    the square of the lengths' ratio, an upper bound for attention over every earlier token."""
    # looked up on the package at call time, so what the package exposes is what runs
    from . import estimate_ig_seconds

    fallback = min(DEFAULT_MAX_TOKENS, model.max_tokens)
    if model.max_tokens <= TIMED_MAX:
        seconds = estimate_ig_seconds(model, model.max_tokens, 2)
    else:
        seconds = estimate_ig_seconds(model, fallback, 2) * (model.max_tokens / fallback) ** 2
    return model.max_tokens if seconds <= budget_s else fallback


def cached_or_estimate(model: LoadedModel, analysis, steps: int):
    """(IG of the predicted class from the disk cache, None), or (None, the estimated seconds of computing it)."""
    from . import cached_attribution, estimate_ig_seconds

    hit = cached_attribution(model, analysis, None, steps)
    if hit is not None:
        return hit, None
    return None, estimate_ig_seconds(model, analysis.n, steps)
