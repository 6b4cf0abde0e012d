"""Units (model.segments): a crafted text whose sentences and paragraphs are known, the span invariants on every
unit and tokenizer scheme, aggregate against a loop, the odd inputs (no sentence end, one text token, a tokenizer
without offsets, truncation), through the tokenizers' own encodings (no model)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import longviz_core as lv
from longviz_core.model.encoding import encode
from longviz_core.model.segments import ABBREVIATIONS
from tiny import make_tiny_bert

CRAFTED = ("The width is 2.54 cm. See e.g. Fig. 3 for details. Is it? Yes! It works, i.e. it runs\n\n"
           "A second paragraph starts here. Dr. Smith wrote it.\n  \n"
           "Third paragraph without an end")
SENTENCES = ["The width is 2.54 cm.", "See e.g. Fig. 3 for details.", "Is it?", "Yes!", "It works, i.e. it runs",
             "A second paragraph starts here.", "Dr. Smith wrote it.", "Third paragraph without an end"]
PARAGRAPHS = ["The width is 2.54 cm. See e.g. Fig. 3 for details. Is it? Yes! It works, i.e. it runs",
              "A second paragraph starts here. Dr. Smith wrote it.", "Third paragraph without an end"]


@pytest.fixture(scope="module")
def bpe(tiny_longformer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_longformer_dir))  # byte-level BPE (RoBERTa's)


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(make_tiny_bert(tmp_path_factory.mktemp("bert"))))  # lower-cased


def _doc(tokenizer, text, max_tokens=2048, offsets=True):
    """What segment reads of a DocumentAnalysis: its text, tokens and Encoded (without offsets if asked)."""
    enc = encode(tokenizer, text, max_tokens)
    if not offsets:
        enc = replace(enc, offsets=None)
    return SimpleNamespace(text=text, encoded=enc, tokens=enc.tokens, n=enc.n)


def _check_invariants(seg, doc):
    """Spans half-open, in order, touching, covering exactly the text positions; texts and len agree."""
    enc = doc.encoded
    covered = [p for a, b in seg.spans for p in range(a, b)]
    assert covered == enc.text_positions.tolist()
    assert all(a < b for a, b in seg.spans)
    assert len(seg) == len(seg.spans) == len(seg.texts) and seg.n == enc.n
    of = seg.unit_of_token
    assert (of[: enc.prefix] == -1).all() and (of[enc.n - enc.suffix :] == -1).all()
    assert of[enc.text_positions].tolist() == [u for u, (a, b) in enumerate(seg.spans) for _ in range(a, b)]


def test_the_crafted_text_has_its_known_sentences_and_paragraphs(bpe):
    doc = _doc(bpe, CRAFTED)
    sentences, paragraphs = lv.segment(doc, "sentence"), lv.segment(doc, "paragraph")
    assert [t.strip() for t in sentences.texts] == SENTENCES
    assert [t.strip() for t in paragraphs.texts] == PARAGRAPHS
    # a sentence never crosses a paragraph: every sentence lies inside one
    for a, b in sentences.spans:
        assert sum(pa <= a and b <= pb for pa, pb in paragraphs.spans) == 1
    # the tokens of each unit spell its text (the tokenizer's own decoding of its ids)
    for seg in (sentences, paragraphs):
        for (a, b), text in zip(seg.spans, seg.texts):
            assert bpe.decode(doc.encoded.input_ids[a:b]).strip() == text.strip()
    assert {"e.g", "i.e", "fig", "dr"} <= ABBREVIATIONS


@pytest.mark.parametrize("text", [CRAFTED, "one word", "Line one.\nLine two?\n\n\n\nEnd.  \n\n",
                                  "café—naïve “quotes”. Ünïcode here! ok", "x"])
@pytest.mark.parametrize("unit", lv.UNITS)
def test_spans_cover_every_text_token_once_in_order(bpe, wordpiece, text, unit):
    for tokenizer in (bpe, wordpiece):
        for offsets in (True, False):
            doc = _doc(tokenizer, text, offsets=offsets)
            seg = lv.segment(doc, unit)
            _check_invariants(seg, doc)
            assert seg.unit == unit
            if unit == "token":
                assert len(seg) == len(doc.encoded.text_positions)


def test_words_are_the_projects_words(bpe):
    doc = _doc(bpe, CRAFTED)
    words = lv.segment(doc, "word")
    from longviz_core.tokens import word_spans

    w = word_spans(doc.tokens)
    assert words.spans == tuple(zip(w.starts.tolist(), w.stops.tolist()))
    assert words.texts == w.text


def test_without_offsets_units_come_from_the_decoded_tokens(bpe, wordpiece):
    """A byte-level tokenizer's decoded tokens spell the document: the same units as through the offsets. A
    lower-casing WordPiece tokenizer's decoded text still ends its sentences at the same places."""
    for unit in ("sentence", "paragraph"):
        with_offsets = lv.segment(_doc(bpe, CRAFTED), unit)
        without = lv.segment(_doc(bpe, CRAFTED, offsets=False), unit)
        assert without.spans == with_offsets.spans
        assert [t.strip() for t in without.texts] == [t.strip() for t in with_offsets.texts]
    text = "the model learns. the compiler checks types. data trains the network"  # in the tiny vocabulary
    a, b = (lv.segment(_doc(wordpiece, text, offsets=o), "sentence") for o in (True, False))
    assert a.spans == b.spans and len(a) == 3


def test_odd_inputs(bpe):
    # no sentence end: one sentence, one paragraph
    doc = _doc(bpe, "the model learns attention over long documents and never stops")
    assert len(lv.segment(doc, "sentence")) == 1 and len(lv.segment(doc, "paragraph")) == 1
    # one text token: one unit of every kind
    doc = _doc(bpe, "x")
    assert len(doc.encoded.text_positions) == 1
    for unit in lv.UNITS:
        seg = lv.segment(doc, unit)
        assert seg.spans == ((1, 2),) and len(seg) == 1
    # truncated: the units of the kept tokens only, the last sentence cut where the tokens end
    doc = _doc(bpe, CRAFTED, max_tokens=30)
    seg = lv.segment(doc, "sentence")
    _check_invariants(seg, doc)
    assert seg.spans[-1][1] == doc.encoded.n - 1 and [t.strip() for t in seg.texts][0] == SENTENCES[0]
    with pytest.raises(lv.SettingsError, match="unit must be one of"):
        lv.segment(doc, "chapter")


def test_aggregate_sums_per_unit_and_per_token_spreads_back(bpe):
    doc = _doc(bpe, CRAFTED)
    seg = lv.segment(doc, "sentence")
    values = np.random.default_rng(0).normal(size=doc.n)
    want = [sum(values[p] for p in range(a, b)) for a, b in seg.spans]  # the specials' values count nowhere
    np.testing.assert_allclose(lv.aggregate(values, seg), want, rtol=1e-12)
    unit_values = np.arange(len(seg), dtype=float) - 3.5
    spread = seg.per_token(unit_values)
    np.testing.assert_allclose(lv.aggregate(spread, seg), unit_values, rtol=1e-12)
    assert spread[0] == spread[-1] == 0.0
    a, b = seg.spans[1]
    np.testing.assert_allclose(spread[a:b], unit_values[1] / (b - a))
    with pytest.raises(lv.SettingsError, match="one per token"):
        lv.aggregate(values[1:], seg)
    with pytest.raises(lv.SettingsError, match="1-D"):
        lv.aggregate(values[None, :], seg)
    with pytest.raises(lv.SettingsError, match="NaN"):
        lv.aggregate(np.full(doc.n, np.nan), seg)
    with pytest.raises(lv.SettingsError, match="Segments"):
        lv.aggregate(values, seg.spans)
    with pytest.raises(lv.SettingsError, match="unit values"):
        seg.per_token(unit_values[:-1])
