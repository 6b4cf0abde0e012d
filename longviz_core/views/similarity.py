"""Agreement between received attention and Integrated Gradients attribution (paper sections 3.3-3.4, 5.2.3, A.3).

`compare` gives, for one document, the paper's cosine, Kendall tau, RBO and top-5% Jaccard plus the notebook's
extra cosine variants; `compare_many` gives one of them for every head (the per-head agreement grid). Every metric
is "higher = more agreement". Definitions, ranges, defaults and where this differs from the paper's notebook are
in docs/methods.md ("Agreement metrics"); `METRICS` carries the same facts for the UI.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import scipy.stats

from ..errors import LongvizError, MissingDependencyError, finite_vector, real_number
from ..progress import Progress, report

Mode = Literal["zero", "drop"]
MODES: tuple[Mode, ...] = ("zero", "drop")

# RBO persistence. The top d ranks carry rbo_top_weight(p, d) of the weight: with p = 0.99 the top 102 ranks
# (5% of a 2,048-token document, the paper's length) carry 85.6%, the same share Webber et al. quote for
# p = 0.9 / d = 10, and the same depth the Jaccard metric looks at.
DEFAULT_P = 0.99
DEFAULT_TOP = 0.05


class SimilarityError(LongvizError, ValueError):
    """Inputs for which an agreement metric is undefined (constant vector, too short, mismatched, not finite)."""


def _metric(label: str, lo: float, hi: float, description: str) -> dict:
    """One metric's facts for the UI; every metric here is better when higher."""
    return dict(label=label, range=(lo, hi), higher_is_better=True, description=description)


METRICS: dict[str, dict] = {
    "cosine": _metric(
        "Cosine similarity", 0.0, 1.0,
        "Cosine of min-max normalised attention and min-max normalised |attribution| (paper, A.3.1). "
        "Both vectors are non-negative, so the value lies in [0, 1].",
    ),
    "kendall_tau": _metric(
        "Kendall tau", -1.0, 1.0,
        "Kendall's tau-b (scipy) between normalised attention and normalised |attribution|: "
        "concordant minus discordant token pairs, ties corrected (paper, A.3.2).",
    ),
    "rbo": _metric(
        "Rank-biased overlap", 0.0, 1.0,
        "Extrapolated RBO (Webber et al. 2010, rbo package) of the two rankings from highest to "
        "lowest score; p sets how much weight the top ranks get (paper, A.3.3).",
    ),
    "jaccard_top": _metric(
        "Jaccard of the top 5%", 0.0, 1.0,
        "Jaccard index of the token positions at or above each vector's 95th percentile "
        "(paper, 3.3.1 and Table 2).",
    ),
    "cosine_raw": _metric(
        "Cosine, raw", -1.0, 1.0,
        "Cosine of raw attention and signed attribution, no absolute value or normalisation "
        "(notebook's 'similarity raw').",
    ),
    "cosine_median": _metric(
        "Cosine, median threshold", 0.0, 1.0,
        "Cosine after setting each normalised vector's values below its median to 0 "
        "(notebook's 'sim_norm w/ median threshold').",
    ),
    "cosine_mean": _metric(
        "Cosine, mean threshold", 0.0, 1.0,
        "Cosine after setting each normalised vector's values below its mean to 0 "
        "(notebook's 'sim_norm w/ mean threshold').",
    ),
    "cosine_rank": _metric(
        "Cosine of ranks", 0.0, 1.0,
        "Cosine of the two rank vectors (0 = lowest score, ties share their average rank) "
        "(notebook's 'sim w/ ranks').",
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# Building blocks (public: the UI's tables use the same rankings and sets as the metrics)
# ---------------------------------------------------------------------------------------------------------------

def minmax(values) -> np.ndarray:
    """(v - min) / (max - min) as float64. Raises SimilarityError for an empty, non-finite or constant vector,
    where the scaling is undefined."""
    return _minmax(_vector(values, "values", min_size=1), "values")


def rank_order(values) -> np.ndarray:
    """Positions sorted from the highest value to the lowest; ties keep the lower position first (stable), so the
    order is deterministic and the same for both vectors of a comparison."""
    return _rank_order(_vector(values, "values", min_size=1))


def top_set(values, top: float = DEFAULT_TOP, exclude=None) -> set[int]:
    """Positions whose value is at or above the (1 - top) quantile of `values` (numpy's default linear
    interpolation, as the notebook's np.percentile(x, 95)); every position tied at the threshold is included.
    For n = 2,048 and top = 0.05 that is 103 positions when there are no ties.

    `exclude` (bool array): positions never returned (masked tokens in 'zero' mode); the quantile is still taken
    over all of `values`, as the notebook did."""
    v = _vector(values, "values", min_size=1)
    check_top(top)
    excluded = None if exclude is None else _mask(exclude, v.size)
    return _top_set(v, top, excluded)


def rbo_top_weight(p: float, d: int) -> float:
    """Share of RBO's total weight carried by the top `d` ranks (Webber et al. 2010, eq. 21):
    1 - p^(d-1) + (1-p)/p * d * (ln(1/(1-p)) - sum_{i=1}^{d-1} p^i / i).
    rbo_top_weight(0.9, 10) = 0.856; rbo_top_weight(0.99, 102) = 0.856."""
    check_p(p)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise SimilarityError(f"d must be a positive integer depth, got {d!r}")
    i = np.arange(1, int(d), dtype=np.float64)
    tail = float(np.sum(np.exp(i * np.log(p)) / i))
    return float(1.0 - p ** (d - 1) + (1.0 - p) / p * d * (np.log(1.0 / (1.0 - p)) - tail))


# ---------------------------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------------------------

def compare(
    attention,
    attribution,
    mask=None,
    mode: Mode = "zero",
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
) -> dict[str, float]:
    """All agreement metrics between received attention (n,) and signed IG attribution (n,).

    attention: non-negative received attention per token (e.g. AttentionBands.received()).
    attribution: signed attribution per token; its absolute value is compared.
    mask: bool (n,), True = masked token (views.masking.build_mask), or None.
    mode: 'zero' (the paper): masked tokens are set to 0 before normalising and ranking, so they stay in every
        metric as tied zeros; 'drop': masked tokens are removed first and the metrics see only the others.
    p: RBO persistence in (0, 1). top: share of tokens in the Jaccard top set, in (0, 1].

    Returns {name: value} for every name in METRICS. Raises SimilarityError when a metric is undefined: lengths
    differ, fewer than 2 tokens (after dropping), NaN/inf values, negative attention in 'zero' mode, or a vector
    that is constant after masking (min-max normalisation divides by zero).
    """
    check_p(p)
    check_top(top)
    attention = _vector(attention, "attention")
    attribution = _vector(attribution, "attribution")
    if attention.size != attribution.size:
        raise SimilarityError(
            f"attention and attribution differ in length ({attention.size} vs {attribution.size} tokens)"
        )
    keep, excluded = _masking(mask, mode, attention.size)
    attr = _prepare(attribution, keep, excluded, absolute=True, what="attribution")
    att = _prepare(attention, keep, excluded, absolute=False, what="attention")
    return {name: float(fn(att, attr, excluded, p, top)) for name, fn in _METRIC_FNS.items()}


def compare_many(
    attention_per_head,
    attribution,
    metric: str = "rbo",
    mask=None,
    mode: Mode = "zero",
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
    progress: Progress | None = None,
) -> np.ndarray:
    """One metric between every head's received attention (layers, heads, n) and the attribution (n,), with the
    same normalisation and masking as `compare`. Returns (layers, heads) float64. RBO is the slow one (pure-Python
    package, a few ms per head at 4,096 tokens), hence `progress`.

    A head whose attention is constant after masking (a dead head) gets NaN instead of stopping the whole grid;
    every other degenerate input raises SimilarityError as in `compare`."""
    if metric not in _METRIC_FNS:
        raise SimilarityError(f"unknown metric {metric!r}; choose one of {sorted(_METRIC_FNS)}")
    check_p(p)
    check_top(top)
    heads = np.asarray(attention_per_head)
    if heads.ndim != 3:
        raise SimilarityError(f"attention_per_head must be (layers, heads, n), got shape {heads.shape}")
    attribution = _vector(attribution, "attribution")
    if heads.shape[2] != attribution.size:
        raise SimilarityError(
            f"attention_per_head has {heads.shape[2]} tokens per head but attribution has {attribution.size}"
        )
    keep, excluded = _masking(mask, mode, attribution.size)
    attr = _prepare(attribution, keep, excluded, absolute=True, what="attribution")
    fn = _METRIC_FNS[metric]
    out = np.full(heads.shape[:2], np.nan)  # (layers, heads)
    for k, (layer, head) in enumerate(np.ndindex(*heads.shape[:2])):
        report(progress, k / out.size, f"{METRICS[metric]['label']}: layer {layer}, head {head}")
        what = f"attention of layer {layer} head {head}"
        values = _vector(heads[layer, head], what)
        try:
            att = _prepare(values, keep, excluded, absolute=False, what=what)
        except _ConstantError:
            continue  # documented NaN
        out[layer, head] = fn(att, attr, excluded, p, top)
    report(progress, 1.0, f"{METRICS[metric]['label']}: done")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------------------------

class _ConstantError(SimilarityError):
    """A vector is constant after masking; compare_many turns it into NaN."""


@dataclass(frozen=True)
class _Side:
    raw: np.ndarray   # (m,) values as given (signed attribution), masked zeros ('zero') or masked removed ('drop')
    norm: np.ndarray  # (m,) min-max normalised magnitude of `raw`


def _vector(values, what: str, min_size: int = 2) -> np.ndarray:
    v = finite_vector(values, what, SimilarityError)
    if v.size < min_size:
        raise SimilarityError(f"{what} needs at least {min_size} token(s), got {v.size}")
    return v


def _mask(mask, n: int) -> np.ndarray:
    m = np.asarray(mask)
    if m.dtype != bool:
        # An int array of positions would silently become a wrong boolean mask.
        raise SimilarityError(f"mask must be a boolean array (True = masked), got dtype {m.dtype}")
    if m.shape != (n,):
        raise SimilarityError(f"mask must have shape ({n},), got {m.shape}")
    return m


def _masking(mask, mode: str, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(positions kept, masked flags of the kept positions): 'drop' keeps the unmasked, 'zero' keeps all."""
    if mode not in MODES:
        raise SimilarityError(f"mode must be one of {MODES}, got {mode!r}")
    if mask is None:
        return None, None
    m = _mask(mask, n)
    if m.all():
        raise SimilarityError("every token is masked: nothing left to compare")
    if mode == "drop":
        keep = np.flatnonzero(~m)
        if keep.size < 2:
            raise SimilarityError(f"only {keep.size} token left after dropping masked tokens; need at least 2")
        return keep, None
    return None, m


def _prepare(values: np.ndarray, keep, excluded, absolute: bool, what: str) -> _Side:
    """Mask ('drop': keep only `keep`; 'zero': set `excluded` to 0), then min-max normalise the magnitude."""
    if excluded is not None and not absolute and values.min() < 0:
        raise SimilarityError(
            f"{what} has negative values (min {values.min():.3g}); 'zero' masking needs non-negative scores so "
            "that masked tokens rank lowest. Use mode='drop'."
        )
    raw = values[keep] if keep is not None else values.copy()
    if excluded is not None:
        raw[excluded] = 0.0
    return _Side(raw=raw, norm=_minmax(np.abs(raw) if absolute else raw, what))


def _minmax(v: np.ndarray, what: str) -> np.ndarray:
    if v.size == 0:
        raise SimilarityError(f"{what} is empty")
    if not np.all(np.isfinite(v)):
        raise SimilarityError(f"{what} has NaN/inf values")
    lo, hi = v.min(), v.max()
    if hi == lo:
        raise _ConstantError(
            f"{what} is constant ({lo:.6g} everywhere after masking): min-max normalisation and every ranking "
            "metric are undefined"
        )
    return (v - lo) / (hi - lo)


def _rank_order(v: np.ndarray) -> np.ndarray:
    return np.argsort(-v, kind="stable")


def _top_set(v: np.ndarray, top: float, excluded: np.ndarray | None) -> set[int]:
    chosen = v >= np.quantile(v, 1.0 - top)
    if excluded is not None:
        chosen &= ~excluded
    return set(np.flatnonzero(chosen).tolist())


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _below_zeroed(v: np.ndarray, threshold: float) -> np.ndarray:
    return np.where(v < threshold, 0.0, v)


def check_p(p: float) -> None:
    """SimilarityError unless p is a finite number in (0, 1)."""
    real_number(p, "RBO persistence p", 0.0, 1.0, above=True, below=True, error=SimilarityError)


def check_top(top: float) -> None:
    """SimilarityError unless top is a finite number in (0, 1]."""
    real_number(top, "top", 0.0, 1.0, above=True, error=SimilarityError)  # a share of the tokens


def _m_cosine(att: _Side, attr: _Side, excluded, p, top) -> float:
    return _cosine(att.norm, attr.norm)


def _m_kendall(att: _Side, attr: _Side, excluded, p, top) -> float:
    return scipy.stats.kendalltau(att.norm, attr.norm).statistic


def _rbo():
    """The rbo package. It is installed on its own (`pip install --no-deps rbo==0.1.3`: its metadata pins numpy < 2,
    which the rest of longviz cannot use), so a plain `pip install` of longviz does not bring it."""
    try:
        import rbo
    except ImportError:
        raise MissingDependencyError("RBO needs the rbo package, installed separately because its metadata pins "
                                     "numpy < 2: pip install --no-deps rbo==0.1.3") from None
    return rbo


def rbo_of_orders(a, b, p: float) -> float:
    """Extrapolated RBO (rbo package) of two full orders of the same items, highest first. Both lists rank the
    same items to full depth, so the package's eq. 23 extrapolation (rbo(ext=True)) equals its rbo_ext() and is
    about 3x faster."""
    return _rbo().RankingSimilarity(list(a), list(b)).rbo(p=p, ext=True)


def _m_rbo(att: _Side, attr: _Side, excluded, p, top) -> float:
    return rbo_of_orders(_rank_order(att.norm).tolist(), _rank_order(attr.norm).tolist(), p)


def _m_jaccard(att: _Side, attr: _Side, excluded, p, top) -> float:
    a, b = _top_set(att.norm, top, excluded), _top_set(attr.norm, top, excluded)
    return len(a & b) / len(a | b)


def _m_cosine_raw(att: _Side, attr: _Side, excluded, p, top) -> float:
    return _cosine(att.raw, attr.raw)


def _m_cosine_median(att: _Side, attr: _Side, excluded, p, top) -> float:
    return _cosine(_below_zeroed(att.norm, np.median(att.norm)), _below_zeroed(attr.norm, np.median(attr.norm)))


def _m_cosine_mean(att: _Side, attr: _Side, excluded, p, top) -> float:
    return _cosine(_below_zeroed(att.norm, att.norm.mean()), _below_zeroed(attr.norm, attr.norm.mean()))


def _m_cosine_rank(att: _Side, attr: _Side, excluded, p, top) -> float:
    return _cosine(scipy.stats.rankdata(att.norm) - 1.0, scipy.stats.rankdata(attr.norm) - 1.0)


_METRIC_FNS: dict[str, Callable[..., float]] = {
    "cosine": _m_cosine,
    "kendall_tau": _m_kendall,
    "rbo": _m_rbo,
    "jaccard_top": _m_jaccard,
    "cosine_raw": _m_cosine_raw,
    "cosine_median": _m_cosine_median,
    "cosine_mean": _m_cosine_mean,
    "cosine_rank": _m_cosine_rank,
}
