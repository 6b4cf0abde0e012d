"""Top-k attended / attending lists and their counts against brute-force Algorithms 1-3 on dense matrices:
the lists by a per-row sort of every head's dense matrix (from the bands, and on a tiny Longformer from a
float64 recomputation of attention from the layer weights), the counts by Python sets per owner token and a
Counter, as appendix A.5 writes them."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import analyze
from longviz_core.errors import LongvizError
from longviz_core.figures import attention as fig
from longviz_core.model.bands import AttentionBands
from longviz_core.tokens import normalise_tokens
from longviz_core.dataset.aggregate import dataset_type_counts
from longviz_core.model.topk import CountsError, TopK, topk_indices
from longviz_core.views.counts import (
    COUNT_MEANINGS,
    COUNT_RULES,
    RULES,
    count_intersection,
    instance_counts,
    position_counts,
    tally,
    token_counts,
    type_counts,
)
from support.oracles import brute_topk, synthetic_bands
from tiny import make_tiny_longformer, text_of


def dense_lists(dense: dict, k: int, direction: str) -> dict:
    """{(layer, head): lists} from {(layer, head): (n, n) matrix}; Algorithm 3 = Algorithm 1 on the transpose."""
    return {lh: brute_topk(m if direction == "attended" else m.T, k) for lh, m in dense.items()}


def brute_lists(bands: AttentionBands, k: int, direction: str) -> dict:
    dense = {(l, h): bands.dense(l, h) for l in range(bands.num_layers) for h in range(bands.num_heads)}
    return dense_lists(dense, k, direction)


def brute_paper_counts(lists: dict, labels: list[str], by: str, scope, mask=None) -> Counter:
    """Algorithm 2 as the paper writes it: per owner token, S = set(its top-k over every head of the scope),
    masked entries left out; a key counts once per owner whose S holds it (by type: holds one of its instances).
    Masked owners own no set."""
    n = len(labels)
    sets = [set() for _ in range(n)]
    for (layer, head), per_token in lists.items():
        if (layer, head) in scope:
            for owner, listed in enumerate(per_token):
                sets[owner].update(j for j in listed if mask is None or not mask[j])
    counts = Counter()
    for owner, s in enumerate(sets):
        if mask is None or not mask[owner]:
            counts.update(s if by == "position" else {labels[j] for j in s})
    return counts


def brute_per_head_counts(lists: dict, labels: list[str], by: str, scope, mask=None) -> Counter:
    """The "per head list" rule: per owner token and head, the set of listed types (or positions); summed."""
    counts = Counter()
    for (layer, head), per_token in lists.items():
        if (layer, head) not in scope:
            continue
        for owner, listed in enumerate(per_token):
            if mask is not None and mask[owner]:
                continue
            kept = [j for j in listed if mask is None or not mask[j]]
            counts.update(set(kept) if by == "position" else {labels[j] for j in kept})
    return counts


BRUTE = {"paper": brute_paper_counts, "per_head": brute_per_head_counts}


def labels_of(tokens) -> list[str]:
    norm = normalise_tokens(tokens)
    # tokens that normalise to nothing keep a visible stand-in; the tiny corpus has none but <s>/</s> map to
    # themselves, so the normalised form is the type label here
    assert all(norm)
    return norm


def frame_as_counter(frame: pd.DataFrame, by: str) -> Counter:
    key = "position" if by == "position" else "token"
    return Counter(dict(zip(frame[key], frame["count"])))


def scope_of(layers, heads, L: int, H: int) -> set:
    return {(l, h) for l in (range(L) if layers is None else layers) for h in (range(H) if heads is None else heads)}


def assert_counts_equal_brute(doc, topk, lists: dict, k: int, direction: str, mask, scopes: dict, L: int, H: int):
    """Every rule, `by` and scope: the counts equal the brute force, and under the paper's rule no count exceeds
    the number of unmasked owner tokens (a count is a number of tokens)."""
    labels = labels_of(doc.tokens)
    owners = len(labels) if mask is None else int((~mask).sum())
    tallies = tally(topk, doc.tokens, mask)
    for layers, heads in scopes.values():
        scope = scope_of(layers, heads, L, H)
        for rule in RULES:
            for by in ("type", "position"):
                frame = token_counts(doc, k, direction, by, layers, heads, mask, tallies=tallies, rule=rule)
                expected = BRUTE[rule](lists, labels, by, scope, mask)
                assert frame_as_counter(frame, by) == expected, (rule, by, layers, heads)
                assert (frame["count"] > 0).all() and frame.attrs["count_rule"] == rule
                if rule == "paper":
                    assert (frame["count"] <= owners).all()
                if by == "position" and mask is not None:
                    assert not mask[frame["position"]].any()


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """Window 64 (w = 32): wide enough for the two-stage chunked selection; peaked attention (init 0.5)."""
    from longviz_core import load_model

    path = make_tiny_longformer(tmp_path_factory.mktemp("wide"), layers=2, heads=2, window=64,
                                initializer_range=0.5, max_positions=260)
    return load_model(str(path))


@pytest.fixture(scope="module")
def analysis(wide_model):
    return analyze(wide_model, text_of(150), max_tokens=140)


@pytest.fixture(scope="module")
def topk64(analysis):
    return topk_indices(analysis.attention, k=64)


@pytest.fixture(scope="module")
def model_lists(analysis):
    """Brute-force lists of the `analysis` document, computed once per (k, direction)."""
    cache = {}

    def get(k, direction):
        if (k, direction) not in cache:
            cache[k, direction] = brute_lists(analysis.attention, k, direction)
        return cache[k, direction]

    return get


class Doc(SimpleNamespace):
    """What the counting functions read from a DocumentAnalysis: tokens and attention bands."""


def synthetic_doc(bands: AttentionBands, types: int = 9, seed: int = 0) -> Doc:
    """Byte-level tokens drawn from a few types, so most types have several instances."""
    rng = np.random.default_rng(seed)
    return Doc(tokens=[f"Ġw{t}" for t in rng.integers(0, types, bands.n)], attention=bands)


# ------------------------------------------------------------------------------------------ top-k lists
def _assert_lists_equal(topk: TopK, bands: AttentionBands, k: int):
    for direction in ("attended", "attending"):
        ref = brute_lists(bands, k, direction)
        got = topk.lists(direction)
        for (layer, head), per_token in ref.items():
            for i, listed in enumerate(per_token):
                expected = listed + [-1] * (k - len(listed))
                assert got[layer, head, i, :k].tolist() == expected, (direction, layer, head, i)


@pytest.mark.parametrize("k", [1, 3, 12, 20, 64])
def test_topk_lists_equal_brute_force_on_a_model(analysis, k):
    bands = analysis.attention
    assert bands.window == 32
    _assert_lists_equal(topk_indices(bands, k=k), bands, k)


@pytest.mark.parametrize("seed,gidx,k,levels", [(0, (0, 41), 5, 3), (1, (0,), 20, 3), (2, (), 4, 3),
                                                (3, (7, 8, 119), 6, 3), (4, (0,), 7, 1), (5, (0, 41), 64, 3),
                                                (6, (), 64, 1)])
def test_topk_lists_break_ties_by_lower_position(seed, gidx, k, levels):
    bands = synthetic_bands(gidx=gidx, seed=seed, levels=levels)  # levels=1: every entry ties
    _assert_lists_equal(topk_indices(bands, k=k), bands, k)


@pytest.mark.parametrize("k", [5, 20, 64])
def test_topk_lists_of_a_layer_with_a_narrower_window(k):
    """Per-layer windows: a narrower layer's band is padded to the widest with zeros, never candidates."""
    bands = synthetic_bands(n=150, w=40, gidx=(0,), narrow={1: 8}, seed=7)
    topk = topk_indices(bands, k=k)
    _assert_lists_equal(topk, bands, k)
    listed = topk.attended[1, :, 20:130]  # queries away from the ends and the global token
    spread = np.abs(listed - np.arange(20, 130)[None, :, None])
    assert np.all((listed == -1) | (listed == 0) | (spread <= 8))


def test_lists_are_int16_below_32768_tokens(topk64):
    assert topk64.attended.dtype == np.int16 and topk64.attending.dtype == np.int16
    assert topk64.nbytes == 2 * 2 * 2 * 140 * 64 * 2


def test_all_zero_attention_gives_empty_lists():
    bands = synthetic_bands(n=30, w=5, gidx=(0,))
    zero = AttentionBands(np.zeros_like(bands.local), np.zeros_like(bands.global_cols),
                          np.zeros_like(bands.global_rows), bands.global_idx, bands.window)
    topk = topk_indices(zero, k=3)
    assert np.all(topk.attended == -1) and np.all(topk.attending == -1)
    doc = Doc(tokens=["Ġa"] * 30, attention=zero)
    assert token_counts(doc, 3, topk=topk).empty


def test_prefix_of_a_longer_list_is_the_shorter_list(analysis, topk64):
    short = topk_indices(analysis.attention, k=4)
    assert np.array_equal(topk64.attended[..., :4], short.attended)
    assert np.array_equal(topk64.attending[..., :4], short.attending)


def test_rows_with_fewer_than_k_entries_are_padded(wide_model):
    doc = analyze(wide_model, "the model", max_tokens=16)  # n = 4 tokens
    topk = topk_indices(doc.attention, k=10)
    assert topk.attended.shape == (2, 2, doc.n, 10)
    assert np.all(topk.attended[..., doc.n :] == -1)
    assert np.all(np.sort(topk.attended[..., : doc.n], axis=-1) == np.arange(doc.n))  # every key once
    by_position = token_counts(doc, 10, by="position", topk=topk)
    assert by_position["count"].tolist() == [doc.n] * doc.n  # every token's set holds every token


def test_full_attention_model(tiny_bert):
    doc = analyze(tiny_bert, text_of(30), max_tokens=40)
    _assert_lists_equal(topk_indices(doc.attention, k=5), doc.attention, 5)


# ------------------------------------------------------------------------------------------ counts
SCOPES = {
    "one head": ([1], [0]),
    "one layer": ([0], None),
    "all": (None, None),
    "two heads across layers": ([0, 1], [1]),
}


@pytest.mark.parametrize("k", [1, 5, 20, 64])
@pytest.mark.parametrize("direction", ["attended", "attending"])
@pytest.mark.parametrize("masked", [False, True])
def test_counts_equal_brute_force_on_a_model(analysis, topk64, model_lists, k, direction, masked):
    mask = np.random.default_rng(k).random(analysis.n) < 0.3 if masked else None
    assert_counts_equal_brute(analysis, topk64, model_lists(k, direction), k, direction, mask, SCOPES, 2, 2)


@pytest.mark.parametrize("gidx", [(), (0,), (0, 41)])
@pytest.mark.parametrize("levels", [1, 3])
@pytest.mark.parametrize("k", [1, 5, 20, 64])
def test_counts_equal_brute_force_with_ties_and_global_tokens(gidx, levels, k):
    bands = synthetic_bands(gidx=gidx, levels=levels, seed=k + levels, layers=2, heads=3)
    doc = synthetic_doc(bands)
    topk = topk_indices(bands, k=64)
    mask = np.random.default_rng(k).random(bands.n) < 0.2
    scopes = {"one head": ([0], [2]), "one layer": ([1], None), "all": (None, None)}
    for direction in ("attended", "attending"):
        lists = brute_lists(bands, k, direction)
        for m in (None, mask):
            assert_counts_equal_brute(doc, topk, lists, k, direction, m, scopes, 2, 3)


@pytest.mark.parametrize("k", [5, 64])
def test_counts_with_a_narrower_layer_window(k):
    bands = synthetic_bands(n=150, w=40, gidx=(0,), narrow={0: 8}, seed=11)
    doc = synthetic_doc(bands, types=25)
    topk = topk_indices(bands, k=k)
    for direction in ("attended", "attending"):
        assert_counts_equal_brute(doc, topk, brute_lists(bands, k, direction), k, direction, None, SCOPES, 2, 2)


def test_paper_count_is_once_per_token_and_per_head_count_sums_heads():
    """Hand-made: 4 tokens, 2 heads in which every query's top-2 is keys 0 and 1 (two instances of 'cat').
    Paper: each of the 4 tokens' sets holds 0 and 1 -> 4 each, 'cat' 4. Per head list: 2 heads x 4 lists = 8."""
    n, w = 4, 3
    local = np.zeros((1, 2, n, 2 * w + 1), dtype=np.float32)
    for i in range(n):
        for j in range(n):
            local[0, :, i, j - i + w] = [0.4, 0.4, 0.1, 0.1][j]
    bands = AttentionBands(local, np.zeros((1, 2, n, 0), np.float32), np.zeros((1, 2, 0, n), np.float32),
                           np.zeros(0, np.int64), w)
    doc = Doc(tokens=["Ġcat", "Ġcat", "Ġsat", "Ġmat"], attention=bands)

    def counts(by, rule, heads=None):
        frame = token_counts(doc, k=2, by=by, heads=heads, rule=rule)
        return dict(zip(frame["token" if by == "type" else "position"], frame["count"]))

    assert counts("type", "paper") == {"cat": 4}
    assert counts("position", "paper") == {0: 4, 1: 4}
    assert counts("type", "per_head") == {"cat": 8}
    assert counts("position", "per_head") == {0: 8, 1: 8}
    assert counts("type", "per_head", heads=[1]) == counts("type", "paper", heads=[1]) == {"cat": 4}
    mask = np.array([False, True, False, False])  # the second 'cat' neither counts nor is counted
    masked = token_counts(doc, k=2, by="position", mask=mask)
    assert dict(zip(masked["position"], masked["count"])) == {0: 3}


def test_counts_equal_a_float64_recomputation_from_the_weights(tmp_path):
    """A tiny Longformer (3 layers, window 16) with one and with two global tokens: the bands' lists and counts
    against Algorithms 1-3 on attention recomputed densely, in float64, from each layer's weights. The oracle's
    rows are checked to have no near-tie at the k-th place (so float32 rounding cannot reorder them)."""
    from longviz_core import load_model

    model = load_model(str(make_tiny_longformer(tmp_path, layers=3, heads=2, window=16, initializer_range=0.2,
                                                max_positions=260)))
    doc = analyze(model, text_of(150), max_tokens=140)
    for gidx in ([0], [0, 37]):
        bands, dense = _longformer_bands_and_dense(model, doc, gidx)
        run = Doc(tokens=doc.tokens, attention=bands)
        topk = topk_indices(bands, k=64)
        mask = np.random.default_rng(len(gidx)).random(doc.n) < 0.3
        scopes = {"one head": ([2], [1]), "one layer": ([1], None), "all": (None, None)}
        for k in (1, 5, 20, 64):
            for direction in ("attended", "attending"):
                matrices = {lh: m if direction == "attended" else m.T for lh, m in dense.items()}
                _assert_separated(matrices, k)
                lists = dense_lists(matrices, k, "attended")
                for m in (None, mask):
                    assert_counts_equal_brute(run, topk, lists, k, direction, m, scopes, 3, 2)


def _assert_separated(matrices: dict, k: int, rtol: float = 1e-5):
    for lh, m in matrices.items():
        top = -np.sort(-m, axis=1)
        if k < m.shape[1]:
            kth, nxt = top[:, k - 1], top[:, k]
            tied = (nxt > 0) & (kth - nxt <= rtol * kth)
            assert not tied.any(), f"head {lh}: near-tie at place {k} in rows {np.flatnonzero(tied)}"


@torch.no_grad()
def _longformer_bands_and_dense(model, doc, gidx) -> tuple[AttentionBands, dict]:
    """The model run with global attention on `gidx`: its bands, and every head's (n, n) attention recomputed
    in float64 as softmax(QK^T / sqrt(d)) over the band and the global keys, global queries over every key,
    from the layer's query/key/query_global/key_global weights and the hidden states entering the layer."""
    inputs = doc.encoded.torch_inputs()
    glob = torch.zeros_like(inputs["global_attention_mask"])
    glob[0, gidx] = 1
    inputs["global_attention_mask"] = glob
    out = model.model(**inputs, output_attentions=True, output_hidden_states=True)
    n = doc.n
    bands = AttentionBands.from_longformer(out.attentions, out.global_attentions, gidx, n)
    is_global = glob[0].bool()
    i = torch.arange(n)
    dense = {}
    for layer, block in enumerate(model.model.longformer.encoder.layer):
        att = block.attention.self
        x = out.hidden_states[layer][0].double()
        H, d, w = att.num_heads, att.head_dim, att.one_sided_attn_window_size
        lin = lambda m: (x @ m.weight.double().T + m.bias.double()).view(n, H, d).transpose(0, 1)  # noqa: E731
        q, key, qg, kg = lin(att.query), lin(att.key), lin(att.query_global), lin(att.key_global)
        allowed = ((i[:, None] - i[None, :]).abs() <= w) | is_global[None, :]
        scores = torch.where(allowed, q @ key.transpose(1, 2) / d**0.5, torch.tensor(-torch.inf, dtype=torch.double))
        probs = torch.softmax(scores, dim=-1)
        probs[:, is_global] = torch.softmax(qg @ kg.transpose(1, 2) / d**0.5, dim=-1)[:, is_global]
        for head in range(H):
            dense[layer, head] = probs[head].numpy()
    return bands, dense


def test_int32_lists_count_the_same(analysis, topk64):
    wide = TopK(topk64.attended.astype(np.int32), topk64.attending.astype(np.int32), 64)
    mask = np.random.default_rng(3).random(analysis.n) < 0.3
    for rule in RULES:
        for direction in ("attended", "attending"):
            a = type_counts(tally(topk64, analysis.tokens, mask), 20, direction, rule=rule)
            b = type_counts(tally(wide, analysis.tokens, mask), 20, direction, rule=rule)
            assert np.array_equal(a, b)


def test_two_threads_count_the_same_as_one(monkeypatch, analysis, topk64):
    from longviz_core.views import counts

    mask = np.random.default_rng(2).random(analysis.n) < 0.3

    def all_counts():
        tallies = tally(topk64, analysis.tokens, mask)
        return [counts._counts(tallies, 64, d, None, None, r) for d in ("attended", "attending") for r in RULES]

    monkeypatch.setattr(counts, "_SPLIT_STEPS", 1)
    split = all_counts()
    monkeypatch.setattr(counts, "_SPLIT_STEPS", 10**12)
    for (p1, t1), (p2, t2) in zip(split, all_counts()):
        assert np.array_equal(p1, p2) and np.array_equal(t1, t2)


def test_tables_by_type_and_by_position_share_one_pass(monkeypatch, analysis, topk64):
    from longviz_core.model import _kernels

    calls = []
    real = _kernels.count_sets
    monkeypatch.setattr(_kernels, "count_sets", lambda *args: calls.append(args[3]) or real(*args))
    tallies = tally(topk64, analysis.tokens)
    first = [token_counts(analysis, 7, "attending", by, tallies=tallies) for by in ("type", "position")]
    assert calls == [7]  # one pass (one thread at this size) gave both tables
    again = [token_counts(analysis, 7, "attending", by, tallies=tallies) for by in ("type", "position")]
    assert calls == [7] and all(a.equals(b) for a, b in zip(first, again))
    token_counts(analysis, 7, "attending", tallies=tallies, rule="per_head")
    token_counts(analysis, 7, "attending", tallies=tallies, layers=[1])
    assert calls == [7, 7, 7]
    for k in range(1, 12):  # only the last few are kept
        token_counts(analysis, k, "attended", tallies=tallies)
    assert len(tallies._recent) == 8
    counts = position_counts(tallies, 11, "attended")
    counts[:] = -1  # the caller's copy
    assert (position_counts(tallies, 11, "attended") >= 0).all()


def test_table_order_count_descending_ties_by_position(analysis, topk64):
    frame = token_counts(analysis, k=3, by="position", topk=topk64)
    keys = list(zip(-frame["count"], frame["position"]))
    assert keys == sorted(keys)
    types = token_counts(analysis, k=3, by="type", topk=topk64)
    labels = labels_of(analysis.tokens)
    first = {t: labels.index(t) for t in types["token"]}
    keys = [(-c, first[t]) for t, c in zip(types["token"], types["count"])]
    assert keys == sorted(keys)
    assert list(frame.columns) == ["position", "token", "count"]
    assert list(types.columns) == ["token", "count"]


@pytest.mark.parametrize("rule", RULES)
def test_intersection_and_instances_match_brute_force(analysis, topk64, model_lists, rule):
    k, top_n = 5, 8
    labels = labels_of(analysis.tokens)
    mask = np.random.default_rng(9).random(analysis.n) < 0.25
    tallies = tally(topk64, analysis.tokens, mask)
    scope = scope_of(None, None, 2, 2)
    for by in ("type", "position"):
        a = token_counts(analysis, k, "attended", by, mask=mask, tallies=tallies, rule=rule)
        b = token_counts(analysis, k, "attending", by, mask=mask, tallies=tallies, rule=rule)
        both = count_intersection(a, b, top_n=top_n)
        key = "position" if by == "position" else "token"
        assert set(both[key]) == set(a[key].head(top_n)) & set(b[key].head(top_n))
        assert both[key].tolist() == [x for x in a[key].head(top_n) if x in set(b[key].head(top_n))]
        attended = BRUTE[rule](model_lists(k, "attended"), labels, by, scope, mask)
        attending = BRUTE[rule](model_lists(k, "attending"), labels, by, scope, mask)
        for _, row in both.iterrows():
            assert row["count_attended"] == attended[row[key]]
            assert row["count_attending"] == attending[row[key]]
        assert both.attrs["count_rule"] == rule
    word = "model"
    inst = instance_counts(analysis, word, k, "attending", mask=mask, tallies=tallies, rule=rule)
    expected = BRUTE[rule](model_lists(k, "attending"), labels, "position", scope, mask)
    assert inst["position"].tolist() == [i for i, t in enumerate(labels) if t == word]
    assert inst["count"].tolist() == [expected[p] for p in inst["position"]]
    assert inst["masked"].tolist() == mask[inst["position"]].tolist()
    assert position_counts(tallies, k, "attending", rule=rule)[inst["position"]].tolist() == inst["count"].tolist()
    with pytest.raises(CountsError, match="does not occur"):
        instance_counts(analysis, "zebra", topk=topk64)


def test_intersection_refuses_tables_of_two_rules(analysis, topk64):
    a = token_counts(analysis, 5, "attended", topk=topk64, rule="paper")
    b = token_counts(analysis, 5, "attending", topk=topk64, rule="per_head")
    with pytest.raises(CountsError, match="different rules"):
        count_intersection(a, b)


def test_dataset_type_counts_sum_the_documents_paper_counts(wide_model):
    """Three documents: a type's dataset count = the sum of its per-document paper counts (brute force), so
    it never exceeds the dataset's number of tokens; `documents` = documents whose count is positive."""
    k = 5
    docs = [analyze(wide_model, text_of(m), max_tokens=m) for m in (40, 70, 100)]
    texts = [text_of(m) for m in (40, 70, 100)]
    assert len(set(texts)) == 3
    tables, expected, seen_in = [], Counter(), Counter()
    for doc in docs:
        tables.append(token_counts(doc, k, "attended", "type"))
        per_doc = brute_paper_counts(brute_lists(doc.attention, k, "attended"), labels_of(doc.tokens), "type",
                                     scope_of(None, None, 2, 2))
        expected.update(per_doc)
        seen_in.update(t for t, c in per_doc.items() if c > 0)
    total = dataset_type_counts(tables)
    assert list(total.columns) == ["token", "count", "documents"]
    assert Counter(dict(zip(total["token"], total["count"]))) == expected
    assert dict(zip(total["token"], total["documents"])) == dict(seen_in)
    assert total["count"].is_monotonic_decreasing
    assert total["count"].max() <= sum(doc.n for doc in docs)
    assert total.attrs["count_rule"] == "paper"
    with pytest.raises(CountsError, match="different rules"):
        dataset_type_counts([tables[0], token_counts(docs[1], k, rule="per_head")])
    with pytest.raises(CountsError, match="not a count table"):
        dataset_type_counts([token_counts(docs[0], k, by="position")])
    with pytest.raises(CountsError, match="no per-document"):
        dataset_type_counts([])


def test_rule_names_and_chart_titles(analysis, topk64):
    assert tuple(COUNT_RULES) == tuple(COUNT_MEANINGS) == RULES == ("paper", "per_head")
    assert "over the selected heads" in COUNT_MEANINGS["paper"] and "per-head" in COUNT_MEANINGS["per_head"]
    for rule in RULES:
        frame = token_counts(analysis, 5, by="position", topk=topk64, rule=rule)
        spec = fig.counts_bar_chart(frame, "attended · by position").to_dict()
        assert spec["encoding"]["x"]["title"] == "count"  # short enough for a half-width chart at 1,024 px
        assert spec["encoding"]["tooltip"][-1]["title"] == f"count ({COUNT_MEANINGS[rule]})"
        assert COUNT_RULES[rule] in str(spec["title"])
        inst = instance_counts(analysis, "model", 5, topk=topk64, rule=rule)
        spec = fig.instances_chart(inst, "'model'").to_dict()
        assert spec["title"]["subtitle"] == [f"count = {COUNT_MEANINGS[rule]},", f"counted {COUNT_RULES[rule]}"]
    plain = pd.DataFrame({"token": ["a"], "count": [1]})  # a table without a rule: the default rule, named
    spec = fig.counts_bar_chart(plain, rule="per_head").to_dict()
    assert spec["encoding"]["tooltip"][-1]["title"] == f"count ({COUNT_MEANINGS['per_head']})"
    with pytest.raises(ValueError, match="rule"):
        fig.counts_bar_chart(plain, rule="sometimes")


def test_mask_changes_the_counts_and_tallies_check_their_mask(analysis, topk64):
    mask = np.random.default_rng(1).random(analysis.n) < 0.25
    tallies = tally(topk64, analysis.tokens, mask)
    assert tallies.k == 64 and tallies.matches(mask) and not tallies.matches(None)
    assert tallies.nbytes >= topk64.nbytes
    assert not token_counts(analysis, 4, mask=mask, tallies=tallies).equals(token_counts(analysis, 4, topk=topk64))
    with pytest.raises(CountsError, match="another mask"):
        token_counts(analysis, 2, mask=None, tallies=tallies)
    with pytest.raises(CountsError, match="another mask"):
        token_counts(analysis, 2, mask=~mask, tallies=tallies)


def test_invalid_inputs(analysis):
    topk = topk_indices(analysis.attention, k=3)
    with pytest.raises(CountsError, match="k must be"):
        topk_indices(analysis.attention, k=0)
    with pytest.raises(CountsError, match="exceeds"):
        token_counts(analysis, k=5, topk=topk)
    with pytest.raises(CountsError, match="mask"):
        token_counts(analysis, k=2, topk=topk, mask=np.zeros(3, bool))
    with pytest.raises(CountsError, match="direction"):
        token_counts(analysis, k=2, topk=topk, direction="sideways")
    with pytest.raises(CountsError, match="by must"):
        token_counts(analysis, k=2, topk=topk, by="colour")
    with pytest.raises(CountsError, match="rule must"):
        token_counts(analysis, k=2, topk=topk, rule="sometimes")
    with pytest.raises(CountsError, match="layer index"):
        token_counts(analysis, k=2, topk=topk, layers=[5])
    with pytest.raises(CountsError, match="tokens for lists"):
        tally(topk, analysis.tokens[:-1])
    with pytest.raises(CountsError):
        topk_indices(np.zeros((2, 2)))
    assert issubclass(CountsError, LongvizError) and issubclass(CountsError, ValueError)


def test_one_or_two_workers_give_the_same_lists_and_report_progress(analysis):
    seen = []
    one = topk_indices(analysis.attention, k=6, workers=1)
    two = topk_indices(analysis.attention, k=6, workers=2, progress=lambda f, m: seen.append(f))
    assert np.array_equal(one.attended, two.attended) and np.array_equal(one.attending, two.attending)
    assert seen == [1 / 4, 2 / 4, 3 / 4, 1.0]
    assert not one.attended.flags.writeable


def test_compiled_loops_cache_under_the_longviz_cache_folder(tmp_path):
    """numba's default cache (next to the source, else the home folder) may be read-only on a lab server;
    the compiled loops cache under $LONGVIZ_CACHE_DIR/numba instead, and a second process loads them from there
    instead of compiling them again."""
    script = (
        "import numpy as np\n"
        "from longviz_core.model import _kernels\n"
        "from support.oracles import synthetic_bands\n"
        "from longviz_core.model.topk import topk_indices\n"
        "topk_indices(synthetic_bands(n=40, w=6, gidx=(0,)), k=3)\n"
        "print(sum(map(len, (_kernels.collect.stats.cache_hits, _kernels.collect_keys.stats.cache_hits))))\n"
    )
    env = {**os.environ, "LONGVIZ_CACHE_DIR": str(tmp_path)}
    env.pop("NUMBA_CACHE_DIR", None)
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests")])

    def hits() -> int:
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, check=True, timeout=300,
                              capture_output=True, text=True)
        return int(done.stdout.split()[-1])

    assert hits() == 0  # compiled, and saved
    assert {p.suffix for p in (tmp_path / "numba").rglob("*") if p.is_file()} >= {".nbi", ".nbc"}
    assert hits() == 2  # both loaded from the cache


def test_a_hosted_configurations_cache_dir_reaches_numba(tmp_path):
    """A cache_dir named only in the hosting configuration reaches the core as LONGVIZ_CACHE_DIR when the app
    applies the configuration, after the modules with compiled loops (and numba itself) are imported; the loops
    still cache there, because they are compiled on first use."""
    cache = tmp_path / "configured-cache"
    config = tmp_path / "longviz.toml"
    config.write_text(f'[server]\ncache_dir = "{cache}"\n\n[[models]]\nname = "demo"\nsource = "demo"\n')
    script = (
        "import os, sys\n"
        "import numba\n"
        "from longviz_core.model import _kernels\n"
        "from longviz_core.model.topk import topk_indices\n"
        "from longviz_core.views.pooling import pool_attention\n"
        "from longviz_core.config import load_config\n"
        "from support.oracles import synthetic_bands\n"
        "os.environ.update(load_config(sys.argv[1]).environment())  # as pages/_ui/hosting.apply_host_config\n"
        "bands = synthetic_bands(n=40, w=6, gidx=(0,))\n"
        "topk_indices(bands, k=3)\n"
        "pool_attention(bands, 8)\n"
        "print(numba.config.CACHE_DIR)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "LONGVIZ_CACHE_DIR", "LONGVIZ_CONFIG")}
    env["HOME"] = str(tmp_path / "home")  # the default cache folder, ~/.cache/longviz, must stay unused
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests")])
    done = subprocess.run([sys.executable, "-c", script, str(config)], env=env, cwd=root, timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(cache / "numba")
    saved = {p.name.split("-")[0] for p in (cache / "numba").rglob("*.nbi")}  # one index file per compiled loop
    assert {"_kernels.collect", "_kernels.first_k", "_kernels.block_sums"} <= saved, saved
    assert not (tmp_path / "home").exists()
