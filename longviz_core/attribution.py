"""Integrated Gradients on the embeddings layer, the paper's set-up (§3.2; notebook "Get Attributions").

    F(e)      = softmax(model(e))[target]                 e = output of the whole embeddings layer
    input     = <s> + text + </s>,  baseline = <s> + <pad>... + </s>, the SAME position ids for both
    masks     = attention all ones, global attention on <s>
    raw_i     = sum over the hidden dimension of (e_i - e'_i) * integral_0^1 dF(e' + a (e - e'))/de_i da
    score_i   = raw_i / ||raw||_2                          (paper §2; captum's `summarize_attributions`)

Every view shows, exports and compares the normalised `scores` (sign kept): the paper's scale. The raw sums
stay for the completeness check, sum(raw) = F(x) - F(x') up to the convergence delta; the normalisation
removes that scale, so `Attribution.weak_explanation` says when F(x) - F(x') is too small to explain much.

captum's LayerIntegratedGradients does the integral (Gauss-Legendre by default). Because <s>, </s> and the
window padding have the same token and position in the input and the baseline, their embedding rows are
identical, (e_i - e'_i) = 0 and their attribution is exactly 0.

Cost: one forward+backward per step, plus the two forwards captum needs to read the embeddings of the input
and of the baseline. Those two forwards also produce F(x) and F(x') (our forward function keeps them), so the
convergence delta sum(IG) - (F(x) - F(x')) costs nothing more; captum's own `return_convergence_delta` would
run both forwards again.

Progress: captum has no callback, but it calls the forward function once per internal batch of steps, so
the forward function counts them. Results are cached on disk (npz + JSON metadata, no pickle) keyed by the
model fingerprint, the exact token ids the model sees and the settings.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import tempfile
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from .analysis import DocumentAnalysis
from .encoding import DEFAULT_MAX_TOKENS, Encoded, encode
from .errors import CacheCorruptError
from .loading import LoadedModel
from .runtime import COMPUTE
from .types import Progress, report
from .views.masking import build_mask, special_mask

log = logging.getLogger(__name__)

METHODS = ("gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle")
STEP_PRESETS = {"50 steps (quick)": 50, "500 steps (as in the paper)": 500}
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
DELTA_WARN = 0.05  # warn when |delta| > 5 % of |F(x) - F(x')|
# When IG explains little (Attribution.weak_explanation):
# - the baseline alone gives the target at least this probability, and so does the input. From 0.5 on, the target
#   is the most probable class whatever the number of classes: the text does not decide the prediction, the
#   attributions only share out a confirmation, and removing tokens (faithfulness) may never flip it.
WEAK_BASELINE_PROB = 0.5
# - |F(x) - F(x')| is below this: every token together moves the probability by less than a tenth of its range,
#   while the normalised scores (unit L2 norm) look as confident as those of a decisive document.
WEAK_OUTPUT_DIFFERENCE = 0.1
SCORE_SCALE = "l2"  # what Attribution.scores are (recorded with precomputed results, see precompute.KINDS)
_CACHE_VERSION = 2  # 2: the file holds the raw sums under "raw" (1 held them under "scores")
# Units of work for progress: a forward without gradients is 1, a forward+backward about 3.
_FWD_UNITS, _FB_UNITS = 1.0, 3.0
# Share of the free memory one batch of steps may take (the rest: weights, fragmentation, other tenants).
_MEMORY_FRACTION = 0.5
# Share of the steps one batch may hold. captum's default recipe (internal_batch_size=None) runs every step in
# one batch and needs n_steps times a step's memory; longviz stays at a quarter of that or less.
_MAX_STEP_SHARE = 0.25
# Before a batch size has been timed: a batch of about this many token rows (steps x padded length). On a 2-core
# CPU a step at 512 tokens cost half as much in a batch of 8 as alone and no less in larger batches
# (benchmarks/explainers.py, docs/benchmarks.md#explainers).
_START_ROWS = 4096
# A batch twice the fastest one timed is tried only while the last doubling gained at least this factor.
_DOUBLING_GAIN = 1.05


class ConvergenceWarning(UserWarning):
    """Integrated Gradients' completeness gap is larger than DELTA_WARN of the output difference."""


def normalise_scores(raw) -> np.ndarray:
    """The paper's token scores: the per-token sums divided by their L2 norm over the tokens (captum's
    `summarize_attributions`), sign kept. An all-zero vector stays zero (captum's would be NaN)."""
    raw = np.asarray(raw, dtype=np.float64).reshape(-1)  # (n,)
    norm = float(np.linalg.norm(raw))
    return raw / norm if norm > 0 else np.zeros_like(raw)


@dataclass(frozen=True)
class Attribution:
    raw: np.ndarray  # (n,) float64: one sum per token over the hidden dimension (completeness: sums to F(x) - F(x'))
    delta: float  # convergence delta: sum(raw) - (prob_input - prob_baseline)
    target: int  # class whose probability is explained
    n_steps: int  # steps of the final run (adaptive runs double them)
    method: str
    prob_input: float  # F(x): p_target of the input
    prob_baseline: float  # F(x'): p_target of the <s> <pad>... </s> baseline
    precision: str  # "fp32" | "bf16" | "fp16" (autocast)
    internal_batch_size: int
    seconds: float  # wall time of the computation (not of a cache read)
    key: str  # cache key
    from_cache: bool = field(default=False, compare=False)
    scores: np.ndarray = field(init=False, repr=False, compare=False)  # (n,) raw / ||raw||_2: what views show

    def __post_init__(self):
        object.__setattr__(self, "scores", normalise_scores(self.raw))

    @property
    def n(self) -> int:
        return int(self.raw.shape[0])

    @property
    def total(self) -> float:
        """The attribution score of the whole document (the paper's header, captum's
        VisualizationDataRecord.attr_score): the sum of the normalised scores."""
        return float(self.scores.sum())

    @property
    def raw_total(self) -> float:
        """The sum of the raw per-token sums: F(x) - F(x') + delta."""
        return float(self.raw.sum())

    @property
    def expected(self) -> float:
        """What the raw sums must add up to (completeness): F(x) - F(x')."""
        return self.prob_input - self.prob_baseline

    @property
    def relative_delta(self) -> float:
        return abs(self.delta) / abs(self.expected) if self.expected != 0 else math.inf

    @property
    def converged(self) -> bool:
        # the tiny absolute floor keeps float noise on a near-zero output difference from raising alarms
        return abs(self.delta) <= DELTA_WARN * abs(self.expected) + 1e-6

    @property
    def warning(self) -> str | None:
        if self.converged:
            return None
        return (
            f"Integrated Gradients has not converged: the raw attributions add up to {self.raw_total:+.4f} but "
            f"F(x) - F(baseline) = {self.expected:+.4f} (delta {self.delta:+.4f}, "
            f"{100 * self.relative_delta:.0f} % > {100 * DELTA_WARN:.0f} %). Use more steps or the adaptive option."
        )

    @property
    def weak_explanation(self) -> str | None:
        """A message when this explanation explains little (see WEAK_BASELINE_PROB, WEAK_OUTPUT_DIFFERENCE),
        else None."""
        decided = self.prob_baseline >= WEAK_BASELINE_PROB and self.prob_input >= WEAK_BASELINE_PROB
        small = abs(self.expected) < WEAK_OUTPUT_DIFFERENCE
        if not (decided or small):
            return None
        msg = (f"This explanation explains little. F(x) − F(baseline) = {self.prob_input:.4f} − "
               f"{self.prob_baseline:.4f} = {self.expected:+.4f} is all that Integrated Gradients shares out over "
               f"the tokens (p(baseline) = {self.prob_baseline:.4f})")
        if small:
            msg += (f", less than {WEAK_OUTPUT_DIFFERENCE:g} of the probability range; the normalised scores (unit "
                    "L2 norm) do not show how small that is")
        msg += "."
        if decided:
            msg += (" The baseline (<s> <pad>… </s>, no text) already gives this class "
                    f"p ≥ {WEAK_BASELINE_PROB:g}: the text does not decide the prediction, and faithfulness may "
                    "report no flip.")
        return msg


# ------------------------------------------------------------------------------------------ public API
def integrated_gradients(
    model: LoadedModel,
    analysis: DocumentAnalysis | Encoded,
    target: int | None = None,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    precision: str = "fp32",
    internal_batch_size: int | None = None,
    adaptive: bool = False,
    tolerance: float = DELTA_WARN,
    max_steps: int = 1600,
    use_cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    on_wait=None,
) -> Attribution:
    """Token attributions for `target` (default: the predicted class; required when given an Encoded).

    adaptive: start at n_steps and double until |delta| <= tolerance * |F(x) - F(x')| (or max_steps).
    internal_batch_size: steps per forward batch; default from free memory (internal_batch_size_for).
    A cached result is returned at once (from_cache=True); a corrupt cache file is logged and recomputed."""
    enc, target = _resolve(model, analysis, target)
    _validate(model, n_steps, method, precision, internal_batch_size, tolerance, max_steps)
    key = _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps)
    path = _cache_path(cache_dir, key)
    if use_cache:
        hit = _try_read(path, key, enc.n)
        if hit is not None:
            report(progress, 1.0, "Loaded from cache")
            return hit
    steps = n_steps
    with COMPUTE.hold(on_wait):
        # another session may have computed this very entry while we waited in the queue
        hit = _try_read(path, key, enc.n) if use_cache else None
        if hit is not None:
            report(progress, 1.0, "Loaded from cache")
            return hit
        while True:
            round_progress = progress if not adaptive else _prefixed(progress, f"{steps} steps: ")
            result = _compute(model, enc, target, steps, method, precision, internal_batch_size, round_progress)
            if not adaptive or abs(result.delta) <= tolerance * abs(result.expected) + 1e-6 or steps * 2 > max_steps:
                break
            steps *= 2
        result = replace(result, key=key)
        if use_cache:  # written before the queue moves on, so a session waiting for the same entry finds it
            _write_cache(path, result)
    if result.warning:
        warnings.warn(result.warning, ConvergenceWarning, stacklevel=2)
    _record_timing(model, enc.n, precision, result, cache_dir)
    return result


def cached_attribution(
    model: LoadedModel,
    analysis: DocumentAnalysis | Encoded,
    target: int | None = None,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    precision: str = "fp32",
    adaptive: bool = False,
    tolerance: float = DELTA_WARN,
    max_steps: int = 1600,
    cache_dir: str | os.PathLike | None = None,
) -> Attribution | None:
    """The cached result for these settings, or None (nothing computed; a corrupt file counts as none)."""
    enc, target = _resolve(model, analysis, target)
    key = _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps)
    return _try_read(_cache_path(cache_dir, key), key, enc.n)


def internal_batch_size_for(model: LoadedModel, n_tokens: int, n_steps: int, precision: str = "fp32",
                            cache_dir: str | os.PathLike | None = None) -> int:
    """Steps per batch: the fastest timed batch size inside a memory budget.

    Budget: at most _MEMORY_FRACTION of the free memory and at most a quarter of the steps (_MAX_STEP_SHARE), so a
    run needs at most a quarter of the memory of captum's default recipe, which puts every step in one batch.
    Throughput: every finished run records its seconds per step for its batch size, per model, device, precision
    and length bucket (beside estimate_ig_seconds' timing). Without a record the batch holds about _START_ROWS
    token rows; with records it is the size with the best seconds per step, and while the largest size timed is
    also the fastest (and its doubling gained at least _DOUBLING_GAIN, or it is the only one timed), the next
    run tries twice that size if the budget allows. Throughput grows with the batch until its matrices fill the
    machine, so runs climb to the fastest size that fits and stay there.

    Free memory: torch.cuda.mem_get_info on a GPU, MemAvailable of /proc/meminfo on CPU (sysconf pages as a
    fallback). Memory per step (activations kept for the backward pass), with L layers, hidden size d,
    intermediate size f, A heads, one-sided window w_l of layer l, n the window-padded length and b bytes per
    element (4; 2 under bf16/fp16 autocast):
        bytes = n * b * (L (12 d + 2 f) + 3 A sum_l (2 w_l + 2))
    i.e. about a dozen (n, d) tensors per layer (q, k, v, context, projections, layer norms, residuals),
    two (n, f) for the feed-forward, and three copies of the banded scores (scores, softmax, dropout).
    A full-attention encoder has 2 w_l + 2 replaced by n. Checked against the peak resident memory on CPU at
    longformer-base dimensions, 1,024 tokens: 141 MB per layer per additional step measured, 139 MB predicted."""
    per_step = _bytes_per_step(model, n_tokens, precision)
    fit = int(_MEMORY_FRACTION * _free_memory_bytes(model.device) // per_step)
    cap = max(1, min(n_steps, fit, int(n_steps * _MAX_STEP_SHARE)))
    timed = {b: s for b, s in _batch_speeds(model, n_tokens, precision, cache_dir).items() if b <= cap}
    if not timed:
        return max(1, min(cap, math.ceil(_START_ROWS / _padded(model, n_tokens))))
    best = min(timed, key=lambda b: (timed[b], b))
    larger = min(2 * best, cap)
    still_gaining = best // 2 not in timed or timed[best // 2] >= _DOUBLING_GAIN * timed[best]
    if best == max(timed) and larger > best and larger not in timed and still_gaining:
        return larger
    return best


def _batch_speeds(model, n_tokens, precision, cache_dir) -> dict[int, float]:
    """Seconds per step recorded by finished runs, by batch size, for n_tokens' length bucket."""
    try:
        bucket = _bucket(model, n_tokens)
    except ValueError:
        return {}
    timing = _read_timing(model, bucket, precision, cache_dir) or {}
    speeds = timing.get("batches", {})
    return {int(b): float(s) for b, s in speeds.items() if float(s) > 0} if isinstance(speeds, dict) else {}


def estimate_ig_seconds(
    model: LoadedModel,
    n_tokens: int,
    n_steps: int,
    precision: str = "fp32",
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    on_wait=None,
) -> float:
    """Expected wall time of integrated_gradients on a document of n_tokens.

    Based on one forward and one forward+backward timed at a length bucket (512, 1024, 2048, ... capped at
    the model's maximum; scaled linearly to n_tokens, as Longformer's cost is linear in length), cached on
    disk per model + bucket + precision, and refined by every finished run. The first call for a bucket
    runs the model (seconds at base dimensions); later calls are instant."""
    if n_tokens < 3 or n_steps < 2:
        raise ValueError(f"need n_tokens >= 3 and n_steps >= 2, got {n_tokens}, {n_steps}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    bucket = _bucket(model, n_tokens)
    timing = _read_timing(model, bucket, precision, cache_dir)
    if timing is None:
        with COMPUTE.hold(on_wait):
            report(progress, 0.0, f"Timing one forward+backward at {bucket} tokens")
            t_fwd, t_fb = _time_passes(model, _synthetic(model, bucket), precision)[:2]
        timing = {"forward": t_fwd, "step": t_fb}
        _write_timing(model, bucket, precision, timing, cache_dir)
        report(progress, 1.0, "Timed")
    scale = _padded(model, n_tokens) / _padded(model, bucket)
    return scale * (n_steps * timing["step"] + 2 * timing["forward"])


def estimate_dataset_seconds(
    model: LoadedModel,
    texts,
    n_steps: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "fp32",
    *,
    cache_dir: str | os.PathLike | None = None,
    on_wait=None,
) -> float:
    """Expected wall time of dataset_attributions over `texts` (each document's own length, truncated)."""
    total = 0.0
    for text in texts:
        ids = model.tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        n = min(len(ids) + 2, max_tokens, model.max_tokens)
        total += estimate_ig_seconds(model, max(n, 3), n_steps, precision, cache_dir=cache_dir, on_wait=on_wait)
    return total


# ----------------------------------------------------------------------------------------- tables
def top_attributions(tokens, scores, k: int = 10, sign: str = "positive", mask=None) -> pd.DataFrame:
    """The k most positive (or negative) single tokens: columns token, position, attribution (Fig 10a/b)."""
    from .figures.text import token_label

    if sign not in ("positive", "negative"):
        raise ValueError(f"sign must be 'positive' or 'negative', got {sign!r}")
    scores = _scores(tokens, scores)
    keep = _keep(len(scores), mask)
    pos = np.flatnonzero(keep & (scores > 0 if sign == "positive" else scores < 0))
    order = pos[np.argsort(-scores[pos] if sign == "positive" else scores[pos], kind="stable")][:k]
    return pd.DataFrame(
        {"token": [token_label(tokens[i]) for i in order], "position": order.astype(np.int64),
         "attribution": scores[order]}
    )


def attribution_by_token(tokens, scores, mask=None) -> pd.DataFrame:
    """Attributions summed per token type over the document (Fig 10c/d): columns token, attribution, count,
    sorted by attribution (descending). A token type is the token's text without its word-start marker
    (so 'Ġalgorithms' and 'algorithms' are one type; case is kept)."""
    from .figures.text import token_label

    scores = _scores(tokens, scores)
    keep = _keep(len(scores), mask)
    df = pd.DataFrame({"token": [token_label(t) for t in tokens], "attribution": scores})[keep]
    out = df.groupby("token", sort=False)["attribution"].agg(["sum", "size"]).reset_index()
    out.columns = ["token", "attribution", "count"]
    return out.sort_values("attribution", ascending=False, kind="stable").reset_index(drop=True)


def document_token_sums(tokens, scores, special_tokens) -> pd.DataFrame:
    """One document's share of the dataset-wide table (Fig 10e/f), as the precompute stores it: per token type
    (as attribution_by_token), with `special_tokens` always left out, the summed score and the occurrences
    (columns attribution, count), and the same under the paper's mask (views.masking.build_mask: special,
    non-alphanumeric, stopwords) in attribution_unmasked, count_unmasked (count 0: every occurrence masked)."""
    special = special_mask(tokens, special_tokens)
    by_token = attribution_by_token(tokens, scores, mask=special)
    kept = attribution_by_token(tokens, scores, mask=special | build_mask(tokens, special_tokens=special_tokens))
    by_token = by_token.merge(kept.rename(columns={"attribution": "attribution_unmasked", "count": "count_unmasked"}),
                              on="token", how="left")
    return by_token.fillna({"attribution_unmasked": 0.0, "count_unmasked": 0}).astype({"count_unmasked": "int64"})


def token_sums_partial(by_token: pd.DataFrame, masked: bool = False) -> pd.DataFrame:
    """A document_token_sums table as the partial sums store.combine_token_sums takes (one document)."""
    value, count = ("attribution_unmasked", "count_unmasked") if masked else ("attribution", "count")
    rows = by_token[by_token[count] > 0]
    return pd.DataFrame({"token": rows["token"].to_numpy(), "total_attribution": rows[value].to_numpy(np.float64),
                         "n_docs": np.ones(len(rows), dtype=np.int64), "occurrences": rows[count].to_numpy(np.int64)})


@dataclass(frozen=True)
class DatasetAttribution:
    table: pd.DataFrame  # store.TOKEN_TABLE_COLUMNS, sorted by mean_attribution (descending), see combine_token_sums
    target: int
    n_steps: int
    n_docs: int  # documents the means are taken over: all of them, whether they contain a type or not
    key: str
    masked: bool = False  # the paper's mask (stopwords, non-alphanumeric) applied; special tokens are always out
    min_docs: int = 1  # types found in fewer documents are left out of the table
    from_cache: bool = field(default=False, compare=False)

    def title(self, class_name: str) -> str:
        return f"Dataset-wide attribution for class '{class_name}' (IG, L2-normalised per document)"

    def description(self) -> str:
        """What the table's numbers are, for a caption."""
        return (f"mean_attribution: a type's summed score per document, averaged over all {self.n_docs} documents "
                "(0 where it is absent); mean_per_occurrence: its total over its occurrences. Special tokens left out"
                + ("; stopwords and non-alphanumeric tokens masked" if self.masked else "")
                + (f"; types in fewer than {self.min_docs} documents hidden" if self.min_docs > 1 else "") + ".")


def dataset_attributions(
    model: LoadedModel,
    texts,
    target: int,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "fp32",
    masked: bool = False,
    min_docs: int = 1,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetAttribution:
    """Dataset-wide attribution by token type (Fig 10e/f): every document's normalised scores summed per token
    type (document_token_sums), then store.combine_token_sums: per type, the sum over documents divided by
    the number of documents (a mean over all of them), with documents containing it, occurrences and the
    mean per occurrence. masked: apply the paper's mask; min_docs: hide types found in fewer documents.

    Each document's IG result goes through the per-document cache, so an interrupted run resumes where it
    stopped; the per-type sums are cached too (keyed by model, texts and settings; both mask choices)."""
    texts = list(texts)
    _check_min_docs(min_docs)
    key, path = _dataset_key(model, texts, target, n_steps, method, max_tokens, precision, cache_dir)
    cached = _read_dataset(path, key)
    if cached is not None:
        report(progress, 1.0, "Loaded from cache")
        return _dataset_result(cached, key, masked, min_docs, from_cache=True)
    specials = model.tokenizer.all_special_tokens
    parts: dict[bool, list] = {False: [], True: []}
    started = time.monotonic()
    for i, text in enumerate(texts):
        enc = encode(model.tokenizer, text, max_tokens, model_max=model.max_tokens,
                     position_offset=model.position_offset)
        done = i / len(texts)
        eta = _fmt_eta((time.monotonic() - started) / i * (len(texts) - i)) if i else ""
        sub = _scaled(progress, done, 1 / len(texts), f"Document {i + 1}/{len(texts)}{eta}: ")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # 50 steps is the paper's dataset compromise
            attr = integrated_gradients(model, enc, target, n_steps, method, precision=precision,
                                        cache_dir=cache_dir, progress=sub, on_wait=on_wait)
        by_token = document_token_sums(enc.tokens, attr.scores, specials)
        for m in parts:
            parts[m].append(token_sums_partial(by_token, m))
    saved = {"key": key, "target": int(target), "n_steps": int(n_steps), "n_docs": len(texts)}
    for m, frames in parts.items():  # per-type sums: what combine_token_sums needs, in any grouping
        sums = pd.concat(frames, ignore_index=True).groupby("token", sort=False).sum()
        saved["masked" if m else "all"] = {"token": sums.index.tolist(), **{c: sums[c].tolist() for c in sums}}
    _write_quietly(path, json.dumps(saved).encode())
    report(progress, 1.0, "Done")
    return _dataset_result(saved, key, masked, min_docs)


def cached_dataset_attributions(
    model: LoadedModel,
    texts,
    target: int,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "fp32",
    masked: bool = False,
    min_docs: int = 1,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetAttribution | None:
    """The cached dataset-wide table for these settings, or None (nothing is computed)."""
    _check_min_docs(min_docs)
    key, path = _dataset_key(model, list(texts), target, n_steps, method, max_tokens, precision, cache_dir)
    cached = _read_dataset(path, key)
    return None if cached is None else _dataset_result(cached, key, masked, min_docs, from_cache=True)


def _dataset_result(saved: dict, key: str, masked: bool, min_docs: int, from_cache: bool = False):
    from .store import combine_token_sums

    partial = pd.DataFrame(saved["masked" if masked else "all"])
    table = combine_token_sums(partial, int(saved["n_docs"]), min_docs)
    return DatasetAttribution(table, int(saved["target"]), int(saved["n_steps"]), int(saved["n_docs"]), key,
                              masked=bool(masked), min_docs=int(min_docs), from_cache=from_cache)


def _check_min_docs(min_docs) -> None:
    if not isinstance(min_docs, (int, np.integer)) or min_docs < 1:
        raise ValueError(f"min_docs must be a positive integer, got {min_docs!r}")


def _dataset_key(model, texts, target, n_steps, method, max_tokens, precision, cache_dir):
    if not texts:
        raise ValueError("No documents to attribute.")
    if not isinstance(target, (int, np.integer)) or not 0 <= int(target) < model.num_labels:
        raise ValueError(f"target must be a class index in [0, {model.num_labels - 1}], got {target!r}")
    _validate(model, n_steps, method, precision, None, DELTA_WARN, n_steps)
    h = hashlib.blake2b(digest_size=12)
    for t in texts:
        h.update(str(t).encode("utf-8", "surrogatepass") + b"\x1e")
    key = _digest({"kind": "dataset", "v": _CACHE_VERSION, "model": model.fingerprint, "texts": h.hexdigest(),
                   "target": int(target), "n_steps": int(n_steps), "method": method, "precision": precision,
                   "max_tokens": int(max_tokens)})
    return key, _cache_root(cache_dir) / f"dataset-{key}.json"


def token_detail(analysis: DocumentAnalysis, attribution: Attribution, position: int, received=None) -> dict:
    """One token's numbers for the UI: text, position, attribution and its rank (1 = most positive),
    received attention (summed over all layers and heads unless `received` (n,) is given) and its rank."""
    from .figures.text import token_label

    n = analysis.n
    if attribution.n != n:
        raise ValueError(f"the attribution has {attribution.n} tokens, the document {n}")
    if not 0 <= int(position) < n:
        raise ValueError(f"position must be in [0, {n - 1}], got {position}")
    position = int(position)
    att = analysis.attention.received() if received is None else np.asarray(received, dtype=np.float64)
    return {
        "token": token_label(analysis.tokens[position]),
        "raw_token": analysis.tokens[position],
        "position": position,
        "attribution": float(attribution.scores[position]),
        "attribution_rank": _rank_of(attribution.scores, position),
        "abs_attribution_rank": _rank_of(np.abs(attribution.scores), position),
        "received_attention": float(att[position]),
        "attention_rank": _rank_of(att, position),
        "n": n,
    }


# ----------------------------------------------------------------------------------------- the maths
def _compute(model, enc: Encoded, target, n_steps, method, precision, batch_size, progress) -> Attribution:
    """One captum LayerIntegratedGradients run. Caller holds COMPUTE."""
    from captum.attr import LayerIntegratedGradients

    net, dev = model.model, model.device
    n = enc.n
    args, input_ids, baseline_ids = _padded_tensors(model, enc)
    batch = batch_size or internal_batch_size_for(model, n, n_steps, precision)
    autocast = _autocast(dev, precision)
    tracker = _Tracker(progress, n_steps, batch, input_ids, baseline_ids, target)
    if net.training:
        raise RuntimeError("the shared model must stay in eval mode")

    def forward(ids, attention_mask, position_ids, global_attention_mask=None):
        grad = torch.is_grad_enabled()
        if grad:
            tracker.batch_starting(ids.shape[0])
        kwargs = {"input_ids": ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if global_attention_mask is not None:
            kwargs["global_attention_mask"] = global_attention_mask
        with autocast:
            logits = net(**kwargs).logits
        probs = torch.softmax(logits.float(), dim=-1)  # (batch, classes)
        if not grad:
            tracker.endpoint(ids, probs)
        return probs

    lig = LayerIntegratedGradients(forward, _embeddings_layer(net))
    started = time.monotonic()
    report(progress, 0.0, f"Integrated Gradients: {n_steps} steps, batches of {batch}")
    attributions = lig.attribute(
        inputs=input_ids,
        baselines=baseline_ids,
        additional_forward_args=args,
        target=int(target),
        n_steps=int(n_steps),
        method=method,
        internal_batch_size=int(batch),
    )  # (1, n_padded, hidden)
    p_x, p_b = tracker.endpoints()
    if p_x is None or p_b is None:  # captum did not evaluate the endpoints through us: do it here
        with torch.no_grad():
            probs = forward(torch.cat([input_ids, baseline_ids]), *(torch.cat([a, a]) for a in args))
        p_x, p_b = float(probs[0, target]), float(probs[1, target])
    per_token = attributions.detach().double().sum(dim=-1)[0].cpu().numpy()  # (n_padded,)
    raw = per_token[:n].copy()  # (n,) window padding sliced off (its attribution is 0)
    seconds = time.monotonic() - started
    report(progress, 1.0, f"Done in {format_seconds(seconds)}")
    return Attribution(
        raw=raw,
        delta=float(per_token.sum() - (p_x - p_b)),
        target=int(target),
        n_steps=int(n_steps),
        method=method,
        prob_input=p_x,
        prob_baseline=p_b,
        precision=precision,
        internal_batch_size=int(batch),
        seconds=seconds,
        key="",
    )


class _Tracker:
    """Counts captum's calls of the forward function: gradient calls are batches of steps (progress, ETA);
    the two calls without gradients are the endpoints x and x' (their probabilities give the delta)."""

    def __init__(self, progress, n_steps, batch, input_ids, baseline_ids, target):
        self.progress, self.n_steps, self.batch, self.target = progress, n_steps, batch, target
        self.input_ids, self.baseline_ids = input_ids, baseline_ids
        self.p_x = self.p_b = None
        self.steps_started = 0
        self.first_batch_at = None
        self.n_batches = math.ceil(n_steps / batch)
        self.total_units = 2 * _FWD_UNITS + n_steps * _FB_UNITS

    def endpoint(self, ids, probs):
        if ids.shape[0] != 1:
            return
        if self.p_x is None and torch.equal(ids, self.input_ids):
            self.p_x = float(probs[0, self.target])
        elif self.p_b is None and torch.equal(ids, self.baseline_ids):
            self.p_b = float(probs[0, self.target])
        else:
            return
        done = (self.p_x is not None) + (self.p_b is not None)
        report(self.progress, done * _FWD_UNITS / self.total_units, "Embedding the input and the baseline")

    def batch_starting(self, size):
        now = time.monotonic()
        done_steps = self.steps_started
        if self.first_batch_at is None:
            self.first_batch_at = now
            eta = ""
        else:
            eta = _fmt_eta((now - self.first_batch_at) / done_steps * (self.n_steps - done_steps))
        self.steps_started += size
        k = math.ceil(self.steps_started / self.batch)
        units = 2 * _FWD_UNITS + done_steps * _FB_UNITS
        report(self.progress, units / self.total_units,
               f"Batch {k}/{self.n_batches} (steps {done_steps}/{self.n_steps} done){eta}")

    def endpoints(self):
        return self.p_x, self.p_b


def _padded_tensors(model, enc: Encoded):
    """(additional forward args, input ids, baseline ids), each (1, n_padded): Longformer inputs padded to a
    multiple of its window as the model itself would (pad token, pad position id, attention mask 0), so
    captum's embeddings and the model's agree in length; the padding rows are equal in x and x'."""
    tok = model.tokenizer
    pad_to = 2 * model.attention_window if model.is_longformer and model.attention_window else 1
    extra = (-enc.n) % pad_to
    pad_id = int(tok.pad_token_id)

    def t(a, fill):
        a = np.concatenate([np.asarray(a, dtype=np.int64), np.full(extra, fill, dtype=np.int64)])
        return torch.as_tensor(a, device=model.device).unsqueeze(0)  # (1, n_padded)

    position_pad = pad_id if model.position_offset else 0
    args = [t(np.ones(enc.n), 0), t(enc.position_ids, position_pad)]
    if model.is_longformer:
        args.append(t(enc.global_mask, 0))
    return tuple(args), t(enc.input_ids, pad_id), t(enc.baseline_ids, pad_id)


def _embeddings_layer(net):
    layer = getattr(getattr(net, "base_model", net), "embeddings", None)
    if layer is None:
        raise ValueError(f"{type(net).__name__} has no `embeddings` module to attribute to")
    return layer


def _autocast(device, precision):
    dtype = PRECISIONS[precision]
    return nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)


class Passes(NamedTuple):
    forward: float  # wall seconds of one forward without gradients
    step: float  # wall seconds of one forward+backward (an IG step at batch 1)
    forward_cpu: float  # the same in CPU seconds of this process (all threads): steadier on a shared machine
    step_cpu: float


def _time_passes(model, enc: Encoded, precision: str, target: int = 0) -> Passes:
    """One forward (no gradients) and one forward+backward as an IG step does it: gradients of p_target with
    respect to the embeddings output only (no parameter gradients)."""
    net = model.model
    args, input_ids, _ = _padded_tensors(model, enc)
    kwargs = {"input_ids": input_ids, "attention_mask": args[0], "position_ids": args[1]}
    if model.is_longformer:
        kwargs["global_attention_mask"] = args[2]
    autocast = _autocast(model.device, precision)
    w0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad(), autocast:
        net(**kwargs)
    w1, c1 = time.perf_counter(), time.process_time()
    held = []

    def swap(_module, _inputs, out):  # what LayerIntegratedGradients does: the layer output becomes a leaf
        leaf = out.detach().requires_grad_()
        held.append(leaf)
        return leaf

    hook = _embeddings_layer(net).register_forward_hook(swap)
    try:
        with autocast:
            logits = net(**kwargs).logits
        prob = torch.softmax(logits.float(), dim=-1)[0, target]
        torch.autograd.grad(prob, held[0])
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
    finally:
        hook.remove()
    w2, c2 = time.perf_counter(), time.process_time()
    return Passes(w1 - w0, w2 - w1, c1 - c0, c2 - c1)


# ----------------------------------------------------------------------------------------- memory
def _bytes_per_step(model, n_tokens, precision) -> float:
    cfg = model.model.config
    n = _padded(model, n_tokens)
    d = int(cfg.hidden_size)
    f = int(getattr(cfg, "intermediate_size", 4 * d))
    heads = int(cfg.num_attention_heads)
    layers = int(cfg.num_hidden_layers)
    # each layer's scores are as wide as its own window (Longformer's windows may differ by layer)
    bands = sum(2 * w + 2 for w in model.attention_windows) if model.is_longformer else layers * n
    b = 4 if PRECISIONS[precision] is None else 2
    return float(n * b * (layers * (12 * d + 2 * f) + 3 * heads * bands))


def _free_memory_bytes(device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


# ----------------------------------------------------------------------------------------- cache
def _cache_root(cache_dir) -> Path:
    from .demo import cache_root

    return cache_root(cache_dir) / "attributions"


def _cache_path(cache_dir, key: str) -> Path:
    return _cache_root(cache_dir) / f"{key}.npz"


def _digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


def _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps) -> str:
    """The model's fingerprint, the exact ids and positions it sees (text + tokenizer + truncation), and
    every setting that changes the numbers."""
    ids = hashlib.blake2b(enc.input_ids.tobytes() + enc.position_ids.tobytes(), digest_size=16).hexdigest()
    return _digest({"v": _CACHE_VERSION, "model": model.fingerprint, "ids": ids, "target": int(target),
                    "n_steps": int(n_steps), "method": method, "precision": precision, "adaptive": bool(adaptive),
                    "tolerance": float(tolerance) if adaptive else None,
                    "max_steps": int(max_steps) if adaptive else None})


def _write_cache(path: Path, a: Attribution) -> None:
    meta = {"key": a.key, "delta": a.delta, "target": a.target, "n_steps": a.n_steps, "method": a.method,
            "prob_input": a.prob_input, "prob_baseline": a.prob_baseline, "precision": a.precision,
            "internal_batch_size": a.internal_batch_size, "seconds": a.seconds}
    buf = io.BytesIO()
    np.savez(buf, raw=a.raw, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    _write_quietly(path, buf.getvalue())


def _write_quietly(path: Path, data: bytes) -> None:
    try:
        _atomic_write(path, data)
    except OSError as exc:  # a read-only or full disk costs the cache, not the result
        log.warning("Could not write the attribution cache %s: %s", path, exc)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write to a private temporary file in the same directory, then rename over the target: readers see
    the old file or the new one, never half of one; two writers of the same entry both leave a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared by the lab's accounts
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_cache(path: Path, key: str, n: int) -> Attribution:
    """The cached result (the raw sums; the normalised scores are recomputed from them); CacheCorruptError if
    the file cannot be read or does not match."""
    try:
        with np.load(path, allow_pickle=False) as z:
            raw = np.asarray(z["raw"], dtype=np.float64)
            meta = json.loads(bytes(z["meta"]).decode())
        if meta.get("key") != key or raw.shape != (n,) or not np.all(np.isfinite(raw)):
            raise ValueError("contents do not match the key")
        return Attribution(raw=raw, delta=float(meta["delta"]), target=int(meta["target"]),
                           n_steps=int(meta["n_steps"]), method=str(meta["method"]),
                           prob_input=float(meta["prob_input"]), prob_baseline=float(meta["prob_baseline"]),
                           precision=str(meta["precision"]), internal_batch_size=int(meta["internal_batch_size"]),
                           seconds=float(meta["seconds"]), key=key, from_cache=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # zip, json, key and value errors all mean the same: unusable file
        raise CacheCorruptError(f"Attribution cache file {path} is unreadable ({type(exc).__name__}: {exc})") from exc


def _try_read(path: Path, key: str, n: int) -> Attribution | None:
    try:
        return _read_cache(path, key, n)
    except FileNotFoundError:
        return None
    except CacheCorruptError as exc:
        log.warning("%s; recomputing.", exc)
        return None


def _read_dataset(path: Path, key: str) -> dict | None:
    """The cached per-type sums (as dataset_attributions saves them), or None."""
    try:
        saved = json.loads(path.read_text())
        if saved.get("key") != key:
            raise ValueError("key mismatch")
        for m in ("all", "masked"):
            cols = saved[m]
            if set(cols) != {"token", "total_attribution", "n_docs", "occurrences"} or len(
                    {len(v) for v in cols.values()}) != 1:
                raise ValueError(f"malformed '{m}' sums")
        return saved
    except FileNotFoundError:
        return None
    except Exception as exc:
        log.warning("Dataset attribution cache %s is unreadable (%s); recomputing.", path, exc)
        return None


# ---- timings for estimate_ig_seconds
def _timing_path(model, bucket, precision, cache_dir) -> Path:
    name = _digest({"model": model.fingerprint, "bucket": bucket, "precision": precision,
                    "device": model.device.type})
    return _cache_root(cache_dir) / f"timing-{name}.json"


def _read_timing(model, bucket, precision, cache_dir) -> dict | None:
    try:
        t = json.loads(_timing_path(model, bucket, precision, cache_dir).read_text())
        return t if t.get("step", 0) > 0 and t.get("forward", -1) >= 0 else None
    except (OSError, ValueError, AttributeError):
        return None


def _write_timing(model, bucket, precision, timing, cache_dir) -> None:
    _write_quietly(_timing_path(model, bucket, precision, cache_dir), json.dumps(timing).encode())


def _record_timing(model, n_tokens, precision, result: Attribution, cache_dir=None) -> None:
    """A finished run is the best timing there is: rescale the bucket's timing so it predicts this run.

    Forward and step times are scaled by one factor (measured / predicted) rather than solving for the step
    alone, which would go negative when a quick run on an idle machine follows a timing taken under load."""
    if result.seconds <= 0:
        return
    bucket = _bucket(model, n_tokens)
    scale = _padded(model, n_tokens) / _padded(model, bucket)
    old = _read_timing(model, bucket, precision, cache_dir)
    if old is None:
        timing = {"forward": 0.0, "step": result.seconds / scale / result.n_steps}
    else:
        factor = result.seconds / (scale * (result.n_steps * old["step"] + 2 * old["forward"]))
        timing = {"forward": old["forward"] * factor, "step": old["step"] * factor}
    # the run's own seconds per step at its batch size (internal_batch_size_for): the fastest seen is kept, a
    # run slowed down by other work on the machine does not count against its batch size
    per_step = max(result.seconds - 2 * scale * timing["forward"], 0.0) / scale / result.n_steps
    batches = dict((old or {}).get("batches", {}))
    key = str(result.internal_batch_size)
    if per_step > 0:
        batches[key] = min(per_step, float(batches.get(key, math.inf)))
    timing["batches"] = batches
    _write_timing(model, bucket, precision, timing, cache_dir)


# ----------------------------------------------------------------------------------------- helpers
def _resolve(model, analysis, target) -> tuple[Encoded, int]:
    if not isinstance(model, LoadedModel):
        raise ValueError("model must be a LoadedModel (see load_model)")
    if isinstance(analysis, DocumentAnalysis):
        if analysis.model_fingerprint != model.fingerprint:
            raise ValueError("this analysis was made with another model")
        enc = analysis.encoded
        target = analysis.predicted if target is None else target
    elif isinstance(analysis, Encoded):
        enc = analysis
        if target is None:
            raise ValueError("give the target class when attributing an Encoded input")
    else:
        raise ValueError(f"expected a DocumentAnalysis or Encoded, got {type(analysis).__name__}")
    if not isinstance(target, (int, np.integer)) or not 0 <= int(target) < model.num_labels:
        raise ValueError(f"target must be a class index in [0, {model.num_labels - 1}], got {target!r}")
    return enc, int(target)


def _validate(model, n_steps, method, precision, batch_size, tolerance, max_steps) -> None:
    if not isinstance(n_steps, (int, np.integer)) or n_steps < 2:
        raise ValueError(f"n_steps must be an integer of at least 2 (captum's minimum), got {n_steps!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
        raise ValueError(f"internal_batch_size must be a positive integer, got {batch_size!r}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}")
    if max_steps < n_steps:
        raise ValueError(f"max_steps ({max_steps}) must be at least n_steps ({n_steps})")


def _padded(model, n: int) -> int:
    """The length the model runs at: transformers pads a Longformer input to a multiple of the largest full
    window, max(config.attention_window) = 2 * model.attention_window, whatever the other layers' windows."""
    w2 = 2 * model.attention_window if model.is_longformer and model.attention_window else 1
    return -(-int(n) // w2) * w2


def _bucket(model, n_tokens: int) -> int:
    if n_tokens > model.max_tokens:
        raise ValueError(f"{n_tokens} tokens exceed what this model accepts ({model.max_tokens})")
    b = 512
    while b < n_tokens:
        b *= 2
    return min(b, model.max_tokens)


def _synthetic(model, n: int) -> Encoded:
    """A document of n tokens for timing (speed does not depend on which tokens)."""
    tok = model.tokenizer
    filler = next(i for i in range(len(tok)) if i not in set(tok.all_special_ids))
    ids = np.asarray([tok.cls_token_id] + [filler] * (n - 2) + [tok.sep_token_id], dtype=np.int64)
    off = model.position_offset
    gm = np.zeros(n, dtype=np.int64)
    gm[0] = 1
    return Encoded(input_ids=ids, baseline_ids=ids.copy(), position_ids=np.arange(off, off + n, dtype=np.int64),
                   global_mask=gm, tokens=[""] * n, n_text_tokens_original=n - 2, max_tokens=n)


def _scores(tokens, scores) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.shape[0] != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {s.shape[0]} scores")
    return s


def _keep(n, mask) -> np.ndarray:
    if mask is None:
        return np.ones(n, dtype=bool)
    m = np.asarray(mask, dtype=bool).reshape(-1)
    if m.shape[0] != n:
        raise ValueError(f"{n} tokens but a mask of {m.shape[0]}")
    return ~m


def _rank_of(values, position) -> int:
    """1-based rank of values[position] in descending order (ties share the best rank)."""
    v = np.asarray(values, dtype=np.float64)
    return int(np.count_nonzero(v > v[position])) + 1


def _prefixed(progress, prefix):
    if progress is None:
        return None
    return lambda f, msg: progress(f, prefix + msg)


def _scaled(progress, lo, width, prefix):
    if progress is None:
        return None
    return lambda f, msg: progress(lo + width * f, prefix + msg)


def format_seconds(s: float) -> str:
    """A duration for people: '42 s', '3.5 min', '1.2 h'."""
    s = max(0.0, float(s))
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _fmt_eta(s: float) -> str:
    return f", about {format_seconds(s)} left"

