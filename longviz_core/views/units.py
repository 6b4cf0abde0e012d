"""What the overlays and their tables show, one entry per unit: a token (the paper's view), a word, a sentence or a
paragraph (model.segments: the units every per-token view reads a document by), valued by the sum of its tokens'
values (model.segments.aggregate). Special tokens belong to no unit and are shown as units of their own.
docs/methods.md, "Units", defines them.

`unit` is a `Segments` (model.segments.segment(analysis, unit): any unit) or, for a bare token list without its
document, "token" or "word" (model.segments.token_segments).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import SettingsError
from ..model.segments import UNITS, Segments, Unit, aggregate, token_segments
from ..tokens import detect_scheme, join_pieces, readable_token, text_label, word_spans

__all__ = ["UNITS", "Segments", "Unit", "Units", "overlay_table", "unit_start", "units"]  # Segments: for figures


@dataclass(frozen=True)
class Units:
    """What an overlay shows, one entry per unit of `unit` and one per special token, in document order."""

    unit: str  # one of UNITS
    positions: np.ndarray  # (units,) int64: the unit's first token (its data-pos, the position it selects)
    text: list[str]  # (units,) readable text, leading whitespace kept (a special token: the token itself)
    labels: list[str]  # (units,) one-line labels (tokens.text_label)
    values: np.ndarray  # (units,) float64: the sum of the unit's tokens' values (a special token: its own)
    masked: np.ndarray  # (units,) bool: a unit is masked only if all its tokens are
    special: np.ndarray  # (units,) bool
    n: int  # tokens


def units(tokens, values, mask=None, unit: Unit | Segments = "token") -> Units:
    """`values` (n,) and `mask` (n,) (True = masked; None = nothing) per token, grouped by `unit` (a Segments of
    these tokens, or "token" / "word")."""
    tokens, vals, masked = _per_token(tokens, values, mask)
    segments = unit if isinstance(unit, Segments) else token_segments(tokens, unit)
    if segments.n != len(tokens):
        raise SettingsError(f"{len(tokens)} tokens but units of a document of {segments.n}: segment this document "
                            "(segment(analysis, unit))")
    of = segments.unit_of_token  # (n,) -1 for a special token
    starts = np.fromiter((a for a, _ in segments.spans), dtype=np.int64, count=len(segments))  # (m_u,)
    positions = np.sort(np.concatenate([starts, np.flatnonzero(of < 0)]))  # (units,)
    u = of[positions]  # (units,) -1 for a special token
    inside = u >= 0
    # a last entry that u = -1 (a special token) reads, overwritten by np.where: indexing stays one expression
    unit_masked = np.append(segments.masked(masked), False)  # (m_u + 1,)
    sums = np.append(aggregate(vals, segments), 0.0)  # (m_u + 1,)
    texts = _texts(tokens, segments)
    text = [texts[k] if k >= 0 else tokens[p] for p, k in zip(positions, u)]
    return Units(segments.unit, positions, text, [text_label(x) for x in text],
                 np.where(inside, sums[u], vals[positions]), np.where(inside, unit_masked[u], masked[positions]),
                 ~inside, len(tokens))


def _texts(tokens: list[str], segments: Segments) -> list[str]:
    """(m_u,) each unit's text as the overlay writes it: its tokens' readable text, the pieces of a word decoded
    together (tokens.join_pieces), a space before each WordPiece word but the document's first (a WordPiece
    token carries no space)."""
    scheme = detect_scheme(tokens)
    space = scheme == "wordpiece"

    def lead(i: int) -> str:
        return " " if space and i > 0 and not tokens[i].startswith("##") else ""

    if segments.unit == "token":
        return [lead(a) + readable_token(tokens[a]) for a, _ in segments.spans]
    words = word_spans(tokens, scheme)
    out = []
    for a, b in segments.spans:
        parts, i = [], a
        while i < b:  # word by word (a word cut by the unit's end: its part inside)
            w = int(words.word_of_token[i])
            j = i + 1 if w < 0 else min(b, int(words.stops[w]))
            parts.append(lead(i) + join_pieces(tokens[i:j], scheme))
            i = j
        out.append("".join(parts))
    return out


def _per_token(tokens, values, mask) -> tuple[list[str], np.ndarray, np.ndarray]:
    tokens = [str(t) for t in tokens]
    vals = np.asarray(values, dtype=np.float64).reshape(-1)  # (n,)
    n = len(tokens)
    if vals.shape[0] != n:
        raise SettingsError(f"{n} tokens but {vals.shape[0]} values")
    masked = np.zeros(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(-1)  # (n,)
    if masked.shape[0] != n:
        raise SettingsError(f"{n} tokens but a mask of {masked.shape[0]}")
    return tokens, vals, masked


def overlay_table(tokens, values, column: str, mask=None, unit: Unit | Segments = "token") -> pd.DataFrame:
    """The overlay's values, one row per unit in document order (its CSV export and its tables): columns
    position (the unit's first token), the unit's name (token, word, sentence or paragraph: its one-line text),
    `column` (its value: the sum of its tokens') and masked."""
    shown = units(tokens, values, mask, unit)
    return pd.DataFrame({"position": shown.positions, shown.unit: shown.labels, column: shown.values,
                         "masked": shown.masked})


def unit_start(shown: Units, position: int) -> int:
    """The first token of the unit containing token `position`: the position a unit stands for (its overlay
    box, its table row), so a selected token outlines its whole word, sentence or paragraph."""
    if not 0 <= position < shown.n:
        return position
    return int(shown.positions[np.searchsorted(shown.positions, position, side="right") - 1])
