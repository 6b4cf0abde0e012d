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
from typing import Literal, NamedTuple

import numpy as np

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
    text = readable_token(tok)
    core = text.strip()
    if core:
        return core.replace("\n", "↵")
    return "↵" * text.count("\n") or "␣"


# ------------------------------------------------------------------------------------------------ comparable form
class TokenForm(NamedTuple):
    text: str  # decoded, marker-free, stripped, lower-cased, curly apostrophe -> "'"
    starts_word: bool  # carries a word-start marker (space/newline, '▁')
    continues: bool  # carries a continuation marker ('##')


def detect_scheme(tokens: Sequence[str]) -> Scheme:
    """Tokenization scheme from its markers: 'Ġ'-style -> byte_level, '▁' -> sentencepiece, else wordpiece."""
    if any(t.startswith(BYTE_LEVEL_WORD_START) for t in tokens):
        return "byte_level"
    if any(t.startswith("▁") for t in tokens):
        return "sentencepiece"
    return "wordpiece"


def as_token_list(tokens: Sequence[str]) -> list[str]:
    """`tokens` as a list of strings; ValueError naming the first token that is not one."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
        raise ValueError(f"tokens must be a list of strings, got {type(tokens).__name__}")
    tokens = list(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise ValueError(f"tokens must be a list of strings; token {i} is {type(t).__name__}: {t!r}")
    return tokens


def with_scheme(tokens: Sequence[str], scheme: Scheme | None) -> tuple[list[str], Scheme]:
    """(as_token_list(tokens), the scheme given, or detected when None)."""
    tokens = as_token_list(tokens)
    if scheme is None:
        scheme = detect_scheme(tokens)
    elif scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES} or None, got {scheme!r}")
    return tokens, scheme


@functools.lru_cache(maxsize=1 << 17)
def token_form(token: str, scheme: Scheme) -> TokenForm:
    """One raw token's comparable form and word markers (cached: a document repeats a few thousand types)."""
    starts = continues = False
    if scheme == "byte_level":
        body = token.lstrip(_BYTE_LEVEL_MARKERS)
        starts = len(body) < len(token)
        if body.isascii():
            token = body  # fast path (most tokens): printable ASCII stands for itself; the markers are whitespace
        else:
            # Bytes of a multi-byte character cut across tokens carry no text on their own: dropped, so a
            # fragment-only token ('âĢ') normalises to '' like a whitespace token.
            decoded = decode_byte_level(token, errors="ignore")
            if decoded is not None:
                token = decoded
    elif scheme == "sentencepiece":
        starts = token.startswith("▁")
        token = token.lstrip("▁")
    elif token.startswith("##") and len(token) > 2:
        continues = True
        token = token[2:]
    return TokenForm(token.strip().lower().replace("’", "'"), starts, continues)


def normalise_tokens(tokens: Sequence[str], scheme: Scheme | None = None) -> list[str]:
    """Readable, comparable form of each token: markers removed ('Ġ', 'Ċ', '▁', '##'), byte-level tokens decoded,
    whitespace stripped, lowercased, curly apostrophe -> "'".
    'ĠThe' -> 'the', 'Ċ' -> '', byte fragment 'âĢ' -> '' (no text of its own)."""
    tokens, scheme = with_scheme(tokens, scheme)
    return [token_form(t, scheme).text for t in tokens]


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
