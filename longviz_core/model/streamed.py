"""A full-attention layer kept as its queries and keys; every view streamed from them in one pass over its rows.

A full layer's attention is softmax(Q K^T * scaling) row by row over all n keys (`capture` takes Q and K after
RoPE from the model's own attention call). Storing it would take heads x n x n floats per layer (22 x 12 x
8,192^2 x 4 B = 71 GB for ModernBERT-base at 8,192 tokens), so this layer keeps Q and K, (heads, n, d), and
computes what the views read from chunks of query rows: each chunk's scores are computed and soft-maxed (exact
float32, torch's own softmax, as eager attention computes it) and read while they are in cache.

One pass (`summary`) gives, per head, everything the pages show by default: the attention every key receives
(column sums), the CLS row, the block sums the heatmap grid pools, each query's top-k keys (Algorithm 1) and each
key's top-k queries (Algorithm 3). A head's rows go first in one band (`_BAND_BYTES` of probabilities: the
whole head up to about 3,500 tokens, 1,536 rows at 8,192), then one chunk at a time, a chunk being 256 rows (Q K^T
by one matmul, its softmax in place), and worker threads take the heads. `_kernels.stream_rows` reads each chunk
once: the column sums of the current query block (into the received attention and the block sums, float64),
each row's maxima over 2 k interleaved chunks of its columns, and (in the first band) each key's maxima over 2 k
interleaved chunks of the band's rows. A row's threshold is the k-th largest of its chunk maxima (numpy's
partition, a chunk's rows at once): k distinct entries reach it, so every top-k entry does, and about k + 20
entries do. A key's threshold in the first band is the k-th largest of its maxima there; later, its floor, the
k-th best value of the rows before. At the end of the band, and of each later chunk, `_kernels.band_candidates`
reads it again (in cache: a chunk's 8 MiB are the band's first rows, written over each time) for the entries at
or above their row's or their key's threshold, as sort keys (row or key, value bits inverted, position); numpy
sorts them; a row's first k are its list. The keys' candidates wait for `_MERGE_ROWS` rows, then each key's are
merged into its best k so far (`_kernels.merge_keys`), which raises its floor. Exact: the candidates hold every
top-k entry, ties included, and the sort orders them by the views' rule. Why no band after the first: writing
every chunk into a 48 MiB band and reading it back went to memory, not cache, and cost about a fifth of the pass
at 8,192 tokens, more than the first band's thresholds save later (docs/benchmarks.md, where the time goes: Q
K^T and the softmax are about half of it).

The key side reads the very values of the row side, those of `dense`. (Before, each key's top-k came from a
second pass over chunks of keys, K Q^T with each query's log-sum-exp from the first: exp(score - lse), the same
softmax rounded in another order, a few ulp apart, so that two near-equal entries of a column could be ordered
unlike the column's own values; the row side divided by the sum where torch's softmax multiplies by its
inverse. Both now match a whole-head torch.softmax entry for entry.) Memory: Q and K, the lists O(heads * n *
k), and per worker the first band, its candidates and each key's best k (about 130 MiB at 8,192 tokens).

Rows, columns and dense heads on demand and the cached summary (`RowStreamed`) serve BigBird's block-sparse
layers too (`block_sparse.BlockSparseLayer`, whose pass reads its stored blocks through `rows_topk`).

A decoder's layer (`causal`) is the same with query i over keys j <= i (and j >= i - reach for a sliding layer):
each chunk of rows scores only the keys its rows reach (the band holds zeros beyond), so a causal pass costs
about half a full one and a sliding pass a band's. Grouped-query attention keeps the keys as they come,
(key/value heads, n, d): query head h scores against key head h // (heads / key/value heads) through a broadcast
matmul, never a copy of K per query head. A soft-capped layer (Gemma 2) caps the scaled scores, cap * tanh(s /
cap), before the mask and the softmax, as the model's attention does.

Top-k order is the views' (`views.counts`): value descending, ties to the lower position, positive values
only, -1 padded.
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from . import _kernels

_CHUNK_BYTES = 48 << 20  # one chunk's (heads, rows, n) float32 probabilities (rows, columns, dense heads)
_CHUNK_ROWS = 256  # rows of one head's Q K^T at a time in the views' pass (fewer: MKL's matmul is 25 % slower)
_CHUNK_ROWS_BYTES = 8 << 20  # ... at most this many bytes of them
_BAND_BYTES = 48 << 20  # a head's first band of rows in the views' pass: its keys' candidates are read at its end
_MERGE_ROWS = 1024  # after the first band, rows whose keys' candidates are merged into their best at once
_WORKERS = 8  # threads of the views' pass at most (each holds a band)
DEFAULT_K = 64  # the app's top-k lists (views.counts.TOPK_MAX)
DEFAULT_GRID = 64  # the heatmap grid's cells per axis (views.pooling.DEFAULT_GRID)


@dataclass(frozen=True)
class Summary:
    """What one pass over a full layer's rows gives, per head."""

    received: np.ndarray  # (heads, n) float32 column sums
    cls_row: np.ndarray  # (heads, n) float32 attention of query 0
    attended: np.ndarray | None  # (heads, n, k) int16 (int32 from 32,768 tokens) each query's top-k keys, -1 padded
    attending: np.ndarray | None  # (heads, n, k) int16 / int32 each key's top-k queries, -1 padded
    block: int  # tokens per pooled block (0: not pooled)
    block_sums: np.ndarray | None  # (heads, g, g) float64 attention from query block a to key block b


class RowStreamed:
    """Views of one layer that holds no n x n matrix: rows, columns and dense heads on demand, and the cached
    summary of one pass; what `StreamedLayer` and `block_sparse.BlockSparseLayer` share. A subclass gives `num_heads`, `n`, a `_cache`
    dict, `probs(rows, heads)` and `_pass(k, block)`, the one pass over the layer that makes a `Summary`."""

    # ---- rows on demand ---------------------------------------------------------------------------------
    def dense(self, head: int) -> np.ndarray:
        """The (n, n) matrix of one head (rows = queries, sum to 1)."""
        return self.probs(slice(None), [head])[0].numpy()

    def row(self, head: int, i: int) -> np.ndarray:
        """Query i's attention over all keys, (n,)."""
        return self.probs(slice(i, i + 1), [head])[0, 0].numpy().copy()

    def column(self, head: int, j: int) -> np.ndarray:
        """Attention every query gives key j, (n,): one row chunk at a time, keeping column j."""
        out = np.empty(self.n, dtype=np.float32)
        for rows in self._chunks(1):
            out[rows] = self.probs(rows, [head])[0, :, j].numpy()
        return out

    # ---- one pass over every row ------------------------------------------------------------------------
    def received(self) -> np.ndarray:
        """(heads, n) attention each key receives (column sums)."""
        return self.summary().received

    def summary(self, k: int = 0, block: int = 0) -> Summary:
        """Received and the CLS row always; top-k lists for k > 0 (prefixes of a longer cached list serve a
        smaller k); block sums for `block` > 0 tokens per block. The first pass computes what the app's views
        ask by default too (k = DEFAULT_K, the DEFAULT_GRID grid's blocks), so that one pass serves every view of
        a document; other k or grids take passes of their own. Cached."""
        for (ck, cb), s in self._cache.items():
            if ck >= k and (block == 0 or cb == block):
                return s if ck == k or k == 0 else _prefix(s, k)
        want = (max(k, DEFAULT_K), block or -(-self.n // DEFAULT_GRID)) if not self._cache else (k, block)
        self._cache[want] = self._pass(*want)
        return self.summary(k, block)

    def _chunks(self, heads: int):
        """Slices of query rows, each about _CHUNK_BYTES of (heads, rows, n) float32."""
        rows = max(1, _CHUNK_BYTES // (4 * heads * self.n))
        for start in range(0, self.n, rows):
            yield slice(start, min(start + rows, self.n))


@dataclass(frozen=True)
class StreamedLayer(RowStreamed):
    """One full-attention or causal layer: its queries and keys, views computed from them (module docstring)."""

    query: torch.Tensor  # (heads, n, d) float32, after RoPE
    key: torch.Tensor  # (key/value heads, n, d) float32, after RoPE
    scaling: float
    causal: bool = False  # query i attends keys j <= i only
    reach: int = 0  # causal sliding window: keys j >= i - reach too (0: every earlier key)
    softcap: float | None = None  # scores capped as cap * tanh(s / cap) (Gemma 2's attn_logit_softcapping)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        q, k = self.query, self.key
        if q.ndim != 3 or k.ndim != 3 or q.shape[1:] != k.shape[1:] or q.shape[0] % k.shape[0]:
            raise ValueError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} must be (heads, n, d) and "
                             "(key/value heads, n, d), the heads a multiple of the key/value heads")

    @property
    def num_heads(self) -> int:
        return self.query.shape[0]

    @property
    def n(self) -> int:
        return self.query.shape[1]

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.query.shape[0] // self.key.shape[0]

    @property
    def nbytes(self) -> int:
        cached = sum(a.nbytes for s in self._cache.values() for a in vars(s).values() if isinstance(a, np.ndarray))
        return self.query.numel() * 4 + self.key.numel() * 4 + cached

    # ---- scores of a block of queries x keys --------------------------------------------------------------
    def _keys_of(self, rows: slice) -> slice:
        """The keys the queries in `rows` can attend to."""
        if not self.causal:
            return slice(0, self.n)
        return slice(max(0, rows.start - self.reach) if self.reach else 0, rows.stop)

    def _allowed(self, rows: slice, keys: slice) -> torch.Tensor | None:
        """(rows, keys) bool: which pairs the layer allows (None: all)."""
        if not self.causal:
            return None
        i = torch.arange(rows.start, rows.stop)[:, None]
        j = torch.arange(keys.start, keys.stop)[None, :]
        ok = j <= i
        return ok & (j >= i - self.reach) if self.reach else ok

    def _scores(self, rows: slice, keys: slice, heads=None, out: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled (capped) scores of queries `rows` against keys `keys`, (heads, rows, keys) float32, -inf where the
        layer does not allow the pair. `heads`: a list of query heads, or None (all), or one head as an int: then
        (rows, keys), into `out` where given."""
        if isinstance(heads, int) and math.frexp(self.scaling)[0] == 0.5:  # a power of two: exact in the product
            s = torch.addmm(out, self.query[heads, rows], self.key[heads // self.group, keys].T, beta=0,
                            alpha=self.scaling, out=out)
        elif isinstance(heads, int):
            s = torch.matmul(self.query[heads, rows], self.key[heads // self.group, keys].T, out=out)
        elif heads is None:
            kv, g = self.key.shape[0], self.group
            q = self.query[:, rows].reshape(kv, g, -1, self.query.shape[-1])  # (kv, g, rows, d)
            k = self.key[:, keys].unsqueeze(1)  # (kv, 1, keys, d)
            s = torch.matmul(q, k.transpose(-1, -2))
            s = s.reshape(self.num_heads, *s.shape[2:])  # (heads, rows, keys)
        else:
            q = self.query[heads, rows]
            k = self.key[[h // self.group for h in heads], keys]
            s = torch.matmul(q, k.transpose(-1, -2))
        if not isinstance(heads, int) or math.frexp(self.scaling)[0] != 0.5:
            s.mul_(self.scaling)  # in place: at 32,768 tokens each copy of a chunk is 48 MiB
        if self.softcap is not None:
            s.div_(self.softcap).tanh_().mul_(self.softcap)
        ok = self._allowed(rows, keys)
        if ok is not None:
            s.masked_fill_(~ok, float("-inf"))
        return s

    def probs(self, rows: slice, heads=None) -> torch.Tensor:
        """Attention of the queries in `rows` over all keys, (heads, rows, n) float32: exact softmax."""
        rows = slice(*rows.indices(self.n)[:2])
        keys = self._keys_of(rows)
        p = torch.softmax(self._scores(rows, keys, heads), dim=-1, dtype=torch.float32)  # (heads, rows, keys)
        if keys.stop - keys.start == self.n:
            return p
        out = p.new_zeros((p.shape[0], p.shape[1], self.n))
        out[..., keys] = p
        return out

    def _pass(self, k: int, block: int) -> Summary:
        """The heads shared among worker threads (as many as torch's threads, at most _WORKERS), each with one
        torch thread and its own buffers (`_HeadState`, about 130 MiB at 8,192 tokens); numba's loops release
        the GIL."""
        H, n = self.num_heads, self.n
        g = -(-n // block) if block else 0
        dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32  # positions and -1, as views.counts
        out = _Out(received=np.zeros((H, n)), sums=np.zeros((H, g, g)), cls_row=np.zeros((H, n), dtype=np.float32),
                   attended=np.full((H, n, k), -1, dtype=dtype), attending=np.full((H, n, k), -1, dtype=dtype))
        heads = iter(range(H))
        lock = threading.Lock()

        def work():
            torch.set_num_threads(1)  # this thread's own setting: the workers take the cores instead
            shape = (n, min(k, n), *self._rows_per_chunk())
            state = _taken(shape)
            try:
                while True:
                    with lock:
                        h = next(heads, None)
                    if h is None:
                        return
                    self._head_pass(h, block, state, out)
            finally:
                _given_back(shape, state)

        workers = max(1, min(torch.get_num_threads(), H, _WORKERS))
        with ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(work) for _ in range(workers)]:
                done.result()
        return Summary(out.received.astype(np.float32), out.cls_row, out.attended if k else None,
                       out.attending if k else None, block, out.sums if block else None)

    def _rows_per_chunk(self) -> tuple[int, int]:
        """Rows per chunk and in the first band (a multiple of the chunk's)."""
        rows = min(self.n, _CHUNK_ROWS, max(1, _CHUNK_ROWS_BYTES // (4 * self.n)))
        return rows, min(-(-self.n // rows), max(1, _BAND_BYTES // (4 * self.n * rows))) * rows

    def _head_pass(self, h: int, block: int, state: "_HeadState", out: "_Out") -> None:
        """One head's rows: the first band, then one chunk at a time (module docstring)."""
        n, kk = self.n, state.kk
        state.reset()
        for band_start in [0, *range(state.band_rows, n, state.rows)]:
            band_rows = slice(band_start, min(band_start + (state.rows if band_start else state.band_rows), n))
            band_keys = self._keys_of(band_rows)
            R, M = band_rows.stop - band_rows.start, band_keys.stop - band_keys.start
            band = state.band[: R * M].view(R, M)
            if self.causal:  # rows reach fewer keys than the band: the rest of each row is zero
                band.zero_()
            # a key's threshold over the first band; later its kk-th best so far (the floor), far higher than
            # a chunk's kk-th largest maximum
            key_chunks = min(2 * kk, R) if kk and not band_start else 0
            key_maxima = state.key_maxima[: key_chunks * M].reshape(key_chunks, M)
            key_maxima[:] = 0
            for start in range(band_start, band_rows.stop, state.rows):
                rows = slice(start, min(start + state.rows, band_rows.stop))
                keys = self._keys_of(rows)
                c, m = rows.stop - rows.start, keys.stop - keys.start
                t0 = rows.start - band_start
                into = band[t0 : t0 + c] if m == M else state.scores[: c * m].view(c, m)
                s = self._scores(rows, keys, h, out=into)
                p = torch.ops.aten._softmax.out(s, -1, False, out=s).numpy()
                if start == 0:
                    out.cls_row[h, keys] = p[0]
                chunks = 2 * kk  # a row's threshold: the kk-th largest maximum of 2 kk chunks
                maxima = state.maxima[: c * chunks].reshape(c, chunks)
                _kernels.stream_rows(p, p.view(np.int32), rows.start, keys.start, block, state.acc, out.received[h],
                                     out.sums[h], maxima, key_maxima, t0, band.numpy() if m != M else state.no_band,
                                     band_keys.start)
                if kk:
                    state.row_threshold[t0 : t0 + c] = np.partition(maxima, chunks - kk, axis=1)[:, chunks - kk]
            if kk:
                self._band_lists(band.numpy().view(np.int32), band_start, band_keys.start, key_maxima, state,
                                 out.attended[h, band_rows])
                if band_rows.stop - state.group_start >= _MERGE_ROWS or band_rows.stop == n:
                    state.merge(band_rows.stop)
        if kk:
            _kernels.key_lists(state.kept, state.count, out.attending[h])

    def _band_lists(self, bits: np.ndarray, band_start: int, key0: int, key_maxima: np.ndarray, state: "_HeadState",
                    attended: np.ndarray) -> None:
        """The band's rows' lists into `attended`; its keys' candidates added to those waiting to be merged."""
        kk, chunks, (R, M) = state.kk, key_maxima.shape[0], bits.shape
        row_threshold = np.maximum(state.row_threshold[:R], 1)  # float bits: 1 = positive values only
        key_threshold = np.maximum(state.floor[key0 : key0 + M] + 1, 1)  # above the kk-th best of earlier rows
        if chunks >= kk:
            by_key = np.ascontiguousarray(key_maxima.T)  # (keys, chunks): numpy partitions a contiguous row faster
            np.maximum(key_threshold, np.partition(by_key, chunks - kk, axis=1)[:, chunks - kk], out=key_threshold)
        col_bits = max(1, (self.n - 1).bit_length())
        t = 0
        while t < R:  # the buffers hold a band's candidates but for ties: then in parts, each exact
            first = t
            listed, found, t = _kernels.band_candidates(bits, key0, t, row_threshold, key_threshold, col_bits,
                                                        state.row_bits, state.keys, state.counts,
                                                        state.found[state.pending :], band_start - state.group_start)
            state.pending += found
            state.keys[:listed].sort()  # by row, value descending, position
            _kernels.first_of_rows(state.keys, state.counts[first:t], col_bits, attended[first:t])
            if t < R:  # no room for the next row's: merge those waiting, which raises the floors
                state.merge(band_start)
                np.maximum(key_threshold, state.floor[key0 : key0 + M] + 1, out=key_threshold)


@dataclass
class _Out:
    """What a pass fills, every head."""

    received: np.ndarray  # (heads, n) float64
    sums: np.ndarray  # (heads, g, g) float64
    cls_row: np.ndarray  # (heads, n) float32
    attended: np.ndarray  # (heads, n, k)
    attending: np.ndarray  # (heads, n, k)


class _HeadState:
    """One worker's buffers for a head's pass: a band of probabilities, computed in chunks of rows, with its
    rows' thresholds and its keys' maxima; the current query block's column sums; each key's best queries so
    far and their floor; a band's rows' candidates, and the keys' candidates since the last merge."""

    def __init__(self, n: int, kk: int, rows: int, band_rows: int):
        self.kk, self.rows, self.band_rows = kk, rows, band_rows
        self.band = torch.empty(band_rows * n)
        self.scores = torch.empty(rows * n)
        self.no_band = np.empty((0, 0), dtype=np.float32)
        self.acc = np.zeros(n)
        self.kept = np.zeros((n, kk), dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.floor = np.zeros(n, dtype=np.int32)
        # a band's candidates, or the keys' waiting, but for ties (else those waiting are merged early)
        room = (kk + 32) * max(band_rows, n) if kk else 0
        self.keys, self.found = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
        self.counts = np.empty(band_rows, dtype=np.int64)
        self.maxima = np.empty(rows * 2 * kk, dtype=np.int32)
        self.row_threshold = np.empty(band_rows, dtype=np.int32)
        self.key_maxima = np.empty(2 * kk * n, dtype=np.int32)
        # the keys' candidates waiting: queries from group_start, at most the first band's or _MERGE_ROWS and a
        # chunk's rows later (a key's candidate: key, value bits, query - group_start in row_bits)
        self.row_bits = max(1, (max(band_rows, _MERGE_ROWS + rows) - 1).bit_length())
        self.pending = self.group_start = 0

    def reset(self) -> None:
        self.acc[:] = 0.0
        self.count[:] = 0
        self.floor[:] = 0
        self.pending = self.group_start = 0

    def merge(self, next_start: int) -> None:
        """The keys' candidates waiting merged into their best queries (their floors rise); the next from query
        next_start."""
        self.found[: self.pending].sort()  # by key, value descending, query
        _kernels.merge_keys(self.found, self.pending, self.group_start, self.row_bits, self.kept, self.count,
                            self.floor)
        self.pending, self.group_start = 0, next_start


# ------------------------------------------------------------------ worker buffers across a document's passes
_SPARE: dict[tuple, list[_HeadState]] = {}  # buffers of passes that ended, by shape, while some caller keeps them
_KEEPERS = 0
_SPARE_LOCK = threading.Lock()


@contextmanager
def buffers_reused():
    """Within it, a pass's worker buffers serve the next pass of the same shape (a document's layers, one after
    another) instead of being freed and made again; all freed at the end. Each worker's are about 60 MiB at
    4,096-8,192 tokens, and their first writes cost page faults: 0.45-0.5 s of the kernel's time over a
    document's 8 full layers on this project's 2-core machine (docs/benchmarks.md)."""
    global _KEEPERS
    with _SPARE_LOCK:
        _KEEPERS += 1
    try:
        yield
    finally:
        with _SPARE_LOCK:
            _KEEPERS -= 1
            if not _KEEPERS:
                _SPARE.clear()


def _taken(shape: tuple) -> _HeadState:
    with _SPARE_LOCK:
        spare = _SPARE.get(shape)
        if spare:
            return spare.pop()
    return _HeadState(*shape)


def _given_back(shape: tuple, state: _HeadState) -> None:
    with _SPARE_LOCK:
        if _KEEPERS:
            _SPARE.setdefault(shape, []).append(state)


def rows_topk(values: np.ndarray, positions: np.ndarray, group: int, n: int, out: np.ndarray) -> None:
    """out[r, :kk] = the positions of row r's kk = min(k, width) largest positive entries of values (rows, width)
    float32, by value descending then position ascending (the views' order; out (rows, k) holds -1 beyond);
    entry x of row r is at position positions[r // group, x] (< n). Each row's threshold is the kk-th largest
    maximum of 2 kk interleaved chunks (every top-kk entry reaches it, and about kk + 20 entries do); those
    entries are sorted by key (row, value bits inverted, position), rows in batches."""
    R, W = values.shape
    kk = min(out.shape[1], W)
    if not (R and kk):
        return
    bits = values.view(np.int32)
    chunks = 2 * kk
    pos_bits = max(1, (n - 1).bit_length())
    # rows per batch: a multiple of the group, the keys of 4 M entries at most, the row's field within 63 bits
    step = max(group, min((1 << 22) // W, 1 << (32 - pos_bits)) // group * group)
    keys, counts = np.empty(min(step, R) * W, dtype=np.int64), np.empty(min(step, R), dtype=np.int64)
    for r0 in range(0, R, step):
        part = bits[r0 : r0 + step]
        if W > chunks:
            maxima = np.empty((len(part), chunks), dtype=np.int32)
            _kernels.row_maxima(part, maxima)
            threshold = np.maximum(np.partition(maxima, chunks - kk, axis=1)[:, chunks - kk], 1)
        else:  # every positive entry is a candidate
            threshold = np.ones(len(part), dtype=np.int32)
        found = _kernels.row_candidates(part, threshold, positions[r0 // group :], group, pos_bits, keys, counts)
        keys[:found].sort()
        _kernels.first_of_rows(keys, counts[: len(part)], pos_bits, out[r0 : r0 + step])


def _prefix(s: Summary, k: int) -> Summary:
    return Summary(s.received, s.cls_row, s.attended[..., :k], s.attending[..., :k], s.block, s.block_sums)
