"""The deletion test, once for every caller: AOPC / LOdds curves (Song et al. 2024) and first decision flips
(Serrano & Smith 2019) of any set of removal orders, staged, each perturbed input scored once.

    deletion_engine.deletion_test(model, analysis, orders, settings)
                                                       orders: {name: removal order}; the random orders of
                                                       settings.seeds are added here (random_order)
    DeletionResult.rows()                              one row per run: ROW_COLUMNS (the one row schema)
    summarise(rows, ks)                                runs of one document or many -> one row per method

Deleting = replacing the token id by `<mask>` (default) or `<pad>`; positions, attention and global masks stay,
so only token identities change. Orders are over the removable positions, the text tokens (1 .. n-2 between <s>
and </s>; a decoder's template may put none after the text, or none at all: Encoded.text_positions). With y the class predicted on
the intact input and x~c the input with the first c positions of an order removed:
    AOPC(k) = p(y | x) - p(y | x~c(k)),  LOdds(k) = log p(y | x~c(k)) - log p(y | x),  c(k) = removed_count(k, m)
and the first flip is the smallest c whose argmax differs from y, found by an exact scan (every count in order:
the decision may flip back, so a grid can miss the first flip).

p is the head's explained quantity (model.heads). A multi-label head: p = sigmoid_y of the label explained (the
most probable), and a flip is sigmoid_y crossing 0.5. A regression head: p = the score s, AOPC(k) = s(x) -
s(x~c(k)) in score units, LOdds is undefined (None in the curves, NaN in the rows: a score has no log-odds), and
a flip is s crossing settings.threshold, with no scan at all without one (RankingCurve.flips False).

Units (settings.unit, model.segments): "token" removes text tokens as above; "word", "sentence" or "paragraph"
removes whole units. A ranking then orders the m_u units of the document by the sums of their tokens' scores
(removal_order with `segments`), c(k) = removed_count(k, m_u) units are removed at k, the first flip counts units
and the flip scan's bound is in units; the random baseline is a seeded permutation of the units. Same engine,
same stages: a copy is the document with the tokens of the first c units of an order replaced.

Stages (settings.flip_bound): 0 scores the curves only (1 + runs x len(ks) copies at most); an integer N scans
every count 1 .. N ("no flip within the first N tokens" when none flips); None scans to the end (exact). A scan
with resume=True keeps its position on disk, so a later call with a larger bound (or after Stop) goes on from the
last count scored. Copies are keyed by the set of removed positions: the intact input, a curve count the scan
reaches, and equal prefixes of two orders are scored once. The scans of every order advance together, their next
counts sharing each forward (`batch_size` copies).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ..attribution.random_order import random_order
from ..errors import LongvizError, items, real_number, whole_number
from ..model.copies import BATCH_SIZE, REPLACEMENTS, default_batch_size
from ..model.heads import REGRESSION
from ..model.segments import UNITS, Segments, aggregate

KS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20, 0.50)
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
# The default first-flip bound in tokens: with eight orders (three rankings, five seeds) it costs at most 8 x 24
# copies; measured on the demo's document 0 (docs/benchmarks.md, "Faithfulness"), the page's first numbers then
# arrive within the budget of a few hundred forwards.
FLIP_BOUND = 24
RANDOM = "random"
LODDS_UNDEFINED = ("LOdds is undefined for a regression head: it compares log-probabilities, and a score is not a "
                   "probability.")
NO_THRESHOLD = "no decision flips without a threshold"


class DeletionError(LongvizError, ValueError):
    """Inputs for which the deletion test is undefined (no text tokens, bad orders or settings)."""


@dataclass(frozen=True)
class DeletionSettings:
    """Everything that changes the deletion test's numbers (batch_size only its speed)."""

    ks: tuple[float, ...] = KS  # fractions of the removable tokens, increasing, in (0, 1]
    replacement: str = "mask"  # one of REPLACEMENTS
    seeds: tuple[int, ...] = DEFAULT_SEEDS  # one random order per seed; () = no random baseline
    flip_bound: int | None = FLIP_BOUND  # counts the flip scan covers: 0 = none, None = every count (exact)
    batch_size: int | None = None  # copies per forward; None = default_batch_size(model, n)
    threshold: float | None = None  # a regression head's decision, score >= threshold; None = no flips to find
    unit: str = "token"  # what is removed (model.segments.UNITS); ks, counts and flip_bound count these units

    def __post_init__(self):
        # every count through errors.whole_number, every fraction through errors.real_number: NaN, infinity, 2.5,
        # True and "3" are refused by name, not rounded or read
        ks = tuple(real_number(k, "ks (fractions of the removable tokens)", 0.0, 1.0, above=True,
                               error=DeletionError) for k in items(self.ks, "ks", DeletionError))
        if not ks or list(ks) != sorted(set(ks)):
            raise DeletionError(f"ks must be increasing, distinct fractions in (0, 1], got {ks}")
        seeds = tuple(whole_number(s, "a random seed", lo=0, error=DeletionError)
                      for s in items(self.seeds, "seeds", DeletionError))
        if len(set(seeds)) != len(seeds):
            raise DeletionError(f"random seeds must be distinct and >= 0, got {seeds}")
        if self.replacement not in REPLACEMENTS:
            raise DeletionError(f"replacement must be one of {REPLACEMENTS}, got {self.replacement!r}")
        if self.unit not in UNITS:
            raise DeletionError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        if self.flip_bound is not None:
            object.__setattr__(self, "flip_bound", whole_number(
                self.flip_bound, "flip_bound (tokens the flip scan covers; None = every count)", lo=0,
                error=DeletionError))
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", whole_number(self.batch_size, "batch_size (copies per forward)",
                                                                lo=1, error=DeletionError))
        if self.threshold is not None:
            object.__setattr__(self, "threshold", real_number(self.threshold, "threshold (a regression's decision "
                                                              "score)", error=DeletionError))
        object.__setattr__(self, "ks", ks)
        object.__setattr__(self, "seeds", seeds)

    def limit(self, m: int) -> int:
        """The last count the scan covers for m removable tokens (units)."""
        return m if self.flip_bound is None else min(m, self.flip_bound)

    def key(self) -> dict:
        """The settings that change the numbers, for cache keys and store manifests."""
        key = {"ks": list(self.ks), "replacement": self.replacement, "seeds": list(self.seeds),
               "flip_bound": self.flip_bound}
        if self.threshold is not None:  # only a regression's flips depend on it; label heads keep their keys
            key["threshold"] = float(self.threshold)
        if self.unit != "token":  # deletion by tokens keeps the keys it had
            key["unit"] = self.unit
        return key


@dataclass(frozen=True)
class RankingCurve:
    """One removal order's curves and first flip (p: the head's explained quantity, a probability or the score)."""

    name: str
    order: np.ndarray = field(repr=False)  # (m,) removable positions (by units: unit indices), most important first
    removed: np.ndarray  # (K,) tokens (units) removed at each k
    probs: np.ndarray  # (K,) p(y | x with the top-k removed)
    aopc_k: np.ndarray  # (K,) p(y | x) - p(y | x~k)
    lodds_k: np.ndarray | None  # (K,) log p(y | x~k) - log p(y | x); None for a regression's score
    flip_removed: int | None  # smallest count whose removal changes the decision; None = none within `scanned`
    flip_fraction: float | None  # flip_removed / removable tokens; None = no flip within `scanned`
    scanned: int  # every count 1 .. scanned was scored (the first flip, or as far as the scan got)
    seed: int | None = None  # of a random order
    copies: int = 0  # copies this run had scored (a copy another run reached first counts there)
    flips: bool = True  # a decision flip is defined (False: a regression head without a threshold, no scan)

    @property
    def aopc(self) -> float:
        return float(self.aopc_k.mean())

    @property
    def lodds(self) -> float:
        if self.lodds_k is None:
            raise DeletionError(LODDS_UNDEFINED)
        return float(self.lodds_k.mean())

    def flip_text(self, m: int, unit: str = "token") -> str:
        """The first flip in words: '12 tokens (0.046)', 'no flip within the first 24 tokens', 'no flip' or
        NO_THRESHOLD (m removable units of kind `unit`)."""
        if not self.flips:
            return NO_THRESHOLD
        if self.flip_removed is not None:
            return f"{self.flip_removed:,} {unit}s ({self.flip_fraction:.3f})"
        return "no flip" if self.scanned >= m else f"no flip within the first {self.scanned:,} {unit}s"


@dataclass(frozen=True)
class RandomBaseline:
    """The random order run once per seed: per-seed curves and their mean and population sd over the seeds."""

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
        return np.array([c.aopc for c in self.runs])  # (S,)

    @property
    def lodds(self) -> np.ndarray:
        return np.array([c.lodds for c in self.runs])  # (S,)

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
        when none did (Serrano & Smith 2019 leave never-flipping instances out)."""
        values = [getattr(c, name) for c in self.runs if c.flip_removed is not None]
        if not values:
            return None, None
        return float(np.mean(values)), float(np.std(values))


@dataclass(frozen=True)
class DeletionResult:
    ks: tuple[float, ...]
    predicted: int  # y: the label explained (the most probable on the intact input; 0 for a regression's score)
    p_original: float  # p(y | x) (the head's explained quantity), from the same batched forward as the copies
    n: int  # tokens, <s> and </s> included
    n_removable: int  # the text tokens: n - 2 between <s> and </s> (by units: the document's units)
    replacement: str  # the token written over deleted ones, e.g. '<mask>'
    flip_limit: int  # the scan's bound in tokens (units) for this document (n_removable = exact to the end)
    runs: tuple[RankingCurve, ...]  # the given orders, then one per random seed
    labels: dict  # name -> label for tables and charts
    forward_passes: int  # copies scored by this call (the intact input included)
    copies_needed: int  # copies the same answers need without sharing (one per run and count, plus the intact)
    seconds: float
    head: str  # the head's kind (model.heads.KINDS): what p is, whether LOdds and flips are defined
    threshold: float | None  # a regression's decision threshold (score >= threshold); None for label heads
    stopped: bool = False  # Stop was pressed: the scans hold what they had scored
    unit: str = "token"  # what was removed (DeletionSettings.unit): counts, bounds and flips are in these units

    @property
    def lodds_defined(self) -> bool:
        """LOdds compares log-probabilities: undefined for a regression's score (LODDS_UNDEFINED)."""
        return self.head != REGRESSION

    @property
    def flips_defined(self) -> bool:
        """A decision flip is defined: always for labels, for a regression's score only against a threshold."""
        return self.head != REGRESSION or self.threshold is not None

    @property
    def curves(self) -> dict[str, RankingCurve]:
        """The given orders' runs by name (random's seeds are in `random`)."""
        return {r.name: r for r in self.runs if r.seed is None}

    @property
    def random(self) -> RandomBaseline | None:
        runs = tuple(r for r in self.runs if r.seed is not None)
        return RandomBaseline(tuple(r.seed for r in runs), runs) if runs else None

    @property
    def rankings(self) -> list[str]:
        return list(self.curves) + ([RANDOM] if self.random is not None else [])

    @property
    def max_removed(self) -> float:
        return self.flip_limit / self.n_removable

    @property
    def exact(self) -> bool:
        """Every run's first flip is settled: found, or every count scanned."""
        return all(_settled(r, self.n_removable) for r in self.runs)

    def label(self, run: RankingCurve) -> str:
        return self.labels.get(run.name, run.name)

    def rows(self) -> pd.DataFrame:
        """One row per run in the row schema ROW_COLUMNS (NaN first flip = no flip within `scanned`, or none
        defined; NaN LOdds = undefined, a regression's score)."""
        nan = math.nan
        out = []
        for r in self.runs:
            row = {"method": r.name, "seed": nan if r.seed is None else r.seed}
            lodds = [nan] * (len(self.ks) + 1) if r.lodds_k is None else [*r.lodds_k, r.lodds]
            row.update(zip(metric_columns(self.ks), [*r.aopc_k, r.aopc, *lodds]))
            row.update(first_flip=nan if r.flip_fraction is None else r.flip_fraction,
                       flip_removed=nan if r.flip_removed is None else float(r.flip_removed), scanned=r.scanned,
                       settled=_settled(r, self.n_removable), copies=r.copies,
                       deletion_seconds=self.seconds * r.copies / max(1, self.forward_passes))
            out.append(row)
        return pd.DataFrame(out, columns=row_columns(self.ks)).astype({c: float for c in metric_columns(self.ks)})

    def table(self) -> pd.DataFrame:
        """summarise(rows()) in run order, with the labels as `ranking`: one row per method, random's numbers the
        mean and population sd over its seeds."""
        table = summarise(self.rows(), self.ks)
        table.insert(0, "ranking", [self.labels.get(m, m) for m in table["method"]])
        return table

    def numbers(self, flips: bool = True) -> pd.DataFrame:
        """The numbers as the Faithfulness page and a notebook show them, one row per ranking (indexed by its
        label): AOPC and LOdds (where defined) at each k and their means, the first flip, its count and the flip
        rate (with `flips`, where defined), the runs, then the sds; rounded to 4 decimals. Its transpose, a column
        per ranking, is the table on screen."""
        metrics = [c for c in metric_columns(self.ks) if self.lodds_defined or not c.startswith("lodds")]
        flip = ["first_flip", "flip_removed", "flip_rate"] if flips and self.flips_defined else []
        columns = metrics + flip + ["runs"] + [f"{c}_sd" for c in metrics + flip[:1]]
        return self.table().set_index("ranking")[columns].round(4)

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves for charts: ranking, k, removed, then probability, aopc and lodds, each with '_sd', '_lo' and
        '_hi' (mean -+ sd over the random seeds; NaN for the other rankings)."""
        rows = []
        for c in self.curves.values():
            for i, k in enumerate(self.ks):
                rows.append({"ranking": self.label(c), "k": k, "removed": int(c.removed[i]),
                             **{m: float(_curve(c, a)[i]) for m, a in _CURVE_ATTRS.items()}})
        rnd = self.random
        if rnd is not None:
            stats = {m: (_curve(rnd, a, "mean"), _curve(rnd, a, "sd")) for m, a in _CURVE_ATTRS.items()}
            for i, k in enumerate(self.ks):
                row = {"ranking": self.labels.get(RANDOM, "Random"), "k": k, "removed": int(rnd.runs[0].removed[i])}
                for m, (mean, sd) in stats.items():
                    row.update({m: float(mean[i]), f"{m}_sd": float(sd[i]), f"{m}_lo": float(mean[i] - sd[i]),
                                f"{m}_hi": float(mean[i] + sd[i])})
                rows.append(row)
        columns = ["ranking", "k", "removed"] + [f"{m}{s}" for m in _CURVE_ATTRS for s in ("", "_sd", "_lo", "_hi")]
        return pd.DataFrame(rows, columns=columns)

    def seed_curves(self) -> pd.DataFrame:
        """Every random seed's own curve: seed, k, removed, probability, aopc, lodds."""
        runs = self.random.runs if self.random is not None else ()
        return pd.DataFrame([{"seed": c.seed, "k": k, "removed": int(c.removed[i]),
                              **{m: float(_curve(c, a)[i]) for m, a in _CURVE_ATTRS.items()}}
                             for c in runs for i, k in enumerate(self.ks)],
                            columns=["seed", "k", "removed", *_CURVE_ATTRS])

    def flips(self) -> pd.DataFrame:
        """One row per run for figures.faithfulness.flip_chart: ranking, seed, flip_removed, flip_fraction (NaN = no
        flip within the run's scan)."""
        nan = math.nan
        return pd.DataFrame([{"ranking": self.label(c), "seed": nan if c.seed is None else c.seed,
                              "flip_removed": nan if c.flip_removed is None else c.flip_removed,
                              "flip_fraction": nan if c.flip_fraction is None else c.flip_fraction}
                             for c in self.runs], columns=["ranking", "seed", "flip_removed", "flip_fraction"])


_CURVE_ATTRS = {"probability": "probs", "aopc": "aopc_k", "lodds": "lodds_k"}


def _curve(c, attr: str, stat: str | None = None) -> np.ndarray:
    """A run's curve (or a random baseline's mean / sd), NaN throughout for a regression's undefined LOdds."""
    runs = c.runs if isinstance(c, RandomBaseline) else (c,)
    if attr == "lodds_k" and runs[0].lodds_k is None:
        return np.full(len(runs[0].removed), math.nan)
    return getattr(c, stat)(attr) if stat else getattr(c, attr)


def _settled(r: RankingCurve, m: int) -> bool:
    """A run's first flip is known: found, every count scanned, or no decision to flip."""
    return not r.flips or r.flip_removed is not None or r.scanned >= m


# ------------------------------------------------------------------------------------------- the column vocabulary
def k_label(k: float) -> str:
    """A fraction as column names write it: 0.05 -> '5%'."""
    return f"{100 * k:g}%"


def metric_columns(ks: Sequence[float] = KS) -> list[str]:
    """AOPC@k for every k, AOPC (their mean), LOdds@k for every k, LOdds."""
    return [f"aopc@{k_label(k)}" for k in ks] + ["aopc"] + [f"lodds@{k_label(k)}" for k in ks] + ["lodds"]


def row_columns(ks: Sequence[float] = KS) -> list[str]:
    """The one row schema of a run: method, seed (random only), the curve numbers, first_flip (fraction of the
    removable tokens), flip_removed (count), scanned (every count 1 .. scanned was scored), settled (the first flip
    is known: found, or every count scanned), copies (scored for this run) and deletion_seconds (the test's time
    in proportion to those copies)."""
    return ["method", "seed", *metric_columns(ks), "first_flip", "flip_removed", "scanned", "settled", "copies",
            "deletion_seconds"]


def summarise(runs: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """Runs of one document or many (a 'doc' column tells documents apart) -> one row per method, in order of
    first appearance: every number's mean over documents; first_flip over the runs that flipped, flip_rate the
    share that did. Random (rows with a seed): each seed's mean over documents first, then the mean and the
    population sd over the seeds (`<number>_sd`; NaN for the other methods). `documents`, `runs` (seeds or 1);
    `no_flip_within`: the fewest counts scanned by a run that neither flipped nor reached its end (a bounded
    scan: "no flip within the first N tokens"), NaN when every run is settled."""
    cols = metric_columns(ks) + ["first_flip"]
    missing = [c for c in ["method", "seed", *cols] if c not in runs]
    if missing:
        raise DeletionError(f"runs lack column(s) {missing}")
    if runs.empty:
        raise DeletionError("no runs to summarise")
    docs = runs["doc"] if "doc" in runs else pd.Series(0, index=runs.index)
    out = []
    for method, group in runs.groupby("method", sort=False):
        row = {"method": method, "documents": int(docs[group.index].nunique())}
        seeded = group["seed"].notna().any()
        means = group.groupby("seed")[cols].mean() if seeded else group[cols]  # pandas skips NaN (no flip)
        for c in cols:
            values = means[c].dropna() if seeded else group[c].dropna()
            row[c] = float(values.mean()) if len(values) else math.nan
            row[f"{c}_sd"] = float(values.std(ddof=0)) if seeded and len(values) else math.nan
        row["flip_removed"] = float(group["flip_removed"].mean()) if "flip_removed" in group else math.nan
        row["flip_rate"] = float(group["first_flip"].notna().mean())
        row["runs"] = int(group["seed"].nunique()) if seeded else 1
        open_ = group[~group["settled"].astype(bool)] if "settled" in group else group.iloc[:0]
        row["no_flip_within"] = float(open_["scanned"].min()) if len(open_) else math.nan
        out.append(row)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------- orders
def removal_order(scores, n: int | None = None, prefix: int = 1, suffix: int = 1, *,
                  segments: Segments | None = None) -> np.ndarray:
    """Removable positions (the text tokens prefix .. n-1-suffix; <s> and </s>: 1 .. n-2) sorted from the highest
    score to the lowest; ties keep the lower position first, so the order is deterministic. With `segments`
    (deletion by units, model.segments.segment): the unit indices 0 .. m_u-1 sorted by the sums of their tokens'
    scores (model.segments.aggregate), highest first, ties by position."""
    scores = check_vector(scores, n, "scores")
    if segments is not None:
        if segments.n != len(scores):
            raise DeletionError(f"scores has {len(scores)} values but the units cover {segments.n} tokens")
        return np.argsort(-aggregate(scores, segments), kind="stable").astype(np.int64)
    return (np.argsort(-scores[prefix : len(scores) - suffix], kind="stable") + prefix).astype(np.int64)


def removed_count(k: float, m: int) -> int:
    """Tokens removed at fraction k of m removable tokens: round(k * m), at least 1 and at most m."""
    return int(min(m, max(1, math.floor(k * m + 0.5))))


def bound_of(max_removed: float, m: int) -> int | None:
    """The flip bound in tokens for a scan limit given as a fraction of the m removable tokens (1.0: None)."""
    max_removed = real_number(max_removed, "max_removed (a fraction of the removable tokens)", 0.0, 1.0, above=True,
                              error=DeletionError)
    return None if max_removed >= 1.0 else removed_count(max_removed, m)


def scan_bound(max_removed: float, flip_bound: int | None, m: int) -> int | None:
    """The flip scan's bound in tokens for m removable tokens: the smaller of `max_removed` (a fraction of them;
    1.0 = all) and `flip_bound` (tokens; None = no bound), each checked first; None = every count (exact)."""
    bounds = [bound_of(max_removed, m), DeletionSettings(seeds=(), flip_bound=flip_bound).flip_bound]
    bounds = [b for b in bounds if b is not None]
    return min(bounds) if bounds else None


def check_vector(values, n: int | None, what: str) -> np.ndarray:
    from ..errors import finite_vector

    v = finite_vector(values, what, DeletionError)
    if n is not None and v.size != n:
        raise DeletionError(f"{what} has {v.size} values but the document has {n} tokens")
    if v.size < 3:
        raise DeletionError(f"{what} needs at least 3 tokens (<s>, one text token, </s>), got {v.size}")
    return v


__all__ = [
    "BATCH_SIZE", "DEFAULT_SEEDS", "DeletionError", "DeletionResult", "DeletionSettings", "FLIP_BOUND", "KS",
    "LODDS_UNDEFINED", "NO_THRESHOLD",
    "RANDOM", "REPLACEMENTS", "RandomBaseline", "RankingCurve", "bound_of", "default_batch_size", "scan_bound",
    "k_label", "metric_columns", "random_order", "removal_order", "removed_count", "row_columns", "summarise"]
