"""Counts over one document's top-k lists, and their tables (paper section 3.1.2, appendix A.5 Algorithms 1-3;
the lists themselves are model.topk's search).

Algorithm 1: for every query token, per layer and head, the k keys it attends to most ("attended").
Algorithm 3: for every key token, the k queries that attend to it most ("attending"), i.e. Algorithm 1 on the
transposed matrix.
Algorithm 2: for every token (the owner), S = the set of its top-k keys over all the selected layers and heads
together; a position's count is the number of owners whose S contains it, and a token type's count the number
of owners whose S contains at least one position of that type. So no count exceeds the number of tokens. The
same on the attending lists for Algorithm 3. This is the default rule, "paper". The rule "per_head" counts
every (owner, head) list separately and sums over the heads (a type still counts once per list): a count
can then reach tokens x heads. `COUNT_RULES` / `COUNT_MEANINGS` name both for the UI.

Conventions (the paper leaves them open; these are ours):
- Order: descending attention; ties go to the lower position. So the first k' entries of a top-k list are
  exactly the top-k' list, and one computation at `TOPK_MAX` serves every k <= TOPK_MAX.
  (The paper's pseudo-code takes `argsort()[:k]`, i.e. the k smallest; the text and figures mean the largest.)
- Only keys with attention > 0 are candidates: positions outside the document, band columns that Longformer
  leaves empty (or that lie outside a narrower layer's window) and exact zeros are never chosen. A row with
  fewer than k positive entries gets a shorter list, padded with -1.
- Masking (paper section 3.4) is applied after the top-k: the lists are the model's real top-k; a masked
  token then neither counts (it owns no set) nor is counted (it is skipped inside other lists, which are not
  refilled). Re-ranking without masked tokens would change what the model attended to, and it would make the
  mask toggle recompute every head instead of re-counting cached lists.
- Token type = the normalised token (`tokens.type_labels`: markers removed, byte-level text decoded,
  lower-cased), so 'Ġtraining', 'training' and 'ĠTraining' are one type; tokens that normalise to nothing
  (whitespace, byte fragments) keep a visible form of the raw token.
- By word (by="word"): the groups are word types (`tokens.word_spans`' `type`, the lower-cased word), so a word
  the tokenizer cuts into pieces counts once per owner (per (owner, head) list under "per_head") when any of its
  pieces is listed; special tokens, in no word, are groups of their own (their type label). A word is masked
  (neither counted nor counting for its pieces) only if all its pieces are masked. The owners stay tokens.

Everything is computed from the attention bands, in compiled loops (`longviz_core.model._kernels`): no n x n matrix
is built and the band is never transposed or copied ("attending" reads each key's column in place). The lists
(`model.topk.topk_indices`) are computed once per document and cached; every count (any scope, k, direction, rule and
mask) is then one compiled pass over the owners' lists with a "last owner seen" stamp per position and per
type, owners x heads x k steps (`_kernels.count_sets`), with no per-type table. The dataset-wide sum of these
tables is dataset.aggregate.dataset_type_counts. Encoders held layer by layer (`model.layered.LayeredAttention`:
ModernBERT, BERT-like) go through the same loops for their banded layers; a full layer's lists come from its
streamed passes (`model.streamed`).
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from ..errors import whole_number
from ..model import _kernels
from ..model.bands import selection
from ..model.topk import DIRECTIONS, CountsError, Direction, TopK, check_choice, check_k, topk_indices
from ..tokens import type_labels, word_spans

By = Literal["type", "word", "position"]
BYS: tuple[str, ...] = ("type", "word", "position")
GROUPS: tuple[str, ...] = ("type", "word")  # what a count groups positions by (BYS less "position")
GROUP_COLUMNS = {"type": "token", "word": "word"}  # the column naming the group in tables by type / by word


# ---------------------------------------------------------------------------------------------- counting
Rule = Literal["paper", "per_head"]
RULES: tuple[str, ...] = ("paper", "per_head")
# What each rule is called in the UI, and what its count means (axis and column titles)
COUNT_RULES: dict[str, str] = {
    "paper": "once per token (paper, Algorithm 2)",
    "per_head": "once per head list",
}
COUNT_MEANINGS: dict[str, str] = {
    "paper": "tokens whose top-k (over the selected heads) contain it",
    "per_head": "per-head top-k lists that contain it",
}


@dataclass(frozen=True)
class Tallies:
    """One document's top-k lists made ready to count under one mask: each position's token type (and, made on
    first use, its word type) and the mask.

    Any count (scope, k <= `k`, direction, rule) is then one compiled pass over the lists, so the app's toggles
    re-count cached lists; a new mask needs new tallies (cheap: the types and the mask)."""

    topk: TopK
    labels: tuple  # (types,) type labels, numbered by first appearance in the document
    type_ids: np.ndarray  # (n,) int64 type number of each position
    mask: np.ndarray | None  # (n,) bool, True = masked; None = nothing masked
    tokens: tuple = field(default=(), repr=False)  # (n,) raw tokens: the word groups are made from them
    # the last few counts made, so that a page's tables by type and by position share one pass
    _recent: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        for a in (self.type_ids, self.mask):
            if a is not None:
                a.setflags(write=False)

    @property
    def k(self) -> int:
        return self.topk.k

    @functools.cached_property
    def owners(self) -> np.ndarray:
        """(n,) bool: tokens whose sets count (the unmasked ones)."""
        return np.ones(len(self.type_ids), dtype=np.bool_) if self.mask is None else ~self.mask

    @functools.cached_property
    def pos_bin(self) -> np.ndarray:
        """(n,) int64: where the count puts each position; masked ones in a last bin (n), dropped."""
        n = len(self.type_ids)
        return np.arange(n, dtype=np.int64) if self.mask is None else np.where(self.mask, n, np.arange(n))

    @functools.cached_property
    def type_bin(self) -> np.ndarray:
        """(n,) int64: the type bin of each position; masked ones in a last bin (types), dropped."""
        return self.type_ids if self.mask is None else np.where(self.mask, len(self.labels), self.type_ids)

    @functools.cached_property
    def words(self) -> tuple[tuple, np.ndarray]:
        """(word labels (groups,), the word bin of each position (n,) int64): word types numbered by first
        appearance, special tokens under their type label; a position of a masked word (all its pieces masked,
        or a masked special token) in a last bin (groups), dropped. Made on first use: most counts are by type."""
        if len(self.tokens) != len(self.type_ids):
            raise CountsError("these tallies were made without the tokens: tally(topk, tokens, mask) to count by word")
        words = word_spans(self.tokens)
        inside = words.word_of_token >= 0
        labels = np.asarray(self.labels, dtype=object)[self.type_ids]  # (n,) specials keep their type label
        labels[inside] = np.asarray(words.type, dtype=object)[words.word_of_token[inside]]
        ids, names, _ = _number_by_first(labels)
        if self.mask is not None:
            dropped = self.mask.copy()  # a special token's own mask
            dropped[inside] = words.masked(self.mask)[words.word_of_token[inside]]
            ids = np.where(dropped, len(names), ids)
        ids.setflags(write=False)
        return tuple(names), ids

    @property
    def nbytes(self) -> int:
        """Including the lists it holds (also cached on their own: a cache budget counts them twice, not never)."""
        own = self.type_ids.nbytes + (0 if self.mask is None else self.mask.nbytes)
        return self.topk.nbytes + own

    def matches(self, mask: np.ndarray | None) -> bool:
        if mask is None or self.mask is None:
            return mask is None and self.mask is None
        return np.array_equal(mask, self.mask)


def tally(topk: TopK, tokens, mask: np.ndarray | None = None) -> Tallies:
    """`topk` ready to count under `mask` (True = masked): the type of every position."""
    if not isinstance(topk, TopK):
        raise CountsError(f"expected TopK, got {type(topk).__name__}")
    n = topk.attended.shape[2]
    tokens = list(tokens)
    if len(tokens) != n:
        raise CountsError(f"{len(tokens)} tokens for lists over {n} positions")
    mask = None if mask is None else _check_mask(mask, n).copy()
    type_ids, labels, _ = token_types(tokens)
    return Tallies(topk, tuple(labels), type_ids, mask, tuple(tokens))


def position_counts(tallies: Tallies, k: int = 10, direction: Direction = "attended", layers=None, heads=None,
                    rule: Rule = "paper") -> np.ndarray:
    """(n,) int64: Algorithm 2 by position. "paper": how many owner tokens have the position in their top-k
    (first k entries) of some head of the scope; "per_head": how many (owner, head) lists of the scope have it."""
    return _counts(tallies, k, direction, layers, heads, rule)[0].copy()


def type_counts(tallies: Tallies, k: int = 10, direction: Direction = "attended", layers=None, heads=None,
                rule: Rule = "paper") -> np.ndarray:
    """(types,) int64: Algorithm 2 by type (types as in `tallies.labels`). "paper": how many owner tokens have a
    position of the type in their top-k of some head of the scope; "per_head": how many (owner, head) lists."""
    return _counts(tallies, k, direction, layers, heads, rule)[1].copy()


def _counts(tallies, k, direction, layers, heads, rule, group: str = "type") -> tuple[np.ndarray, np.ndarray]:
    """(positions (n,), groups (T,)), read-only, from one compiled pass over the owners' lists, the owners split
    between up to two threads (each with its own stamps and counts, added at the end); the last few are kept.
    `group`: "type" (groups = tallies.labels) or "word" (groups = tallies.words' labels)."""
    if not isinstance(tallies, Tallies):
        raise CountsError(f"expected Tallies, got {type(tallies).__name__}")
    check_choice(direction, DIRECTIONS, "direction")
    check_choice(rule, RULES, "rule")
    k = check_k(k)
    if k > tallies.k:
        raise CountsError(f"k={k} exceeds the {tallies.k} entries computed per list; recompute with k >= {k}")
    lists = tallies.topk.lists(direction)
    L, H, n, _ = lists.shape
    try:
        sel_l, sel_h = selection(layers, L, "layer"), selection(heads, H, "head")
    except ValueError as exc:
        raise CountsError(str(exc)) from None
    key = (k, direction, tuple(sel_l.tolist()), tuple(sel_h.tolist()), rule, group)
    recent = tallies._recent.get(key)
    if recent is not None:
        return recent
    if group == "word":
        names, group_bin = tallies.words
    else:
        names, group_bin = tallies.labels, tallies.type_bin
    T = len(names)
    parts = 2 if n * len(sel_l) * len(sel_h) * k >= _SPLIT_STEPS else 1
    bounds = np.linspace(0, n, parts + 1).round().astype(np.int64)
    out = [(np.zeros(n + 1, np.int64), np.zeros(T + 1, np.int64)) for _ in range(parts)]  # last bins: masked

    by_owner = np.moveaxis(lists, 2, 0)  # (n, layers, heads, k): contiguous for the lists of `topk_indices`

    def one(part):
        _kernels.count_sets(by_owner, sel_l, sel_h, k, tallies.owners, tallies.pos_bin, group_bin,
                            rule == "per_head", bounds[part], bounds[part + 1], *out[part])

    if parts == 1:
        one(0)
    else:
        with ThreadPoolExecutor(parts) as pool:
            list(pool.map(one, range(parts)))
    result = tuple(sum(o[c] for o in out)[:size] for c, size in ((0, n), (1, T)))
    for a in result:
        a.setflags(write=False)
    tallies._recent[key] = result
    for old in list(tallies._recent)[:-_RECENT]:  # oldest first; list() copies the keys in one step
        tallies._recent.pop(old, None)
    return result


_SPLIT_STEPS = 2_000_000  # owners x heads x k above which the owners are split between two threads
_RECENT = 8  # counts kept per Tallies: a page's two directions and rules (by type or by word)


# ---------------------------------------------------------------------------------------------- tables
def token_types(tokens) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(type id per position (n,), type labels, first position of each type): types numbered by first
    appearance, so sorting ties by type id is sorting by first position."""
    return _number_by_first(np.asarray(type_labels(tokens), dtype=object))


def _number_by_first(labels: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(id per position (n,), distinct labels, first position of each) for `labels` (n,) object, numbered by
    first appearance."""
    uniq, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse].astype(np.int64), [str(u) for u in uniq[order]], first[order]


def token_counts(
    analysis,
    k: int = 10,
    direction: Direction = "attended",
    by: By = "type",
    layers=None,
    heads=None,
    mask: np.ndarray | None = None,
    topk: TopK | None = None,
    tallies: Tallies | None = None,
    rule: Rule = "paper",
) -> pd.DataFrame:
    """Algorithm 2 (3 for "attending"): per token type (or word, or position), the number of tokens whose top-k
    attended (attending) lists over the scope's heads contain it (rule "paper"), or the number of (token, head)
    lists that contain it (rule "per_head"). By word, a word counts when any of its pieces is listed (see the
    module's notes).

    `analysis`: a DocumentAnalysis. `layers`/`heads`: indices (None = all); the scope is their product.
    `mask` (n,) bool, True = masked: masked tokens neither count nor are counted.
    `topk` / `tallies`: the document's precomputed lists (`topk_indices`) / the lists ready for this mask
    (`tally`); computed here when not given (the app caches both, so its reruns only re-count the lists).
    Returns only tokens with a positive count: columns token, count (by="type"), word, count (by="word") or
    position, token, count (by="position"), sorted by count descending, ties by (first) position ascending. The
    rule is kept in `frame.attrs["count_rule"]`."""
    check_choice(by, BYS, "by")
    tallies = _tallies_for(analysis, k, mask, topk, tallies)
    positions, groups = _counts(tallies, k, direction, layers, heads, rule, "word" if by == "word" else "type")
    if by == "position":
        labels = np.asarray(tallies.labels, dtype=object)[tallies.type_ids]
        frame = pd.DataFrame({"position": np.arange(len(positions)), "token": labels, "count": positions})
        frame = frame[frame["count"] > 0]
        frame = frame.sort_values(["count", "position"], ascending=[False, True], kind="stable")
    else:
        names = tallies.words[0] if by == "word" else tallies.labels
        column = GROUP_COLUMNS[by]
        frame = pd.DataFrame({column: names, "count": groups})  # rows already in first-position order
        frame = frame[frame["count"] > 0].sort_values("count", ascending=False, kind="stable")
    frame = frame.reset_index(drop=True)
    frame.attrs["count_rule"] = rule
    return frame


def count_intersection(attended: pd.DataFrame, attending: pd.DataFrame, top_n: int = 10) -> pd.DataFrame:
    """Tokens (or words, or positions) in both the top-`top_n` attended and the top-`top_n` attending (paper
    Fig. 7): columns token [position] (word, for tables by word), count_attended, count_attending, in the attended
    table's order. Both tables must come from the same counting rule."""
    top_n = whole_number(top_n, "top_n", lo=1, error=CountsError)
    key = next(c for c in ("position", "word", "token") if c in attended.columns)
    if key not in attending.columns or ("word" in attending.columns) != ("word" in attended.columns):
        raise CountsError("both tables must count by the same thing (type, word or position)")
    rule = same_rule([attended, attending])
    left = attended.head(top_n).rename(columns={"count": "count_attended"})
    right = attending.head(top_n)[[key, "count"]].rename(columns={"count": "count_attending"})
    both = left.merge(right, on=key, how="inner", sort=False)
    cols = ["token", "position"] if key == "position" else [key]
    both = both[[*cols, "count_attended", "count_attending"]].reset_index(drop=True)
    if rule is not None:
        both.attrs["count_rule"] = rule
    return both




def same_rule(tables) -> str | None:
    """The counting rule the tables name (`attrs["count_rule"]`), None if none names one; mixed rules fail."""
    rules = {t.attrs.get("count_rule") for t in tables} - {None}
    if len(rules) > 1:
        raise CountsError(f"the tables were counted with different rules: {sorted(rules)}")
    return rules.pop() if rules else None


def instance_counts(
    analysis,
    token: str,
    k: int = 10,
    direction: Direction = "attended",
    layers=None,
    heads=None,
    mask: np.ndarray | None = None,
    topk: TopK | None = None,
    tallies: Tallies | None = None,
    rule: Rule = "paper",
) -> pd.DataFrame:
    """Count of every instance of one token type along the document (paper Fig. 6), zeros included, under
    `rule` (as `token_counts` by position): columns position, token, count, masked, in position order."""
    tallies = _tallies_for(analysis, k, mask, topk, tallies)
    if token not in tallies.labels:
        raise CountsError(f"token {token!r} does not occur in the document")
    where = np.flatnonzero(tallies.type_ids == tallies.labels.index(token))
    counts = position_counts(tallies, k, direction, layers, heads, rule)
    masked = np.zeros(len(counts), dtype=bool) if tallies.mask is None else tallies.mask
    frame = pd.DataFrame({"position": where, "token": token, "count": counts[where], "masked": masked[where]})
    frame.attrs["count_rule"] = rule
    return frame


def _tallies_for(analysis, k, mask, topk, tallies) -> Tallies:
    if tallies is not None:
        if not isinstance(tallies, Tallies):
            raise CountsError(f"expected Tallies, got {type(tallies).__name__}")
        if not tallies.matches(None if mask is None else np.asarray(mask)):
            raise CountsError("the tallies were made with another mask; tally the lists again with this mask")
        return tallies
    if topk is None:
        topk = topk_indices(analysis.attention, k=check_k(k))
    return tally(topk, analysis.tokens, mask)


# ---------------------------------------------------------------------------------------------- helpers
def _check_mask(mask, n: int) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (n,):
        raise CountsError(f"mask must be a boolean array of shape ({n},), got {mask.dtype} {mask.shape}")
    return mask

