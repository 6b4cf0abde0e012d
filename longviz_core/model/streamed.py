"""A full-attention layer kept as its queries and keys; every view streamed from them in chunks of query rows.

A full layer's attention is softmax(Q K^T * scaling) row by row over all n keys (`capture` takes Q and K after
RoPE from the model's own attention call). Storing it would take heads x n x n floats per layer (22 x 12 x
8,192^2 x 4 B = 71 GB for ModernBERT-base at 8,192 tokens), so this layer keeps Q and K, (heads, n, d), and
computes what the views read in passes over chunks of query rows: each chunk's scores are a (heads, rows, n)
matrix whose exact float32 softmax (max subtracted, as eager attention computes it) lives only while the chunk
is read. One pass (`summary`) gives per head the attention every key receives (column sums), the CLS row,
each query's top-k keys and the block sums the heatmap grid pools; each key's top-k queries (Algorithm 3
needs them beside Algorithm 1's) come from a second pass over chunks of keys, K Q^T with each query's
log-sum-exp from the first, so that a key's column is contiguous (exp(score - lse): the same softmax, rounded
in another order, to a few ulp); any single row, column or dense head is computed on demand. Memory: Q and K plus
O(heads * n * k) for the lists, and one chunk. Rows, columns and dense heads on demand and the cached summary
(`RowStreamed`) serve BigBird's block-sparse layers too (`block_sparse.BlockSparseLayer`, with a pass of its own).

A decoder's layer (`causal`) is the same with query i over keys j <= i (and j >= i - reach for a sliding layer):
each chunk of rows scores only the keys its rows reach and the rest is zero, so a causal pass costs half a full
one and a sliding pass a band's. Grouped-query attention keeps the keys as they come, (key/value heads, n, d):
query head h scores against key head h // (heads / key/value heads) through a broadcast matmul, never a copy of K
per query head. A soft-capped layer (Gemma 2) caps the scaled scores, cap * tanh(s / cap), before the mask and
the softmax, as the model's attention does.

Top-k order is the views' (`views.counts`): value descending, ties to the lower position, positive values
only, -1 padded. A tie exactly at the k-th place is resolved by `torch.topk`, which may keep either of the
tied positions; with float32 softmax values such ties have probability ~0 except for exact zeros (excluded).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

_CHUNK_BYTES = 48 << 20  # one chunk's (heads, rows, n) float32 probabilities
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
        ask by default too (k = DEFAULT_K, the DEFAULT_GRID grid's blocks), so that one row pass and one key
        pass serve every view of a document; other k or grids take passes of their own. Cached."""
        for (ck, cb), s in self._cache.items():
            if ck >= k and (block == 0 or cb == block):
                return s if ck == k or k == 0 else _prefix(s, k)
        want = (max(k, DEFAULT_K), block or -(-self.n // DEFAULT_GRID)) if not self._cache else (k, block)
        self._cache[want] = self._pass(*want)
        return self.summary(k, block)

    def _chunks(self, heads: int, multiple: int = 1):
        """Slices of query rows, each about _CHUNK_BYTES of (heads, rows, n) float32, a multiple of `multiple`."""
        rows = max(1, _CHUNK_BYTES // (4 * heads * self.n) // multiple) * multiple
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

    def _queries_of(self, keys: slice) -> slice:
        """The queries that can attend to the keys in `keys`."""
        if not self.causal:
            return slice(0, self.n)
        return slice(keys.start, min(self.n, keys.stop + self.reach) if self.reach else self.n)

    def _allowed(self, rows: slice, keys: slice) -> torch.Tensor | None:
        """(rows, keys) bool: which pairs the layer allows (None: all)."""
        if not self.causal:
            return None
        i = torch.arange(rows.start, rows.stop)[:, None]
        j = torch.arange(keys.start, keys.stop)[None, :]
        ok = j <= i
        return ok & (j >= i - self.reach) if self.reach else ok

    def _scores(self, rows: slice, keys: slice, heads=None, transpose: bool = False) -> torch.Tensor:
        """Scaled (capped) scores of queries `rows` against keys `keys`, (heads, rows, keys) float32, -inf where the
        layer does not allow the pair; (heads, keys, rows) with `transpose`. `heads`: a list of query heads or None."""
        if heads is None:
            kv, g = self.key.shape[0], self.group
            q = self.query[:, rows].reshape(kv, g, -1, self.query.shape[-1])  # (kv, g, rows, d)
            k = self.key[:, keys].unsqueeze(1)  # (kv, 1, keys, d)
            s = (torch.matmul(k, q.transpose(-1, -2)) if transpose else torch.matmul(q, k.transpose(-1, -2)))
            s = s.reshape(self.num_heads, *s.shape[2:])  # (heads, rows, keys) or (heads, keys, rows)
        else:
            q = self.query[heads, rows]
            k = self.key[[h // self.group for h in heads], keys]
            s = torch.matmul(k, q.transpose(-1, -2)) if transpose else torch.matmul(q, k.transpose(-1, -2))
        s.mul_(self.scaling)  # in place: at 32,768 tokens each copy of a chunk is 48 MiB
        if self.softcap is not None:
            s.div_(self.softcap).tanh_().mul_(self.softcap)
        ok = self._allowed(rows, keys)
        if ok is not None:
            s.masked_fill_(~(ok.T if transpose else ok), float("-inf"))
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
        H, n = self.num_heads, self.n
        kk = min(k, n)
        received = torch.zeros((H, n), dtype=torch.float64)
        lse = torch.empty((H, n)) if kk else None  # each query's log-sum-exp of its scores, for the key side
        cls_row = None
        g = -(-n // block) if block else 0
        sums = torch.zeros((H, g, g), dtype=torch.float64) if block else None
        dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32  # positions and -1, as views.counts
        attended = np.full((H, n, k), -1, dtype=dtype) if k else None
        for rows in self._chunks(H, multiple=max(block, 1)):
            keys = self._keys_of(rows)
            p = self._scores(rows, keys)  # (H, c, m) scores
            top = p.amax(dim=-1, keepdim=True)
            z = p.sub_(top).exp_().sum(dim=-1, keepdim=True)
            p.div_(z)  # the softmax, in place; its log-sum-exp is top + log z
            c, m = p.shape[1], p.shape[2]
            received[:, keys] += p.sum(dim=1)  # float32 over the chunk's rows, float64 across chunks
            if rows.start == 0:
                cls_row = np.zeros((H, n), dtype=np.float32)
                cls_row[:, keys] = p[:, 0].numpy()
            if kk:
                lse[:, rows] = (top + torch.log(z))[..., 0]
                v, i = torch.topk(p, min(kk, m), dim=-1)  # (H, c, <= kk)
                attended[:, rows, : i.shape[-1]] = ordered_topk(v, i + keys.start).numpy()
            if block:
                a0, rb = rows.start // block, -(-c // block)
                if c % block or m != g * block:  # the last rows, or keys short of whole blocks: pad
                    padded = p.new_zeros((H, rb * block, g * block))
                    padded[:, :c, keys] = p
                    p = padded
                sums[:, a0 : a0 + rb] += p.view(H, rb, block, g, block).sum(dim=(2, 4))
        attending = None
        if kk:  # a second pass over chunks of keys: column j of the attention is exp(score - lse) of its queries
            attending = np.full((H, n, k), -1, dtype=dtype)
            for keys in self._chunks(H):
                queries = self._queries_of(keys)
                # (H, keys, queries): key j's attention from each query
                pt = self._scores(queries, keys, transpose=True).sub_(lse[:, None, queries]).exp_()
                v, i = torch.topk(pt, min(kk, pt.shape[-1]), dim=-1)
                attending[:, keys, : i.shape[-1]] = ordered_topk(v, i + queries.start).numpy()
        return Summary(received.float().numpy(), cls_row, attended, attending, block,
                       None if sums is None else sums.numpy())


def ordered_topk(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(..., k) positions by value descending then position ascending; -1 where the value is not positive."""
    idx_sorted, order = torch.sort(idx, dim=-1, stable=True)
    vals = torch.gather(values, -1, order)
    _, order = torch.sort(-vals, dim=-1, stable=True)
    idx_sorted, vals = torch.gather(idx_sorted, -1, order), torch.gather(vals, -1, order)
    return torch.where(vals > 0, idx_sorted, -1).to(torch.int32)


def _prefix(s: Summary, k: int) -> Summary:
    return Summary(s.received, s.cls_row, s.attended[..., :k], s.attending[..., :k], s.block, s.block_sums)
