"""Which explainer should a researcher trust on a long document? Every explainer of
`attribution.explainers.EXPLAINERS` scored by the deletion test (evaluation.deletion: Song et al. 2024's AOPC and
LOdds, Serrano & Smith 2019's first decision flip) with its cost, side by side, for one document or over a dataset.

    document_leaderboard(model, analysis, methods, target)  one document -> its runs: one row per explainer,
                                                            one per seed for random (a pure function of its
                                                            inputs: the per-document unit a store kind can hold);
                                                            every explainer's order in one deletion test
    summarise(runs)                                         runs of one or many documents -> the leaderboard:
                                                            evaluation.deletion.summarise with each explainer's
                                                            cost, sorted by AOPC, best marked
    api.leaderboard(model, texts, ...)                      the dataset leaderboard (lv.leaderboard): the
                                                            precompute's store kind 'leaderboard' (dataset.kinds)
                                                            into the local store (progress, resumable), read back
                                                            through ResultStore.leaderboard_runs;
                                                            api.leaderboard_runs for the runs
    curves(runs)                                            AOPC / LOdds against the fraction removed (Song et al. 2024
                                                            Fig. 3), for figures.faithfulness.deletion_curves_chart
    agreement_matrix(explanations)                          Kendall tau / RBO between the explainers' rankings

Deletion order: an explanation ranks the text tokens by its scores, highest first (`rank_by="signed"`, the
default: a token pushing towards the class explained ranks above one pushing against it), or by |score|
(`rank_by="magnitude"`, the Faithfulness page's |IG| ranking). Ties keep the lower position first. The deletion
test always scores p(y) of the class y predicted on the intact document (Song et al. 2024 eq. 12's f_ŷ); `target`
chooses the class the explainers explain (default: y).

Random: the deletion test's own random order, one run per seed (default 0-4); its numbers are per seed first
(over documents), then the mean and the population sd over the seeds, as Song et al. 2024's five random runs.
Every explainer's row holds its cost: the explanation's wall time in seconds and its peak extra memory
(explainers.Explanation).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd
import scipy.stats

from ..attribution.explainers import DEFAULT_METHODS, EXPLAINERS, Explanation, check_options, explain
from ..errors import LongvizError, whole_number
from ..model.analysis import DocumentAnalysis
from ..model.loading import LoadedModel
from ..model.segments import Segments, aggregate, segment
from ..progress import Progress, scaled
from ..evaluation import deletion as dl
from ..evaluation.deletion import DEFAULT_SEEDS, KS, REPLACEMENTS, k_label
from ..evaluation.deletion_engine import deletion_test
from ..views.similarity import DEFAULT_P, rank_order, rbo_of_orders

RANK_BY = ("signed", "magnitude")
# Random's floor is the mean and sd over at least this many seeds (Song et al. 2024 report five random runs); the page
# and the command line ask for no fewer. The functions take any number, for tests and notebooks.
MIN_SEEDS = 5
AGREEMENT_METRICS = {"kendall_tau": "Kendall τ-b", "rbo": "RBO (extrapolated)"}


class LeaderboardError(LongvizError, ValueError):
    """Settings for which the leaderboard is undefined (no methods, unknown method, bad options)."""


def run_columns(ks: Sequence[float] = KS) -> list[str]:
    """A leaderboard run: the deletion test's row (evaluation.deletion.row_columns) with the explainer's label, the
    class explained, the prediction and the explanation's cost (seconds, peak_bytes)."""
    return ["method", "label", "seed", "target", "predicted", "p_original", "n", *dl.row_columns(ks)[2:],
            "seconds", "peak_bytes"]


# ------------------------------------------------------------------------------------------ one document
def document_leaderboard(
    model: LoadedModel,
    analysis: DocumentAnalysis,
    methods: Sequence[str] | None = None,
    target: int | None = None,
    *,
    ks: Sequence[float] = KS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    replacement: str = "mask",
    max_removed: float = 1.0,
    flip_bound: int | None = None,
    rank_by: str = "signed",
    options: dict | None = None,
    explanations: dict[str, Explanation] | None = None,
    batch_size: int | None = None,
    threshold: float | None = None,
    resume: bool = False,
    cache_dir=None,
    progress: Progress | None = None,
    stop=None,
    unit: str = "token",
) -> pd.DataFrame:
    """Every explainer of `methods` (default: DEFAULT_METHODS, every explainer but Shapley sampling) on one
    document, scored by one deletion test.

    Returns the runs: one row per explainer, one per seed for 'random' (columns run_columns(ks)): AOPC and LOdds
    at each k and their means, the first flip as a fraction of the text tokens (NaN = no flip within `scanned`)
    and as a count, the explanation's seconds and peak_bytes.
    options: per-method options, e.g. {"ig": {"n_steps": 50}}. explanations: already computed explanations by
    name (used as they are; a name outside EXPLAINERS is scored too, under its own name).
    max_removed / flip_bound: the flip scan's bound (a fraction of the text tokens, a number of tokens; the smaller
    applies; 1.0 and None: exact to the end; flip_bound=0: the curves alone). threshold: a regression head's
    decision (score >= threshold), without which its flips are not defined (NaN; its LOdds are NaN always).
    unit: what the deletion test removes (DeletionSettings.unit): every explanation ranks the units by its
    tokens' summed scores, and ks, max_removed, flip_bound and the first flips count units. Occlusion and Shapley
    perturb the units of their own `unit` option (default "sentence"), whatever this one is: give
    options={"occlusion": {"unit": ...}} to match. Other settings as deletion_test."""
    explanations = dict(explanations or {})
    methods = list(DEFAULT_METHODS if methods is None else methods)
    check_methods(methods, rank_by, replacement, options, explanations)
    options = options or {}
    for method in methods:  # every explainer's option values, before the first explainer runs
        if method in EXPLAINERS and method not in explanations:
            check_options(method, options.get(method, {}), model)
    if target is not None:
        target = whole_number(target, "target (the class explained)", 0, model.num_labels - 1, error=LeaderboardError)
    enc = analysis.encoded
    # the deletion test's settings (the seeds too, used or not) are checked before any explanation is computed
    unit = dl.DeletionSettings(seeds=(), unit=unit).unit
    segments = None if unit == "token" else segment(analysis, unit)
    settings = dl.DeletionSettings(ks=ks, replacement=replacement, seeds=seeds,
                                   flip_bound=dl.scan_bound(max_removed, flip_bound, len(enc.text_positions)
                                                            if segments is None else len(segments)),
                                   batch_size=batch_size, threshold=threshold, unit=unit)
    if "random" not in methods:
        settings = replace(settings, seeds=())
    seeds = settings.seeds
    scored = [m for m in methods if m != "random"]
    made: dict[str, Explanation] = {}
    for i, method in enumerate(scored):
        e = explanations.get(method)
        if e is None:
            e = explain(model, analysis, method, target, **options.get(method, {}),
                        progress=scaled(progress, 0.5 * i / len(scored), 0.5 / len(scored), f"{_label(method)}: "))
        _check_explanation(e, method, analysis)
        made[method] = e
    orders = {m: dl.removal_order(_key(e.scores, rank_by), prefix=enc.prefix, suffix=enc.suffix, segments=segments)
              for m, e in made.items()}
    result = deletion_test(model, analysis, orders, settings, scaled(progress, 0.5 if scored else 0.0,
                           0.5 if scored else 1.0), labels={m: _label(m) for m in methods}, resume=resume,
                           cache_dir=cache_dir, stop=stop)
    costs = {m: (e.target, e.seconds, e.peak_bytes) for m, e in made.items()}
    for s in seeds:
        e = explain(model, analysis, "random", seed=s)
        costs[("random", s)] = (e.target, e.seconds, e.peak_bytes)
    return with_costs(result, costs)


def with_costs(result: dl.DeletionResult, costs: dict) -> pd.DataFrame:
    """The deletion test's rows as leaderboard runs: `costs` maps a method (or ('random', seed)) to the
    explanation's (target, seconds, peak_bytes)."""
    runs = result.rows()
    cost = [costs[m if m != "random" else (m, int(s))] for m, s in zip(runs["method"], runs["seed"])]
    runs.insert(1, "label", [_label(m) for m in runs["method"]])
    runs.insert(3, "target", [c[0] for c in cost])
    runs.insert(4, "predicted", result.predicted)
    runs.insert(5, "p_original", result.p_original)
    runs.insert(6, "n", result.n)
    runs["seconds"] = [float(c[1]) for c in cost]
    runs["peak_bytes"] = [math.nan if c[2] is None else float(c[2]) for c in cost]
    return runs[run_columns(result.ks)]


def _label(method: str) -> str:
    return EXPLAINERS[method].label if method in EXPLAINERS else method


def check_methods(methods, rank_by: str, replacement: str, options: dict | None = None,
                  explanations: dict | None = None) -> None:
    """Validates the leaderboard's explainers and options (LeaderboardError); `explanations` may name methods
    outside EXPLAINERS."""
    explanations = explanations or {}
    if not methods:
        raise LeaderboardError("choose at least one explainer")
    if len(set(methods)) != len(methods):
        raise LeaderboardError(f"explainers listed twice: {methods}")
    unknown = [m for m in methods if m not in EXPLAINERS and m not in explanations]
    if unknown:
        raise LeaderboardError(f"unknown explainer(s) {unknown}; choose from {list(EXPLAINERS)}")
    if rank_by not in RANK_BY:
        raise LeaderboardError(f"rank_by must be one of {RANK_BY}, got {rank_by!r}")
    if replacement not in REPLACEMENTS:
        raise LeaderboardError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    stray = sorted(set(options or {}) - set(methods))
    if stray:
        raise LeaderboardError(f"options given for explainer(s) not chosen: {stray}")


def _check_explanation(e: Explanation, method: str, analysis: DocumentAnalysis) -> None:
    if not isinstance(e, Explanation) or e.scores.shape != (analysis.n,):
        raise LeaderboardError(f"the explanation given for {method!r} does not have one score per token of this "
                               f"document ({analysis.n})")


# ------------------------------------------------------------------------------------------ the leaderboard
class Leaderboard(pd.DataFrame):
    """summarise's table: a DataFrame whose own type tells a notebook to show it as the Explainers page does
    (longviz_core.notebook). Every pandas operation on it gives a plain DataFrame, which shows as any other."""

    @property
    def _constructor(self):
        return pd.DataFrame


def summarise(runs: pd.DataFrame, ks: Sequence[float] = KS) -> Leaderboard:
    """The leaderboard from the runs of one document or many (a 'doc' column tells documents apart): the deletion
    test's summary (evaluation.deletion.summarise: means over documents, random's mean and sd over its seeds) with
    each explainer's label and cost, one row per explainer, sorted by AOPC (highest first), `best` on the first row.
    seconds: mean wall time of one explanation; peak_bytes: the largest peak; cost: the explainer's cost class
    (EXPLAINERS)."""
    missing = [c for c in ["label", "seconds", "peak_bytes"] if c not in runs]
    if missing:
        raise LeaderboardError(f"runs lack column(s) {missing}")
    try:
        out = dl.summarise(runs, ks)
    except dl.DeletionError as e:
        raise LeaderboardError(str(e)) from None
    groups = runs.groupby("method", sort=False)
    out["label"] = groups["label"].first().to_numpy()
    out["seconds"] = groups["seconds"].mean().to_numpy()
    out["peak_bytes"] = groups["peak_bytes"].max().to_numpy()  # NaN when no run measured it
    out["cost"] = [EXPLAINERS[m].cost if m in EXPLAINERS else "" for m in out["method"]]
    out = out.sort_values("aopc", ascending=False, kind="stable").reset_index(drop=True)
    out["best"] = out.index == 0
    lead = ["method", "label", "aopc", "lodds", "first_flip", "seconds", "best", "aopc_sd", "lodds_sd",
            "first_flip_sd", "flip_rate", "no_flip_within", "peak_bytes", "cost", "documents", "runs"]
    return Leaderboard(out[lead + [c for c in out.columns if c not in lead]])


def curves(runs: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """AOPC and LOdds against k for every explainer, one row per (explainer, k), in the layout of
    figures.faithfulness.deletion_curves_chart: ranking (the label), k, aopc, lodds, and for random
    `<metric>_sd`, `_lo`, `_hi` (mean -+ sd over the seeds of each seed's mean over documents)."""
    table = summarise(runs, ks)
    rows = []
    for rec in table.to_dict("records"):
        for k in ks:
            row = {"ranking": rec["label"], "k": float(k)}
            for metric in ("aopc", "lodds"):
                value, sd = rec[f"{metric}@{k_label(k)}"], rec[f"{metric}@{k_label(k)}_sd"]
                row.update({metric: value, f"{metric}_sd": sd, f"{metric}_lo": value - sd, f"{metric}_hi": value + sd})
            rows.append(row)
    return pd.DataFrame(rows)


def flips(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run for figures.faithfulness.flip_chart: ranking (the label), flip_fraction (NaN = no flip),
    seed and doc where present."""
    out = pd.DataFrame({"ranking": runs["label"], "flip_fraction": runs["first_flip"], "seed": runs["seed"]})
    if "doc" in runs:
        out["doc"] = runs["doc"]
    return out


# ------------------------------------------------------------------------------------------ agreement
def agreement_matrix(explanations: dict[str, Explanation], metric: str = "kendall_tau", p: float = DEFAULT_P,
                     rank_by: str = "signed", segments: Segments | None = None) -> pd.DataFrame:
    """How much the explainers agree: `metric` between every two explanations' rankings of the text tokens
    (special tokens left out; the deletion key of `rank_by`), as a square DataFrame indexed by method. With the
    document's `segments` (model.segments.segment), rankings of its units by their tokens' summed keys: the order
    the deletion test by units removes them in (evaluation.deletion.removal_order).

    kendall_tau: scipy.stats.kendalltau (τ-b) of the two key vectors; rbo: extrapolated rank-biased overlap of the
    two orders (highest first, ties by position), persistence p, by the `rbo` package. NaN where a vector is
    constant (τ undefined)."""
    if metric not in AGREEMENT_METRICS:
        raise LeaderboardError(f"metric must be one of {list(AGREEMENT_METRICS)}, got {metric!r}")
    if rank_by not in RANK_BY:
        raise LeaderboardError(f"rank_by must be one of {RANK_BY}, got {rank_by!r}")
    names = list(explanations)
    if len(names) < 2:
        raise LeaderboardError("agreement needs at least two explanations")
    sizes = {(e.n, e.specials) for e in explanations.values()}
    if len(sizes) != 1 or len(next(iter(explanations.values())).text_scores) < 2:
        raise LeaderboardError("the explanations must cover the same document of at least two text tokens")
    if segments is None:
        keys = {m: _key(e.text_scores, rank_by) for m, e in explanations.items()}
    elif segments.n != next(iter(sizes))[0]:
        raise LeaderboardError(f"the units cover {segments.n} tokens, the explanations {next(iter(sizes))[0]}: "
                               "segment the explanations' document")
    elif len(segments) < 2:
        raise LeaderboardError(f"agreement needs at least two {segments.unit}s to rank; this document has one")
    else:
        keys = {m: aggregate(_key(e.scores, rank_by), segments) for m, e in explanations.items()}
    orders = {m: rank_order(k).tolist() for m, k in keys.items()}
    out = np.full((len(names), len(names)), math.nan)
    for i, a in enumerate(names):
        for j, b in enumerate(names[i:], start=i):
            if metric == "kendall_tau":
                value = scipy.stats.kendalltau(keys[a], keys[b]).statistic
            else:
                value = rbo_of_orders(orders[a], orders[b], p)
            out[i, j] = out[j, i] = value
    return pd.DataFrame(out, index=names, columns=names)


def _key(scores, rank_by: str) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    return np.abs(s) if rank_by == "magnitude" else s


__all__ = ["AGREEMENT_METRICS", "LeaderboardError", "MIN_SEEDS", "RANK_BY", "agreement_matrix", "check_methods",
           "curves", "document_leaderboard", "flips", "run_columns", "summarise", "with_costs"]
