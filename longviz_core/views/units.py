"""What the overlays and their tables show, one entry per unit: a token (the paper's view), or a word
(`tokens.word_spans`: the demo tokenizer cuts ordinary words into pieces) whose value is the sum of its pieces'
values. Special tokens are units of their own in both. docs/methods.md, "Words", defines them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ..errors import SettingsError
from ..tokens import detect_scheme, is_special_token, readable_token, text_label, token_label, word_spans

Unit = Literal["token", "word"]
UNITS: tuple[str, ...] = ("token", "word")


@dataclass(frozen=True)
class Units:
    """What an overlay shows, one entry per unit: a token, or a word (`tokens.word_spans`) with special tokens
    as units of their own."""

    positions: np.ndarray  # (units,) int64: the unit's first token (its data-pos, the position it selects)
    raw: list[str]  # (units,) the raw token (token unit), or the word's pieces joined (word unit)
    text: list[str]  # (units,) readable text, leading whitespace kept
    labels: list[str]  # (units,) one-line labels
    values: np.ndarray  # (units,) float64: the token's value, or the sum of the word's pieces
    masked: np.ndarray  # (units,) bool: a word is masked only if all its pieces are (Words.masked)
    special: np.ndarray  # (units,) bool
    n: int  # tokens


def units(tokens, values, mask=None, unit: Unit = "token") -> Units:
    """`values` (n,) and `mask` (n,) (True = masked; None = nothing) per token, grouped by `unit`."""
    tokens, vals, masked = _per_token(tokens, values, mask)
    if unit not in UNITS:
        raise SettingsError(f"unit must be one of {UNITS}, got {unit!r}")
    special = np.array([is_special_token(t) for t in tokens], dtype=bool)  # (n,)
    # byte-level BPE and SentencePiece carry the space in the token; WordPiece needs one before every token
    # except '##' continuations (and so before every word)
    space = detect_scheme(tokens) == "wordpiece"
    if unit == "token":
        text = [readable_token(t) for t in tokens]
        if space:
            text = [" " + x if i > 0 and not t.startswith("##") else x for i, (t, x) in enumerate(zip(tokens, text))]
        return Units(np.arange(len(tokens), dtype=np.int64), tokens, text, [token_label(t) for t in tokens], vals,
                     masked, special, len(tokens))
    words = word_spans(tokens)
    # one unit per word, placed at its first token, and one per special token; in document order
    positions = np.sort(np.concatenate([words.starts, np.flatnonzero(special)]))  # (units,)
    word = words.word_of_token[positions]  # (units,) -1 for a special token
    sums, word_masked = words.sums(vals), words.masked(masked)
    raw, text = [], []
    for p, w in zip(positions, word):
        if w < 0:
            raw.append(tokens[p])
            text.append(tokens[p])
        else:
            raw.append("".join(tokens[words.starts[w]:words.stops[w]]))
            text.append((" " if space and p > 0 else "") + words.text[w])
    return Units(positions, raw, text, [text_label(x) for x in text],
                 np.where(word < 0, vals[positions], sums[np.maximum(word, 0)]),
                 np.where(word < 0, masked[positions], word_masked[np.maximum(word, 0)]), word < 0, len(tokens))


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


def overlay_table(tokens, values, column: str, mask=None, unit: Unit = "token") -> pd.DataFrame:
    """The overlay's values, one row per unit in document order (its CSV export and its tables): columns
    position (the unit's first token), token or word (its label), `column` (its value: a word's is the sum of
    its pieces') and masked."""
    shown = units(tokens, values, mask, unit)
    return pd.DataFrame({"position": shown.positions, unit: shown.labels, column: shown.values,
                         "masked": shown.masked})


def unit_start(shown: Units, position: int) -> int:
    """The first token of the unit containing token `position`: the position a word stands for (its overlay
    box, its table row), so a selected piece outlines its whole word."""
    if not 0 <= position < shown.n:
        return position
    return int(shown.positions[np.searchsorted(shown.positions, position, side="right") - 1])
