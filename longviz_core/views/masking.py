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
from typing import NamedTuple

import numpy as np

from ..errors import SettingsError
from ..tokens import Scheme, as_token_list, token_form, with_scheme

DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]")

STOPWORD_FILE = resources.files("longviz_core") / "data" / "stopwords" / "english"

_APOSTROPHES = "'’"


@functools.cache
def english_stopwords() -> frozenset[str]:
    """NLTK's English stopwords (198 words), read from the list shipped with the package (one word per line, as
    nltk's own reader reads it)."""
    return frozenset(STOPWORD_FILE.read_text(encoding="utf-8").split())


class _TokenInfo(NamedTuple):
    text: str            # decoded, marker-free, stripped, lowercased
    starts_word: bool    # carries a word-start marker (space/newline, '▁')
    continues: bool      # carries a continuation marker ('##')
    first_alnum: bool    # first character of `text` is a letter or digit
    last_alnum: bool
    has_alnum: bool
    is_stop: bool        # `text` (or `text` without a leading apostrophe) is a stopword, judged as a whole word


@functools.lru_cache(maxsize=1 << 17)
def _info(token: str, scheme: Scheme) -> _TokenInfo:
    """Everything the masks need about one raw token (cached: a document repeats a few thousand types)."""
    form = token_form(token, scheme)
    text = form.text
    stop = english_stopwords()
    return _TokenInfo(
        text=text,
        starts_word=form.starts_word,
        continues=form.continues,
        first_alnum=text[:1].isalnum(),
        last_alnum=text[-1:].isalnum(),
        has_alnum=text.isalnum() or any(c.isalnum() for c in text),
        is_stop=text in stop or text.lstrip(_APOSTROPHES) in stop,
    )


def special_mask(tokens: Sequence[str], special_tokens: Sequence[str] | None = DEFAULT_SPECIAL_TOKENS) -> np.ndarray:
    """True where the raw token is one of `special_tokens` (exact match; pass tokenizer.all_special_tokens)."""
    return _special(as_token_list(tokens), special_tokens)


def nonalnum_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True where the normalised token has no letter or digit at all: punctuation, whitespace-only tokens ('Ġ',
    'Ċ'), and byte fragments of a multi-byte character ('âĢ'). Tokens mixing letters and punctuation ("'s",
    SentencePiece '▁U.S.') keep their content and are not masked here."""
    tokens, scheme = with_scheme(tokens, scheme)
    return _nonalnum([_info(t, scheme) for t in tokens])


def stopword_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True on every token of a word that is an NLTK English stopword.

    Tokens are grouped into words first, so a sub-word piece is never taken for a stopword on its own (the 's' of
    'Ġhuman'+'s', the 'Ġthe' of 'Ġthe'+'ory') and a stopword split into pieces is masked whole. A piece continues
    the previous word when it carries no word-start marker and joins letters/digits to letters/digits
    (byte_level, sentencepiece), or when it starts with '##' (wordpiece). Contraction pieces ("'s", "'ll") are
    looked up without their apostrophe, matching NLTK's bare forms ('s', 'll')."""
    tokens, scheme = with_scheme(tokens, scheme)
    return _stopwords([_info(t, scheme) for t in tokens], scheme)


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
    (case-insensitive). Both judge whole words, as the stopword mask does."""
    tokens, scheme = with_scheme(tokens, scheme)
    mask = np.zeros(len(tokens), dtype=bool)
    if special:
        mask |= _special(tokens, special_tokens)
    extra = frozenset(w.strip().lower() for w in extra_stopwords if w.strip())
    if nonalnum or stopwords or numbers or extra:
        infos = [_info(t, scheme) for t in tokens]
        if nonalnum:
            mask |= _nonalnum(infos)
        if stopwords:
            mask |= _stopwords(infos, scheme)
        for start, stop, word in (_words(infos, scheme) if numbers or extra else ()):
            if (numbers and _NUMBER.fullmatch(word)) or word in extra or word.lstrip(_APOSTROPHES) in extra:
                mask[start:stop] = True
    return mask


_NUMBER = re.compile(r"[+-]?\d[\d.,]*%?")


def _words(infos: list[_TokenInfo], scheme: Scheme):
    """(start, stop, text) of every word: runs of tokens where each piece continues the previous one."""
    start = 0
    for i in range(1, len(infos) + 1):
        if i < len(infos) and _continues(infos[i - 1], infos[i], scheme):
            continue
        yield start, i, "".join(info.text for info in infos[start:i])
        start = i


def _special(tokens: list[str], special_tokens: Sequence[str] | None) -> np.ndarray:
    if isinstance(special_tokens, str):
        raise SettingsError(f"special_tokens must be a list of strings (e.g. tokenizer.all_special_tokens), not the "
                            f"string {special_tokens!r}.")
    specials = frozenset(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    return np.fromiter((t in specials for t in tokens), dtype=bool, count=len(tokens))


def _nonalnum(infos: list[_TokenInfo]) -> np.ndarray:
    return np.fromiter((not info.has_alnum for info in infos), dtype=bool, count=len(infos))


def _stopwords(infos: list[_TokenInfo], scheme: Scheme) -> np.ndarray:
    n = len(infos)
    mask = np.zeros(n, dtype=bool)
    stop = english_stopwords()
    start = 0
    for i in range(1, n + 1):
        if i < n and _continues(infos[i - 1], infos[i], scheme):
            continue
        if i - start == 1:
            mask[start] = infos[start].is_stop
        else:  # a word cut into pieces: judge the whole word
            word = "".join(info.text for info in infos[start:i])
            mask[start:i] = word in stop or word.lstrip(_APOSTROPHES) in stop
        start = i
    return mask


def _continues(prev: _TokenInfo, cur: _TokenInfo, scheme: Scheme) -> bool:
    """Whether `cur` is a further piece of the word `prev` belongs to."""
    if scheme == "wordpiece":
        return cur.continues
    return not cur.starts_word and cur.first_alnum and prev.last_alnum
