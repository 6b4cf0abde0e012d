"""Counts by word (views.counts.token_counts(..., by="word")) against a brute force: per owner (or owner and
head), the dense top-k lists mapped to words by the fast tokenizer's own word_ids(), counted with Python sets, on
a tiny Longformer with a window per layer (16, 8), its global <s> and an odd length."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from longviz_core import analyze, load_model
from longviz_core.figures import attention as fig
from longviz_core.dataset.aggregate import dataset_type_counts
from longviz_core.model.topk import CountsError, topk_indices
from longviz_core.views.counts import (
    RULES,
    Tallies,
    count_intersection,
    tally,
    token_counts,
)
from longviz_core.views.masking import build_mask
from support.oracles import brute_topk, encoding_words
from tiny import make_tiny_longformer, text_of

# words the tiny BPE (trained on tiny.WORDS) has never seen come in pieces; "the", "model" ... come whole
EXTRA = "the transformers attended unforeseen paragraphs , et al . 2021 ! Themselves models"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_tiny_longformer(tmp_path_factory.mktemp("words_counts"), layers=2, heads=2, window=[16, 8],
                                initializer_range=0.3, seed=3)
    return load_model(str(path), device="cpu")


@pytest.fixture(scope="module")
def doc(model):
    text = text_of(20) + " " + EXTRA + " " + text_of(9)
    tokens, ids, texts = encoding_words(model.tokenizer, text)
    if len(tokens) % 2 == 0:  # an odd length: the band's edges differ from an even one's
        text += " data"
        tokens, ids, texts = encoding_words(model.tokenizer, text)
    analysis = analyze(model, text, max_tokens=model.max_tokens)
    assert analysis.tokens == tokens and analysis.n % 2 == 1 and analysis.n < model.max_tokens
    assert analysis.attention.global_idx.tolist() == [0]
    assert max(Counter(w for w in ids if w >= 0).values()) >= 4  # some words really are cut into pieces
    # a position's group: its word's text (the oracle's, from the character offsets), a special token its own
    group = [texts[w] if w >= 0 else tok for w, tok in zip(ids, tokens)]
    return analysis, np.array(ids), group, topk_indices(analysis.attention, k=12)


def dense_lists(analysis, k: int, direction: str) -> dict:
    bands = analysis.attention
    out = {}
    for layer in range(bands.num_layers):
        for head in range(bands.num_heads):
            m = bands.dense(layer, head)
            out[layer, head] = brute_topk(m if direction == "attended" else m.T, k)
    return out


def brute_word_counts(lists: dict, ids, group, mask, scope, rule: str) -> Counter:
    """A word counts once per owner (per (owner, head) list) if any of its pieces is listed; a word is dropped
    only if all its pieces are masked, a special token if it is; masked owners own no list."""
    n = len(ids)
    mask = np.zeros(n, dtype=bool) if mask is None else mask
    dropped = mask.copy()
    for w in set(ids[ids >= 0].tolist()):
        dropped[ids == w] = mask[ids == w].all()
    counts, sets = Counter(), [set() for _ in range(n)]
    for (layer, head), per_owner in lists.items():
        if (layer, head) not in scope:
            continue
        for owner, listed in enumerate(per_owner):
            if mask[owner]:
                continue
            seen = {group[j] for j in listed if not dropped[j]}
            if rule == "per_head":
                counts.update(seen)
            else:
                sets[owner] |= seen
    for s in sets:
        counts.update(s)
    return counts


def masks(analysis, ids) -> dict:
    rng = np.random.default_rng(0)
    partial = rng.random(analysis.n) < 0.4  # some words lose some pieces, a few all of them
    cut = [w for w, c in Counter(ids[ids >= 0].tolist()).items() if c > 1]
    assert any(partial[ids == w].any() and not partial[ids == w].all() for w in cut)
    return {"none": None, "paper": build_mask(analysis.tokens), "random": partial}


SCOPES = {"all": (None, None), "layer 2 (window 8)": ([1], None), "one head": ([0], [1])}


@pytest.mark.parametrize("k", [1, 5, 12])
@pytest.mark.parametrize("direction", ["attended", "attending"])
def test_word_counts_equal_brute_force(doc, k, direction):
    analysis, ids, group, topk = doc
    lists = dense_lists(analysis, k, direction)
    for name, mask in masks(analysis, ids).items():
        tallies = tally(topk, analysis.tokens, mask)
        for layers, heads in SCOPES.values():
            scope = {(a, b) for a in (layers or range(2)) for b in (heads or range(2))}
            for rule in RULES:
                frame = token_counts(analysis, k, direction, "word", layers, heads, mask, tallies=tallies, rule=rule)
                expected = brute_word_counts(lists, ids, group, mask, scope, rule)
                assert Counter(dict(zip(frame["word"], frame["count"]))) == expected, (name, layers, heads, rule)
                assert list(frame.columns) == ["word", "count"] and frame.attrs["count_rule"] == rule
                assert frame["count"].is_monotonic_decreasing
                if rule == "paper":
                    owners = analysis.n if mask is None else int((~mask).sum())
                    assert frame["count"].max() <= owners


def test_a_cut_word_counts_once_where_its_pieces_count_apart(doc):
    analysis, ids, group, topk = doc
    tallies = tally(topk, analysis.tokens)
    by_position = token_counts(analysis, 12, "attended", "position", tallies=tallies, rule="per_head")
    at = dict(zip(by_position["position"], by_position["count"]))
    words = dict(zip(*token_counts(analysis, 12, "attended", "word", tallies=tallies, rule="per_head").values.T))
    checked, merged = 0, 0
    for w in sorted(set(ids[ids >= 0].tolist())):
        pieces = np.flatnonzero(ids == w)
        text = group[pieces[0]]
        if len(pieces) < 2 or len({i for i, g in zip(ids, group) if g == text}) > 1:  # a cut word met once
            continue
        piece_counts = [at.get(p, 0) for p in pieces]  # lists holding each piece
        count = words.get(text, 0)  # lists holding any piece
        assert max(piece_counts) <= count <= sum(piece_counts), text
        checked += 1
        merged += count < sum(piece_counts)  # a list held two of its pieces: the word counted once there
    assert checked >= 3 and merged >= 1


def test_intersection_and_bars_by_word(doc):
    analysis, ids, group, topk = doc
    tallies = tally(topk, analysis.tokens, build_mask(analysis.tokens))
    attended = token_counts(analysis, 5, "attended", "word", mask=tallies.mask, tallies=tallies)
    attending = token_counts(analysis, 5, "attending", "word", mask=tallies.mask, tallies=tallies)
    both = count_intersection(attended, attending, 8)
    expected = [w for w in attended["word"].head(8) if w in set(attending["word"].head(8))]
    assert both["word"].tolist() == expected and list(both.columns) == ["word", "count_attended", "count_attending"]
    lookup = dict(zip(attending["word"], attending["count"]))
    assert both["count_attending"].tolist() == [lookup[w] for w in expected]
    chart = fig.counts_bar_chart(attended, "by word", 6).to_dict()
    rows = chart["datasets"][chart["data"]["name"]] if "datasets" in chart else chart["data"]["values"]
    assert [r["label"] for r in rows] == attended["word"].head(6).tolist()
    assert chart["encoding"]["tooltip"][0]["field"] == "word"


def test_word_and_type_tables_do_not_mix(doc):
    analysis, ids, group, topk = doc
    tallies = tally(topk, analysis.tokens)
    by_word = token_counts(analysis, 5, "attended", "word", tallies=tallies)
    by_type = token_counts(analysis, 5, "attending", "type", tallies=tallies)
    with pytest.raises(CountsError, match="same thing"):
        count_intersection(by_word, by_type)
    with pytest.raises(CountsError, match="different things"):
        dataset_type_counts([by_word, by_type])
    by_position = token_counts(analysis, 5, "attended", "position", tallies=tallies)
    with pytest.raises(CountsError, match="not a count table by type or by word"):
        dataset_type_counts([by_position])
    bare = Tallies(topk, tallies.labels, tallies.type_ids, None)
    with pytest.raises(CountsError, match="without the tokens"):
        token_counts(analysis, 5, "attended", "word", tallies=bare)
    assert isinstance(by_type, pd.DataFrame) and "token" in by_type


def test_dataset_counts_by_word_sum_the_documents_brute_force_counts(model):
    """Three documents with cut words: a word's dataset count = the sum of its per-document paper counts by the
    brute force (the tokenizer's own word_ids), unmasked and masked; `documents` = the documents counting it."""
    k = 5
    texts = [text_of(m) + " " + EXTRA for m in (6, 15, 30)]
    for masked in (False, True):
        tables, expected, seen_in = [], Counter(), Counter()
        for text in texts:
            analysis = analyze(model, text, max_tokens=model.max_tokens)
            tokens, ids, words = encoding_words(model.tokenizer, text)
            assert analysis.tokens == tokens
            ids = np.array(ids)
            group = [words[w] if w >= 0 else tok for w, tok in zip(ids, tokens)]
            mask = build_mask(analysis.tokens) if masked else None
            tables.append(token_counts(analysis, k, "attending", "word", mask=mask))
            per_doc = brute_word_counts(dense_lists(analysis, k, "attending"), ids, group, mask,
                                        {(a, b) for a in range(2) for b in range(2)}, "paper")
            expected.update(per_doc)
            seen_in.update(w for w, c in per_doc.items() if c > 0)
        total = dataset_type_counts(tables)
        assert list(total.columns) == ["word", "count", "documents"] and total.attrs["count_rule"] == "paper"
        assert Counter(dict(zip(total["word"], total["count"]))) == expected
        assert dict(zip(total["word"], total["documents"])) == dict(seen_in)
        assert total["count"].is_monotonic_decreasing
        assert max(seen_in.values()) == 3  # words met in every document: their counts really are sums
