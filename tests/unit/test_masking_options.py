"""The masking options beyond the paper's rule: numbers and a user's extra stopwords, off by default."""
from __future__ import annotations

import numpy as np

from longviz_core.views.masking import build_mask

# byte-level BPE, as the demo's and Longformer's tokenizers write it ('Ġ' = a space before the token)
TOKENS = ["<s>", "Smith", "Ġet", "Ġal", ".", "Ġ(", "2021", ")", "Ġfound", "Ġ7", "Ġmodels", "Ġin", "Ġ3", ".", "5",
          "Ġyears", "Ġ1", ",", "000", "Ġtimes", "Ġ20", "%", "Ġal", "gebra", "</s>"]


def test_defaults_are_the_papers_rule():
    assert np.array_equal(build_mask(TOKENS), build_mask(TOKENS, numbers=False, extra_stopwords=()))
    kept = [t for t, m in zip(TOKENS, build_mask(TOKENS)) if not m]
    assert {"Ġet", "Ġal", "2021", "Ġ7"} <= set(kept)  # alphanumeric, not NLTK stopwords: the paper keeps them


def test_numbers_mask_whole_number_words_only():
    mask = build_mask(TOKENS, special=False, nonalnum=False, stopwords=False, numbers=True)
    masked = [t for t, m in zip(TOKENS, mask) if m]
    # "3.5", "1,000" and "20%" come as pieces around punctuation tokens: each number piece is masked
    assert masked == ["2021", "Ġ7", "Ġ3", "5", "Ġ1", "000", "Ġ20"]
    words = ["Ġyear", "Ġ3.5", "Ġ1,000", "Ġ20%", "Ġ7th", "Ġ-2"]
    assert build_mask(words, special=False, nonalnum=False, stopwords=False, numbers=True).tolist() == [
        False, True, True, True, False, True]


def test_extra_stopwords_match_whole_words_case_insensitively():
    mask = build_mask(TOKENS, special=False, nonalnum=False, stopwords=False, extra_stopwords=[" Al", "ET ", ""])
    masked = [(i, t) for i, (t, m) in enumerate(zip(TOKENS, mask)) if m]
    assert masked == [(2, "Ġet"), (3, "Ġal")]  # "al" + "gebra" is the word "algebra", not "al"
