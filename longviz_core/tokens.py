"""The one decoder of model tokens, used by overlays, tables, exports, masks and counts.

Tokens are raw tokenizer strings in one of three schemes, detected per token list unless given:

* "byte_level" (GPT-2 / RoBERTa / Longformer): each character stands for one byte (GPT-2's byte-to-unicode
  table), so 'Ġ' is a space, 'Ċ' a newline, 'ĉ' a tab, 'č' a carriage return, and a multi-byte character may be
  cut across tokens ('âĢ' + 'ľ' = '“'). Tokens are decoded back to text (`decode_byte_level`).
* "sentencepiece": '▁' marks the start of a word.
* "wordpiece" (BERT): '##' marks a continuation piece; any other token starts a word. Also the fallback for
  plain word lists.

Three forms of a token, each for its readers; they differ where their readers need different things:

* `readable_token`: the text the token stands for, spaces and line breaks included ('Ġtraining' -> ' training'):
  the coloured-text overlays, which lay out whole documents.
* `token_label`: one line for tables, hover text and exports, case kept ('ĠThe' -> 'The'), whitespace-only
  tokens as glyphs ('↵', '␣').
* `normalise_tokens`: the comparable form, lower-cased, apostrophes straightened ('ĠThe' -> 'the'): masks
  (stopwords) and the counts' token types, where 'The' and 'the' are one word. `type_labels` adds, for tokens
  that normalise to nothing, a stand-in showing every whitespace marker of the raw token, so that different
  whitespace tokens stay different types.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .errors import SettingsError

Scheme = Literal["byte_level", "sentencepiece", "wordpiece"]
SCHEMES: tuple[Scheme, ...] = ("byte_level", "sentencepiece", "wordpiece")

# Leading characters that mean "this token starts a new word" in byte-level BPE: space, newline, tab, CR.
BYTE_LEVEL_WORD_START = ("Ġ", "Ċ", "ĉ", "č")
_BYTE_LEVEL_MARKERS = "".join(BYTE_LEVEL_WORD_START)
_SPECIAL = re.compile(r"^(<[^<>\s]{1,20}>|\[[A-Z_]{2,10}\])$")


# ------------------------------------------------------------------------------------------------ bytes
@functools.cache
def byte_decoder() -> dict[str, int]:
    """GPT-2 / RoBERTa byte-level alphabet: printable stand-in character -> byte it encodes. Printable Latin-1
    bytes stand for themselves, the 68 others (controls, space, 127-160, soft hyphen) are U+0100 onwards in byte
    order."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    visible += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in visible:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def decode_byte_level(token: str, errors: str = "strict") -> str | None:
    """The text a byte-level token's bytes encode, or None when a character is outside the byte alphabet (an
    added token, e.g. a custom special token, is text already). `errors` as bytes.decode: "strict" raises
    UnicodeDecodeError on part of a multi-byte character, "ignore" drops such bytes."""
    dec = byte_decoder()
    try:
        data = bytes(dec[c] for c in token)
    except KeyError:
        return None
    return data.decode("utf-8", errors)


# ------------------------------------------------------------------------------------------------ display
def is_special_token(tok: str) -> bool:
    return bool(_SPECIAL.match(str(tok)))


def readable_token(tok: str) -> str:
    """The text a model token stands for: 'Ġtraining' -> ' training', 'Ċ' -> '\\n', '##ing' -> 'ing',
    '▁word' -> ' word'. Byte-level pieces that are not valid UTF-8 on their own are kept as they are."""
    if not isinstance(tok, str):
        tok = str(tok)
    if _SPECIAL.match(tok):
        return tok
    if tok.startswith("##") and len(tok) > 2:
        return tok[2:]
    tok = tok.replace("▁", " ")
    if tok:
        try:
            text = decode_byte_level(tok)
        except UnicodeDecodeError:
            text = None  # half of a multi-byte character: show the stand-in glyphs rather than nothing
        if text is not None:
            return text
    return tok.replace("Ġ", " ").replace("Ċ", "\n").replace("ĉ", "\t")


def token_label(tok: str) -> str:
    """A one-line label for tables and hover text: the readable token without its word-start space, case kept;
    whitespace-only tokens as visible glyphs ('\n' -> '↵', ' ' -> '␣')."""
    return text_label(readable_token(tok))


# ------------------------------------------------------------------------------------------------ comparable form
def detect_scheme(tokens: Sequence[str]) -> Scheme:
    """Tokenization scheme from its markers: 'Ġ'-style -> byte_level, '▁' -> sentencepiece, '##' -> wordpiece.
    A text without any marker (one word, no space) that carries RoBERTa's <s> / </s> is byte-level: a
    SentencePiece model marks its first word with '▁' and BERT's specials are [CLS] / [SEP]. Else wordpiece,
    also the reading of plain word lists."""
    if any(t.startswith(BYTE_LEVEL_WORD_START) for t in tokens):
        return "byte_level"
    if any(t.startswith("▁") for t in tokens):
        return "sentencepiece"
    if not any(t.startswith("##") for t in tokens) and any(t in ("<s>", "</s>") for t in tokens):
        return "byte_level"
    return "wordpiece"


def as_token_list(tokens: Sequence[str]) -> list[str]:
    """`tokens` as a list of strings; ValueError naming the first token that is not one."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
        raise SettingsError(f"tokens must be a list of strings (e.g. analyze(model, text).tokens), got "
                            f"{type(tokens).__name__}.")
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise SettingsError(f"tokens must be a list of strings; token {i} is {type(t).__name__}: {t!r}.")
    return tokens


def with_scheme(tokens: Sequence[str], scheme: Scheme | None) -> tuple[list[str], Scheme]:
    """(as_token_list(tokens), the scheme given, or detected when None)."""
    tokens = as_token_list(tokens)
    if scheme is None:
        scheme = detect_scheme(tokens)
    elif scheme not in SCHEMES:
        raise SettingsError(f"scheme must be one of {', '.join(SCHEMES)}, or None to detect it; got {scheme!r}.")
    return tokens, scheme


@functools.lru_cache(maxsize=1 << 17)
def token_form(token: str, scheme: Scheme) -> str:
    """One raw token's comparable form (cached: a document repeats a few thousand types)."""
    if scheme == "byte_level":
        body = token.lstrip(_BYTE_LEVEL_MARKERS)
        if body.isascii():
            token = body  # fast path (most tokens): printable ASCII stands for itself; the markers are whitespace
        else:
            # Bytes of a multi-byte character cut across tokens carry no text on their own: dropped, so a
            # fragment-only token ('âĢ') normalises to '' like a whitespace token.
            decoded = decode_byte_level(token, errors="ignore")
            if decoded is not None:
                token = decoded
    elif scheme == "sentencepiece":
        token = token.lstrip("▁")
    elif token.startswith("##") and len(token) > 2:
        token = token[2:]
    return comparable_text(token)


def comparable_text(text: str) -> str:
    """Readable text in the comparable form: stripped, lower-cased, curly apostrophe -> "'"."""
    return text.strip().lower().replace("’", "'")


def normalise_tokens(tokens: Sequence[str], scheme: Scheme | None = None) -> list[str]:
    """Readable, comparable form of each token: markers removed ('Ġ', 'Ċ', '▁', '##'), byte-level tokens decoded,
    whitespace stripped, lowercased, curly apostrophe -> "'".
    'ĠThe' -> 'the', 'Ċ' -> '', byte fragment 'âĢ' -> '' (no text of its own)."""
    tokens, scheme = with_scheme(tokens, scheme)
    return [token_form(t, scheme) for t in tokens]


def type_labels(tokens: Sequence[str]) -> list[str]:
    """Token types as the counts name them: normalise_tokens (lower-cased), and for a token that normalises to
    nothing (whitespace, byte fragments) a stand-in of the raw token (see visible_whitespace)."""
    norm = normalise_tokens(list(tokens))
    return [t if t else visible_whitespace(raw) for t, raw in zip(norm, tokens)]


def visible_whitespace(raw: str) -> str:
    """A readable stand-in for a token that normalises to nothing: every space '␣', newline '↵' and tab '⇥' it
    carries shown (unlike token_label's one glyph), so different whitespace tokens stay different types."""
    shown = str(raw).replace("Ġ", "␣").replace("Ċ", "↵").replace("ĉ", "⇥").replace("▁", "␣").strip()
    return shown or "␣"


# ------------------------------------------------------------------------------------------------ words
@dataclass(frozen=True)
class Words:
    """The words of a token list: each word is a run of tokens (its pieces), special tokens belong to none.

    Built by `word_spans`; the counts group by `type`, the overlays show `text`."""

    word_of_token: np.ndarray  # (n,) int64: the word each token belongs to, -1 for special tokens
    starts: np.ndarray  # (words,) int64: first token of each word
    stops: np.ndarray  # (words,) int64: one past its last token
    text: tuple[str, ...]  # (words,) the word's readable text joined from its pieces, leading whitespace kept
    type: tuple[str, ...]  # (words,) the comparable form: stripped, lower-cased, apostrophes straightened

    def __post_init__(self):
        for a in (self.word_of_token, self.starts, self.stops):
            a.setflags(write=False)  # shared through caches

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def n(self) -> int:
        """Number of tokens."""
        return len(self.word_of_token)

    def sums(self, values) -> np.ndarray:
        """(words,) float64: per word the sum of its pieces' `values` ((n,) one per token). Summing is how IG
        attributions add up (completeness is a sum over tokens) and how received attention adds up (a word
        receives what its pieces receive)."""
        vals = self._per_token(values, "values").astype(np.float64)
        inside = self.word_of_token >= 0
        return np.bincount(self.word_of_token[inside], weights=vals[inside], minlength=len(self))

    def masked(self, token_mask) -> np.ndarray:
        """(words,) bool: a word is masked only if every piece is masked, so a word that keeps any piece (the
        letters of a word whose byte fragments are masked) stays; views.masking masks a word's pieces together,
        where the two rules agree."""
        mask = self._per_token(token_mask, "mask").astype(bool)
        inside = self.word_of_token >= 0
        kept = np.bincount(self.word_of_token[inside], weights=~mask[inside], minlength=len(self))
        return kept == 0

    def _per_token(self, values, what: str) -> np.ndarray:
        a = np.asarray(values).reshape(-1)
        if a.shape[0] != self.n:
            raise SettingsError(f"{self.n} tokens but {a.shape[0]} {what}: give one per token of these words.")
        return a


def word_spans(tokens: Sequence[str], scheme: Scheme | None = None) -> Words:
    """The words of `tokens` (raw tokenizer strings), as the fast tokenizer's `encoding.word_ids()` numbers them:

    * byte_level (RoBERTa, Longformer, the demo): the words of the tokenizers library's ByteLevel pre-tokenizer
      (GPT-2's split: letters, digits, other symbols, whitespace runs and contractions are separate words; a word
      takes the one space before it). The tokens between special tokens are decoded back to text, that text is
      pre-tokenized by `tokenizers.pre_tokenizers.ByteLevel`, and each token belongs to the word its first byte
      falls in (BPE never merges across the pre-tokenizer's words). Bytes that are not valid UTF-8 (a character
      cut by truncation) and tokens outside the byte alphabet (added tokens) are words of their own.
    * wordpiece (BERT): a '##' piece continues the word before it; every other token starts a word.
    * sentencepiece: a '▁' piece starts a word; any other piece continues it.

    Special tokens (`is_special_token`: <s>, </s>, <pad>, [CLS], ...) belong to no word and split the text, as
    the tokenizer splits them out before pre-tokenizing. A token list with no marker at all and no <s> / </s>
    (pieces of one word cut out of a document) detects as wordpiece: pass scheme="byte_level" for it."""
    tokens, scheme = with_scheme(tokens, scheme)
    return _word_spans(tuple(tokens), scheme)


@functools.lru_cache(maxsize=8)
def _word_spans(tokens: tuple[str, ...], scheme: Scheme) -> Words:
    """word_spans, kept for the last few token lists: a page draws the overlay, its scale and its tables from
    one document's words on every rerun (Words is read-only, so sharing it is safe)."""
    n = len(tokens)
    word_of = np.full(n, -1, dtype=np.int64)  # (n,)
    starts_word = _byte_level_starts(tokens) if scheme == "byte_level" else _marker_starts(tokens, scheme)
    special = [is_special_token(t) for t in tokens]
    word = -1
    for i in range(n):
        if special[i]:
            continue
        if starts_word[i] or word < 0 or special[i - 1]:
            word += 1
        word_of[i] = word
    inside = np.flatnonzero(word_of >= 0)
    first = np.ones(len(inside), dtype=bool)
    first[1:] = word_of[inside[1:]] != word_of[inside[:-1]]
    starts = inside[first]
    stops = np.append(inside[np.flatnonzero(first)[1:] - 1] + 1, inside[-1] + 1) if len(inside) else inside
    text = tuple(join_pieces(tokens[a:b], scheme) for a, b in zip(starts, stops))
    types = tuple(comparable_text(t) or _whitespace_type(t) for t in text)
    return Words(word_of, starts.astype(np.int64), stops.astype(np.int64), text, types)


def text_label(text: str) -> str:
    """A one-line label of readable text: stripped, line breaks as '↵', whitespace-only text as glyphs."""
    core = text.strip()
    if core:
        return core.replace("\n", "↵")
    return "↵" * text.count("\n") or "␣"


def _marker_starts(tokens: tuple[str, ...], scheme: Scheme) -> list[bool]:
    if scheme == "wordpiece":
        return [not (t.startswith("##") and len(t) > 2) for t in tokens]
    return [t.startswith("▁") for t in tokens]


def _byte_level_starts(tokens: tuple[str, ...]) -> list[bool]:
    """Whether each token starts a word of the ByteLevel pre-tokenizer (see word_spans)."""
    from tokenizers.pre_tokenizers import ByteLevel  # the tokenizer's own split, not a copy of its regex

    split = ByteLevel(add_prefix_space=False, use_regex=True)
    out = [True] * len(tokens)
    run: list[int] = []  # a run of byte-alphabet tokens between special and added tokens

    def close() -> None:
        if not run:
            return
        data = b"".join(bytes(byte_decoder()[c] for c in tokens[i]) for i in run)
        bounds = set()  # byte offsets where a word starts
        at = 0
        while at < len(data):
            try:
                text, bad, bad_end = data[at:].decode("utf-8"), len(data), len(data)
            except UnicodeDecodeError as e:
                text, bad, bad_end = data[at:at + e.start].decode("utf-8"), at + e.start, at + e.end
            for piece, _ in split.pre_tokenize_str(text):
                bounds.add(at)
                at += len(piece)  # a pre-token comes back in the byte alphabet: one character per byte
            if bad < len(data):  # bytes of no valid character (one cut by truncation): a word of their own
                bounds.add(bad)
                at = bad_end
        offset = 0
        for i in run:
            out[i] = offset in bounds
            offset += len(tokens[i])
        run.clear()

    for i, t in enumerate(tokens):
        if t and not is_special_token(t) and decode_byte_level(t, errors="ignore") is not None:
            run.append(i)
        else:
            close()
    close()
    return out


def join_pieces(pieces: Sequence[str], scheme: Scheme) -> str:
    """The readable text of consecutive tokens (a word's pieces, or any run of them): byte-level pieces decoded
    together (a character cut across pieces comes whole; bytes of a character cut by truncation show as
    '\ufffd'), the others piece by piece."""
    if scheme == "byte_level":
        joined = "".join(pieces)
        text = decode_byte_level(joined, errors="replace")
        return readable_token(joined) if text is None else text
    return "".join(readable_token(p) for p in pieces)


def _whitespace_type(text: str) -> str:
    """A whitespace-only word's type: each space '␣', newline '↵', tab '⇥', carriage return '␍' shown, so
    different whitespace words stay different types."""
    return "".join({"\n": "↵", "\t": "⇥", "\r": "␍"}.get(c, "␣") for c in text) or "␣"
