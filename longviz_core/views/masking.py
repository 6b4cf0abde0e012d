"""Token masks for the paper's masking (section 3.4): special tokens, non-alphanumeric tokens, English stopwords.

Every mask is a boolean array aligned with the model's tokens, True = masked (left out of rankings and tables).
Tokens are raw tokenizer strings in one of three schemes (byte-level BPE, SentencePiece, WordPiece), detected per
token list unless given, and judged in the comparable form of `longviz_core.tokens` (decoded, lower-cased).

The stopword list is NLTK's English list, shipped as package data (longviz_core/data/stopwords/english, one word
per line) because `nltk.download` cannot reach the internet on many lab servers; it is read directly, so nltk is
not needed. docs/methods.md, "Masking", gives the rules and how they differ from the paper's notebook.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from importlib import resources

import numpy as np

from ..errors import SettingsError
from ..tokens import Scheme, Words, as_token_list, with_scheme, word_spans

DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]")

STOPWORD_FILE = resources.files("longviz_core") / "data" / "stopwords" / "english"

_APOSTROPHES = "'’"

# The masking rule's version, part of the settings of every store kind that keeps masked numbers: a store made
# under an earlier rule (per token, before masks were judged on whole words) is then another store, never mixed in.
RULE = "words"


@functools.cache
def english_stopwords() -> frozenset[str]:
    """NLTK's English stopwords (198 words), read from the list shipped with the package (one word per line, as
    nltk's own reader reads it)."""
    return frozenset(STOPWORD_FILE.read_text(encoding="utf-8").split())


def _word_rules(words: Words) -> tuple[np.ndarray, np.ndarray]:
    """(no letter or digit (words,), stopword (words,)): the paper's rule (§3.4) judged on each whole word."""
    stop = english_stopwords()
    nonalnum = np.fromiter((not any(c.isalnum() for c in t) for t in words.type), dtype=bool, count=len(words))
    stopword = np.fromiter((t in stop or t.lstrip(_APOSTROPHES) in stop for t in words.type), dtype=bool,
                           count=len(words))
    return nonalnum, stopword


def _on_tokens(words: Words, per_word: np.ndarray) -> np.ndarray:
    """(n,) bool: each token takes its word's value, so a word's pieces are masked together; special tokens
    (no word) are False."""
    out = np.zeros(words.n, dtype=bool)
    inside = words.word_of_token >= 0
    out[inside] = per_word[words.word_of_token[inside]]
    return out


def special_tokens_of(encoded) -> tuple[str, ...]:
    """The special tokens of one encoded document: DEFAULT_SPECIAL_TOKENS and whatever its template put around the
    text (a decoder's BOS, e.g. Llama 3's <|begin_of_text|>). Text tokens never spell a special token
    (`encoding.text_token_ids` splits such spellings), so matching these strings masks exactly the specials."""
    tokens = encoded.tokens
    around = tokens[: encoded.prefix] + tokens[encoded.n - encoded.suffix :]
    return DEFAULT_SPECIAL_TOKENS + tuple(sorted(set(around) - set(DEFAULT_SPECIAL_TOKENS)))


def special_mask(tokens: Sequence[str], special_tokens: Sequence[str] | None = DEFAULT_SPECIAL_TOKENS) -> np.ndarray:
    """True where the raw token is one of `special_tokens` (exact match; pass tokenizer.all_special_tokens)."""
    return _special(as_token_list(tokens), special_tokens)


def nonalnum_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True on every token of a word (`tokens.word_spans`) with no letter or digit at all: punctuation,
    whitespace, a symbol cut into byte fragments ('âĢ' + 'ľ' = '“'). A word mixing letters and punctuation
    ("'s", SentencePiece '▁U.S.') keeps its content and is not masked here, and neither is a letter cut into
    byte fragments (a fragment alone has no text, the word has)."""
    words = word_spans(tokens, scheme)
    return _on_tokens(words, _word_rules(words)[0])


def stopword_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True on every token of a word that is an NLTK English stopword.

    Tokens are grouped into words first (`tokens.word_spans`), so a sub-word piece is never taken for a stopword
    on its own (the 's' of 'Ġhuman'+'s', the 'Ġthe' of 'Ġthe'+'ory') and a stopword split into pieces is masked
    whole. Contraction words ("'s", "'ll") are looked up without their apostrophe, matching NLTK's bare forms
    ('s', 'll')."""
    words = word_spans(tokens, scheme)
    return _on_tokens(words, _word_rules(words)[1])


def build_mask(
    tokens: Sequence[str],
    special: bool = True,
    nonalnum: bool = True,
    stopwords: bool = True,
    special_tokens: Sequence[str] | None = None,
    scheme: Scheme | None = None,
    numbers: bool = False,
    extra_stopwords: Sequence[str] = (),
) -> np.ndarray:
    """Union of the chosen masks (True = masked). special_tokens=None uses DEFAULT_SPECIAL_TOKENS.

    The paper's rule (§3.4) is the first three. Two options go beyond it, off by default, for scientific text
    where "al", "et" and "7" are alphanumeric and not NLTK stopwords, so the rule keeps them: `numbers` masks
    every word that is a number ("7", "1997", "3.5", "1,000", "20%"), `extra_stopwords` every word in that list
    (case-insensitive). All but `special` judge whole words (`tokens.word_spans`): a word's pieces are masked
    together."""
    tokens, scheme = with_scheme(tokens, scheme)
    mask = np.zeros(len(tokens), dtype=bool)
    if special:
        mask |= _special(tokens, special_tokens)
    extra = frozenset(w.strip().lower() for w in extra_stopwords if w.strip())
    if nonalnum or stopwords or numbers or extra:
        words = word_spans(tokens, scheme)
        no_alnum, stop = _word_rules(words)
        per_word = (no_alnum & nonalnum) | (stop & stopwords)
        if numbers or extra:
            per_word |= np.fromiter(((numbers and _NUMBER.fullmatch(t) is not None) or t in extra
                                     or t.lstrip(_APOSTROPHES) in extra for t in words.type), dtype=bool,
                                    count=len(words))
        mask |= _on_tokens(words, per_word)
    return mask


_NUMBER = re.compile(r"[+-]?\d[\d.,]*%?")


def _special(tokens: list[str], special_tokens: Sequence[str] | None) -> np.ndarray:
    if isinstance(special_tokens, str):
        raise SettingsError(f"special_tokens must be a list of strings (e.g. tokenizer.all_special_tokens), not the "
                            f"string {special_tokens!r}.")
    specials = frozenset(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    return np.fromiter((t in specials for t in tokens), dtype=bool, count=len(tokens))
