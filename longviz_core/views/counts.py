"""Top-k attended and attending tokens and their counts (paper section 3.1.2, appendix A.5 Algorithms 1-3).

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
(`topk_indices`) are computed once per document and cached; every count (any scope, k, direction, rule and
mask) is then one compiled pass over the owners' lists with a "last owner seen" stamp per position and per
type, owners x heads x k steps (`_kernels.count_sets`), with no per-type table.
Encoders held layer by layer (`model.layered.LayeredAttention`: ModernBERT, BERT-like) go through the same
loops for their banded layers; a full layer's lists come from its streamed passes (`model.streamed`).
"""
from __future__ import annotations

import functools
import os
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from ..errors import LongvizError
from ..model import _kernels
from ..model.bands import AttentionBands, selection
from ..model.layered import LayeredAttention
from ..progress import Progress, report
from ..tokens import type_labels, word_spans

TOPK_MAX = 64  # lists the app computes once per document; the k slider re-counts their prefixes
Direction = Literal["attended", "attending"]
By = Literal["type", "word", "position"]
DIRECTIONS: tuple[str, ...] = ("attended", "attending")
BYS: tuple[str, ...] = ("type", "word", "position")
GROUPS: tuple[str, ...] = ("type", "word")  # what a count groups positions by (BYS less "position")
GROUP_COLUMNS = {"type": "token", "word": "word"}  # the column naming the group in tables by type / by word


class CountsError(LongvizError, ValueError):
    """Counts asked for with input that cannot give them (k beyond the lists, a wrong mask, mixed rules)."""


@dataclass(frozen=True)
class TopK:
    """Per-head top-k lists of one document; entry -1 = no further key with positive attention."""

    attended: np.ndarray  # (layers, heads, n, k) int16 (int32 from 32,768 tokens): query i's keys, most attended first
    attending: np.ndarray  # (layers, heads, n, k) int16 / int32: key j's queries, most attending first
    # (`topk_indices` stores both owner-major: views of (n, layers, heads, k) arrays)
    k: int

    def __post_init__(self):
        for a in (self.attended, self.attending):
            a.setflags(write=False)  # shared through caches

    @property
    def nbytes(self) -> int:
        return self.attended.nbytes + self.attending.nbytes

    def lists(self, direction: Direction) -> np.ndarray:
        _check_choice(direction, DIRECTIONS, "direction")
        return self.attended if direction == "attended" else self.attending


# ------------------------------------------------------------------------------------------- top-k lists
def topk_indices(
    bands: AttentionBands, k: int = TOPK_MAX, progress: Progress | None = None, workers: int | None = None
) -> TopK:
    """Top-k attended (Algorithm 1) and attending (Algorithm 3) positions for every token, layer and head.

    Heads are processed by `workers` threads (default: up to 2; the compiled workers release the GIL), each
    with its own buffers (chunk maxima and the candidate keys), so the extra memory is a few heads' worth."""
    if isinstance(bands, LayeredAttention):
        return _topk_by_layer(bands, _check_k(k), progress, workers)
    if not isinstance(bands, AttentionBands):
        raise CountsError(f"expected AttentionBands or LayeredAttention, got {type(bands).__name__}")
    k = _check_k(k)
    L, H, n = bands.num_layers, bands.num_heads, bands.n
    dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32  # positions and -1: half the memory at k = 64
    _check_lists_fit(k, n * L * H * 2 * np.dtype(dtype).itemsize)
    # stored owner-major, (n, layers, heads, k), seen as (layers, heads, n, k): a count reads one owner's lists
    # of every head in turn, adjacent in this order. One count over 144 heads at 4,096 tokens took 25-50 ms
    # for k = 8-64 so; head-major (each owner's lists 0.5 MB apart) 19-25 ms up to k = 16, 70-105 ms from k = 20
    attended = np.moveaxis(np.full((n, L, H, k), -1, dtype=dtype), 0, 2)  # (layers, heads, n, k)
    attending = np.moveaxis(np.full((n, L, H, k), -1, dtype=dtype), 0, 2)  # (layers, heads, n, k)
    workers = max(1, min(int(workers or min(2, os.cpu_count() or 1)), L * H))
    buffers = queue.SimpleQueue()
    for _ in range(workers):
        buffers.put(_Buffers(n, bands.local.shape[-1], k))

    def one(layer_head):
        layer, head = layer_head
        work = buffers.get()
        try:
            attended[layer, head] = _attended_head(bands, layer, head, k, work)
            attending[layer, head] = _attending_head(bands, layer, head, k, work)
        finally:
            buffers.put(work)

    heads = [(layer, head) for layer in range(L) for head in range(H)]
    with ThreadPoolExecutor(workers) as pool:
        for done, _ in enumerate(pool.map(one, heads), start=1):  # progress from the caller's thread
            report(progress, done / len(heads), f"top-{k} lists: {done}/{len(heads)} heads")
    return TopK(attended, attending, k)


def _topk_by_layer(attention: LayeredAttention, k: int, progress, workers) -> TopK:
    """`topk_indices` of a document held layer by layer: a banded layer through the band kernels above, a
    streamed (full) layer from its one pass over the query rows (`StreamedLayer.summary`); same order, same
    owner-major storage."""
    L, H, n = attention.num_layers, attention.num_heads, attention.n
    dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32
    attended = np.moveaxis(np.full((n, L, H, k), -1, dtype=dtype), 0, 2)  # (layers, heads, n, k)
    attending = np.moveaxis(np.full((n, L, H, k), -1, dtype=dtype), 0, 2)  # (layers, heads, n, k)
    for layer, part in enumerate(attention.layers):
        if isinstance(part, AttentionBands):
            lists = topk_indices(part, k, workers=workers)
            attended[layer], attending[layer] = lists.attended[0], lists.attending[0]
        else:
            summary = part.summary(k=k)
            attended[layer], attending[layer] = summary.attended, summary.attending
        report(progress, (layer + 1) / L, f"top-{k} lists: {layer + 1}/{L} layers")
    return TopK(attended, attending, k)


class _Buffers:
    """One worker's scratch space for a head: chunk maxima for both directions and the candidate keys (room
    for every band entry: a row of equal values makes every entry a candidate)."""

    def __init__(self, n: int, width: int, k: int):
        kk, w = min(k, width), (width - 1) // 2
        # about 2k chunks per row (at most _CHUNK columns each): the k-th largest chunk maximum then admits
        # 1.15-1.3 k candidates per row (23 at k = 20, 81 at k = 64 on random rows); 8-column chunks admitted
        # 3 k at k = 64, and 3k chunks cost more in the thresholds' partition than they saved in the sort
        chunks = -(-width // int(np.clip(width // (2 * kk), 1, _CHUNK)))
        self.chunks = chunks if chunks >= kk else width  # narrow bands: one column per chunk
        block = int(np.clip(2 * w // (2 * kk), 1, _KEY_BLOCK))
        self.block = block if 2 * w // block + 2 >= kk else 1  # queries per chunk of a key's column
        self.key_chunks = 2 * w // self.block + 2  # blocks that a key's 2w + 1 queries overlap
        self.maxima = np.empty((n, self.chunks), dtype=np.float32)  # (n, chunks)
        self.blocks = np.empty((-(-n // self.block), width + self.block - 1), dtype=np.float32)  # (n / 4, 2w + 4)
        self.key_maxima = np.empty((n, self.key_chunks), dtype=np.float32)  # (n, 2w / 4 + 2)
        self.keys = np.empty(n * width, dtype=np.int64)  # (n * (2w + 1),)
        self.counts = np.empty(n, dtype=np.int64)  # (n,)


def _attended_head(bands: AttentionBands, layer: int, head: int, k: int, work: _Buffers) -> np.ndarray:
    """(n, k) for one head, Algorithm 1: each query's band row plus its attention to the global keys; a global
    query's row is taken whole from the bands. Each row's threshold is the k-th largest maximum of its
    interleaved column chunks (columns c, c + chunks, c + 2 chunks, ...)."""
    band = _float32(bands.local[layer, head])
    col_bits = _col_bits(band)
    _kernels.chunk_maxima(band, work.chunks, work.maxima)
    threshold = _threshold(work.maxima, k)
    m = _kernels.collect(band, band.view(np.int32), work.maxima, threshold, col_bits, work.keys, work.counts)
    out = _first_k(work, m, col_bits, bands.window, bands.global_cols[layer, head], bands.global_idx, k)
    for p, pos in enumerate(bands.global_idx):
        out[pos] = _topk_exact(bands.global_rows[layer, head, p], np.arange(bands.n), k)
    return out


def _attending_head(bands: AttentionBands, layer: int, head: int, k: int, work: _Buffers) -> np.ndarray:
    """(n, k) for one head, Algorithm 3: each key's column of the band (query i <-> band[i, j - i + w]) plus
    the global queries' attention to it; a global key's column is taken whole from the bands. The band is read
    in place, never transposed: a key's threshold is the k-th largest maximum over its column's blocks of 4
    consecutive queries, which are diagonals of 4 band rows (`_kernels.block_maxima`)."""
    band = _float32(bands.local[layer, head])
    col_bits = _col_bits(band)
    _kernels.block_maxima(band, work.block, work.blocks)
    _kernels.key_maxima(work.blocks, work.block, bands.window, work.key_maxima)
    threshold = _threshold(work.key_maxima, k)
    m = _kernels.collect_keys(band, band.view(np.int32), work.blocks, work.block, bands.window, threshold,
                              col_bits, work.keys, work.counts)
    out = _first_k(work, m, col_bits, bands.window, bands.global_rows[layer, head].T, bands.global_idx, k)
    for pos in bands.global_idx:
        out[pos] = _topk_exact(bands.column(layer, head, int(pos)), np.arange(bands.n), k)
    return out


def _col_bits(band: np.ndarray) -> int:
    """Bits of the column field of the sort keys (`longviz_core.model._kernels`); the row field must fit beside it."""
    n, width = band.shape
    col_bits = int(width - 1).bit_length()
    if int(n - 1).bit_length() + 31 + col_bits > 63:
        raise CountsError(f"band of {n} x {width} is too large for 64-bit sort keys")
    return col_bits


def _threshold(maxima: np.ndarray, k: int) -> np.ndarray:
    """(n,) per row the k-th largest chunk maximum: k distinct entries reach it, so it is at most the row's
    k-th largest value (every top-k entry passes) and admits few more (about 1.2 k per row). Zeros (outside
    the document, empty columns) never pass."""
    chunks = maxima.shape[1]
    kk = min(k, chunks)
    threshold = np.partition(maxima, chunks - kk, axis=1)[:, chunks - kk]  # (n,)
    return np.maximum(threshold, _TINY)


def _first_k(work: _Buffers, m: int, col_bits: int, w: int, extra: np.ndarray, extra_pos: np.ndarray, k: int
             ) -> np.ndarray:
    """(n, k): the m candidates' keys sorted (row, value descending, position ascending; one numpy sort for
    all rows), each row's first k merged with its `extra` columns (attention to / from the global tokens at
    `extra_pos`); exact, ties to the lower position, only positive values, -1 padded."""
    keys = work.keys[:m]
    keys.sort()
    extra = _float32(extra)
    out = np.empty((len(work.counts), k), dtype=np.int32)
    _kernels.first_k(keys, work.counts, col_bits, w, extra, extra.view(np.int32),
                     np.asarray(extra_pos, dtype=np.int64), out)
    return out


def _float32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


_CHUNK = 8  # columns per interleaved chunk of a band row (at most: fewer when k is large)
_KEY_BLOCK = 4  # (at most) consecutive queries per chunk of a key's column: their attention to a key is correlated, so
# blocks of 8 admitted 47 candidates per key at 1,024 tokens and blocks of 4 admit 28 (rows: 24)
_TINY = np.float32(np.finfo(np.float32).smallest_subnormal)


def _topk_exact(values: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
    """(k,) top-k positions of one vector by (value desc, position asc), positive values only, -1 padded."""
    order = np.lexsort((positions, -values))[:k]
    out = np.full(k, -1, dtype=np.int32)
    good = values[order] > 0
    out[: good.sum()] = positions[order][good]
    return out


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
    _check_choice(direction, DIRECTIONS, "direction")
    _check_choice(rule, RULES, "rule")
    k = _check_k(k)
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
    _check_choice(by, BYS, "by")
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
    top_n = int(top_n)
    if top_n < 1:
        raise CountsError(f"top_n must be at least 1, got {top_n}")
    key = next(c for c in ("position", "word", "token") if c in attended.columns)
    if key not in attending.columns or ("word" in attending.columns) != ("word" in attended.columns):
        raise CountsError("both tables must count by the same thing (type, word or position)")
    rule = _same_rule([attended, attending])
    left = attended.head(top_n).rename(columns={"count": "count_attended"})
    right = attending.head(top_n)[[key, "count"]].rename(columns={"count": "count_attending"})
    both = left.merge(right, on=key, how="inner", sort=False)
    cols = ["token", "position"] if key == "position" else [key]
    both = both[[*cols, "count_attended", "count_attending"]].reset_index(drop=True)
    if rule is not None:
        both.attrs["count_rule"] = rule
    return both


def dataset_type_counts(tables) -> pd.DataFrame:
    """Dataset-wide counts by token type (or by word) from per-document `token_counts(..., by="type")` tables
    (`by="word"`): a type's (word's) count is the sum over documents of its count in each (so, under the paper's
    rule, at most the dataset's number of tokens). Columns token (word), count, documents (how many documents
    count it), sorted by count descending, ties in the order the tokens first appear in the tables (as given). A
    table may also be a partial sum over several documents, with its own `documents` column (a result store sums
    in SQL first). The tables must all count by type or all by word."""
    tables = list(tables)
    if not tables:
        raise CountsError("no per-document count tables to aggregate")
    groups = set()
    for i, t in enumerate(tables):
        column = next((c for c in ("word", "token") if isinstance(t, pd.DataFrame) and c in t.columns), None)
        if column is None or "count" not in t.columns or "position" in t.columns:
            raise CountsError(f"table {i} is not a count table by type or by word (columns token or word, count)")
        groups.add(column)
    if len(groups) > 1:
        raise CountsError("the tables count by different things: all by type or all by word")
    key = groups.pop()
    rule = _same_rule(tables)
    rows = pd.concat([t[[key, "count"]].assign(documents=t["documents"] if "documents" in t else 1)
                      for t in tables], ignore_index=True)
    rows = rows[rows["count"] > 0]
    frame = rows.groupby(key, sort=False).agg(count=("count", "sum"), documents=("documents", "sum"))
    frame = frame.reset_index().astype({"count": np.int64, "documents": np.int64})
    frame = frame.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)
    if rule is not None:
        frame.attrs["count_rule"] = rule
    return frame


def _same_rule(tables) -> str | None:
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
        topk = topk_indices(analysis.attention, k=_check_k(k))
    return tally(topk, analysis.tokens, mask)


# ---------------------------------------------------------------------------------------------- helpers
def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise CountsError(f"k must be a positive integer, got {k!r}")
    return int(k)


TOPK_BYTES = 8 * 2**30  # the two lists' ceiling: k = 64 at 4,096 tokens, 12 x 12 heads takes 145 MB


def _check_lists_fit(k: int, bytes_per_k: int) -> None:
    """Refuse a k whose lists (both directions, every head and token) would not fit, before allocating them."""
    if k * bytes_per_k > TOPK_BYTES:
        raise CountsError(f"k = {k} would need {k * bytes_per_k / 2**30:,.0f} GiB of top-k lists for this document; "
                          f"use k <= {TOPK_BYTES // bytes_per_k:,} (the app offers 1..{TOPK_MAX}).")


def _check_mask(mask, n: int) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (n,):
        raise CountsError(f"mask must be a boolean array of shape ({n},), got {mask.dtype} {mask.shape}")
    return mask


def _check_choice(value, allowed, what: str) -> None:
    if value not in allowed:
        raise CountsError(f"{what} must be one of {allowed}, got {value!r}")
