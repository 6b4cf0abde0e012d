"""Agreement metrics between attention and attribution (longviz_core.views.similarity), checked against direct scipy /
numpy / rbo computations and against the paper notebook's own code where the two should agree."""
import numpy as np
import pandas as pd
import pytest
import rbo
import scipy.stats

from longviz_core.errors import LongvizError
from longviz_core.views import similarity as sim

# Fixed vectors with ties in both (attention 0.3 x3, 0.0 x2; |attribution| 0.2 x3, 0.0 x2).
ATT = np.array([0.1, 0.3, 0.3, 0.0, 0.9, 0.3, 0.05, 0.0, 0.6, 0.2, 0.45, 0.7])
ATTR = np.array([-0.2, 0.5, 0.2, 0.0, -0.8, 0.2, 0.1, 0.0, 0.3, -0.05, 0.2, 0.6])
MASK = np.array([False, False, True, False, False, True, False, True, False, False, True, False])


def _norm(v):
    return (v - v.min()) / (v.max() - v.min())


def _cos(a, b):
    return a @ b / np.sqrt((a @ a) * (b @ b))


def _desc(v):
    # Independent oracle for the tie rule: sort by value descending, then by position ascending.
    return np.lexsort((np.arange(v.size), -v))


def _oracle(att, attr, p=0.99, top=0.05, excluded=None):
    a, b = _norm(att), _norm(np.abs(attr))

    def top_positions(v):
        chosen = v >= np.percentile(v, 100 * (1 - top))
        if excluded is not None:
            chosen &= ~excluded
        return set(np.flatnonzero(chosen))

    ta, tb = top_positions(a), top_positions(b)
    ranks = [pd.Series(v).rank(method="average").to_numpy() - 1 for v in (a, b)]
    return {
        "cosine": _cos(a, b),
        "kendall_tau": scipy.stats.kendalltau(a, b).statistic,
        "rbo": rbo.RankingSimilarity(list(_desc(a)), list(_desc(b))).rbo_ext(p=p),
        "jaccard_top": len(ta & tb) / len(ta | tb),
        "cosine_raw": _cos(att, attr),
        "cosine_median": _cos(np.where(a < np.median(a), 0, a), np.where(b < np.median(b), 0, b)),
        "cosine_mean": _cos(np.where(a < a.mean(), 0, a), np.where(b < b.mean(), 0, b)),
        "cosine_rank": _cos(*ranks),
    }


def test_compare_matches_direct_computation_with_ties():
    got = sim.compare(ATT, ATTR, p=0.9, top=0.25)
    assert got.keys() == sim.METRICS.keys()
    assert got == pytest.approx(_oracle(ATT, ATTR, p=0.9, top=0.25), abs=1e-12)
    assert all(type(v) is float for v in got.values())


def test_compare_no_mask_is_the_same_in_both_modes():
    assert sim.compare(ATT, ATTR, mode="zero") == sim.compare(ATT, ATTR, mode="drop")


def test_drop_mode_equals_computing_on_the_filtered_vectors():
    got = sim.compare(ATT, ATTR, mask=MASK, mode="drop", p=0.9, top=0.25)
    assert got == pytest.approx(sim.compare(ATT[~MASK], ATTR[~MASK], p=0.9, top=0.25), abs=1e-12)
    assert got == pytest.approx(_oracle(ATT[~MASK], ATTR[~MASK], p=0.9, top=0.25), abs=1e-12)


def test_zero_mode_sets_masked_tokens_to_zero_before_normalising():
    got = sim.compare(ATT, ATTR, mask=MASK, mode="zero", p=0.9, top=0.25)
    zeroed = _oracle(np.where(MASK, 0, ATT), np.where(MASK, 0, ATTR), p=0.9, top=0.25, excluded=MASK)
    assert got == pytest.approx(zeroed, abs=1e-12)
    drop = sim.compare(ATT, ATTR, mask=MASK, mode="drop", p=0.9, top=0.25)
    assert abs(got["kendall_tau"] - drop["kendall_tau"]) > 0.05


def test_zero_mode_inflates_kendall_tau_as_predicted():
    # Independent vectors: tau ~ 0. With a share m of tokens zeroed in both, every masked/unmasked pair is
    # concordant and masked/masked pairs are tied in both (left out by tau-b): tau ~ 2m / (1 + m).
    rng = np.random.default_rng(7)
    n, m = 3000, 0.5
    att, attr = rng.random(n), rng.normal(size=n)
    mask = rng.random(n) < m
    share = mask.mean()
    zero = sim.compare(att, attr, mask=mask, mode="zero")
    drop = sim.compare(att, attr, mask=mask, mode="drop")
    assert zero["kendall_tau"] == pytest.approx(2 * share / (1 + share), abs=0.03)
    assert abs(drop["kendall_tau"]) < 0.05
    # RBO looks at the top, where both modes rank the same unmasked tokens: the bottom zeros barely count.
    assert zero["rbo"] == pytest.approx(drop["rbo"], abs=1e-6)


def test_masked_positions_never_enter_the_top_set_in_zero_mode():
    # 96% of tokens masked: the 95th percentile of the zero-filled vector is 0, so without the exclusion every
    # masked zero would be "at or above" it.
    n = 100
    att = np.linspace(1, 2, n)
    attr = np.linspace(2, 1, n)
    mask = np.ones(n, dtype=bool)
    mask[[3, 50, 70, 99]] = False
    got = sim.compare(att, attr, mask=mask, mode="zero")
    # unmasked: attention top is 99 (then 70, 50, 3), attribution top is 3: the sets are all 4 unmasked tokens
    assert sim.top_set(np.where(mask, 0, att), exclude=mask) == {3, 50, 70, 99}
    assert got["jaccard_top"] == 1.0


def test_rbo_uses_descending_order_not_the_notebooks_ascending():
    # Top halves ranked identically, bottom halves reversed: agreement is high at the top, where RBO looks.
    n = 200
    att = np.arange(n, 0, -1, dtype=float)  # position 0 highest
    attr = att.copy()
    attr[n // 2:] = attr[n // 2:][::-1]
    got = sim.compare(att, attr, p=0.9)["rbo"]
    desc = rbo.RankingSimilarity(list(np.argsort(-att)), list(np.argsort(-attr))).rbo_ext(p=0.9)
    asc = rbo.RankingSimilarity(list(np.argsort(att)), list(np.argsort(attr))).rbo_ext(p=0.9)
    assert got == pytest.approx(desc, abs=1e-12)
    assert got > 0.9999  # the reversed bottom half carries almost no weight at p = 0.9
    assert asc < 0.5


def test_rbo_identical_is_one_and_reversed_is_small():
    v = np.random.default_rng(1).random(2048)
    assert sim.compare(v, v)["rbo"] == pytest.approx(1.0, abs=1e-12)
    assert sim.compare(v, v.max() - v + 1.0)["rbo"] < 1e-3


def test_rbo_of_short_reversed_rankings_keeps_the_extrapolated_tail():
    # Documented floor: both rankings hold the same n items, so the weight past depth n (p**n) counts as agreement.
    n, p = 50, 0.99
    v = np.arange(1, n + 1, dtype=float)
    got = sim.compare(v, v[::-1].copy(), p=p)["rbo"]
    assert got >= p**n
    assert got == pytest.approx(rbo.RankingSimilarity(list(range(n)), list(range(n))[::-1]).rbo_ext(p=p))


def test_rbo_fast_path_equals_package_rbo_ext_on_ties():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, 300).astype(float)  # heavy ties
    b = rng.integers(0, 5, 300).astype(float)
    a[0], b[0] = 10.0, 10.0
    expected = rbo.RankingSimilarity(list(_desc(_norm(a))), list(_desc(_norm(b)))).rbo_ext(p=0.95)
    assert sim.compare(a, b, p=0.95)["rbo"] == pytest.approx(expected, abs=1e-12)


def test_jaccard_top_takes_the_highest_not_the_notebooks_rank_cut():
    n = 40
    att = np.arange(n, dtype=float)  # the top 5% are positions 38, 39
    attr = att.copy()
    attr[:5] = attr[:5][::-1]  # bottom reshuffled, top untouched
    assert sim.top_set(att) == {38, 39}
    assert sim.compare(att, attr)["jaccard_top"] == 1.0
    # The notebook: ranks = argsort().argsort() (0 = lowest), zero every rank > n - ceil(0.95 n): keeps the BOTTOM.
    num = n - np.ceil(n * 0.95)
    kept = [set(np.flatnonzero(np.argsort(np.argsort(v)) <= num)) for v in (att, attr)]
    assert kept[0] == {0, 1, 2}
    assert len(kept[0] & kept[1]) / len(kept[0] | kept[1]) < 1.0


def test_top_set_size_matches_the_notebook_percentile():
    v = np.random.default_rng(2).random(2048)
    top = sim.top_set(v)
    assert len(top) == 103  # the notebook printed 103 for its 2,048-token example
    assert top == set(np.flatnonzero(v >= np.percentile(v, 95)))
    assert min(v[list(top)]) > max(np.delete(v, list(top)))


def test_top_set_ties_at_threshold_and_exclude():
    v = np.array([0.0, 1.0, 1.0, 1.0, 0.5])
    assert sim.top_set(v, top=0.2) == {1, 2, 3}
    assert sim.top_set(v, top=0.2, exclude=np.array([False, True, False, False, False])) == {2, 3}
    assert all(type(i) is int for i in sim.top_set(v))


def test_notebook_cosine_variants_reproduced_on_continuous_values():
    # Without ties the notebook's own code is the oracle for the cosine variants and Kendall tau.
    rng = np.random.default_rng(5)
    att, attr = rng.gamma(0.5, size=500), rng.normal(size=500)
    got = sim.compare(att, attr)

    def normalize(data):
        return (data - np.min(data)) / (np.max(data) - np.min(data))

    a2, b2 = normalize(att), normalize(np.abs(attr))
    ranks_attrib, ranks = np.abs(attr).argsort().argsort(), att.argsort().argsort()
    a3, b3 = a2.copy(), b2.copy()
    a3[a3 < np.percentile(a3, 50)] = 0
    b3[b3 < np.percentile(b3, 50)] = 0
    a4, b4 = a2.copy(), b2.copy()
    a4[a4 < np.mean(a4)] = 0
    b4[b4 < np.mean(b4)] = 0
    cos = lambda x, y: np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y))  # noqa: E731
    assert got["cosine"] == pytest.approx(cos(b2, a2))
    assert got["cosine_raw"] == pytest.approx(cos(attr, att))
    assert got["cosine_median"] == pytest.approx(cos(b3, a3))
    assert got["cosine_mean"] == pytest.approx(cos(b4, a4))
    assert got["cosine_rank"] == pytest.approx(cos(ranks_attrib, ranks))
    assert got["kendall_tau"] == pytest.approx(scipy.stats.kendalltau(ranks_attrib, ranks).statistic)


def test_rank_order_descending_ties_by_lower_position():
    v = np.array([0.2, 0.9, 0.2, 0.5, 0.9, -0.0, 0.0])
    assert sim.rank_order(v).tolist() == [1, 4, 3, 0, 2, 5, 6]
    assert sim.rank_order(v).tolist() == _desc(v).tolist()


def test_minmax():
    assert sim.minmax([2.0, 4.0, 3.0]).tolist() == [0.0, 1.0, 0.5]
    with pytest.raises(sim.SimilarityError, match="constant"):
        sim.minmax([3.0, 3.0])


@pytest.mark.parametrize(
    "p, d", [(0.9, 10), (0.98, 50), (0.99, 100), (0.99, 102), (0.5, 1), (0.7, 2), (0.999, 1000)]
)
def test_rbo_top_weight_matches_the_package(p, d):
    expected = rbo.RankingSimilarity(list(range(d)), list(range(d))).top_weightness(p=p, d=d)
    got = sim.rbo_top_weight(p, d)
    assert type(got) is float and got == pytest.approx(expected, abs=1e-9)


def test_rbo_top_weight_default_gives_the_top_5_percent_of_2048_tokens_86_percent():
    assert sim.rbo_top_weight(sim.DEFAULT_P, 102) == pytest.approx(0.856, abs=0.001)
    assert sim.rbo_top_weight(0.9, 10) == pytest.approx(0.8556, abs=1e-4)  # Webber et al.'s example
    with pytest.raises(sim.SimilarityError):
        sim.rbo_top_weight(1.0, 10)
    with pytest.raises(sim.SimilarityError):
        sim.rbo_top_weight(0.9, 0)


@pytest.mark.parametrize(
    "att, attr, kwargs, match",
    [
        (np.full(5, 0.3), ATTR[:5], {}, "attention is constant"),
        (ATT, np.zeros(12), {}, "attribution is constant"),
        (ATT, np.r_[1.0, -1.0] .repeat(6), {}, "attribution is constant"),  # |attr| constant
        (np.array([0.5]), np.array([0.1]), {}, "at least 2"),
        (np.array([]), np.array([]), {}, "at least 2"),
        (ATT, ATTR[:-1], {}, "differ in length"),
        (np.r_[ATT[:-1], np.nan], ATTR, {}, "NaN/inf"),
        (ATT, np.r_[ATTR[:-1], np.inf], {}, "NaN/inf"),
        (ATT.reshape(3, 4), ATTR.reshape(3, 4), {}, "1-D"),
        (["a", "b"], ATTR[:2], {}, "numbers"),
        (ATT, ATTR, dict(mask=np.ones(12, dtype=bool)), "every token is masked"),
        (ATT, ATTR, dict(mask=np.r_[False, np.ones(11, dtype=bool)], mode="drop"), "only 1 token"),
        (ATT, ATTR, dict(mask=np.flatnonzero(MASK)), "boolean"),
        (ATT, ATTR, dict(mask=MASK[:-1]), "shape"),
        (ATT, ATTR, dict(mode="ignore"), "mode"),
        (ATT, ATTR, dict(p=1.0), "p must be"),
        (ATT, ATTR, dict(p=0.0), "p must be"),
        (ATT, ATTR, dict(top=0.0), "top must be"),
        (ATT, ATTR, dict(top=1.5), "top must be"),
        (ATT - 0.5, ATTR, dict(mask=MASK), "negative"),
        # unmasked attention all zero: after zeroing the masked tokens the whole vector is 0
        (np.where(MASK, 1.0, 0.0), ATTR, dict(mask=MASK), "attention is constant"),
    ],
)
def test_degenerate_inputs_raise(att, attr, kwargs, match):
    with pytest.raises(sim.SimilarityError, match=match) as info:
        sim.compare(att, attr, **kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, LongvizError)


def test_negative_attention_is_fine_without_zero_masking():
    got = sim.compare(ATT - 0.5, ATTR, mask=MASK, mode="drop")
    assert got == pytest.approx(sim.compare(ATT[~MASK] - 0.5, ATTR[~MASK]), abs=1e-12)


def test_metric_values_lie_in_their_documented_ranges():
    rng = np.random.default_rng(11)
    for _ in range(20):
        att, attr = rng.random(64), rng.normal(size=64)
        for name, value in sim.compare(att, attr, mask=rng.random(64) < 0.3).items():
            lo, hi = sim.METRICS[name]["range"]
            assert lo - 1e-12 <= value <= hi + 1e-12, name
    for meta in sim.METRICS.values():
        assert set(meta) == {"label", "range", "higher_is_better", "description"} and meta["higher_is_better"]


@pytest.mark.parametrize("mode", ["zero", "drop"])
def test_compare_many_equals_compare_per_head(mode):
    rng = np.random.default_rng(4)
    heads = rng.random((2, 3, 30))
    heads[1, 2] = 0.0  # a dead head: constant in both modes
    attr = rng.normal(size=30)
    mask = rng.random(30) < 0.3
    for metric in sim.METRICS:
        calls = []
        grid = sim.compare_many(heads, attr, metric=metric, mask=mask, mode=mode, p=0.9,
                                progress=lambda f, msg: calls.append(f))
        assert grid.shape == (2, 3)
        assert calls[0] == 0.0 and calls[-1] == 1.0 and calls == sorted(calls) and len(calls) == 7
        for layer in range(2):
            for head in range(3):
                if (layer, head) == (1, 2):
                    assert np.isnan(grid[layer, head])
                else:
                    expected = sim.compare(heads[layer, head], attr, mask=mask, mode=mode, p=0.9)[metric]
                    assert grid[layer, head] == pytest.approx(expected, abs=1e-12)


def test_compare_many_validation():
    attr = np.arange(5.0)
    with pytest.raises(sim.SimilarityError, match="unknown metric"):
        sim.compare_many(np.ones((1, 1, 5)), attr, metric="spearman")
    with pytest.raises(sim.SimilarityError, match="layers, heads, n"):
        sim.compare_many(np.ones((2, 5)), attr)
    with pytest.raises(sim.SimilarityError, match="tokens per head"):
        sim.compare_many(np.ones((1, 1, 4)), attr)
    with pytest.raises(sim.SimilarityError, match="attribution is constant"):
        sim.compare_many(np.random.default_rng(0).random((1, 1, 5)), np.ones(5))
    bad = np.random.default_rng(0).random((1, 2, 5))
    bad[0, 1, 2] = np.nan
    with pytest.raises(sim.SimilarityError, match="layer 0 head 1"):
        sim.compare_many(bad, attr)
