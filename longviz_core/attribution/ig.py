"""Integrated Gradients on the embeddings layer, the paper's set-up (§3.2; notebook "Get Attributions").

    F(e)      = head.explained(model(e), target)         e = output of the whole embeddings layer
                (model.heads: softmax(.)[target]; a multi-label head's sigmoid(.)[target], one label at a time;
                 a regression head's score itself, so every number below is then in score units)
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
model fingerprint, the exact token ids the model sees and the settings. What a run costs: attribution.cost.
"""
from __future__ import annotations

import io
import json
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from .._disk import bytes_digest, digest, open_sealed, read_sealed, write_sealed
from ..errors import AttributionError, real_number, whole_number
from ..model.analysis import DocumentAnalysis, DocumentSummary
from ..model.encoding import Encoded
from ..model.heads import REGRESSION
from ..model.loading import LoadedModel
from ..progress import Progress, eta_text, format_seconds, prefixed, report
from ..runtime import COMPUTE
from . import _inputs, cost
from ._inputs import PRECISIONS, autocast, embeddings_layer, padded_tensors

log = logging.getLogger(__name__)

METHODS = ("gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle")
STEP_PRESETS = {"50 steps (quick)": 50, "500 steps (as in the paper)": 500}
DELTA_WARN = 0.05  # warn when |delta| > 5 % of |F(x) - F(x')|
MAX_STEPS = 1600  # the adaptive schedule's ceiling, and the most steps a fixed run may ask
# When IG explains little (Attribution.weak_explanation):
# - the baseline alone gives the target at least this probability, and so does the input. From 0.5 on, the target
#   is the most probable class whatever the number of classes: the text does not decide the prediction, the
#   attributions only share out a confirmation, and removing tokens (faithfulness) may never flip it.
WEAK_BASELINE_PROB = 0.5
# - |F(x) - F(x')| is below this: every token together moves the probability by less than a tenth of its range,
#   while the normalised scores (unit L2 norm) look as confident as those of a decisive document.
WEAK_OUTPUT_DIFFERENCE = 0.1
SCORE_SCALE = "l2"  # what Attribution.scores are (recorded with precomputed results, see dataset.kinds.KINDS)
CACHE_VERSION = 4  # 4: the head's kind; 3: sealed files (checksummed); 2: the raw sums under "raw" (1: "scores")
# Units of work for progress: a forward without gradients is 1, a forward+backward about 3.
_FWD_UNITS, _FB_UNITS = 1.0, 3.0


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
    target: int  # label whose explained quantity (Head.explained) is explained; 0 for a regression's score
    n_steps: int  # steps of the final run (adaptive runs double them)
    method: str
    prob_input: float  # F(x): the explained quantity of the input (p_target, sigmoid_target or the score)
    prob_baseline: float  # F(x'): the same of the <s> <pad>... </s> baseline
    precision: str  # "fp32" | "bf16" | "fp16" (autocast)
    internal_batch_size: int
    seconds: float  # wall time of the computation (not of a cache read)
    key: str  # cache key
    head: str  # the head's kind (model.heads.KINDS): F is a probability, or a regression's score
    from_cache: bool = field(default=False, compare=False)
    # the tokens and the prediction, for a notebook's display (None when attributing an Encoded input)
    document: DocumentSummary | None = field(default=None, repr=False, compare=False)
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
        else None. A regression's score has no range to measure against: None."""
        if self.head == REGRESSION:
            return None
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
    max_steps: int = MAX_STEPS,
    use_cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> Attribution:
    """Token attributions for `target` (default: the predicted class; required when given an Encoded).

    adaptive: start at n_steps and double until |delta| <= tolerance * |F(x) - F(x')| (or max_steps).
    internal_batch_size: steps per forward batch; default one, or a larger size measured faster per step inside a
    memory budget (cost.internal_batch_size_for).
    A cached result is returned at once (from_cache=True); a corrupt cache file is logged and recomputed."""
    enc, target = _resolve(model, analysis, target)
    n_steps, internal_batch_size, tolerance, max_steps = validate_settings(n_steps, method, precision,
                                                                           internal_batch_size, tolerance, max_steps)
    key = _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps)
    path = _cache_path(cache_dir, key)
    if use_cache:
        hit = _try_read(path, key, enc.n)
        if hit is not None:
            report(progress, 1.0, "Loaded from cache")
            return _with_document(hit, analysis)
    steps = n_steps
    with COMPUTE.hold():
        # another session may have computed this very entry while we waited in the queue
        hit = _try_read(path, key, enc.n) if use_cache else None
        if hit is not None:
            report(progress, 1.0, "Loaded from cache")
            return _with_document(hit, analysis)
        while True:
            round_progress = progress if not adaptive else prefixed(progress, f"{steps} steps: ")
            result = _compute(model, enc, target, steps, method, precision, internal_batch_size, round_progress,
                              cache_dir)
            if not adaptive or abs(result.delta) <= tolerance * abs(result.expected) + 1e-6 or steps * 2 > max_steps:
                break
            steps *= 2
        result = replace(result, key=key)
        if use_cache:  # written before the queue moves on, so a session waiting for the same entry finds it
            _write_cache(path, result)
    if result.warning:
        warnings.warn(result.warning, ConvergenceWarning, stacklevel=2)
    cost.record_timing(model, enc.n, precision, result, cache_dir)
    return _with_document(result, analysis)


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
    max_steps: int = MAX_STEPS,
    cache_dir: str | os.PathLike | None = None,
) -> Attribution | None:
    """The cached result for these settings, or None (nothing computed; a corrupt file counts as none)."""
    enc, target = _resolve(model, analysis, target)
    n_steps, _, tolerance, max_steps = validate_settings(n_steps, method, precision, None, tolerance, max_steps)
    key = _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps)
    hit = _try_read(_cache_path(cache_dir, key), key, enc.n)
    return None if hit is None else _with_document(hit, analysis)


# ----------------------------------------------------------------------------------------- the maths
def _compute(model, enc: Encoded, target, n_steps, method, precision, batch_size, progress,
             cache_dir=None) -> Attribution:
    """One captum LayerIntegratedGradients run. Caller holds COMPUTE."""
    from captum.attr import LayerIntegratedGradients

    net, dev = model.model, model.device
    n = enc.n
    args, input_ids, baseline_ids = padded_tensors(model, enc)
    batch = batch_size or cost.internal_batch_size_for(model, n, n_steps, precision, cache_dir)
    context = autocast(dev, precision)
    tracker = _Tracker(progress, n_steps, batch, input_ids, baseline_ids, target)
    if net.training:
        raise RuntimeError("the shared model must stay in eval mode")

    def forward(ids, attention_mask, position_ids, global_attention_mask=None):
        grad = torch.is_grad_enabled()
        if grad:
            tracker.batch_starting(ids.shape[0])
        with context:
            logits = model(**model.family.kwargs(ids, attention_mask, position_ids, global_attention_mask)).logits
        probs = model.head.outputs(logits.float())  # (batch, classes): what F reads its target from
        if not grad:
            tracker.endpoint(ids, probs)
        return probs

    lig = LayerIntegratedGradients(forward, embeddings_layer(model))
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
        head=model.head.kind,
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
        eta = eta_text(self.first_batch_at, done_steps, self.n_steps, now)
        self.steps_started += size
        k = math.ceil(self.steps_started / self.batch)
        units = 2 * _FWD_UNITS + done_steps * _FB_UNITS
        report(self.progress, units / self.total_units,
               f"Batch {k}/{self.n_batches} (steps {done_steps}/{self.n_steps} done){eta}")

    def endpoints(self):
        return self.p_x, self.p_b


# ----------------------------------------------------------------------------------------- cache
def _cache_path(cache_dir, key: str) -> Path:
    return _inputs.cache_folder(cache_dir) / f"{key}.npz"


def _cache_key(model, enc, target, n_steps, method, precision, adaptive, tolerance, max_steps) -> str:
    """The model's fingerprint, the exact ids and positions it sees (text + tokenizer + truncation), and
    every setting that changes the numbers."""
    ids = bytes_digest(enc.input_ids.tobytes() + enc.position_ids.tobytes())
    return digest({"v": CACHE_VERSION, "model": model.fingerprint, "ids": ids, "target": int(target),
                    "n_steps": int(n_steps), "method": method, "precision": precision, "adaptive": bool(adaptive),
                    "tolerance": float(tolerance) if adaptive else None,
                    "max_steps": int(max_steps) if adaptive else None})


def _write_cache(path: Path, a: Attribution) -> None:
    meta = {"key": a.key, "delta": a.delta, "target": a.target, "n_steps": a.n_steps, "method": a.method,
            "prob_input": a.prob_input, "prob_baseline": a.prob_baseline, "precision": a.precision,
            "internal_batch_size": a.internal_batch_size, "seconds": a.seconds, "head": a.head}
    buf = io.BytesIO()
    np.savez(buf, raw=a.raw, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    write_sealed(path, buf.getvalue())


def _decoder(key: str, n: int):
    """The cache entry's payload as an Attribution (the raw sums; the normalised scores are recomputed from them);
    ValueError when it does not match the key."""
    def decode(body: bytes) -> Attribution:
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            raw = np.asarray(z["raw"], dtype=np.float64)
            meta = json.loads(bytes(z["meta"]).decode())
        if meta.get("key") != key or raw.shape != (n,) or not np.all(np.isfinite(raw)):
            raise ValueError("contents do not match the key")
        return Attribution(raw=raw, delta=float(meta["delta"]), target=int(meta["target"]),
                           n_steps=int(meta["n_steps"]), method=str(meta["method"]),
                           prob_input=float(meta["prob_input"]), prob_baseline=float(meta["prob_baseline"]),
                           precision=str(meta["precision"]), internal_batch_size=int(meta["internal_batch_size"]),
                           seconds=float(meta["seconds"]), key=key, head=str(meta["head"]), from_cache=True)

    return decode


def _read_cache(path: Path, key: str, n: int) -> Attribution:
    """The cached result; CacheCorruptError if the file cannot be read or does not match."""
    return open_sealed(path, _decoder(key, n))


def _try_read(path: Path, key: str, n: int) -> Attribution | None:
    return read_sealed(path, _decoder(key, n))


# ----------------------------------------------------------------------------------------- helpers
def _with_document(result: Attribution, analysis: DocumentAnalysis | Encoded) -> Attribution:
    """The result with its document's tokens and prediction (a notebook shows them); an Encoded has no prediction."""
    return replace(result, document=analysis.summary()) if isinstance(analysis, DocumentAnalysis) else result


def _resolve(model, analysis, target) -> tuple[Encoded, int]:
    if not isinstance(model, LoadedModel):
        raise AttributionError(f"model must be a LoadedModel, got {type(model).__name__}: load it with "
                               "load_model('demo' or a checkpoint).")
    if isinstance(analysis, DocumentAnalysis):
        if analysis.model_fingerprint != model.fingerprint:
            raise AttributionError("This analysis was made with another model: analyze the text with this model "
                                   "(analyze(model, text)) and attribute that analysis.")
        enc = analysis.encoded
        target = analysis.predicted if target is None else target
    elif isinstance(analysis, Encoded):
        enc = analysis
        if target is None:
            raise AttributionError("Give the target class (target=...) when attributing an Encoded input, or pass "
                                   "the DocumentAnalysis to explain its predicted class.")
    else:
        raise AttributionError(f"Expected a DocumentAnalysis (from analyze) or an Encoded input, got "
                               f"{type(analysis).__name__}.")
    target = whole_number(target, f"target (the class explained: a class index in [0, {model.num_labels - 1}]; this "
                                  f"model's classes: {model.id2label})", 0, model.num_labels - 1,
                          error=AttributionError)
    return enc, target


def validate_settings(n_steps, method, precision, batch_size, tolerance, max_steps) -> tuple:
    """(n_steps, batch_size, tolerance, max_steps) checked, else AttributionError naming the first setting
    integrated_gradients cannot run with, and what it accepts."""
    n_steps = whole_number(n_steps, "n_steps (captum's minimum is 2)", lo=2, error=AttributionError)
    if method not in METHODS:
        raise AttributionError(f"method must be one of {', '.join(METHODS)}; got {method!r}.")
    if precision not in PRECISIONS:
        raise AttributionError(f"precision must be one of {', '.join(sorted(PRECISIONS))}; got {precision!r}.")
    if batch_size is not None:
        batch_size = whole_number(batch_size, "internal_batch_size (steps per batch: a positive integer, or None for automatic)", lo=1,
                                  error=AttributionError)
    tolerance = real_number(tolerance, "tolerance (a positive number, e.g. 0.05)", lo=0.0, above=True, error=AttributionError)
    max_steps = whole_number(max_steps, f"max_steps (at least n_steps, {n_steps}: raise max_steps or lower "
                                        "n_steps)", lo=n_steps, error=AttributionError)
    return n_steps, batch_size, tolerance, max_steps
