"""Faithfulness of token rankings by deletion: AOPC and LOdds curves (seed 003) and decision flips (seed 004).

A ranking orders the document's text tokens from most to least important. Deleting its top tokens should hurt
the prediction more than deleting random ones if the ranking is faithful. Four rankings are compared:
received attention (any layers, optionally scaled by head importance), |IG|, |IG| x attention (seed 004's
"attention x gradient" ordering) and a seeded random permutation.

Deleting = replacing the token id by `<mask>` (default) or `<pad>`; the sequence keeps its length, position ids,
attention mask and global-attention mask, so Longformer's windows stay aligned and only the token identities
change. `<s>` and `</s>` are never deleted: rankings are over positions 1 .. n-2 ("removable" tokens).

With y the class predicted on the intact input, p(.) its probability and x~k the input with the top k % removed:
    AOPC(k)  = p(y | x) - p(y | x~k)                  seed 003 eq. 12 (higher = more faithful)
    LOdds(k) = log p(y | x~k) - log p(y | x)          seed 003 eq. 13 (lower = more faithful)
    AOPC, LOdds = their means over k in `ks` (default 1, 5, 10, 20, 50 %).
    flip fraction = (tokens removed in ranking order when argmax first differs from y) / removable tokens,
                    None when even removing every text token keeps y (seed 004 §5.1, §5.3: "no flip").

Perturbed copies are scored in batches (`batch_size` copies per forward; by default 8, or 1 on a CPU running one
torch thread, where a copy costs the same alone or batched and a batch only adds probes past the flip that stops
the search). The flip search walks a grid of `flip_step` fractions batch by batch and stops at the first batch
with a flip, then (refine=True) narrows the last step down to one token with further batches of evenly spaced
counts. The result is the first flip on that sequence of probes: a model whose decision flips back and forth
inside a grid step may have flipped earlier.

Dataset-wide: `dataset_faithfulness` runs every document (analysis, IG via longviz_core.attribution, deletion)
and keeps one JSON file per document under LONGVIZ_CACHE_DIR/faithfulness/, so an interrupted run resumes.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .analysis import DocumentAnalysis
from .encoding import Encoded
from .errors import LongvizError, finite_vector
from .loading import LoadedModel
from .runtime import COMPUTE
from .types import Progress, report

log = logging.getLogger(__name__)

KS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20, 0.50)
RANKINGS: tuple[str, ...] = ("attention", "ig", "ig_x_attention", "random")
RANKING_LABELS = {
    "attention": "Attention",
    "ig": "|IG|",
    "ig_x_attention": "|IG| × attention",
    "random": "Random",
}
REPLACEMENTS: tuple[str, ...] = ("mask", "pad")
DEFAULT_FLIP_STEP = 0.05
BATCH_SIZE = 8
_CACHE_VERSION = 1


class FaithfulnessError(LongvizError, ValueError):
    """Inputs for which the deletion test is undefined (no text tokens, bad scores or settings)."""


@dataclass(frozen=True)
class RankingCurve:
    name: str
    order: np.ndarray = field(repr=False)  # (m,) removable positions, most important first
    removed: np.ndarray  # (K,) tokens removed at each k
    probs: np.ndarray  # (K,) p(y | x with the top-k removed)
    aopc_k: np.ndarray  # (K,) p(y | x) - p(y | x~k)
    lodds_k: np.ndarray  # (K,) log p(y | x~k) - log p(y | x)
    flip_removed: int | None  # tokens removed at the first decision flip found; None = no flip
    flip_fraction: float | None  # flip_removed / removable tokens; None = no flip

    @property
    def aopc(self) -> float:
        return float(self.aopc_k.mean())

    @property
    def lodds(self) -> float:
        return float(self.lodds_k.mean())


@dataclass(frozen=True)
class FaithfulnessResult:
    ks: tuple[float, ...]
    predicted: int  # y: the class predicted on the intact input
    p_original: float  # p(y | x), from the same batched forward as the perturbed copies
    n: int  # tokens, <s> and </s> included
    n_removable: int  # n - 2
    replacement: str  # the token written over deleted ones, e.g. '<mask>'
    flip_step: float
    refine: bool
    seed: int  # of the random ranking
    curves: dict[str, RankingCurve]
    forward_passes: int  # perturbed copies scored (the intact input included)
    seconds: float

    def table(self) -> pd.DataFrame:
        """One row per ranking: AOPC@k and LOdds@k for every k, their means, and the flip fraction (NaN = no
        flip)."""
        return pd.DataFrame([_row(c, self.ks) for c in self.curves.values()])

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves for charts: ranking, k (fraction), removed, probability, aopc, lodds."""
        rows = []
        for c in self.curves.values():
            for i, k in enumerate(self.ks):
                rows.append({"ranking": RANKING_LABELS.get(c.name, c.name), "k": k, "removed": int(c.removed[i]),
                             "probability": float(c.probs[i]), "aopc": float(c.aopc_k[i]),
                             "lodds": float(c.lodds_k[i])})
        return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------- rankings
def ranking_scores(analysis: DocumentAnalysis, attribution, layers=None, scale=None) -> dict[str, np.ndarray]:
    """The three score-based rankings' scores, each (n,): received attention over `layers` (None = all; `scale`
    an optional (layers, heads) weight such as head importance), |attribution|, and their product."""
    attribution = _vector(attribution, analysis.n, "attribution")
    attention = np.asarray(analysis.attention.received(layers=layers, scale=scale), dtype=np.float64)
    ig = np.abs(attribution)
    return {"attention": attention, "ig": ig, "ig_x_attention": ig * attention}


def removal_order(scores, n: int | None = None) -> np.ndarray:
    """Removable positions (1 .. n-2) sorted from the highest score to the lowest; ties keep the lower position
    first, so the order is deterministic."""
    scores = _vector(scores, n, "scores")
    inner = scores[1:-1]
    return (np.argsort(-inner, kind="stable") + 1).astype(np.int64)


def random_order(n: int, seed: int = 0) -> np.ndarray:
    """A seeded random permutation of the removable positions 1 .. n-2."""
    if n < 3:
        raise FaithfulnessError(f"a document needs at least one text token between <s> and </s>, got n={n}")
    return (np.random.default_rng(seed).permutation(n - 2) + 1).astype(np.int64)


def default_batch_size(model: LoadedModel) -> int:
    """Copies per forward: 1 on a CPU running one torch thread, BATCH_SIZE otherwise.

    Measured on the demo (README, "Faithfulness"): with one thread a copy costs the same alone or in a batch, so
    batches only add probes past the first flip; with two threads a lone copy cost 3-4x more than one in a batch
    of 8 (thread start-up and synchronisation per operation), and a GPU needs batches to be used at all."""
    single_thread_cpu = torch.device(model.device).type == "cpu" and torch.get_num_threads() == 1
    return 1 if single_thread_cpu else BATCH_SIZE


def removed_count(k: float, m: int) -> int:
    """Tokens removed at fraction k of m removable tokens: round(k * m), at least 1 and at most m."""
    return int(min(m, max(1, math.floor(k * m + 0.5))))


# ------------------------------------------------------------------------------------------- one document
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
    flip_step: float = DEFAULT_FLIP_STEP,
    refine: bool = True,
    seed: int = 0,
    batch_size: int | None = None,
    progress: Progress | None = None,
    on_wait=None,
) -> FaithfulnessResult:
    """Deletion curves and decision flips of `rankings` for one document.

    attribution: signed IG scores (n,) of the predicted class (Attribution.scores).
    layers / scale: the attention ranking's source, as AttentionBands.received (None = all layers, unscaled).
    rankings: any of RANKINGS. ks: fractions of the removable tokens, each in (0, 1].
    replacement: 'mask' (the tokenizer's mask token) or 'pad'. flip_step: grid of the flip search, in (0, 1].
    batch_size: perturbed copies per forward pass; None = default_batch_size(model)."""
    started = time.monotonic()
    ks = _check_ks(ks)
    _check_settings(rankings, flip_step, batch_size)
    unknown = [r for r in rankings if r not in RANKINGS]
    if unknown:
        raise FaithfulnessError(f"unknown ranking(s) {unknown}; choose from {list(RANKINGS)}")
    n = analysis.n
    attribution = _vector(attribution, n, "attribution")  # checked even when only the random ranking uses none
    scores = ranking_scores(analysis, attribution, layers, scale) if set(rankings) - {"random"} else {}
    orders = {r: random_order(n, seed) if r == "random" else removal_order(scores[r]) for r in rankings}
    runner = _Runner(model, analysis.encoded, _replacement_id(model.tokenizer, replacement),
                     default_batch_size(model) if batch_size is None else int(batch_size))
    m = n - 2
    counts = [removed_count(k, m) for k in ks]
    with COMPUTE.hold(on_wait):
        report(progress, 0.0, "Deletion curves")
        # The intact input rides in the first batch, so p(y | x) comes from the same kind of pass as the rest.
        probes = [(orders[rankings[0]], 0)] + [(orders[r], c) for r in rankings for c in counts]
        logp = runner.log_probs(probes)  # (1 + R*K, classes)
        predicted = int(np.argmax(logp[0]))
        base = logp[0, predicted]
        curves_logp = logp[1:, predicted].reshape(len(rankings), len(counts))  # (R, K)
        flips: dict[str, int | None] = {}
        for i, r in enumerate(rankings):
            lo = 0.3 + 0.7 * i / len(rankings)
            report(progress, lo, f"Decision flips: {RANKING_LABELS[r]}")
            flips[r] = _first_flip(runner, orders[r], predicted, flip_step, refine)
        report(progress, 1.0, "Done")
    curves = {}
    for i, r in enumerate(rankings):
        lp = curves_logp[i]
        curves[r] = RankingCurve(
            name=r,
            order=orders[r],
            removed=np.asarray(counts, dtype=np.int64),
            probs=np.exp(lp),
            aopc_k=np.exp(base) - np.exp(lp),
            lodds_k=lp - base,
            flip_removed=flips[r],
            flip_fraction=None if flips[r] is None else flips[r] / m,
        )
    return FaithfulnessResult(
        ks=tuple(ks), predicted=predicted, p_original=float(np.exp(base)), n=n, n_removable=m,
        replacement=model.tokenizer.convert_ids_to_tokens(runner.replacement_id), flip_step=float(flip_step),
        refine=bool(refine), seed=int(seed), curves=curves, forward_passes=runner.passes,
        seconds=time.monotonic() - started,
    )


# ------------------------------------------------------------------------------------------- dataset
@dataclass(frozen=True)
class DatasetFaithfulness:
    per_document: pd.DataFrame  # one row per (document, ranking): doc, label, predicted, n, p_original, table()
    summary: pd.DataFrame  # one row per ranking: mean and std of every number, flips and no-flip counts
    n_documents: int
    from_cache: int  # documents read from the disk cache
    ks: tuple[float, ...] = KS

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves of every document for charts: doc, ranking, k, aopc, lodds."""
        rows = []
        for rec in self.per_document.to_dict("records"):
            for k in self.ks:
                rows.append({"doc": rec["doc"], "ranking": rec["ranking"], "k": k,
                             "aopc": rec[f"aopc@{_pct(k)}"], "lodds": rec[f"lodds@{_pct(k)}"]})
        return pd.DataFrame(rows)


def dataset_faithfulness(
    model: LoadedModel,
    texts,
    labels=None,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    layers=None,
    scale=None,
    rankings: Sequence[str] = RANKINGS,
    ks: Sequence[float] = KS,
    replacement: str = "mask",
    flip_step: float = DEFAULT_FLIP_STEP,
    refine: bool = True,
    seed: int = 0,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetFaithfulness:
    """`faithfulness` on every document (IG with `ig_steps` steps on the predicted class), then mean and std per
    ranking. Each document's rows are cached on disk, keyed by model, token ids and every setting."""
    import warnings

    from .analysis import analyze
    from .attribution import ConvergenceWarning, integrated_gradients

    texts = list(texts)
    if not texts:
        raise FaithfulnessError("No documents to evaluate.")
    labels = [None] * len(texts) if labels is None else [None if v is None else int(v) for v in labels]
    ks = _check_ks(ks)
    _check_settings(rankings, flip_step, batch_size)
    settings = {"v": _CACHE_VERSION, "model": model.fingerprint, "max_tokens": int(max_tokens),
                "ig_steps": int(ig_steps), "layers": _jsonable(layers), "scale": array_digest(scale),
                "rankings": list(rankings), "ks": list(ks), "replacement": replacement,
                "flip_step": float(flip_step), "refine": bool(refine), "seed": int(seed)}
    store = JsonStore("faithfulness", cache_dir)
    rows, hits, started = [], 0, time.monotonic()
    for i, text in enumerate(texts):
        done = i / len(texts)
        eta = eta_text(started, i, len(texts))
        key = document_key(settings, text)
        doc_rows = store.get(key)
        if doc_rows is None:
            def sub(f, msg, lo=done, i=i, eta=eta):
                report(progress, lo + f / len(texts), f"Document {i + 1}/{len(texts)}{eta}: {msg}")

            analysis = analyze(model, text, max_tokens, on_wait=on_wait)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # few steps are the dataset-wide compromise
                ig = integrated_gradients(model, analysis, None, ig_steps, cache_dir=cache_dir,
                                          progress=lambda f, msg: sub(0.5 * f, f"IG {msg}"), on_wait=on_wait)
            result = faithfulness(model, analysis, ig.scores, layers=layers, scale=scale, rankings=rankings, ks=ks,
                                  replacement=replacement, flip_step=flip_step, refine=refine, seed=seed,
                                  batch_size=batch_size, progress=lambda f, msg: sub(0.5 + 0.5 * f, msg),
                                  on_wait=on_wait)
            doc_rows = [{"predicted": result.predicted, "n": result.n, "p_original": result.p_original, **r}
                        for r in result.table().to_dict("records")]
            store.put(key, doc_rows)
        else:
            hits += 1
        for r in doc_rows:
            rows.append({"doc": i, "label": labels[i], **r})
        report(progress, (i + 1) / len(texts), f"Document {i + 1}/{len(texts)} done")
    per_doc = pd.DataFrame(rows)
    return DatasetFaithfulness(per_doc, summarise(per_doc, ks), len(texts), hits, ks)


def summarise(per_document: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """Per ranking: mean and std over documents of AOPC@k, LOdds@k, AOPC, LOdds; the flip fraction's mean and
    std over the documents that flipped, how many flipped and how many did not ('no flip')."""
    numbers = [f"aopc@{_pct(k)}" for k in ks] + ["aopc"] + [f"lodds@{_pct(k)}" for k in ks] + ["lodds"]
    out = []
    for ranking, group in per_document.groupby("ranking", sort=False):
        row = {"ranking": ranking, "documents": len(group)}
        for col in numbers + ["flip_fraction"]:
            values = group[col].to_numpy(dtype=np.float64)
            row[f"{col} mean"] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
            row[f"{col} std"] = float(np.nanstd(values)) if np.isfinite(values).any() else math.nan
        row["flipped"] = int(group["flip_fraction"].notna().sum())
        row["no flip"] = int(group["flip_fraction"].isna().sum())
        out.append(row)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------- disk store
class JsonStore:
    """One JSON file per key under <cache root>/<kind>/. Writes go to a temporary file in the same folder and
    are renamed over the target, so a reader never sees half a file; an unreadable file counts as missing."""

    def __init__(self, kind: str, cache_dir=None) -> None:
        from .demo import cache_root

        self.root = cache_root(cache_dir) / kind

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str):
        path = self.path(key)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            if payload.get("key") != key:
                raise ValueError("key mismatch")
            return payload["value"]
        except FileNotFoundError:
            return None
        except Exception as exc:  # json, unicode, key errors all mean one thing: recompute
            log.warning("Unreadable cache file %s (%s); recomputing.", path, exc)
            return None

    def put(self, key: str, value) -> None:
        data = json.dumps({"key": key, "value": value}, allow_nan=True).encode("utf-8")
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f"{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.path(key))
        except OSError as exc:  # a full or read-only disk costs the cache, not the result
            Path(tmp).unlink(missing_ok=True)
            log.warning("Could not write cache file %s: %s", self.path(key), exc)


def digest(obj) -> str:
    """A short stable hash of a JSON-able object (cache keys)."""
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


def document_key(settings: dict, text: str) -> str:
    """Cache key of one document's results under `settings` (model fingerprint and every number-changing option)."""
    text_digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return digest({**settings, "text": text_digest})


def array_digest(a) -> str | None:
    """Hash of an optional array's values and shape (e.g. head importance) for cache keys."""
    if a is None:
        return None
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    return hashlib.blake2b(a.tobytes() + str(a.shape).encode(), digest_size=12).hexdigest()


def eta_text(started: float, done: int, total: int) -> str:
    """' (about N s left)' from the mean time per finished item; '' before the first one."""
    if not done:
        return ""
    left = (time.monotonic() - started) / done * (total - done)
    return f" (about {left / 60:.0f} min left)" if left >= 90 else f" (about {left:.0f} s left)"


# ------------------------------------------------------------------------------------------- workers
class _Runner:
    """Scores perturbed copies of one encoded document in batches and counts the copies."""

    def __init__(self, model: LoadedModel, enc: Encoded, replacement_id: int, batch_size: int) -> None:
        self.model, self.enc, self.replacement_id, self.batch_size = model, enc, int(replacement_id), batch_size
        self.passes = 0

    def log_probs(self, probes: list[tuple[np.ndarray, int]]) -> np.ndarray:
        """Log-probabilities (len(probes), classes) of the input with order[:count] replaced, per probe."""
        out = []
        for start in range(0, len(probes), self.batch_size):
            chunk = probes[start : start + self.batch_size]
            ids = np.repeat(self.enc.input_ids[None, :], len(chunk), axis=0)  # (B, n)
            for row, (order, count) in enumerate(chunk):
                ids[row, order[:count]] = self.replacement_id
            out.append(self._forward(ids))
            self.passes += len(chunk)
        return np.concatenate(out, axis=0)

    def _forward(self, ids: np.ndarray) -> np.ndarray:
        device = self.model.device
        b = ids.shape[0]
        as_t = lambda a: torch.as_tensor(a, dtype=torch.long, device=device)  # noqa: E731
        inputs = {
            "input_ids": as_t(ids),
            "attention_mask": torch.ones(ids.shape, dtype=torch.long, device=device),
            "position_ids": as_t(np.repeat(self.enc.position_ids[None, :], b, axis=0)),
        }
        if self.model.is_longformer:
            inputs["global_attention_mask"] = as_t(np.repeat(self.enc.global_mask[None, :], b, axis=0))
        with torch.no_grad():
            logits = self.model.model(**inputs).logits
        return torch.log_softmax(logits.double(), dim=-1).cpu().numpy()


def _first_flip(runner: _Runner, order: np.ndarray, predicted: int, step: float, refine: bool) -> int | None:
    """Smallest probed count whose removal changes the argmax, or None when removing every token does not."""
    m = len(order)
    grid = sorted({removed_count(j * step, m) for j in range(1, math.ceil(1.0 / step) + 1)} | {m})
    lo, hi = 0, None  # lo: last probe without a flip; hi: first probe with one
    for start in range(0, len(grid), runner.batch_size):
        chunk = grid[start : start + runner.batch_size]
        flipped = np.argmax(runner.log_probs([(order, c) for c in chunk]), axis=1) != predicted
        if flipped.any():
            first = int(np.argmax(flipped))
            hi, lo = chunk[first], (chunk[first - 1] if first else lo)
            break
        lo = chunk[-1]
    if hi is None:
        return None
    while refine and hi - lo > 1:
        inner = np.unique(np.linspace(lo, hi, min(runner.batch_size, hi - lo - 1) + 2).round().astype(int))[1:-1]
        flipped = np.argmax(runner.log_probs([(order, int(c)) for c in inner]), axis=1) != predicted
        if flipped.any():
            first = int(np.argmax(flipped))
            hi, lo = int(inner[first]), (int(inner[first - 1]) if first else lo)
        else:
            lo = int(inner[-1])
    return int(hi)


def _replacement_id(tokenizer, replacement: str) -> int:
    if replacement not in REPLACEMENTS:
        raise FaithfulnessError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    token_id = tokenizer.mask_token_id if replacement == "mask" else tokenizer.pad_token_id
    if token_id is None:
        raise FaithfulnessError(f"The tokenizer has no {replacement} token; choose the other replacement.")
    return int(token_id)


def _row(curve: RankingCurve, ks: Sequence[float]) -> dict:
    row = {"ranking": RANKING_LABELS.get(curve.name, curve.name)}
    row.update({f"aopc@{_pct(k)}": float(v) for k, v in zip(ks, curve.aopc_k)})
    row["aopc"] = curve.aopc
    row.update({f"lodds@{_pct(k)}": float(v) for k, v in zip(ks, curve.lodds_k)})
    row["lodds"] = curve.lodds
    row["flip_fraction"] = math.nan if curve.flip_fraction is None else float(curve.flip_fraction)
    row["flip_removed"] = math.nan if curve.flip_removed is None else float(curve.flip_removed)
    return row


def _pct(k: float) -> str:
    return f"{100 * k:g}%"


def _vector(values, n: int | None, what: str) -> np.ndarray:
    v = finite_vector(values, what, FaithfulnessError)
    if n is not None and v.size != n:
        raise FaithfulnessError(f"{what} has {v.size} values but the document has {n} tokens")
    if v.size < 3:
        raise FaithfulnessError(f"{what} needs at least 3 tokens (<s>, one text token, </s>), got {v.size}")
    return v


def _check_ks(ks) -> tuple[float, ...]:
    ks = tuple(float(k) for k in ks)
    if not ks or any(not (0.0 < k <= 1.0) for k in ks):
        raise FaithfulnessError(f"ks must be fractions in (0, 1], got {ks}")
    if list(ks) != sorted(set(ks)):
        raise FaithfulnessError(f"ks must be increasing and distinct, got {ks}")
    return ks


def _check_settings(rankings, flip_step, batch_size) -> None:
    if not rankings:
        raise FaithfulnessError("choose at least one ranking")
    if not (0.0 < float(flip_step) <= 1.0):
        raise FaithfulnessError(f"flip_step must be a fraction in (0, 1], got {flip_step}")
    if batch_size is not None and int(batch_size) < 1:
        raise FaithfulnessError(f"batch_size must be at least 1, got {batch_size}")


def _jsonable(layers):
    if layers is None:
        return None
    return [int(v) for v in np.atleast_1d(np.asarray(layers))]


__all__ = [
    "BATCH_SIZE", "DEFAULT_FLIP_STEP", "DatasetFaithfulness", "FaithfulnessError", "FaithfulnessResult", "JsonStore",
    "KS", "RANKINGS", "RANKING_LABELS", "REPLACEMENTS", "RankingCurve", "array_digest", "dataset_faithfulness",
    "default_batch_size", "digest", "document_key", "eta_text", "faithfulness", "random_order", "ranking_scores",
    "removal_order", "removed_count", "summarise",
]
