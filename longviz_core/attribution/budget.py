"""What the model's work costs a page here: the longest input that fits a time budget, a document's cached
attribution or, failing that, the estimated seconds of computing it, and the notice a long analysis gets before it
starts."""
from __future__ import annotations

from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel
from ..progress import format_seconds


TIMED_MAX = 8192  # longest maximum timed directly; a longer one is extrapolated from DEFAULT_MAX_TOKENS
NOTICE_S = 30.0  # work expected to take longer than this is announced on the page before it starts
# The analysis and the views a page draws from it, in forwards of the document through the model's own route (what
# cost.estimate_forward times): at ModernBERT-base dimensions 2.05 x at 2,048 tokens and 2.2-2.3 x at 8,192 (its
# chunked sdpa forward: 7.0 s and 50.5 s CPU on the 2-core Xeon; docs/benchmarks.md "8,192 tokens end to end").
ANALYSIS_FORWARDS = 2.2
# Below this many floating-point operations (cost.forward_flops) an analysis takes seconds on any CPU (this 2-core
# one runs a ModernBERT-base forward at about 50 GFLOP a CPU-second): nothing is timed to say so.
QUICK_FLOPS = 1e11


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


def analysis_notice(model: LoadedModel, n_tokens: int) -> str | None:
    """'Analysing 8,192 tokens with this model takes about 3.5 min on this machine (...)' when the analysis of
    n_tokens and the page's views from it are expected to take longer than NOTICE_S, else None: ANALYSIS_FORWARDS
    forwards of cost.estimate_forward (a forward timed on this machine, once per model and length bucket, at a
    smaller length scaled by the model's arithmetic when timing this one would itself take long)."""
    from .cost import estimate_forward, forward_flops

    if ANALYSIS_FORWARDS * forward_flops(model, n_tokens) < QUICK_FLOPS:
        return None
    forward = estimate_forward(model, n_tokens)
    seconds = ANALYSIS_FORWARDS * forward.seconds
    if seconds <= NOTICE_S:
        return None
    return (f"Analysing {int(n_tokens):,} tokens with this model takes about {format_seconds(seconds)} on this "
            f"machine ({model.device.type}): the analysis and this page's views cost about {ANALYSIS_FORWARDS:g} "
            f"forwards, estimated from {forward.basis}.")
