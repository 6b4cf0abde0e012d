"""The top-k search (paper section 3.1.2, appendix A.5 Algorithms 1 and 3): for every token, layer and head, the k
keys it attends to most ("attended") and the k queries that attend to it most ("attending"), from the attention
bands in compiled loops (model._kernels).

Order: descending attention; ties go to the lower position, so the first k' entries of a top-k list are exactly
the top-k' list and one computation at `TOPK_MAX` serves every k <= TOPK_MAX. Only keys with attention > 0 are
candidates; a row with fewer than k positive entries gets a shorter list, padded with -1. No n x n matrix is
built and the band is never transposed or copied ("attending" reads each key's column in place). The counts
over these lists are views.counts."""
from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import LongvizError, whole_number
from . import _kernels
from .bands import AttentionBands, default_workers
from .layered import LayeredAttention
from .streamed import buffers_reused
from ..progress import Progress, report

TOPK_MAX = 64  # lists the app computes once per document; the k slider re-counts their prefixes
Direction = Literal["attended", "attending"]
DIRECTIONS: tuple[str, ...] = ("attended", "attending")


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
        check_choice(direction, DIRECTIONS, "direction")
        return self.attended if direction == "attended" else self.attending



# ------------------------------------------------------------------------------------------- top-k lists
def topk_indices(
    bands: AttentionBands, k: int = TOPK_MAX, progress: Progress | None = None, workers: int | None = None
) -> TopK:
    """Top-k attended (Algorithm 1) and attending (Algorithm 3) positions for every token, layer and head
    (`_fill_bands`: heads shared among worker threads)."""
    if isinstance(bands, LayeredAttention):
        return _topk_by_layer(bands, check_k(k), progress, workers)
    if not isinstance(bands, AttentionBands):
        raise CountsError(f"expected AttentionBands or LayeredAttention, got {type(bands).__name__}")
    k = check_k(k)
    L, H, n = bands.num_layers, bands.num_heads, bands.n
    attended, attending = _lists_of(n, L, H, k)
    _fill_bands(bands, k, progress, workers, attended, attending)
    return TopK(attended, attending, k)


def _lists_of(n: int, L: int, H: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Room for both directions' lists, owner-major: (n, layers, heads, k) arrays seen as (layers, heads, n, k).
    A count reads one owner's lists of every head in turn, adjacent in this order: one count over 144 heads at
    4,096 tokens took 25-50 ms for k = 8-64 so; head-major (each owner's lists 0.5 MB apart) 19-25 ms up to
    k = 16, 70-105 ms from k = 20. Left unset: every list is written whole, -1 padded, by its layer's search."""
    dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32  # positions and -1: half the memory at k = 64
    _check_lists_fit(k, n * L * H * 2 * np.dtype(dtype).itemsize)
    return (np.moveaxis(np.empty((n, L, H, k), dtype=dtype), 0, 2),  # (layers, heads, n, k)
            np.moveaxis(np.empty((n, L, H, k), dtype=dtype), 0, 2))


def _fill_bands(bands: AttentionBands, k: int, progress, workers, attended: np.ndarray, attending: np.ndarray) -> None:
    """Every head's lists of `bands` into attended and attending (layers, heads, n, k), heads shared by
    `workers` threads (default: up to 2; the compiled loops release the GIL), each with its own buffers
    (chunk maxima and the candidate keys), so the extra memory is a few heads' worth."""
    L, H, n = bands.num_layers, bands.num_heads, bands.n
    workers = max(1, min(default_workers(workers), L * H))
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


def _topk_by_layer(attention: LayeredAttention, k: int, progress, workers) -> TopK:
    """`topk_indices` of a document held layer by layer: a banded layer through the band kernels above, straight
    into the document's lists; a streamed (full) layer from its one pass over the query rows
    (`StreamedLayer.summary`); same order, same owner-major storage."""
    L, H, n = attention.num_layers, attention.num_heads, attention.n
    attended, attending = _lists_of(n, L, H, k)
    with buffers_reused():  # the streamed layers' passes one after another
        for layer, part in enumerate(attention.layers):
            if isinstance(part, AttentionBands):
                _fill_bands(part, k, None, workers, attended[layer : layer + 1], attending[layer : layer + 1])
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
        # k a third of the band or more (ModernBERT's 129 columns at k = 64): a threshold keeps half the entries
        # or more, so every entry is a candidate and each row of keys is sorted on its own (numpy sorts a short
        # row in a few SIMD steps): 4.4 instead of 10 ms a head at 2,048 tokens, both directions. All but the
        # last column: numpy sorts 128 int64 by a sorting network (0.8 ms for 2,048 rows), 129 another way
        # (1.5 ms), and the last is merged like a global token's entry (`_first_k`)
        self.dense = 3 * kk >= width


def _attended_head(bands: AttentionBands, layer: int, head: int, k: int, work: _Buffers) -> np.ndarray:
    """(n, k) for one head, Algorithm 1: each query's band row plus its attention to the global keys; a global
    query's row is taken whole from the bands. Each row's threshold is the k-th largest maximum of its
    interleaved column chunks (columns c, c + chunks, c + 2 chunks, ...); a dense band's rows have none."""
    band = _float32(bands.local[layer, head])
    col_bits = _col_bits(band)
    if work.dense:
        _kernels.row_keys(band, band.view(np.int32), col_bits, _dense_keys(work, band), work.counts)
    else:
        _kernels.chunk_maxima(band, work.chunks, work.maxima)
        threshold = _threshold(work.maxima, k)
        _kernels.collect(band, band.view(np.int32), work.maxima, threshold, col_bits, work.keys, work.counts)
    out = _first_k(work, band, col_bits, bands.window, bands.global_cols[layer, head], bands.global_idx, k, band[:, -1])
    for p, pos in enumerate(bands.global_idx):
        out[pos] = _topk_exact(bands.global_rows[layer, head, p], np.arange(bands.n), k)
    return out


def _attending_head(bands: AttentionBands, layer: int, head: int, k: int, work: _Buffers) -> np.ndarray:
    """(n, k) for one head, Algorithm 3: each key's column of the band (query i <-> band[i, j - i + w]) plus
    the global queries' attention to it; a global key's column is taken whole from the bands. The band is read
    in place, never transposed: a key's threshold is the k-th largest maximum over its column's blocks of 4
    consecutive queries, which are diagonals of 4 band rows (`_kernels.block_maxima`); a dense band's keys have
    none."""
    band = _float32(bands.local[layer, head])
    col_bits = _col_bits(band)
    if work.dense:
        _kernels.column_keys(band, band.view(np.int32), bands.window, col_bits, _dense_keys(work, band), work.counts)
    else:
        _kernels.block_maxima(band, work.block, work.blocks)
        _kernels.key_maxima(work.blocks, work.block, bands.window, work.key_maxima)
        threshold = _threshold(work.key_maxima, k)
        _kernels.collect_keys(band, band.view(np.int32), work.blocks, work.block, bands.window, threshold,
                              col_bits, work.keys, work.counts)
    w = bands.window  # key j's last column: query j + w, band[j + w, 0]
    last = np.concatenate([band[w:, 0], np.zeros(min(w, bands.n), dtype=np.float32)]) if work.dense else None
    out = _first_k(work, band, col_bits, w, bands.global_rows[layer, head].T, bands.global_idx, k, last)
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


def _dense_keys(work: _Buffers, band: np.ndarray) -> np.ndarray:
    """(n, width - 1) of the keys' room: a dense band's keys but for its last column."""
    n, width = band.shape
    return work.keys[: n * (width - 1)].reshape(n, width - 1)


def _first_k(work: _Buffers, band: np.ndarray, col_bits: int, w: int, extra: np.ndarray, extra_pos: np.ndarray, k: int,
             last: np.ndarray) -> np.ndarray:
    """(n, k): the candidates' keys sorted (row, value descending, position ascending: one numpy sort for all
    rows, or each row's keys on their own when dense), each row's first k merged with its `extra` columns
    (attention to / from the global tokens at `extra_pos`) and, when dense, with `last` (n,), the band's last
    column (position i + w); exact, ties to the lower position, only positive values, -1 padded."""
    n, width = band.shape
    extra = _float32(extra)
    positions = np.broadcast_to(np.asarray(extra_pos, dtype=np.int64), (n, len(extra_pos)))
    if work.dense:
        _dense_keys(work, band).sort(axis=1)
        extra = np.concatenate([extra, last[:, None]], axis=1)
        positions = np.concatenate([positions, np.arange(w, n + w)[:, None]], axis=1)
    else:
        work.keys[: work.counts.sum()].sort()
    out = np.empty((n, k), dtype=np.int32)
    _kernels.first_k(work.keys, work.counts, width - 1 if work.dense else 0, col_bits, w, extra, extra.view(np.int32),
                     positions, out)
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


# ---------------------------------------------------------------------------------------------- checks
def check_k(k) -> int:
    return whole_number(k, "k", lo=1, error=CountsError)


TOPK_BYTES = 8 * 2**30  # the two lists' ceiling: k = 64 at 4,096 tokens, 12 x 12 heads takes 145 MB


def _check_lists_fit(k: int, bytes_per_k: int) -> None:
    """Refuse a k whose lists (both directions, every head and token) would not fit, before allocating them."""
    if k * bytes_per_k > TOPK_BYTES:
        raise CountsError(f"k = {k} would need {k * bytes_per_k / 2**30:,.0f} GiB of top-k lists for this document; "
                          f"use k <= {TOPK_BYTES // bytes_per_k:,} (the app offers 1..{TOPK_MAX}).")



def check_choice(value, allowed, what: str) -> None:
    if value not in allowed:
        raise CountsError(f"{what} must be one of {allowed}, got {value!r}")
