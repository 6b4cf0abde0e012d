"""Top-k attended and attending tokens and their counts (paper section 3.1.2, appendix A.5 Algorithms 1-3).

Algorithm 1: for every query token, per layer and head, the k keys it attends to most ("attended").
Algorithm 3: for every key token, the k queries that attend to it most ("attending"), i.e. Algorithm 1 on the
transposed matrix.
Algorithm 2: count how often each token appears in those lists, by token type or by position. Each list is
taken as a set (per owning token and head), so a position counts at most once per list and a type at most once
per list even when several of its instances are in it.

Conventions (the paper leaves them open; these are ours):
- Order: descending attention; ties go to the lower position. So the first k' entries of a top-k list are
  exactly the top-k' list, and one computation at `TOPK_MAX` serves every k <= TOPK_MAX.
  (The paper's pseudo-code takes `argsort()[:k]`, i.e. the k smallest; the text and figures mean the largest.)
- Only keys with attention > 0 are candidates: positions outside the document, band columns that Longformer
  leaves empty and exact zeros are never chosen. A row with fewer than k positive entries gets a shorter list,
  padded with -1.
- Masking (paper section 3.4) is applied after the top-k: the lists are the model's real top-k; a masked
  token then neither counts (its own list is ignored) nor is counted (it is skipped inside other lists, which
  are not refilled). Re-ranking without masked tokens would change what the model attended to, and it would
  make the mask toggle recompute every head instead of re-counting cached lists.
- Token type = the normalised token (`masking.normalise_tokens`: markers removed, byte-level text decoded,
  lower-cased), so 'Ġtraining', 'training' and 'ĠTraining' are one type; tokens that normalise to nothing
  (whitespace, byte fragments) keep a visible form of the raw token.

Everything is computed from the attention bands, in compiled loops (`longviz_core._kernels`): no n x n matrix
is built and the band is never transposed or copied ("attending" reads each key's column in place). Two
per-document results are meant to be cached: the lists (`topk_indices`, once) and their tallies per head and
rank (`tally`, once per mask), after which any scope and any k is a sum of small integer tables
(`token_counts(..., tallies=...)`).
"""
from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ..bands import AttentionBands, _selection
from ..types import Progress, report
from .. import _kernels
from .masking import normalise_tokens

TOPK_MAX = 20  # lists the app computes once per document; the k slider re-counts their prefixes
Direction = Literal["attended", "attending"]
By = Literal["type", "position"]
DIRECTIONS: tuple[str, ...] = ("attended", "attending")
BYS: tuple[str, ...] = ("type", "position")


@dataclass(frozen=True)
class TopK:
    """Per-head top-k lists of one document; entry -1 = no further key with positive attention."""

    attended: np.ndarray  # (layers, heads, n, k) int32: query i's keys, most attended first
    attending: np.ndarray  # (layers, heads, n, k) int32: key j's queries, most attending first
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
    if not isinstance(bands, AttentionBands):
        raise ValueError(f"expected AttentionBands, got {type(bands).__name__}")
    k = _check_k(k)
    L, H, n = bands.num_layers, bands.num_heads, bands.n
    attended = np.full((L, H, n, k), -1, dtype=np.int32)  # (layers, heads, n, k)
    attending = np.full((L, H, n, k), -1, dtype=np.int32)  # (layers, heads, n, k)
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


class _Buffers:
    """One worker's scratch space for a head: chunk maxima for both directions and the candidate keys (room
    for every band entry: a row of equal values makes every entry a candidate)."""

    def __init__(self, n: int, width: int, k: int):
        kk, w = min(k, width), (width - 1) // 2
        chunks = -(-width // _CHUNK)
        self.chunks = chunks if chunks >= kk else width  # narrow bands: one column per chunk
        self.block = _KEY_BLOCK if 2 * w // _KEY_BLOCK + 2 >= kk else 1  # queries per chunk of a key's column
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
    """Bits of the column field of the sort keys (`longviz_core._kernels`); the row field must fit beside it."""
    n, width = band.shape
    col_bits = int(width - 1).bit_length()
    if int(n - 1).bit_length() + 31 + col_bits > 63:
        raise ValueError(f"band of {n} x {width} is too large for 64-bit sort keys")
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


_CHUNK = 8  # columns per interleaved chunk of a band row
_KEY_BLOCK = 4  # consecutive queries per chunk of a key's column: their attention to a key is correlated, so
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
@dataclass(frozen=True)
class Tallies:
    """One document's top-k lists tallied per head and rank, for one mask (Algorithm 2 prepared once).

    The counts of any scope (layers x heads) and any k <= `k` are sums over these tables, so the app's
    toggles (scope, layer, head, k) only add up small integer arrays; a new mask needs new tallies."""

    positions: np.ndarray  # (2, layers, heads, k, n) int16/int32: lists whose entry at rank r is position p
    types: np.ndarray  # (2, layers, heads, k, types): lists whose first entry of type t is at rank r
    labels: tuple  # (types,) type labels, numbered by first appearance in the document
    type_ids: np.ndarray  # (n,) type number of each position
    mask: np.ndarray | None  # (n,) bool, True = masked; None = nothing masked
    k: int

    def __post_init__(self):
        for a in (self.positions, self.types, self.type_ids, self.mask):
            if a is not None:
                a.setflags(write=False)

    @property
    def nbytes(self) -> int:
        return self.positions.nbytes + self.types.nbytes + self.type_ids.nbytes

    def matches(self, mask: np.ndarray | None) -> bool:
        if mask is None or self.mask is None:
            return mask is None and self.mask is None
        return np.array_equal(mask, self.mask)


def tally(topk: TopK, tokens, mask: np.ndarray | None = None) -> Tallies:
    """Tally every (owner token, head) list of `topk` by rank: by position, and by type where each type counts
    at its first rank in the list (a list is a set). Masked owners' lists and masked entries are left out."""
    if not isinstance(topk, TopK):
        raise ValueError(f"expected TopK, got {type(topk).__name__}")
    L, H, n, K = topk.attended.shape
    tokens = list(tokens)
    if len(tokens) != n:
        raise ValueError(f"{len(tokens)} tokens for lists over {n} positions")
    mask = None if mask is None else _check_mask(mask, n).copy()
    type_ids, labels, _ = token_types(tokens)
    T = len(labels)
    dtype = np.int16 if n < 2**15 else np.int32  # a (head, rank, bin) count is at most n
    positions = np.zeros((2, L, H, K, n), dtype=dtype)  # (2, layers, heads, k, n)
    types = np.zeros((2, L, H, K, T), dtype=dtype)  # (2, layers, heads, k, types)
    # position -> bin and type; masked positions and the -1 padding (index -1 = the appended entry) go to a
    # last bin, dropped at the end
    key_bin = np.append(np.where(mask, n, np.arange(n)) if mask is not None else np.arange(n), n).astype(np.int32)
    type_bin = np.append(np.where(mask, T, type_ids) if mask is not None else type_ids, T).astype(np.int32)
    rank = np.arange(K, dtype=np.int32)
    head = np.arange(H, dtype=np.int32)[:, None, None]
    for d, lists in enumerate((topk.attended, topk.attending)):
        for layer in range(L):  # one layer at a time keeps the temporaries small
            owned = lists[layer] if mask is None else lists[layer][:, ~mask]  # (heads, owners, k)
            flat = ((head * K + rank) * (n + 1) + key_bin[owned]).reshape(-1)
            positions[d, layer] = np.bincount(flat, minlength=H * K * (n + 1)).reshape(H, K, n + 1)[..., :n]
            # type * K + rank, sorted within each list: each type's run starts at its first (lowest) rank
            keyed = type_bin[owned] * K + rank  # (heads, owners, k)
            keyed.sort(axis=-1)
            tids = keyed // K
            first = np.ones(keyed.shape, dtype=bool)
            first[..., 1:] = tids[..., 1:] != tids[..., :-1]
            flat = ((head * K + (keyed - tids * K)) * (T + 1) + tids)[first]
            types[d, layer] = np.bincount(flat, minlength=H * K * (T + 1)).reshape(H, K, T + 1)[..., :T]
    return Tallies(positions, types, tuple(labels), type_ids, mask, K)


def position_counts(tallies: Tallies, k: int = 10, direction: Direction = "attended", layers=None, heads=None
                    ) -> np.ndarray:
    """(n,) int64: how many (owner token, head) lists of the scope contain each position in their first k
    entries (Algorithm 2 by position)."""
    return _summed(tallies, tallies.positions, k, direction, layers, heads)


def type_counts(tallies: Tallies, k: int = 10, direction: Direction = "attended", layers=None, heads=None
                ) -> np.ndarray:
    """(types,) int64: how many lists of the scope contain each token type at least once in their first k
    entries (Algorithm 2 by type); types as in `tallies.labels`."""
    return _summed(tallies, tallies.types, k, direction, layers, heads)


def _summed(tallies, table, k, direction, layers, heads) -> np.ndarray:
    if not isinstance(tallies, Tallies):
        raise ValueError(f"expected Tallies, got {type(tallies).__name__}")
    _check_choice(direction, DIRECTIONS, "direction")
    k = _check_k(k)
    if k > tallies.k:
        raise ValueError(f"k={k} exceeds the {tallies.k} entries computed per list; recompute with k >= {k}")
    _, L, H, _, _ = table.shape
    sel_l, sel_h = _selection(layers, L, "layer"), _selection(heads, H, "head")
    part = table[DIRECTIONS.index(direction), :, :, :k]  # (layers, heads, k, bins)
    if len(sel_l) < L:
        part = part[sel_l]
    if len(sel_h) < H:
        part = part[:, sel_h]
    return part.sum(axis=(0, 1, 2), dtype=np.int64)


# ---------------------------------------------------------------------------------------------- tables
def token_types(tokens) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(type id per position (n,), type labels, first position of each type): types numbered by first
    appearance, so sorting ties by type id is sorting by first position."""
    labels = _type_labels(tokens)
    uniq, first, inverse = np.unique(np.asarray(labels, dtype=object), return_index=True, return_inverse=True)
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
) -> pd.DataFrame:
    """How often each token type (or position) is among the top-k attended / attending of the scope.

    `analysis`: a DocumentAnalysis. `layers`/`heads`: indices (None = all); the scope is their product.
    `mask` (n,) bool, True = masked: masked tokens neither count nor are counted.
    `topk` / `tallies`: the document's precomputed lists (`topk_indices`) / their tallies for this mask
    (`tally`); computed here when not given (the app caches both, so its reruns only add up tallies).
    Returns only tokens with a positive count: columns token, count (by="type") or position, token, count
    (by="position"), sorted by count descending, ties by (first) position ascending."""
    _check_choice(by, BYS, "by")
    tallies = _tallies_for(analysis, k, mask, topk, tallies)
    if by == "position":
        counts = position_counts(tallies, k, direction, layers, heads)
        labels = np.asarray(tallies.labels, dtype=object)[tallies.type_ids]
        frame = pd.DataFrame({"position": np.arange(len(counts)), "token": labels, "count": counts})
        frame = frame[frame["count"] > 0]
        return frame.sort_values(["count", "position"], ascending=[False, True], kind="stable").reset_index(
            drop=True
        )
    counts = type_counts(tallies, k, direction, layers, heads)
    frame = pd.DataFrame({"token": tallies.labels, "count": counts})  # rows already in first-position order
    frame = frame[frame["count"] > 0]
    return frame.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)


def count_intersection(attended: pd.DataFrame, attending: pd.DataFrame, top_n: int = 10) -> pd.DataFrame:
    """Tokens (or positions) in both the top-`top_n` attended and the top-`top_n` attending (paper Fig. 7):
    columns token [position], count_attended, count_attending, in the attended table's order."""
    top_n = int(top_n)
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")
    key = "position" if "position" in attended.columns else "token"
    if key not in attending.columns:
        raise ValueError("both tables must count by the same thing (type or position)")
    left = attended.head(top_n).rename(columns={"count": "count_attended"})
    right = attending.head(top_n)[[key, "count"]].rename(columns={"count": "count_attending"})
    both = left.merge(right, on=key, how="inner", sort=False)
    cols = ["token", "position"] if key == "position" else ["token"]
    return both[[*cols, "count_attended", "count_attending"]].reset_index(drop=True)


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
) -> pd.DataFrame:
    """Count of every instance of one token type along the document (paper Fig. 6), zeros included:
    columns position, token, count, masked, in position order."""
    tallies = _tallies_for(analysis, k, mask, topk, tallies)
    if token not in tallies.labels:
        raise ValueError(f"token {token!r} does not occur in the document")
    where = np.flatnonzero(tallies.type_ids == tallies.labels.index(token))
    counts = position_counts(tallies, k, direction, layers, heads)
    masked = np.zeros(len(counts), dtype=bool) if tallies.mask is None else tallies.mask
    return pd.DataFrame({"position": where, "token": token, "count": counts[where], "masked": masked[where]})


def _tallies_for(analysis, k, mask, topk, tallies) -> Tallies:
    if tallies is not None:
        if not isinstance(tallies, Tallies):
            raise ValueError(f"expected Tallies, got {type(tallies).__name__}")
        if not tallies.matches(None if mask is None else np.asarray(mask)):
            raise ValueError("the tallies were made with another mask; tally the lists again with this mask")
        return tallies
    if topk is None:
        topk = topk_indices(analysis.attention, k=_check_k(k))
    return tally(topk, analysis.tokens, mask)


# ---------------------------------------------------------------------------------------------- helpers
def _type_labels(tokens) -> list[str]:
    norm = normalise_tokens(list(tokens))
    return [t if t else _visible(raw) for t, raw in zip(norm, tokens)]


def _visible(raw: str) -> str:
    """A readable stand-in for a token that normalises to nothing (whitespace, byte fragments)."""
    shown = str(raw).replace("Ġ", "␣").replace("Ċ", "↵").replace("ĉ", "⇥").replace("▁", "␣").strip()
    return shown or "␣"


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _check_mask(mask, n: int) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (n,):
        raise ValueError(f"mask must be a boolean array of shape ({n},), got {mask.dtype} {mask.shape}")
    return mask


def _check_choice(value, allowed, what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
