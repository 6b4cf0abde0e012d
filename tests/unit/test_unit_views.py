"""The per-token views at every unit (views.units over model.segments): an overlay's units, values, masks and texts
against a brute-force loop over the spans, the tables by sentence, and a word of the document equal to a word of
its token list (one grouping), through the tokenizers' own encodings (no model)."""
from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.figures.text import scale_max, token_overlay_html
from longviz_core.model.encoding import encode
from longviz_core.model.segments import token_segments
from longviz_core.views.attribution_tables import top_attributions
from longviz_core.views.units import overlay_table, unit_start, units
from tiny import make_tiny_bert

TEXT = ("The width is 2.54 cm. See e.g. Fig. 3 for details. Is it? Yes!\n\n"
        "A second paragraph starts here. Dr. Smith wrote it.\n\nThird paragraph without an end")


@pytest.fixture(scope="module")
def bpe(tiny_longformer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_longformer_dir))


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(make_tiny_bert(tmp_path_factory.mktemp("bert"))))


def _doc(tokenizer, text=TEXT, offsets=True):
    enc = encode(tokenizer, text, 2048)
    if not offsets:
        enc = replace(enc, offsets=None)
    return SimpleNamespace(text=text, encoded=enc, tokens=enc.tokens, n=enc.n)


def _brute(seg, values, mask):
    """(position, value, masked, special) of every shown unit, by walking the tokens and the spans."""
    rows, p = [], 0
    while p < seg.n:
        span = [(a, b) for a, b in seg.spans if a <= p < b]
        if not span:
            rows.append((p, values[p], mask[p], True))
            p += 1
            continue
        (a, b), = span
        rows.append((a, sum(values[a:b]), all(mask[a:b]), False))
        p = b
    return rows


@pytest.mark.parametrize("unit", ["sentence", "paragraph"])
@pytest.mark.parametrize("scheme", ["bpe", "wordpiece"])
@pytest.mark.parametrize("offsets", [True, False])
def test_units_at_sentences_and_paragraphs_match_a_loop_over_the_spans(request, unit, scheme, offsets):
    doc = _doc(request.getfixturevalue(scheme), offsets=offsets)
    seg = lv.segment(doc, unit)
    rng = np.random.default_rng(3)
    values = rng.normal(size=doc.n)
    mask = rng.random(doc.n) < 0.5
    mask[[0, -1]] = False
    a, b = seg.spans[-1]
    mask[a:b] = True  # one unit masked whole: masked; a unit that keeps any token is not
    shown = units(doc.tokens, values, mask, seg)
    brute = _brute(seg, values, mask)
    assert shown.unit == unit and (scheme != "bpe" or len(seg) == (7 if unit == "sentence" else 3))
    assert shown.positions.tolist() == [r[0] for r in brute]
    assert shown.values == pytest.approx([r[1] for r in brute])
    assert shown.masked.tolist() == [r[2] for r in brute] and shown.masked[-2]
    assert scheme != "bpe" or shown.masked.sum() == 1  # (the tiny WordPiece's sentences: some of one token)
    assert shown.special.tolist() == [r[3] for r in brute] and shown.special.sum() == 2
    if scheme == "bpe":  # (the tiny WordPiece vocabulary lower-cases, and spells most words [UNK]: a special tag
        # at tokens, a text token of its sentence here)
        # the overlay reads as the token view does: the units' texts, one after another, spell the same text
        assert "".join(shown.text[1:-1]) == "".join(units(doc.tokens, values).text[1:-1])
        assert [t.strip() for t in shown.text[1:-1]] == [t.strip() for t in seg.texts]  # the document's own
    # a token inside a unit selects the unit's first token; special tokens stand for themselves
    for (a, b) in seg.spans:
        assert {unit_start(shown, p) for p in range(a, b)} == {a}
    assert unit_start(shown, 0) == 0 and unit_start(shown, doc.n - 1) == doc.n - 1


def test_a_documents_words_are_its_token_lists_words(bpe):
    """One grouping: segment(analysis, "word") and the words of the token list alone (what views.units used
    before it read Segments) are the same spans, so a word looks the same with or without its document. (Where a
    text token spells a special token, e.g. the tiny WordPiece vocabulary's [UNK], the document knows it is text;
    the token list alone cannot.)"""
    for offsets in (True, False):
        doc = _doc(bpe, offsets=offsets)
        for unit in ("token", "word"):
            seg, alone = lv.segment(doc, unit), token_segments(doc.tokens, unit)
            assert seg.spans == alone.spans and seg.texts == alone.texts
            ours, theirs = units(doc.tokens, np.ones(doc.n), unit=seg), units(doc.tokens, np.ones(doc.n), unit=unit)
            assert ours.positions.tolist() == theirs.positions.tolist() and ours.text == theirs.text


def test_tables_overlay_and_scale_by_sentence(bpe):
    doc = _doc(bpe)
    seg = lv.segment(doc, "sentence")
    scores = np.random.default_rng(0).normal(size=doc.n)
    sums = lv.aggregate(scores, seg)
    top = top_attributions(doc.tokens, scores, 3, "positive", None, seg)
    order = [u for u in np.argsort(-sums, kind="stable") if sums[u] > 0][:3]
    assert list(top.columns) == ["sentence", "position", "attribution"]
    assert top["attribution"].tolist() == pytest.approx(sums[order].tolist())
    assert top["position"].tolist() == [seg.spans[u][0] for u in order]
    assert top["sentence"].tolist() == [seg.texts[u].strip() for u in order]
    table = overlay_table(doc.tokens, scores, "attribution", None, seg)
    assert len(table) == len(seg) + 2 and table["attribution"].iloc[1:-1].tolist() == pytest.approx(sums.tolist())
    assert scale_max(doc.tokens, scores, unit=seg) == pytest.approx(np.abs(sums).max())  # <s>, </s> left out
    a, b = seg.spans[2]
    html = token_overlay_html(doc.tokens, scores, unit=seg, selected=b - 1)
    assert html.count("data-pos=") == len(seg) + 2
    assert re.findall(r'lv-sel" data-pos="(\d+)"', html) == [str(a)]
    with pytest.raises(lv.SettingsError, match="segment this document"):
        units(doc.tokens[:-1], scores[:-1], unit=seg)


# ------------------------------------------------------------------------------------------ agreement by units
def _by_hand(seg, values):
    """Per unit, the sum of its tokens' values, in a plain loop."""
    return np.array([sum(values[a:b]) for a, b in seg.spans])


@pytest.fixture(scope="module")
def sentences(tiny_longformer):
    analysis = lv.analyze(tiny_longformer, TEXT * 2, 128)
    return analysis, lv.segment(analysis, "sentence")


def test_agreement_by_units_compares_the_hand_summed_vectors(sentences):
    from longviz_core.views import agreement as ag
    from longviz_core.views.similarity import compare, compare_many

    analysis, seg = sentences
    attribution = np.random.default_rng(5).normal(size=analysis.n)
    mask = ag.mask_for(analysis.tokens, ag.MASK_KINDS)
    a, b = seg.spans[3]
    mask[a:b] = True  # a sentence of masked tokens only: the one masked unit
    unit_mask = np.array([all(mask[a:b]) for a, b in seg.spans])
    assert unit_mask.sum() == 1 and len(seg) == 7
    table = ag.agreement_table(analysis, attribution, mask=mask, segments=seg)
    ig = _by_hand(seg, np.abs(attribution))  # |IG| summed per sentence
    for _, row in table.iterrows():
        layers = (analysis.attention.num_layers - 1,) if "final" in row["source"] else None
        attention = _by_hand(seg, analysis.attention.received(layers=layers))
        expected = compare(attention, ig, mask=None if row["masked"] == "no" else unit_mask,
                           mode="zero" if row["masked"] == "no" else row["masked"])
        assert [row[m] for m in expected] == pytest.approx(list(expected.values()), nan_ok=True), row
    # it differs from the token comparison: the check can fail
    assert not np.allclose(table["cosine"], ag.agreement_table(analysis, attribution, mask=mask)["cosine"])
    per_head = analysis.attention.received_per_head()
    grid = ag.head_agreement(analysis, attribution, "kendall_tau", mask, "drop", segments=seg)
    hand = np.array([[_by_hand(seg, per_head[i, j]) for j in range(per_head.shape[1])]
                     for i in range(per_head.shape[0])])
    assert grid == pytest.approx(compare_many(hand, ig, "kendall_tau", unit_mask, "drop"), nan_ok=True)
    sets = ag.top_sets(analysis.tokens, analysis.attention.received(), attribution, mask, "drop", segments=seg)
    starts = {s for s, _ in seg.spans}
    rows = pd.concat(sets.tables())
    assert set(rows["position"]) <= starts and a not in set(rows["position"])  # the masked sentence is dropped
    assert list(rows.columns[:2]) == ["sentence", "position"] and sets.counts().columns[0] == "sentence"


def test_explainer_agreement_by_units_ranks_the_summed_keys(sentences, tiny_longformer):
    import scipy.stats

    from longviz_core.attribution.explainers import Explanation
    from longviz_core.dataset import leaderboard as lb

    analysis, seg = sentences
    rng = np.random.default_rng(2)
    made = {m: Explanation(m, 0, rng.normal(size=analysis.n), 0.0, None) for m in ("ig", "grad_norm")}
    matrix = lb.agreement_matrix(made, "kendall_tau", rank_by="magnitude", segments=seg)
    hand = [_by_hand(seg, np.abs(e.scores)) for e in made.values()]
    assert matrix.loc["ig", "grad_norm"] == pytest.approx(scipy.stats.kendalltau(*hand).statistic)
    short = lv.analyze(tiny_longformer, "One sentence, and only one", 64)
    alone = {m: Explanation(m, 0, rng.normal(size=short.n), 0.0, None) for m in made}
    with pytest.raises(lb.LeaderboardError, match="at least two sentences to rank; this document has one"):
        lb.agreement_matrix(alone, segments=lv.segment(short, "sentence"))
    with pytest.raises(lb.LeaderboardError, match="segment the explanations' document"):
        lb.agreement_matrix(alone, segments=seg)
