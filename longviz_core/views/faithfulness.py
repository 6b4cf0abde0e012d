"""Faithfulness of token rankings by deletion: AOPC and LOdds curves (seed 003) and decision flips (seed 004).

A ranking orders the document's text tokens from most to least important. Deleting its top tokens should hurt
the prediction more than deleting random ones if the ranking is faithful. Four rankings are compared:
received attention (any layers, optionally scaled by head importance), |IG|, |IG| x attention (seed 004's
"attention x gradient" ordering) and random permutations, one per seed (default five, as seed 003's random
baseline: mean and standard deviation over the seeds).

Deleting = replacing the token id by `<mask>` (default) or `<pad>`; the sequence keeps its length, position ids,
attention mask and global-attention mask, so Longformer's windows stay aligned and only the token identities
change. `<s>` and `</s>` are never deleted: rankings are over positions 1 .. n-2 ("removable" tokens).

With y the class predicted on the intact input, p(.) its probability and x~k the input with the top k % removed:
    AOPC(k)  = p(y | x) - p(y | x~k)                  seed 003 eq. 12 (higher = more faithful)
    LOdds(k) = log p(y | x~k) - log p(y | x)          seed 003 eq. 13 (lower = more faithful)
    AOPC, LOdds = their means over k in `ks` (default 1, 5, 10, 20, 50 %).
    flip fraction = c / removable tokens, c the smallest count whose removal in ranking order changes the argmax
                    (seed 004 §5.1: the first decision flip); None when no count up to the scan's limit does
                    ("no flip"; seed 004 §5.3 leaves such instances out of its flip statistics).
Random baseline: every seed is a full run (curves and flip); its numbers are the mean and the population
standard deviation over the seeds; the flip fraction's mean and sd are over the seeds that flipped (as seed 004
leaves out instances that never flip), and `flip_rate` is the share of seeds that flipped.

The first flip is found by an exact scan: every count 1, 2, 3, ... is scored in increasing order until the
decision flips, because the decision need not stay flipped once it flips (a grid or bisection can miss the first
flip and report a later one). Copies are scored in batches of consecutive counts (`batch_size` per forward; by
default 8, or 1 on a CPU running one torch thread, where a copy costs the same alone or batched); the scan stops
after the first batch holding a flip and reports that batch's smallest flipping count. A ranking that never flips
costs one forward per removable token; `max_removed` caps the scan (a fraction of the removable tokens) and then
"no flip" means "no flip within the first max_removed of the tokens".

With resume=True each scan's position is kept on disk (LONGVIZ_CACHE_DIR/flip-scans/), so an interrupted run goes
on where its scans stopped.

Dataset-wide means and sds over documents: the precompute's "faithfulness" kind stores every document's numbers
and a result store aggregates them (dataset.aggregate.summarise_faithfulness).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from .._disk import JsonStore, array_digest, digest
from ..errors import LongvizError, finite_vector
from ..model.analysis import DocumentAnalysis
from ..model.encoding import Encoded
from ..model.loading import LoadedModel
from ..progress import Progress, format_seconds, report
from ..runtime import COMPUTE

KS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20, 0.50)
RANKINGS: tuple[str, ...] = ("attention", "ig", "ig_x_attention", "random")
RANKING_LABELS = {
    "attention": "Attention",
    "ig": "|IG|",
    "ig_x_attention": "|IG| × attention",
    "random": "Random",
}
REPLACEMENTS: tuple[str, ...] = ("mask", "pad")
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
BATCH_SIZE = 8
_REPORT_EVERY_S = 0.25  # progress reports during a scan: one per batch, at most this often


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
    flip_removed: int | None  # smallest count whose removal changes the decision; None = no flip up to `scanned`
    flip_fraction: float | None  # flip_removed / removable tokens; None = no flip
    scanned: int  # every count 1 .. scanned was scored (the first flip, or the scan's limit when none)
    seed: int | None = None  # of a random ranking

    @property
    def aopc(self) -> float:
        return float(self.aopc_k.mean())

    @property
    def lodds(self) -> float:
        return float(self.lodds_k.mean())


@dataclass(frozen=True)
class RandomBaseline:
    """The random ranking run once per seed: per-seed curves and their mean and population sd over the seeds."""

    seeds: tuple[int, ...]
    runs: tuple[RankingCurve, ...]  # one per seed, in the order of `seeds`

    def _stack(self, name: str) -> np.ndarray:
        return np.stack([getattr(c, name) for c in self.runs])  # (S, K)

    def mean(self, name: str) -> np.ndarray:
        """Mean over seeds, per k, of 'probs', 'aopc_k' or 'lodds_k'."""
        return self._stack(name).mean(axis=0)  # (K,)

    def sd(self, name: str) -> np.ndarray:
        """Population standard deviation over seeds, per k, of 'probs', 'aopc_k' or 'lodds_k'."""
        return self._stack(name).std(axis=0)  # (K,)

    @property
    def aopc(self) -> np.ndarray:
        return np.array([c.aopc for c in self.runs])  # (S,) each seed's AOPC

    @property
    def lodds(self) -> np.ndarray:
        return np.array([c.lodds for c in self.runs])  # (S,) each seed's LOdds

    @property
    def flip_fractions(self) -> np.ndarray:
        """(S,) each seed's flip fraction, NaN where it did not flip."""
        return np.array([math.nan if c.flip_fraction is None else c.flip_fraction for c in self.runs])

    @property
    def flip_rate(self) -> float:
        """Share of the seeds whose decision flipped."""
        return float(np.isfinite(self.flip_fractions).mean())

    def flip_stats(self, name: str = "flip_fraction") -> tuple[float | None, float | None]:
        """(mean, population sd) of 'flip_fraction' or 'flip_removed' over the seeds that flipped; (None, None)
        when none did (seed 004 §5.3 leaves never-flipping instances out)."""
        values = [getattr(c, name) for c in self.runs if c.flip_removed is not None]
        if not values:
            return None, None
        return float(np.mean(values)), float(np.std(values))


@dataclass(frozen=True)
class FaithfulnessResult:
    ks: tuple[float, ...]
    predicted: int  # y: the class predicted on the intact input
    p_original: float  # p(y | x), from the same batched forward as the perturbed copies
    n: int  # tokens, <s> and </s> included
    n_removable: int  # n - 2
    replacement: str  # the token written over deleted ones, e.g. '<mask>'
    max_removed: float  # the flip scan's limit, a fraction of the removable tokens (1.0 = every count)
    flip_limit: int  # the scan's limit in tokens: removed_count(max_removed, n_removable)
    curves: dict[str, RankingCurve]  # the score-based rankings
    random: RandomBaseline | None  # the random ranking, one run per seed; None when not requested
    forward_passes: int  # perturbed copies scored (the intact input included)
    seconds: float

    @property
    def rankings(self) -> list[str]:
        """Ranking names in display order, 'random' last when present."""
        return list(self.curves) + (["random"] if self.random is not None else [])

    def table(self) -> pd.DataFrame:
        """One row per ranking: AOPC@k and LOdds@k for every k, their means, the flip fraction (NaN = no flip),
        the flip count and flip_rate (share of runs that flipped). The random row holds the means over its seeds
        and fills the '<column> sd' columns with the population sd over the seeds (NaN for the other rankings);
        its flip numbers are over the seeds that flipped. `runs`: 1, or the number of seeds."""
        rows = [_row(c, self.ks) for c in self.curves.values()]
        if self.random is not None:
            rows.append(_random_row(self.random, self.ks))
        return pd.DataFrame(rows, columns=_columns(self.ks))

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves for charts: ranking, k (fraction), removed, then probability, aopc and lodds, each with
        '<metric>_sd', '<metric>_lo' and '<metric>_hi' (mean -+ sd over the random seeds; NaN for the other
        rankings). The random ranking's row per k is its mean over the seeds."""
        rows = []
        for c in self.curves.values():
            for i, k in enumerate(self.ks):
                rows.append({"ranking": RANKING_LABELS.get(c.name, c.name), "k": k, "removed": int(c.removed[i]),
                             **{m: float(getattr(c, a)[i]) for m, a in _CURVE_ATTRS.items()}})
        if self.random is not None:
            first = self.random.runs[0]
            stats = {m: (self.random.mean(a), self.random.sd(a)) for m, a in _CURVE_ATTRS.items()}
            for i, k in enumerate(self.ks):
                row = {"ranking": RANKING_LABELS["random"], "k": k, "removed": int(first.removed[i])}
                for m, (mean, sd) in stats.items():
                    row.update({m: float(mean[i]), f"{m}_sd": float(sd[i]), f"{m}_lo": float(mean[i] - sd[i]),
                                f"{m}_hi": float(mean[i] + sd[i])})
                rows.append(row)
        columns = ["ranking", "k", "removed"] + [f"{m}{s}" for m in _CURVE_ATTRS for s in ("", "_sd", "_lo", "_hi")]
        return pd.DataFrame(rows, columns=columns)

    def seed_curves(self) -> pd.DataFrame:
        """Every random seed's own curve: seed, k, removed, probability, aopc, lodds (empty without random)."""
        runs = self.random.runs if self.random is not None else ()
        return pd.DataFrame([{"seed": c.seed, "k": k, "removed": int(c.removed[i]),
                              **{m: float(getattr(c, a)[i]) for m, a in _CURVE_ATTRS.items()}}
                             for c in runs for i, k in enumerate(self.ks)],
                            columns=["seed", "k", "removed", *_CURVE_ATTRS])

    def flips(self) -> pd.DataFrame:
        """One row per scan: ranking, seed (random only), flip_removed and flip_fraction (NaN = no flip)."""
        runs = list(self.curves.values()) + list(self.random.runs if self.random is not None else ())
        nan = math.nan
        return pd.DataFrame([{"ranking": RANKING_LABELS.get(c.name, c.name), "seed": nan if c.seed is None else c.seed,
                              "flip_removed": nan if c.flip_removed is None else c.flip_removed,
                              "flip_fraction": nan if c.flip_fraction is None else c.flip_fraction} for c in runs],
                            columns=["ranking", "seed", "flip_removed", "flip_fraction"])


_CURVE_ATTRS = {"probability": "probs", "aopc": "aopc_k", "lodds": "lodds_k"}


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

    Measured on the demo (docs/benchmarks.md, "Faithfulness"): with one thread a copy costs the same alone or in a batch, so
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
    seeds: Sequence[int] = DEFAULT_SEEDS,
    max_removed: float = 1.0,
    batch_size: int | None = None,
    resume: bool = False,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> FaithfulnessResult:
    """Deletion curves and first decision flips (exact scan) of `rankings` for one document.

    attribution: signed IG scores (n,) of the predicted class (Attribution.scores); rankings use |scores|.
    layers / scale: the attention ranking's source, as AttentionBands.received (None = all layers, unscaled).
    rankings: any of RANKINGS. ks: fractions of the removable tokens, each in (0, 1].
    replacement: 'mask' (the tokenizer's mask token) or 'pad'.
    seeds: the random ranking's seeds, one full run each (distinct, >= 0).
    max_removed: the flip scan's limit as a fraction of the removable tokens, in (0, 1]; 1.0 scans every count.
    batch_size: perturbed copies per forward pass; None = default_batch_size(model).
    resume: keep each flip scan's position on disk (LONGVIZ_CACHE_DIR/flip-scans/, or under `cache_dir`), so a
    run that is interrupted goes on where its scans stopped. The key is the model's fingerprint, the document's
    token ids, the replacement and the ranking's order: only for models whose fingerprint identifies them.
    progress: told the scan's position and an estimate of the time left if no flip comes sooner."""
    started = time.monotonic()
    ks = check_ks(ks)
    seeds = check_settings(rankings, batch_size, seeds, max_removed)
    n = analysis.n
    attribution = _vector(attribution, n, "attribution")  # checked even when only the random ranking uses none
    scored = [r for r in rankings if r != "random"]
    scores = ranking_scores(analysis, attribution, layers, scale) if scored else {}
    # one run per score-based ranking, then one per random seed: (name, seed, order)
    runs = [(r, None, removal_order(scores[r])) for r in scored]
    if "random" in rankings:
        runs += [("random", s, random_order(n, s)) for s in seeds]
    runner = _Runner(model, analysis.encoded, _replacement_id(model.tokenizer, replacement),
                     default_batch_size(model) if batch_size is None else int(batch_size))
    m = n - 2
    limit = removed_count(max_removed, m)
    counts = [removed_count(k, m) for k in ks]
    with COMPUTE.hold(on_wait):
        report(progress, 0.0, f"Deletion curves: {1 + len(runs) * len(counts)} copies")
        # The intact input rides in the first batch, so p(y | x) comes from the same kind of pass as the rest.
        probes = [(runs[0][2], 0)] + [(order, c) for _, _, order in runs for c in counts]
        logp = runner.log_probs(probes)  # (1 + runs*K, classes)
        predicted = int(np.argmax(logp[0]))
        base = logp[0, predicted]
        curves_logp = logp[1:, predicted].reshape(len(runs), len(counts))  # (runs, K)
        scan = _ScanProgress(progress, runner, len(runs) * limit)
        saved = _ScanStore(model, analysis.encoded, runner.replacement_id, predicted, cache_dir) if resume else None
        flips = []
        for name, seed, order in runs:
            label = RANKING_LABELS[name] + ("" if seed is None else f" (seed {seed})")
            flips.append(_scan(runner, order, predicted, limit, saved, lambda c, label=label: scan.at(c, label)))
            scan.finished(limit, flips[-1])
        report(progress, 1.0, "Done")
    curves = [RankingCurve(
        name=name, order=order, removed=np.asarray(counts, dtype=np.int64), probs=np.exp(lp),
        aopc_k=np.exp(base) - np.exp(lp), lodds_k=lp - base, flip_removed=flip,
        flip_fraction=None if flip is None else flip / m, scanned=limit if flip is None else flip, seed=seed,
    ) for (name, seed, order), lp, flip in zip(runs, curves_logp, flips)]
    randoms = tuple(c for c in curves if c.name == "random")
    return FaithfulnessResult(
        ks=tuple(ks), predicted=predicted, p_original=float(np.exp(base)), n=n, n_removable=m,
        replacement=model.tokenizer.convert_ids_to_tokens(runner.replacement_id), max_removed=float(max_removed),
        flip_limit=limit, curves={c.name: c for c in curves if c.name != "random"},
        random=RandomBaseline(tuple(seeds), randoms) if randoms else None, forward_passes=runner.passes,
        seconds=time.monotonic() - started,
    )


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
        inputs = self.model.family.inputs(self.enc, self.model.device, ids=ids)
        with torch.no_grad():
            logits = self.model(**inputs).logits
        return torch.log_softmax(logits.double(), dim=-1).cpu().numpy()


def _first_flip(runner: _Runner, order: np.ndarray, predicted: int, limit: int, on_clear=None,
                start: int = 1) -> int | None:
    """Smallest count c in start .. limit whose removal (order[:c]) changes the argmax, or None when none does.

    Exact: every count is scored, in increasing order, `runner.batch_size` consecutive counts per forward; the
    scan stops after the first batch holding a flip and returns that batch's smallest flipping count. on_clear
    is told, after each batch without a flip, the largest count scored (every count up to it keeps y)."""
    for first in range(start, limit + 1, runner.batch_size):
        chunk = list(range(first, min(limit, first + runner.batch_size - 1) + 1))
        flipped = np.argmax(runner.log_probs([(order, c) for c in chunk]), axis=1) != predicted
        if flipped.any():
            return chunk[int(np.argmax(flipped))]
        if on_clear is not None:
            on_clear(chunk[-1])
    return None


def _scan(runner: _Runner, order: np.ndarray, predicted: int, limit: int, saved: "_ScanStore | None",
          on_clear=None) -> int | None:
    """_first_flip, resumed from and recorded in `saved` when given."""
    if saved is None:
        return _first_flip(runner, order, predicted, limit, on_clear)
    clear, flip = saved.get(order)  # every count 1 .. clear keeps y; flip: the first count that does not
    if flip is not None or clear >= limit:
        return flip if flip is not None and flip <= limit else None
    if clear and on_clear is not None:
        on_clear(clear)

    def checkpoint(count: int) -> None:
        saved.progress(order, count)
        if on_clear is not None:
            on_clear(count)

    flip = _first_flip(runner, order, predicted, limit, checkpoint, start=clear + 1)
    saved.put(order, limit if flip is None else flip - 1, flip)
    return flip


class _ScanStore:
    """Where each flip scan has got to, on disk: {"clear": c, "flip": f or None} per (document, replacement,
    predicted class, order), written at most every few seconds while a scan runs and when it ends."""

    EVERY_S = 5.0

    def __init__(self, model: LoadedModel, enc: Encoded, replacement_id: int, predicted: int, cache_dir) -> None:
        self.store = JsonStore("flip-scans", cache_dir)
        self.base = {"v": 2, "model": model.fingerprint, "ids": array_digest(enc.input_ids),
                     "positions": array_digest(enc.position_ids), "global": array_digest(enc.global_mask),
                     "replacement": int(replacement_id), "predicted": int(predicted)}
        self.last = time.monotonic()

    def _key(self, order: np.ndarray) -> str:
        return digest({**self.base, "order": array_digest(order)})

    def get(self, order: np.ndarray) -> tuple[int, int | None]:
        value = self.store.get(self._key(order)) or {}
        return int(value.get("clear", 0)), (None if value.get("flip") is None else int(value["flip"]))

    def put(self, order: np.ndarray, clear: int, flip: int | None) -> None:
        old_clear, old_flip = self.get(order)
        if old_flip is None:  # a longer clear stretch from an earlier run with a larger limit is kept
            self.store.put(self._key(order), {"clear": max(clear, old_clear), "flip": flip})
        self.last = time.monotonic()

    def progress(self, order: np.ndarray, clear: int) -> None:
        if time.monotonic() - self.last >= self.EVERY_S:
            self.put(order, clear, None)


class _ScanProgress:
    """Progress of the flip scans: counts settled against the most the scans can still need, and the time the
    rest would take at the cost per copy measured so far (an upper bound: a flip ends a scan early)."""

    def __init__(self, progress: Progress | None, runner: _Runner, worst: int) -> None:
        self.progress, self.runner, self.done, self.total = progress, runner, 0, worst
        self.passes, self.started, self.last = runner.passes, time.monotonic(), -math.inf

    def at(self, count: int, label: str) -> None:
        now = time.monotonic()
        if self.progress is None or now - self.last < _REPORT_EVERY_S:
            return
        self.last = now
        done = self.done + count
        scored = self.runner.passes - self.passes
        left = (now - self.started) / scored * (self.total - done) if scored else math.nan
        eta = f"; at most about {format_seconds(left)} left" if scored else ""
        report(self.progress, done / self.total, f"Decision flips (exact scan), {label}: {count:,} removals "
               f"scored{eta}")

    def finished(self, limit: int, flip: int | None) -> None:
        used = limit if flip is None else flip
        self.done += used
        self.total -= limit - used


def _replacement_id(tokenizer, replacement: str) -> int:
    if replacement not in REPLACEMENTS:
        raise FaithfulnessError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    token_id = tokenizer.mask_token_id if replacement == "mask" else tokenizer.pad_token_id
    if token_id is None:
        raise FaithfulnessError(f"The tokenizer has no {replacement} token; choose the other replacement.")
    return int(token_id)


# ------------------------------------------------------------------------------------------- tables and checks
def metric_columns(ks: Sequence[float]) -> list[str]:
    """The numeric columns of table(): AOPC@k for every k, AOPC, LOdds@k for every k, LOdds."""
    return [f"aopc@{k_label(k)}" for k in ks] + ["aopc"] + [f"lodds@{k_label(k)}" for k in ks] + ["lodds"]


def _columns(ks: Sequence[float]) -> list[str]:
    numbers = metric_columns(ks) + ["flip_fraction"]
    return ["ranking", *numbers, "flip_removed", "flip_rate", "runs", *(f"{c} sd" for c in numbers)]


def _row(curve: RankingCurve, ks: Sequence[float]) -> dict:
    flipped = curve.flip_removed is not None
    values = [*curve.aopc_k, curve.aopc, *curve.lodds_k, curve.lodds, curve.flip_fraction if flipped else math.nan]
    row = {"ranking": RANKING_LABELS.get(curve.name, curve.name)}
    row.update({c: float(v) for c, v in zip(metric_columns(ks) + ["flip_fraction"], values)})
    row.update({"flip_removed": float(curve.flip_removed) if flipped else math.nan,
                "flip_rate": float(flipped), "runs": 1})
    return row


def _random_row(random: RandomBaseline, ks: Sequence[float]) -> dict:
    nan = math.nan
    flip_mean, flip_sd = random.flip_stats("flip_fraction")
    removed_mean, _ = random.flip_stats("flip_removed")
    means = [*random.mean("aopc_k"), random.aopc.mean(), *random.mean("lodds_k"), random.lodds.mean(),
             nan if flip_mean is None else flip_mean]
    sds = [*random.sd("aopc_k"), random.aopc.std(), *random.sd("lodds_k"), random.lodds.std(),
           nan if flip_sd is None else flip_sd]
    names = metric_columns(ks) + ["flip_fraction"]
    row = {"ranking": RANKING_LABELS["random"]}
    row.update({c: float(v) for c, v in zip(names, means)})
    row.update({"flip_removed": nan if removed_mean is None else removed_mean, "flip_rate": random.flip_rate,
                "runs": len(random.runs)})
    row.update({f"{c} sd": float(v) for c, v in zip(names, sds)})
    return row


def k_label(k: float) -> str:
    """A fraction as the column names write it: 0.05 -> '5%'."""
    return f"{100 * k:g}%"


def _vector(values, n: int | None, what: str) -> np.ndarray:
    v = finite_vector(values, what, FaithfulnessError)
    if n is not None and v.size != n:
        raise FaithfulnessError(f"{what} has {v.size} values but the document has {n} tokens")
    if v.size < 3:
        raise FaithfulnessError(f"{what} needs at least 3 tokens (<s>, one text token, </s>), got {v.size}")
    return v


def check_ks(ks) -> tuple[float, ...]:
    """The fractions `ks` as a tuple; FaithfulnessError unless increasing, distinct and in (0, 1]."""
    ks = tuple(float(k) for k in ks)
    if not ks or any(not (0.0 < k <= 1.0) for k in ks):
        raise FaithfulnessError(f"ks must be fractions in (0, 1], got {ks}")
    if list(ks) != sorted(set(ks)):
        raise FaithfulnessError(f"ks must be increasing and distinct, got {ks}")
    return ks


def check_settings(rankings, batch_size, seeds, max_removed) -> tuple[int, ...]:
    """Validates the options shared by faithfulness and the precompute's faithfulness settings; returns the seeds
    as ints."""
    if not rankings:
        raise FaithfulnessError("choose at least one ranking")
    unknown = [r for r in rankings if r not in RANKINGS]
    if unknown:
        raise FaithfulnessError(f"unknown ranking(s) {unknown}; choose from {list(RANKINGS)}")
    if batch_size is not None and int(batch_size) < 1:
        raise FaithfulnessError(f"batch_size must be at least 1, got {batch_size}")
    if not (0.0 < float(max_removed) <= 1.0):
        raise FaithfulnessError(f"max_removed must be a fraction in (0, 1], got {max_removed}")
    seeds = tuple(int(s) for s in seeds)
    if "random" in rankings and (not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds)):
        raise FaithfulnessError(f"the random ranking needs at least one seed, distinct and >= 0; got {seeds}")
    return seeds


__all__ = [
    "BATCH_SIZE", "DEFAULT_SEEDS", "FaithfulnessError", "FaithfulnessResult", "KS", "RANKINGS", "RANKING_LABELS",
    "REPLACEMENTS", "RandomBaseline", "RankingCurve", "check_ks", "check_settings", "default_batch_size",
    "faithfulness", "k_label", "metric_columns", "random_order", "ranking_scores", "removal_order", "removed_count",
]
