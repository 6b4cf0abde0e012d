"""Agreement tables (Tables 1-2), top-5 % sets, per-head grids and their figures, against direct compare() calls
and numpy."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.figures import agreement as fig
from longviz_core.tokens import token_label
from longviz_core.views import agreement as ag
from longviz_core.views.similarity import METRICS, compare
from tiny import text_of


@pytest.fixture(scope="module")
def doc(tiny_longformer):
    analysis = lv.analyze(tiny_longformer, text_of(100), 128)
    rng = np.random.default_rng(11)
    attribution = rng.normal(size=analysis.n)
    importance = rng.uniform(0.2, 1.0, size=(2, 2))
    mask = ag.mask_for(analysis.tokens, ag.MASK_KINDS)
    return analysis, attribution, importance, mask


def _received(analysis, layers, scale=None):
    """Oracle: each head's received attention (column sums; test_bands checks them against dense matrices),
    weighted and summed over the chosen layers in a plain loop. Float32 sums in another order could swap
    near-tied ranks, so the per-head vectors are the band's own."""
    per_head = analysis.attention.received_per_head()
    total = np.zeros(analysis.n)
    for layer in layers:
        for head in range(analysis.attention.num_heads):
            total += (1.0 if scale is None else scale[layer, head]) * per_head[layer, head]
    return total


def test_attention_sources():
    labels = [(s.label, s.layers) for s in ag.attention_sources(12, (3, 5))]
    assert labels == [("layer 12 (final)", (11,)), ("all layers", tuple(range(12))), ("layers 4-6", (3, 4, 5))]
    assert len(ag.attention_sources(12, (0, 11))) == 2  # the range "all layers" is not repeated
    assert len(ag.attention_sources(12, (11, 11))) == 2
    assert ag.attention_sources(4, (2, 2))[2].label == "layer 3"
    with pytest.raises(ValueError, match="layer range"):
        ag.attention_sources(4, (2, 4))


def test_mask_for():
    tokens = ["<s>", "ĠThe", "Ġmodel", ",", "</s>"]
    assert ag.mask_for(tokens, ag.MASK_KINDS).tolist() == [True, True, False, True, True]
    assert ag.mask_for(tokens, ["nonalnum"]).tolist() == [False, False, False, True, False]
    assert ag.mask_for(tokens, []) is None
    with pytest.raises(ValueError, match="mask kind"):
        ag.mask_for(tokens, ["nouns"])


def test_table_rows_equal_direct_compare_calls(doc):
    analysis, attribution, importance, mask = doc
    table = ag.agreement_table(analysis, attribution, importance=importance, mask=mask, layer_range=(0, 0), p=0.95)
    assert list(table.columns) == ["source", "scaled", "masked", *METRICS, "note"]
    assert len(table) == 3 * 2 * 3
    layers = {"layer 2 (final)": [1], "all layers": [0, 1], "layer 1": [0]}
    for row in table.to_dict("records"):
        attention = _received(analysis, layers[row["source"]], importance if row["scaled"] else None)
        expected = compare(attention, attribution, mask=None if row["masked"] == "no" else mask,
                           mode="zero" if row["masked"] == "no" else row["masked"], p=0.95)
        for name in METRICS:
            assert row[name] == pytest.approx(expected[name], abs=1e-6), (row["source"], row["masked"], name)
        assert row["note"] == ""


def test_table_without_importance_or_mask(doc):
    analysis, attribution, _, mask = doc
    assert len(ag.agreement_table(analysis, attribution, mask=mask)) == 2 * 3  # unscaled only
    plain = ag.agreement_table(analysis, attribution)
    assert plain["masked"].tolist() == ["no", "no"] and not plain["scaled"].any()


def test_undefined_configuration_is_nan_with_a_reason(doc):
    analysis, attribution, _, mask = doc
    table = ag.agreement_table(analysis, attribution, importance=np.zeros((2, 2)), mask=mask)
    scaled = table[table["scaled"]]
    assert scaled[list(METRICS)].isna().all().all()
    assert scaled["note"].str.contains("constant").all()
    assert table[~table["scaled"]][list(METRICS)].notna().all().all()


@pytest.mark.parametrize("mode", ag.MASK_MODES)
def test_top_sets_against_numpy(doc, mode):
    analysis, attribution, _, mask = doc
    attention = analysis.attention.received()
    sets = ag.top_sets(analysis.tokens, attention, attribution, mask, mode)
    # oracle: the notebook's construction (min-max, np.percentile(95), >= threshold), per the mode
    keep = np.flatnonzero(~mask) if mode == "drop" else np.arange(analysis.n)
    a, b = attention.astype(float).copy(), np.abs(attribution)
    if mode == "zero":
        a[mask], b[mask] = 0, 0
    a, b = a[keep], b[keep]
    a_n, b_n = (a - a.min()) / (a.max() - a.min()), (b - b.min()) / (b.max() - b.min())
    banned = set(np.flatnonzero(mask).tolist()) if mode == "zero" else set()
    top_a = {int(keep[i]) for i in np.flatnonzero(a_n >= np.percentile(a_n, 95))} - banned
    top_b = {int(keep[i]) for i in np.flatnonzero(b_n >= np.percentile(b_n, 95))} - banned
    assert sets.attention_only["position"].tolist() == sorted(top_a - top_b)
    assert sets.attribution_only["position"].tolist() == sorted(top_b - top_a)
    assert sets.both["position"].tolist() == sorted(top_a & top_b)
    expected_j = compare(attention, attribution, mask=None if mode == "no" else mask,
                         mode="zero" if mode == "no" else mode)["jaccard_top"]
    assert sets.jaccard == pytest.approx(expected_j)
    assert sets.jaccard == pytest.approx(len(top_a & top_b) / len(top_a | top_b))
    # normalised values and ranks (1 = highest, ties: lower position first)
    rank_a = {int(keep[i]): r + 1 for r, i in enumerate(sorted(range(len(a_n)), key=lambda i: (-a_n[i], i)))}
    both = pd.concat(sets.tables())
    for pos, norm, rank, tok in zip(both["position"], both["attention_norm"], both["attention_rank"], both["token"]):
        assert norm == pytest.approx(a_n[np.flatnonzero(keep == pos)[0]])
        assert rank == rank_a[pos]
        assert tok == token_label(analysis.tokens[pos])
    # counts by token type
    counts = sets.counts().set_index("token")
    for name, table in zip(ag.SET_NAMES, sets.tables()):
        for tok, c in Counter(table["token"]).items():
            assert counts.loc[tok, name] == c
    assert counts["total"].sum() == len(both)


def test_top_sets_drop_mode_has_no_masked_positions(doc):
    analysis, attribution, _, mask = doc
    sets = ag.top_sets(analysis.tokens, analysis.attention.received(), attribution, mask, "drop")
    positions = pd.concat(sets.tables())["position"].to_numpy()
    assert not mask[positions].any()


@pytest.mark.parametrize("metric", ag.HEAD_METRICS)
@pytest.mark.parametrize("mode", ag.MASK_MODES)
def test_head_agreement_equals_compare_per_head(doc, metric, mode):
    analysis, attribution, _, mask = doc
    grid = ag.head_agreement(analysis, attribution, metric, mask, mode)
    assert grid.shape == (2, 2)
    for layer in range(2):
        for head in range(2):
            attention = analysis.attention.received_per_head()[layer, head]
            expected = compare(attention, attribution, mask=None if mode == "no" else mask,
                               mode="zero" if mode == "no" else mode)[metric]
            assert grid[layer, head] == pytest.approx(expected, abs=1e-6)


def test_dataset_agreement_means_and_store(tiny_longformer, tmp_path):
    """lv.dataset_agreement (a thin call: precompute into the local store, then the store's aggregation) against
    the single-document functions, pandas means/sds, numpy means and Counters."""
    from longviz_core.attribution import integrated_gradients

    texts = [text_of(50), text_of(80), text_of(110)]
    importance = np.array([[0.5, 1.0], [1.0, 0.25]])
    kwargs = dict(max_tokens=128, ig_steps=4, importance=importance, layer_range=(0, 0), cache_dir=tmp_path)
    seen = []
    result = lv.dataset_agreement(tiny_longformer, texts, progress=lambda f, m: seen.append(f), **kwargs)
    assert result.n_documents == 3 and result.from_cache == 0 and seen[-1] == 1.0
    # oracle: the single-document functions with the same (disk-cached) IG
    docs = []
    for text in texts:
        a = lv.analyze(tiny_longformer, text, 128)
        docs.append((a, integrated_gradients(tiny_longformer, a, None, 4, cache_dir=tmp_path).scores,
                     ag.mask_for(a.tokens, ag.MASK_KINDS)))
    analysis, scores, mask = docs[2]
    single = ag.agreement_table(analysis, scores, importance=importance, mask=mask, layer_range=(0, 0))
    mine = result.per_document[result.per_document["doc"] == 2].reset_index(drop=True)
    np.testing.assert_allclose(mine["rbo"], single["rbo"])
    # mean and std per configuration, by pandas
    per = result.per_document
    expected = per.groupby(["source", "scaled", "masked"], sort=False)["kendall_tau"].agg(
        ["mean", lambda s: s.std(ddof=0)])
    got = result.table.set_index(["source", "scaled", "masked"])
    for config, (mean, std) in expected.iterrows():
        assert got.loc[config, "kendall_tau mean"] == pytest.approx(mean)
        assert got.loc[config, "kendall_tau std"] == pytest.approx(std)
    assert set(result.head_grids) == {(m, mode) for m in ag.HEAD_METRICS for mode in ag.MASK_MODES}
    grids = [ag.head_agreement(a, s, "rbo", m, "drop") for a, s, m in docs]
    np.testing.assert_allclose(result.head_grids[("rbo", "drop")], np.mean(grids, axis=0))
    # token counts summed over documents
    counts = result.set_counts[("all layers", False, "zero")].set_index("token")
    total = Counter()
    for a, s, m in docs:
        total.update(ag.top_sets(a.tokens, a.attention.received(), s, m, "zero").both["token"])
    assert {t: int(counts.loc[t, "both"]) for t in total} == dict(total)
    # a second call reads the store: every document found there
    again = lv.dataset_agreement(tiny_longformer, texts, **kwargs)
    assert again.from_cache == 3
    pd.testing.assert_frame_equal(again.table, result.table)
    shown = ag.mean_std_table(result.table, ag.TABLE1_METRICS)
    assert shown["rbo"].str.contains("±").all()


# ---------------------------------------------------------------------------------------------- figures
def test_table1_and_table2_layout(doc):
    analysis, attribution, importance, mask = doc
    table = ag.agreement_table(analysis, attribution, importance=importance, mask=mask)
    t1 = fig.table1(table)
    assert list(t1.columns) == ["Attention", "Scaled by head importance", "Masked", "Cosine similarity",
                                "Kendall tau", "Rank-biased overlap"]
    assert t1["Kendall tau"].tolist() == table["kendall_tau"].round(3).tolist()
    assert set(t1["Scaled by head importance"]) == {"yes", "no"}
    assert list(fig.table2(table).columns)[-1] == "Jaccard of the top 5%"


def test_head_heatmap_spec():
    grid = np.array([[0.1, np.nan], [0.7, 0.4]])
    chart = fig.head_agreement_heatmap(grid, "rbo")
    spec = chart.to_dict()
    values = next(iter(spec["datasets"].values()))
    assert [(v["layer"], v["head"], v["label"]) for v in values] == [(1, 1, "0.10"), (1, 2, "—"), (2, 1, "0.70"),
                                                                     (2, 2, "0.40")]
    with pytest.raises(ValueError):
        fig.head_agreement_heatmap(np.zeros(3))
