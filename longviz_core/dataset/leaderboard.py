"""Which explainer should a researcher trust on a long document? Every explainer of
`attribution.explainers.EXPLAINERS` scored by the deletion test of `views.faithfulness` (seed 003's AOPC and LOdds
at its deletion fractions, seed 004's first decision flip) with its cost, side by side, for one document or over
a dataset.

    document_leaderboard(model, analysis, methods, target)  one document -> its runs: one row per explainer,
                                                            one per seed for random (a pure function of its
                                                            inputs: the per-document unit a store kind can hold)
    summarise(runs)                                         runs of one or many documents -> the leaderboard:
                                                            one row per explainer, sorted by AOPC, best marked
    run.leaderboard(model, texts, ...)                      the dataset leaderboard (lv.leaderboard): the
                                                            precompute's store kind 'leaderboard' (dataset.kinds)
                                                            into the local store (progress, resumable), read back
                                                            through ResultStore.leaderboard_runs;
                                                            run.leaderboard_runs for the runs
    curves(runs)                                            AOPC / LOdds against the fraction removed (seed 003
                                                            Fig. 3), for figures.agreement.deletion_curves_chart
    agreement_matrix(explanations)                          Kendall tau / RBO between the explainers' rankings

Deletion order: an explanation ranks the text tokens by its scores, highest first (`rank_by="signed"`, the
default: a token pushing towards the class explained ranks above one pushing against it), or by |score|
(`rank_by="magnitude"`, the Faithfulness page's |IG| ranking). Ties keep the lower position first. The deletion
test always scores p(y) of the class y predicted on the intact document (seed 003 eq. 12's f_ŷ); `target`
chooses the class the explainers explain (default: y).

Random: one run per seed (default 0-4); its numbers are per seed first (over documents), then the mean and the
population sd over the seeds, as seed 003's five random runs. Every explainer's row holds its cost: the
explanation's wall time in seconds and its peak extra memory (explainers.Explanation).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import scipy.stats

from ..attribution.explainers import EXPLAINERS, Explanation, explain
from ..errors import LongvizError
from ..model.analysis import DocumentAnalysis
from ..model.loading import LoadedModel
from ..progress import Progress, report
from ..views.faithfulness import DEFAULT_SEEDS, KS, REPLACEMENTS, faithfulness, removal_order
from ..views.similarity import DEFAULT_P, rank_order, rbo_of_orders

RANK_BY = ("signed", "magnitude")
# Random's floor is the mean and sd over at least this many seeds (seed 003 reports five random runs); the page
# and the command line ask for no fewer. The functions take any number, for tests and notebooks.
MIN_SEEDS = 5
AGREEMENT_METRICS = {"kendall_tau": "Kendall τ-b", "rbo": "RBO (extrapolated)"}


class LeaderboardError(LongvizError, ValueError):
    """Settings for which the leaderboard is undefined (no methods, unknown method, bad options)."""


def pct(k: float) -> str:
    return f"{100 * k:g}%"


def numbers(ks: Sequence[float] = KS) -> list[str]:
    """The deletion-curve columns of a run: aopc@k for every k, aopc (their mean), lodds@k, lodds."""
    return [f"aopc@{pct(k)}" for k in ks] + ["aopc"] + [f"lodds@{pct(k)}" for k in ks] + ["lodds"]


def run_columns(ks: Sequence[float] = KS) -> list[str]:
    return ["method", "label", "seed", "target", "predicted", "p_original", "n", *numbers(ks), "first_flip",
            "flip_removed", "seconds", "peak_bytes"]


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
    rank_by: str = "signed",
    options: dict | None = None,
    explanations: dict[str, Explanation] | None = None,
    batch_size: int | None = None,
    resume: bool = False,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> pd.DataFrame:
    """Every explainer of `methods` (default: all of EXPLAINERS) on one document, scored by the deletion test.

    Returns the runs: one row per explainer, one per seed for 'random' (columns run_columns(ks)): AOPC and LOdds
    at each k and their means, the first flip as a fraction of the text tokens (NaN = no flip within max_removed)
    and as a count, the explanation's seconds and peak_bytes.
    options: per-method options, e.g. {"ig": {"n_steps": 50}}. explanations: already computed explanations by
    name (used as they are; a name outside EXPLAINERS is scored too, under its own name). Other settings as
    faithfulness.faithfulness; resume keeps each flip scan's position on disk."""
    explanations = dict(explanations or {})
    methods = list(EXPLAINERS if methods is None else methods)
    check_methods(methods, rank_by, replacement, options, explanations)
    options = options or {}
    seeds = tuple(int(s) for s in seeds)
    runs: list[dict] = []
    scored = [m for m in methods if m != "random"]
    parts = len(scored) + ("random" in methods)
    step = lambda i, label: (lambda f, msg: report(  # noqa: E731
        progress, (i + f) / parts, f"{label} ({i + 1}/{parts}): {msg}"))
    settings = dict(ks=ks, replacement=replacement, max_removed=max_removed, batch_size=batch_size, resume=resume,
                    cache_dir=cache_dir, on_wait=on_wait)
    for i, method in enumerate(scored):
        label = _label(method)
        sub = step(i, label)
        e = explanations.get(method)
        if e is None:
            e = explain(model, analysis, method, target, progress=lambda f, msg: sub(0.5 * f, msg), on_wait=on_wait,
                        **options.get(method, {}))
        _check_explanation(e, method, analysis)
        result = faithfulness(model, analysis, _ranking_scores(e.scores, rank_by), rankings=("ig",), seeds=(),
                              progress=lambda f, msg: sub(0.5 + 0.5 * f, msg), **settings)
        runs.append(_run(method, None, e, result, result.curves["ig"]))
    if "random" in methods:
        sub = step(len(scored), _label("random"))
        made = [explain(model, analysis, "random", seed=s) for s in seeds]
        result = faithfulness(model, analysis, np.zeros(analysis.n), rankings=("random",), seeds=seeds,
                              progress=sub, **settings)
        for e, curve in zip(made, result.random.runs):
            runs.append(_run("random", curve.seed, e, result, curve))
    return pd.DataFrame(runs, columns=run_columns(ks))


def _ranking_scores(scores: np.ndarray, rank_by: str) -> np.ndarray:
    """Positive scores whose |.| ranks the text tokens in the explanation's deletion order (faithfulness ranks
    its 'ig' ranking by |attribution|): the k-th token to delete gets m - k, <s> and </s> get 0."""
    key = np.asarray(scores, dtype=np.float64)
    order = removal_order(np.abs(key) if rank_by == "magnitude" else key)  # (m,) most important first
    out = np.zeros(key.shape[0], dtype=np.float64)
    out[order] = np.arange(len(order), 0, -1, dtype=np.float64)
    return out


def _run(method: str, seed, e: Explanation, result, curve) -> dict:
    row = {"method": method, "label": _label(method), "seed": math.nan if seed is None else int(seed),
           "target": e.target, "predicted": result.predicted, "p_original": result.p_original, "n": result.n}
    values = [*curve.aopc_k, curve.aopc, *curve.lodds_k, curve.lodds]
    row.update({c: float(v) for c, v in zip(numbers(result.ks), values)})
    flipped = curve.flip_removed is not None
    row.update(first_flip=curve.flip_fraction if flipped else math.nan,
               flip_removed=float(curve.flip_removed) if flipped else math.nan,
               seconds=e.seconds, peak_bytes=math.nan if e.peak_bytes is None else float(e.peak_bytes))
    return row


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
def summarise(runs: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """The leaderboard from the runs of one document or many (a 'doc' column tells documents apart): one row per
    explainer, sorted by AOPC (highest first), `best` on the first row.

    Explainers: the mean over documents of every number; first_flip over the documents that flipped, flip_rate
    the share that did. Random: each seed's mean over documents first, then the mean and the population sd over
    the seeds (`<number>_sd`; NaN for the other explainers); its flip_rate is over every (document, seed).
    seconds: mean wall time of one explanation; peak_bytes: the largest peak; cost: the explainer's cost class
    (EXPLAINERS)."""
    cols = numbers(ks)
    missing = [c for c in ["method", "label", "seed", *cols, "first_flip", "seconds", "peak_bytes"] if c not in runs]
    if missing:
        raise LeaderboardError(f"runs lack column(s) {missing}")
    if runs.empty:
        raise LeaderboardError("no runs to summarise")
    docs = runs["doc"] if "doc" in runs else pd.Series(0, index=runs.index)
    rows = []
    for method, group in runs.groupby("method", sort=False):
        row = {"method": method, "label": group["label"].iloc[0], "documents": int(docs[group.index].nunique())}
        if group["seed"].notna().any():
            per_seed = group.groupby("seed")
            means = per_seed[cols + ["first_flip"]].mean()  # (seeds, numbers): pandas skips NaN (no flip)
            for c in cols + ["first_flip"]:
                values = means[c].dropna()
                row[c] = float(values.mean()) if len(values) else math.nan
                row[f"{c}_sd"] = float(values.std(ddof=0)) if len(values) else math.nan
            row["runs"] = int(per_seed.ngroups)
        else:
            for c in cols + ["first_flip"]:
                row[c] = float(group[c].mean()) if group[c].notna().any() else math.nan
                row[f"{c}_sd"] = math.nan
            row["runs"] = 1
        row["flip_rate"] = float(group["first_flip"].notna().mean())
        row["seconds"] = float(group["seconds"].mean())
        row["cost"] = EXPLAINERS[method].cost if method in EXPLAINERS else ""
        row["peak_bytes"] = float(group["peak_bytes"].max()) if group["peak_bytes"].notna().any() else math.nan
        rows.append(row)
    out = pd.DataFrame(rows).sort_values("aopc", ascending=False, kind="stable").reset_index(drop=True)
    out["best"] = out.index == 0
    lead = ["method", "label", "aopc", "lodds", "first_flip", "seconds", "best", "aopc_sd", "lodds_sd",
            "first_flip_sd", "flip_rate", "peak_bytes", "cost", "documents", "runs"]
    rest = [c for c in out.columns if c not in lead]
    return out[lead + rest]


def curves(runs: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """AOPC and LOdds against k for every explainer, one row per (explainer, k), in the layout of
    figures.agreement.deletion_curves_chart: ranking (the label), k, aopc, lodds, and for random
    `<metric>_sd`, `_lo`, `_hi` (mean -+ sd over the seeds of each seed's mean over documents)."""
    table = summarise(runs, ks)
    rows = []
    for rec in table.to_dict("records"):
        for k in ks:
            row = {"ranking": rec["label"], "k": float(k)}
            for metric in ("aopc", "lodds"):
                value, sd = rec[f"{metric}@{pct(k)}"], rec[f"{metric}@{pct(k)}_sd"]
                row.update({metric: value, f"{metric}_sd": sd, f"{metric}_lo": value - sd, f"{metric}_hi": value + sd})
            rows.append(row)
    return pd.DataFrame(rows)


def flips(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run for figures.agreement.flip_chart: ranking (the label), flip_fraction (NaN = no flip),
    seed and doc where present."""
    out = pd.DataFrame({"ranking": runs["label"], "flip_fraction": runs["first_flip"], "seed": runs["seed"]})
    if "doc" in runs:
        out["doc"] = runs["doc"]
    return out


# ------------------------------------------------------------------------------------------ agreement
def agreement_matrix(explanations: dict[str, Explanation], metric: str = "kendall_tau", p: float = DEFAULT_P,
                     rank_by: str = "signed") -> pd.DataFrame:
    """How much the explainers agree: `metric` between every two explanations' rankings of the text tokens
    (<s> and </s> left out; the deletion key of `rank_by`), as a square DataFrame indexed by method.

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
    sizes = {e.n for e in explanations.values()}
    if len(sizes) != 1 or sizes.pop() < 4:
        raise LeaderboardError("the explanations must cover the same document of at least two text tokens")
    keys = {m: _key(e.scores, rank_by)[1:-1] for m, e in explanations.items()}
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
           "curves", "document_leaderboard", "flips", "numbers", "run_columns", "summarise"]
