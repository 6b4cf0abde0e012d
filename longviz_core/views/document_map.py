"""A map of a whole document: its passages (sentences or paragraphs, `Segments`) along the document by token
position, each scored by the sum of its tokens' scores, and the top passages ranked — what the overlay pages draw
above their overlays (docs/methods.md, "Document map"). It reads the scores a page already has: no forward pass.

    document_map(scores, segments, mask=None, rank_by="signed", k=5) -> DocumentMap

* score: `lv.aggregate` of the (n,) per-token scores with the masked tokens' set to 0 (a masked token counts in
  no passage's score, as it counts in no colour of the overlay);
* density: score / tokens in the passage (masked ones included): the colour of the map's strip, whose rectangles
  are as wide as their passages, so a rectangle's width x colour is its score;
* rank: by score, high to low ("signed": the passages pushing towards the class explained first, the attention a
  passage receives), or by |score| ("magnitude"); ties by position;
* top: the first k by rank among the passages with a score > 0 ("signed") or != 0 ("magnitude").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import SettingsError
from ..model.segments import Segments, aggregate
from ..tokens import text_label

RANK_BY: tuple[str, ...] = ("signed", "magnitude")  # as the leaderboard's deletion orders (dataset.leaderboard)
TOP_K = 5
LABEL_CHARS = 90  # a passage's one-line label: a table row at 1,024 px shows about this much


@dataclass(frozen=True)
class DocumentMap:
    """Passages u = 0 .. m-1 of a document in order, scored; `top` the best k by `rank_by`."""

    unit: str  # the Segments' unit: "sentence" or "paragraph" on the pages (any unit works)
    rank_by: str  # one of RANK_BY
    starts: np.ndarray  # (m,) int64: the passage's first token
    stops: np.ndarray  # (m,) int64: one past its last token
    labels: tuple[str, ...]  # (m,) one-line text, at most LABEL_CHARS characters ("…" where cut)
    scores: np.ndarray  # (m,) float64: the sum of its unmasked tokens' scores
    density: np.ndarray  # (m,) float64: scores / (stops - starts)
    share: np.ndarray  # (m,) float64: scores / sum |scores| over passages (0 when every score is 0)
    rank: np.ndarray  # (m,) int64: 1 = first by rank_by, ties by position
    top: np.ndarray  # (<= k,) int64: passage indices, best first
    n: int  # tokens of the document

    def __len__(self) -> int:
        return len(self.starts)

    def passage_of(self, position: int) -> int | None:
        """The passage holding token `position`, or None (a special token, or outside the document)."""
        u = int(np.searchsorted(self.starts, position, side="right")) - 1
        return u if u >= 0 and position < self.stops[u] else None

    def table(self, rows=None) -> pd.DataFrame:
        """One row per passage (`rows`: passage indices, default the top ones, best first): rank, score, share,
        position (its first token, the one a selection picks), tokens and the text."""
        rows = self.top if rows is None else np.asarray(rows, dtype=np.int64)
        return pd.DataFrame({"rank": self.rank[rows], "score": self.scores[rows], "share": self.share[rows],
                             "position": self.starts[rows], "tokens": (self.stops - self.starts)[rows],
                             self.unit: [self.labels[u] for u in rows]})


def document_map(scores, segments: Segments, mask=None, rank_by: str = "signed", k: int = TOP_K) -> DocumentMap:
    """The map of (n,) per-token `scores` by the passages of `segments` (lv.segment(analysis, "sentence")), with
    `mask` (n,) bool (True = masked: its score counts in no passage; None = nothing masked)."""
    if rank_by not in RANK_BY:
        raise SettingsError(f"rank_by must be one of {RANK_BY}, got {rank_by!r}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise SettingsError(f"k (top passages) must be a whole number >= 0, got {k!r}")
    if not isinstance(segments, Segments):
        raise SettingsError(f"document_map needs the Segments of the document (lv.segment(analysis, unit)), got "
                            f"{type(segments).__name__}")
    values = np.asarray(scores, dtype=np.float64).reshape(-1)  # (n,)
    if mask is not None:
        masked = np.asarray(mask, dtype=bool).reshape(-1)  # (n,)
        if masked.shape != values.shape:
            raise SettingsError(f"{values.size} scores but a mask of {masked.size}")
        values = np.where(masked, 0.0, values)  # (n,) a masked token's NaN or score counts nowhere
    sums = aggregate(values, segments)  # (m,) checks the length and that every value is finite
    spans = np.asarray(segments.spans, dtype=np.int64).reshape(-1, 2)  # (m, 2)
    starts, stops = spans[:, 0], spans[:, 1]
    total = np.abs(sums).sum()
    key = -sums if rank_by == "signed" else -np.abs(sums)  # (m,) smaller = earlier
    order = np.argsort(key, kind="stable")  # (m,) ties by position
    rank = np.empty(len(sums), dtype=np.int64)
    rank[order] = np.arange(1, len(sums) + 1)
    eligible = sums[order] > 0 if rank_by == "signed" else sums[order] != 0
    return DocumentMap(segments.unit, rank_by, starts, stops,
                       tuple(_label(t) for t in segments.texts), sums, sums / (stops - starts),
                       sums / total if total > 0 else np.zeros_like(sums), rank, order[eligible][:k], segments.n)


def _label(text: str) -> str:
    line = " ".join(text_label(text).split())  # one line, runs of spaces as one
    return line if len(line) <= LABEL_CHARS else line[: LABEL_CHARS - 1].rstrip() + "…"


__all__ = ["DocumentMap", "LABEL_CHARS", "RANK_BY", "TOP_K", "document_map"]
