"""A document's text tokens grouped into units — tokens, words, sentences or paragraphs — and per-token values
summed per unit: what every per-token view, the perturbation explainers and the deletion test read a document by.

    segment(analysis, unit)     -> Segments: .spans, half-open ranges of token positions covering every text token
                                   once, in order (special tokens belong to no unit); .texts; len() units
    aggregate(values, segments) -> (units,) the sums of an (n,) per-token vector

Units (docs/methods.md, "Units"):

* token: one unit per text token;
* word: tokens.word_spans (the tokenizer's own pre-tokenizer words; a text token word_spans leaves out, one that
  spells a special token, is a unit of its own);
* paragraph: the text between blank lines (a line holding only whitespace);
* sentence: Punkt (Kiss & Strunk 2006; nltk's PunktSentenceTokenizer) inside each paragraph, so a sentence never
  crosses a blank line. Punkt runs untrained, with longviz's ABBREVIATIONS as its only parameters: a document's
  sentences depend on that document alone (the same on every page, in every store, with or without a dataset),
  and nltk needs no data download. "2.54" never ends a sentence (no space after the point), "e.g." and "Fig. 3"
  do not either (abbreviations), ". ", "? " and "! " otherwise do.

Token positions map to characters through the tokenizer's offsets (Encoded.offsets, a fast tokenizer's
offset_mapping). A token belongs to the unit its first non-whitespace character lies in; a token of whitespace
only (a line break, a lone space) belongs to the unit before it. Without offsets (a slow tokenizer) the text is
rebuilt from the decoded tokens (tokens.readable_token, a space before each WordPiece word) and split there.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..errors import SettingsError, finite_vector
from ..tokens import detect_scheme, is_special_token, readable_token, word_spans

Unit = Literal["token", "word", "sentence", "paragraph"]
UNITS: tuple[str, ...] = ("token", "word", "sentence", "paragraph")

# Abbreviations Punkt must not end a sentence after (lower case, without the final point, as Punkt stores them):
# those of scientific and everyday English that rarely end a sentence themselves. "etc" and "no" are left out
# ("..., etc. The next" and "the answer is no. Then" end sentences more often than not).
ABBREVIATIONS: frozenset[str] = frozenset({
    "e.g", "i.e", "cf", "vs", "viz", "al", "approx", "resp", "ca",
    "fig", "figs", "eq", "eqs", "sec", "secs", "ch", "chap", "vol", "vols", "pp", "ref", "refs", "tab", "app",
    "def", "thm", "lem", "prop", "cor", "ed", "eds",
    "dr", "mr", "mrs", "ms", "prof", "jr", "sr", "st", "mt",
    "inc", "ltd", "corp", "dept", "univ",
    "jan", "feb", "apr", "aug", "sept", "oct", "nov",
    "a.m", "p.m", "u.s", "u.k", "ph.d",
})
_CLOSING = ".,;:!?)]}'\""  # WordPiece tokens written without a space before them (_decoded)
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n\s*")  # a line of whitespace only, and all the whitespace after it


@dataclass(frozen=True)
class Segments:
    """A document's text tokens in units: spans[u] = (start, end), token positions start .. end-1."""

    unit: str  # one of UNITS
    spans: tuple[tuple[int, int], ...]  # (units,) half-open token ranges, in order, covering every text token
    texts: tuple[str, ...]  # (units,) the unit's text: a token's or word's readable text (tokens.readable_token,
    # Words.text), a sentence's or paragraph's characters from its first token to its last, as the document
    # writes them; whitespace kept (tokens.text_label makes one-line labels)
    n: int  # tokens of the document, special tokens included
    _of_token: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        of = np.full(self.n, -1, dtype=np.int64)  # (n,)
        for u, (a, b) in enumerate(self.spans):
            of[a:b] = u
        of.setflags(write=False)
        object.__setattr__(self, "_of_token", of)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def unit_of_token(self) -> np.ndarray:
        """(n,) int64: the unit each token belongs to, -1 for the special tokens (read-only)."""
        return self._of_token

    @property
    def lengths(self) -> np.ndarray:
        """(units,) int64: tokens per unit."""
        return np.array([b - a for a, b in self.spans], dtype=np.int64)

    def masked(self, mask) -> np.ndarray:
        """(units,) bool from an (n,) token mask (True = masked): a unit is masked only if all its tokens are (the
        overlays, their tables and the agreement by units read it so)."""
        return aggregate(~np.asarray(mask, dtype=bool), self) == 0  # no token of the unit kept

    def per_token(self, unit_values) -> np.ndarray:
        """(n,) float64 from (units,) `unit_values`: each text token its unit's value divided by the unit's
        length in tokens, the special tokens 0; so aggregate(per_token(v), self) == v."""
        v = finite_vector(unit_values, "unit values", SettingsError)
        if v.shape != (len(self),):
            raise SettingsError(f"{len(self)} {self.unit} units but {v.size} unit values")
        out = np.zeros(self.n, dtype=np.float64)
        inside = self._of_token >= 0
        out[inside] = (v / self.lengths)[self._of_token[inside]]
        return out


def aggregate(values, segments: Segments) -> np.ndarray:
    """(units,) float64: per unit of `segments` the sum of its tokens' `values` ((n,), one per token of the
    document, special tokens included; theirs belong to no unit). Summing is how IG and occlusion scores add
    up (completeness, efficiency) and how received attention adds up."""
    if not isinstance(segments, Segments):
        raise SettingsError(f"aggregate needs the Segments of the document (segment(analysis, unit)), got "
                            f"{type(segments).__name__}")
    v = finite_vector(values, "values", SettingsError)
    if v.shape != (segments.n,):
        raise SettingsError(f"values has {v.size} entries but the document has {segments.n} tokens: give one per "
                            "token, special tokens included")
    inside = segments.unit_of_token >= 0
    return np.bincount(segments.unit_of_token[inside], weights=v[inside], minlength=len(segments))


def segment(analysis, unit: Unit = "sentence") -> Segments:
    """The units of `analysis` (a DocumentAnalysis: its tokens, text and Encoded) of kind `unit`."""
    if unit not in UNITS:
        raise SettingsError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    enc = analysis.encoded
    tokens = list(analysis.tokens)
    positions = enc.text_positions  # (m,)
    if unit in ("token", "word"):
        return _by_tokens(tokens, positions, unit)
    source, chars = _characters(analysis.text, enc, tokens)
    starts = _starts(source[: int(chars[:, 1].max(initial=0))], unit)
    of = _unit_of_tokens(source, chars, starts)  # (m,) nondecreasing
    cut = np.flatnonzero(np.diff(of)) + 1  # where a new unit begins, in text-token indices
    firsts, lasts = np.r_[0, cut], np.r_[cut, len(of)]
    spans = tuple((int(positions[a]), int(positions[b - 1]) + 1) for a, b in zip(firsts, lasts))
    texts = tuple(source[chars[a, 0] : max(chars[a, 0], chars[b - 1, 1])] for a, b in zip(firsts, lasts))
    return Segments(unit, spans, texts, len(tokens))


def token_segments(tokens, unit: Unit = "token") -> Segments:
    """The token or word units of a bare token list, without its document (sentences and paragraphs need the
    text: segment(analysis, unit)): its text tokens are the tokens tokens.is_special_token does not name."""
    if unit not in ("token", "word"):
        why = ("sentences and paragraphs need the document's text: segment(analysis, unit)" if unit in UNITS
               else f"units are {', '.join(UNITS)}")
        raise SettingsError(f"unit must be 'token' or 'word' for a token list alone, got {unit!r} ({why})")
    tokens = [str(t) for t in tokens]
    positions = np.flatnonzero([not is_special_token(t) for t in tokens]).astype(np.int64)  # (m,)
    return _by_tokens(tokens, positions, unit)


def _by_tokens(tokens: list[str], positions: np.ndarray, unit: str) -> Segments:
    """One unit per text token at `positions`, or their words."""
    if unit == "word":
        return _words(tokens, positions)
    return Segments(unit, tuple((int(p), int(p) + 1) for p in positions),
                    tuple(readable_token(tokens[p]) for p in positions), len(tokens))


# ------------------------------------------------------------------------------------------------ words
def _words(tokens: list[str], positions: np.ndarray) -> Segments:
    """Words.starts / stops as spans; a text token outside every word (one that spells a special token, which
    word_spans leaves out) is a unit of its own, so the spans still cover every text token."""
    words = word_spans(tokens)
    spans, texts = [], []
    for p in positions:
        w = int(words.word_of_token[p])
        if w < 0:
            spans.append((int(p), int(p) + 1))
            texts.append(readable_token(tokens[p]))
        elif words.starts[w] == p:
            spans.append((int(p), int(words.stops[w])))
            texts.append(words.text[w])
    return Segments("word", tuple(spans), tuple(texts), len(tokens))


# ------------------------------------------------------------------------------------------------ characters
def _characters(text: str, enc, tokens: list[str]) -> tuple[str, np.ndarray]:
    """(the characters the text tokens come from, (m, 2) each text token's [start, end) in them): the document
    and the tokenizer's offsets where it gave usable ones, else the text rebuilt from the decoded tokens."""
    m = len(enc.text_positions)
    off = enc.offsets
    if off is not None:
        off = np.asarray(off, dtype=np.int64)
        if (off.shape == (m, 2) and (off >= 0).all() and (off[:, 1] <= len(text)).all()
                and (off[:, 0] <= off[:, 1]).all() and (np.diff(off[:, 0]) >= 0).all()):
            return text, off
    return _decoded(tokens[enc.prefix : enc.n - enc.suffix])


def _decoded(text_tokens: list[str]) -> tuple[str, np.ndarray]:
    """The text rebuilt from decoded tokens (byte-level and SentencePiece tokens carry their spaces; WordPiece
    gets one before every word but closing punctuation, as its decoder's clean-up writes "end." rather than
    "end .", which Punkt would not end a sentence at) and each token's characters in it."""
    wordpiece = detect_scheme(text_tokens) == "wordpiece"
    pieces = [(" " if wordpiece and i and not t.startswith("##") and t.strip(_CLOSING) else "") + readable_token(t)
              for i, t in enumerate(text_tokens)]
    ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
    return "".join(pieces), np.stack([ends - [len(p) for p in pieces], ends], axis=1).reshape(-1, 2)


def _starts(text: str, unit: str) -> np.ndarray:
    """(units,) int64: the first character of every paragraph, or of every sentence inside each paragraph."""
    paragraphs = [0] + [m.end() for m in _BLANK_LINE.finditer(text) if m.end() < len(text)]
    if unit == "paragraph":
        return np.asarray(paragraphs, dtype=np.int64)
    bounds = paragraphs + [len(text)]
    starts = [p0 + a for p0, p1 in zip(bounds, bounds[1:]) for a, _ in _punkt().span_tokenize(text[p0:p1])]
    return np.asarray(starts or [0], dtype=np.int64)


def _unit_of_tokens(source: str, chars: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(m,) int64: the unit (index into `starts`) of each text token: the one its first non-whitespace
    character lies in; a whitespace-only token joins the unit before it (the first unit when none is)."""
    of = np.full(len(chars), -1, dtype=np.int64)
    for i, (a, b) in enumerate(chars):
        piece = source[a:b]
        content = len(piece) - len(piece.lstrip())
        if content < len(piece):
            of[i] = max(0, int(np.searchsorted(starts, a + content, side="right")) - 1)
    seen = np.maximum.accumulate(of)  # a whitespace token: the unit of the last token with text before it
    first = int(of[of >= 0][0]) if (of >= 0).any() else 0
    return np.where(seen < 0, first, seen)


@functools.cache
def _punkt():
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    return PunktSentenceTokenizer(params)


__all__ = ["ABBREVIATIONS", "UNITS", "Segments", "Unit", "aggregate", "segment", "token_segments"]
