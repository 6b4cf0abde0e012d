"""Words from tokens (longviz_core.tokens.word_spans) against the fast tokenizer's own `encoding.word_ids()`, their
text, type, sums and masks, and the word-aware masking (views.masking) on real tokenizations."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longviz_core.demo import SHIPPED
from longviz_core.errors import SettingsError
from longviz_core.tokens import detect_scheme, word_spans
from longviz_core.views.masking import build_mask, english_stopwords
from support.oracles import encoding_words
from tiny import WORDS, _bpe_tokenizer

TEXTS = {
    "punctuation": "Hello, world! (Really?) Yes: it's done; isn't it... #1 -- \"quoted\" [x]",
    "numbers": "In 2021 we saw 3.5% growth, 1,000 runs and version 2.0.1 on 12/05/2019; abc123 x2.",
    "et-al": "Smith et al. (2020) and Jones et al., 2019, showed it.",
    "unicode": "naïve café Über straße – “curly” ‘single’ résumé ½ ² 日本語のテキスト Ελληνικά",
    "emoji": "Great 😀👍🏽 job 🎉! 👨‍👩‍👧 family",
    "whitespace": "  lead\ttab\r\nline\n\n  indented   gaps   \n",
    "one-token": "x",
}


@pytest.fixture(scope="module")
def demo_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(SHIPPED / "model"))


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    """A byte-level BPE trained on a few words: every other word is cut into many pieces."""
    return _bpe_tokenizer(tmp_path_factory.mktemp("tiny_bpe"))


def assert_matches_oracle(tokenizer, text: str):
    tokens, ids, texts = encoding_words(tokenizer, text)
    words = word_spans(tokens, "byte_level")
    assert words.word_of_token.tolist() == ids
    assert len(words) == len(texts)
    for j, oracle in enumerate(texts):
        pieces = [i for i, w in enumerate(ids) if w == j]
        assert (words.starts[j], words.stops[j]) == (pieces[0], pieces[-1] + 1)
        if oracle:  # a whitespace-only word has no text in the offsets (trimmed); its type is a glyph stand-in
            assert words.type[j] == oracle.replace("’", "'"), (j, words.text[j])
        else:
            assert set(words.type[j]) <= set("␣↵⇥␍"), words.type[j]
    return words


@pytest.mark.parametrize("name", list(TEXTS))
def test_words_equal_word_ids_of_the_demo_tokenizer(demo_tokenizer, name):
    words = assert_matches_oracle(demo_tokenizer, TEXTS[name])
    assert len(words) >= 1


@pytest.mark.parametrize("name", list(TEXTS))
def test_words_equal_word_ids_of_a_tokenizer_that_cuts_every_word(tiny_tokenizer, name):
    words = assert_matches_oracle(tiny_tokenizer, TEXTS[name])
    assert (words.stops - words.starts).max() >= (1 if name == "one-token" else 3)  # really cut into pieces


def test_a_long_text(demo_tokenizer):
    rng = np.random.default_rng(0)
    vocab = [*WORDS, *" ".join(TEXTS.values()).split()]
    text = " ".join(rng.choice(vocab, size=6000))
    words = assert_matches_oracle(demo_tokenizer, text)
    assert words.n > 6000 and len(words) > 6000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from([*"abcXYZ019 .,'’-\n\t\rüé日😀", "'s", "'t", " et al.", "\u00a0"]), min_size=1,
                     max_size=40).map("".join))
def test_any_text_matches_word_ids(demo_tokenizer, text):
    assert_matches_oracle(demo_tokenizer, text)


def test_text_type_sums_and_masked():
    # <s> 'H' 'ell' 'o' ',' 'Ġwor' 'ld' 'ĠâĢ' 'ľ' 'Ġ' </s>: "Hello", ",", " world", " “", " "
    tokens = ["<s>", "H", "ell", "o", ",", "Ġwor", "ld", "ĠâĢ", "ľ", "Ġ", "</s>"]
    w = word_spans(tokens)
    assert w.word_of_token.tolist() == [-1, 0, 0, 0, 1, 2, 2, 3, 3, 4, -1]
    assert w.starts.tolist() == [1, 4, 5, 7, 9] and w.stops.tolist() == [4, 5, 7, 9, 10]
    assert w.text == ("Hello", ",", " world", " “", " ")  # a quote cut into byte fragments comes whole
    assert w.type == ("hello", ",", "world", "“", "␣")
    values = np.array([9.0, 1.0, 2.0, 4.0, -1.0, 0.5, 0.25, 8.0, -8.0, 3.0, 9.0])
    assert w.sums(values).tolist() == [7.0, -1.0, 0.75, 0.0, 3.0]  # special tokens belong to no word
    mask = np.array([True, True, True, False, True, False, False, True, True, False, True])
    assert w.masked(mask).tolist() == [False, True, False, True, False]  # masked only if every piece is
    with pytest.raises(SettingsError, match="11 tokens but 3 values"):
        w.sums([1.0, 2.0, 3.0])


def test_special_and_added_tokens_and_a_truncated_character():
    # a special token splits a word (the tokenizer splits it out before pre-tokenizing); the cut emoji at the end
    # (two of its four bytes, as truncation leaves it) is a word of its own after "end"
    w = word_spans(["<s>", "Ġab", "<pad>", "cd", "Ġend", "ðŁ"], "byte_level")
    assert w.word_of_token.tolist() == [-1, 0, -1, 1, 2, 3]
    assert w.type == ("ab", "cd", "end", "\ufffd")  # no text of its own
    assert build_mask(["<s>", "Ġab", "<pad>", "cd", "Ġend", "ðŁ"], scheme="byte_level").tolist() == [
        True, False, True, False, False, True]
    # the same bytes in two tokens (one character's start, cut): one word
    assert word_spans(["Ġend", "ð", "Ł"], "byte_level").word_of_token.tolist() == [0, 1, 1]


def test_wordpiece_words_equal_word_ids(tmp_path):
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "un", "##aff", "##able", "cat", "##s", ",", ".",
             "!", "20", "##21", "a", "##bout", "'", "t", "don", "x"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    text = "The unaffable cats, about 2021! Don't x."
    tokens, ids, texts = encoding_words(tok, text)
    assert "##aff" in tokens and "##21" in tokens
    w = word_spans(tokens)
    assert w.word_of_token.tolist() == ids
    assert list(w.type) == texts
    assert w.text[1] == "unaffable"
    for one_word in ("cat", "unaffable"):  # no marker to go by: BERT's specials keep it WordPiece
        tokens, ids, _ = encoding_words(tok, one_word)
        assert detect_scheme(tokens) == "wordpiece" and word_spans(tokens).word_of_token.tolist() == ids


@pytest.mark.parametrize("text", ["themselves", "x", "naïve", "2021"])
def test_one_pasted_word_is_read_as_byte_level(demo_tokenizer, tiny_tokenizer, text):
    """No space, so no 'Ġ': RoBERTa's <s> / </s> tell the scheme (a 'naïve' read as WordPiece would show its
    byte-alphabet characters)."""
    for tokenizer in (demo_tokenizer, tiny_tokenizer):
        tokens, ids, texts = encoding_words(tokenizer, text)
        assert detect_scheme(tokens) == "byte_level"
        w = word_spans(tokens)
        assert w.word_of_token.tolist() == ids and list(w.type) == texts == [text]


def test_sentencepiece_words():
    w = word_spans(["▁The", "▁un", "aff", "able", "▁cat", "s", ".", "▁", "x"])
    assert w.word_of_token.tolist() == [0, 1, 1, 1, 2, 2, 2, 3, 3]
    assert w.type == ("the", "unaffable", "cats.", "x")


def test_masks_treat_the_pieces_of_a_word_alike(demo_tokenizer, tiny_tokenizer):
    text = " ".join(TEXTS.values()) + " themselves ourselves Themselves about et al 7 1997"
    for tokenizer in (demo_tokenizer, tiny_tokenizer):
        tokens, ids, texts = encoding_words(tokenizer, text)
        stop = english_stopwords()
        for options in ({}, {"numbers": True, "extra_stopwords": ("et", "al")}):
            mask = build_mask(tokens, **options)
            for j, oracle in enumerate(texts):  # the paper's rule on the oracle's whole word
                pieces = [i for i, w in enumerate(ids) if w == j]
                assert len(set(mask[pieces].tolist())) == 1, (oracle, [tokens[i] for i in pieces])
                expected = (not any(c.isalnum() for c in oracle) or oracle.replace("’", "'") in stop
                            or oracle.lstrip("'’") in stop  # numbers: a ByteLevel word of digits only
                            or (options and (oracle in {"et", "al"} or oracle.isdecimal())))
                assert bool(mask[pieces[0]]) == bool(expected), (oracle, options)
    tokens = tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer(" themselves")["input_ids"])
    assert len(tokens) > 3 and build_mask(tokens).all()  # a stopword cut into pieces is masked whole
    # with no space at all no 'Ġ' marks the pieces as byte-level; RoBERTa's <s> / </s> do (one word, masked whole)
    tokens = tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer("themselves")["input_ids"])
    assert len(word_spans(tokens)) == 1 and build_mask(tokens).all()
    pieces = tokens[1:-1]  # without the specials nothing tells them from plain tokens: each is a word unless told
    assert build_mask(pieces, scheme="byte_level").all() and not build_mask(pieces).all()


def test_a_letter_cut_into_byte_fragments_is_not_punctuation():
    tokens = ["<s>", "Ġæ", "Ĺ", "¥", "æľ¬", "</s>"]  # " 日本" cut across its bytes
    w = word_spans(tokens)
    assert w.text == (" 日本",) and w.word_of_token.tolist() == [-1, 0, 0, 0, 0, -1]
    assert build_mask(tokens).tolist() == [True, False, False, False, False, True]
