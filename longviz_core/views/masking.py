"""Token masks for the paper's masking (section 3.4): special tokens, non-alphanumeric tokens, English stopwords.

Every mask is a boolean array aligned with the model's tokens, True = masked (left out of rankings and tables).
Tokens are raw tokenizer strings in one of three schemes, detected per token list unless given:

* "byte_level" (GPT-2 / RoBERTa / Longformer): each character stands for one byte (GPT-2's byte-to-unicode
  table), so 'Ġ' is a space, 'Ċ' a newline, 'ĉ' a tab, 'č' a carriage return, and a multi-byte character may be
  cut across tokens ('âĢ' + 'ľ' = '“'). Tokens are decoded back to text before they are judged.
* "sentencepiece": '▁' marks the start of a word.
* "wordpiece" (BERT): '##' marks a continuation piece; any other token starts a word. Also the fallback for
  plain word lists.

The stopword list is NLTK's English list, shipped with the package in NLTK's corpus layout
(longviz_core/data/nltk_data/corpora/stopwords/english) because `nltk.download` cannot reach the internet on
many lab servers; see README, "Agreement metrics and masking", for the rules and how they differ from the paper's notebook.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import nltk
import numpy as np

Scheme = Literal["byte_level", "sentencepiece", "wordpiece"]
SCHEMES: tuple[Scheme, ...] = ("byte_level", "sentencepiece", "wordpiece")

DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]")

NLTK_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "nltk_data"
_STOPWORD_FILE = NLTK_DATA_DIR / "corpora" / "stopwords" / "english"

# Leading characters that mean "this token starts a new word" in byte-level BPE: space, newline, tab, CR.
_BYTE_LEVEL_WORD_START = ("Ġ", "Ċ", "ĉ", "č")
_BYTE_LEVEL_MARKERS = "".join(_BYTE_LEVEL_WORD_START)
_APOSTROPHES = "'’"


def _byte_level_table() -> dict[int, int]:
    """str.translate table inverting GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
    68 others (controls, space, 127-160, soft hyphen) are U+0100 onwards in byte order. Translating a byte-level
    token with it gives a string whose latin-1 encoding is the token's bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in set(printable)]
    return {256 + k: b for k, b in enumerate(shifted)}


_BYTE_LEVEL_TABLE = _byte_level_table()


def register_nltk_data() -> None:
    """Put the shipped nltk_data folder first on `nltk.data.path` (idempotent).

    First, not last, so the shipped list wins over a user's own (possibly different) nltk_data and results are
    the same on every machine."""
    root = str(NLTK_DATA_DIR)
    if root not in nltk.data.path:
        nltk.data.path.insert(0, root)


@functools.cache
def english_stopwords() -> frozenset[str]:
    """NLTK's English stopwords (198 words), loaded offline from the shipped corpus."""
    register_nltk_data()
    try:
        words = nltk.corpus.stopwords.words("english")
    except LookupError:
        # NLTK >= 3.10 refuses data folders that are group/world-writable or owned by another non-root account
        # (common for shared lab checkouts, umask 002). The file is ours and is only read as a word list, so read
        # it directly rather than fail.
        warnings.warn(
            f"NLTK refused the shipped stopword folder {NLTK_DATA_DIR} (writable by or owned by another account); "
            "reading the word list directly.",
            RuntimeWarning,
            stacklevel=2,
        )
        words = _STOPWORD_FILE.read_text(encoding="utf-8").split()
    return frozenset(words)


class _TokenInfo(NamedTuple):
    text: str            # decoded, marker-free, stripped, lowercased
    starts_word: bool    # carries a word-start marker (space/newline, '▁')
    continues: bool      # carries a continuation marker ('##')
    first_alnum: bool    # first character of `text` is a letter or digit
    last_alnum: bool
    has_alnum: bool
    is_stop: bool        # `text` (or `text` without a leading apostrophe) is a stopword, judged as a whole word


def detect_scheme(tokens: Sequence[str]) -> Scheme:
    """Tokenization scheme from its markers: 'Ġ'-style -> byte_level, '▁' -> sentencepiece, else wordpiece."""
    if any(t.startswith(_BYTE_LEVEL_WORD_START) for t in tokens):
        return "byte_level"
    if any(t.startswith("▁") for t in tokens):
        return "sentencepiece"
    return "wordpiece"


@functools.lru_cache(maxsize=1 << 17)
def _info(token: str, scheme: Scheme) -> _TokenInfo:
    """Everything the masks need about one raw token (cached: a document repeats a few thousand types)."""
    starts = continues = False
    if scheme == "byte_level":
        body = token.lstrip(_BYTE_LEVEL_MARKERS)
        starts = len(body) < len(token)
        if body.isascii():
            token = body  # fast path (most tokens): printable ASCII stands for itself; the markers are whitespace
        else:
            try:
                # Bytes of a multi-byte character cut across tokens carry no text on their own: dropped, so a
                # fragment-only token ('âĢ') normalises to '' like a whitespace token.
                token = token.translate(_BYTE_LEVEL_TABLE).encode("latin-1").decode("utf-8", errors="ignore")
            except UnicodeEncodeError:
                pass  # an added token outside the byte alphabet (e.g. a custom special token) is already text
    elif scheme == "sentencepiece":
        starts = token.startswith("▁")
        token = token.lstrip("▁")
    elif token.startswith("##") and len(token) > 2:
        continues = True
        token = token[2:]
    text = token.strip().lower().replace("’", "'")
    stop = english_stopwords()
    return _TokenInfo(
        text=text,
        starts_word=starts,
        continues=continues,
        first_alnum=text[:1].isalnum(),
        last_alnum=text[-1:].isalnum(),
        has_alnum=text.isalnum() or any(c.isalnum() for c in text),
        is_stop=text in stop or text.lstrip(_APOSTROPHES) in stop,
    )


def _as_tokens(tokens: Sequence[str]) -> list[str]:
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
        raise ValueError(f"tokens must be a list of strings, got {type(tokens).__name__}")
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise ValueError(f"tokens must be a list of strings; token {i} is {type(t).__name__}: {t!r}")
    return tokens


def _validate(tokens: Sequence[str], scheme: Scheme | None) -> tuple[list[str], Scheme]:
    tokens = _as_tokens(tokens)
    if scheme is None:
        scheme = detect_scheme(tokens)
    elif scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES} or None, got {scheme!r}")
    return tokens, scheme


def normalise_tokens(tokens: Sequence[str], scheme: Scheme | None = None) -> list[str]:
    """Readable, comparable form of each token: markers removed ('Ġ', 'Ċ', '▁', '##'), byte-level tokens decoded,
    whitespace stripped, lowercased, curly apostrophe -> "'".
    'ĠThe' -> 'the', 'Ċ' -> '', byte fragment 'âĢ' -> '' (no text of its own)."""
    tokens, scheme = _validate(tokens, scheme)
    return [_info(t, scheme).text for t in tokens]


def special_mask(tokens: Sequence[str], special_tokens: Sequence[str] | None = DEFAULT_SPECIAL_TOKENS) -> np.ndarray:
    """True where the raw token is one of `special_tokens` (exact match; pass tokenizer.all_special_tokens)."""
    return _special(_as_tokens(tokens), special_tokens)


def nonalnum_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True where the normalised token has no letter or digit at all: punctuation, whitespace-only tokens ('Ġ',
    'Ċ'), and byte fragments of a multi-byte character ('âĢ'). Tokens mixing letters and punctuation ("'s",
    SentencePiece '▁U.S.') keep their content and are not masked here."""
    tokens, scheme = _validate(tokens, scheme)
    return _nonalnum([_info(t, scheme) for t in tokens])


def stopword_mask(tokens: Sequence[str], scheme: Scheme | None = None) -> np.ndarray:
    """True on every token of a word that is an NLTK English stopword.

    Tokens are grouped into words first, so a sub-word piece is never taken for a stopword on its own (the 's' of
    'Ġhuman'+'s', the 'Ġthe' of 'Ġthe'+'ory') and a stopword split into pieces is masked whole. A piece continues
    the previous word when it carries no word-start marker and joins letters/digits to letters/digits
    (byte_level, sentencepiece), or when it starts with '##' (wordpiece). Contraction pieces ("'s", "'ll") are
    looked up without their apostrophe, matching NLTK's bare forms ('s', 'll')."""
    tokens, scheme = _validate(tokens, scheme)
    return _stopwords([_info(t, scheme) for t in tokens], scheme)


def build_mask(
    tokens: Sequence[str],
    special: bool = True,
    nonalnum: bool = True,
    stopwords: bool = True,
    special_tokens: Sequence[str] | None = None,
    scheme: Scheme | None = None,
) -> np.ndarray:
    """Union of the chosen masks (True = masked). special_tokens=None uses DEFAULT_SPECIAL_TOKENS."""
    tokens, scheme = _validate(tokens, scheme)
    mask = np.zeros(len(tokens), dtype=bool)
    if special:
        mask |= _special(tokens, special_tokens)
    if nonalnum or stopwords:
        infos = [_info(t, scheme) for t in tokens]
        if nonalnum:
            mask |= _nonalnum(infos)
        if stopwords:
            mask |= _stopwords(infos, scheme)
    return mask


def _special(tokens: list[str], special_tokens: Sequence[str] | None) -> np.ndarray:
    if isinstance(special_tokens, str):
        raise ValueError(f"special_tokens must be a list of strings, not the string {special_tokens!r}")
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
