"""BigBird's block-sparse attention as its layers apply it, kept per query block over that block's key blocks.

transformers' `BigBirdBlockSparseAttention` (5.x) runs on the input padded to N = nb * b tokens (b = block_size,
nb blocks) and attends, per head, from query block q to
  q = 0 and q = nb - 1 (the global queries):  every key;
  q = 1:                                      key blocks 0, 1, 2, nb - 1 and r random blocks R[h, 0];
  2 <= q <= nb - 3:                           key blocks 0, q - 1, q, q + 1, r random blocks R[h, q - 1], nb - 1;
  q = nb - 2:                                 key blocks 0, nb - 3, nb - 2, nb - 1 and R[h, nb - 3];
with one softmax over each query's list of (4 + r) * b or (5 + r) * b scores (scaled by 1 / sqrt(head_dim),
padding keys penalised by -10,000 as the module does: weight exactly 0 in float32). A block listed twice (a
random block equal to a global, sliding or other random block) is scored twice, so its keys enter the softmax
and the output twice: here the two probabilities are summed into one, and every row sums to 1 over distinct
keys. In eval mode transformers draws no random blocks: R is all zero, every random block is block 0, and the
middle queries give block 0 (1 + r) shares. R is read from the module's own call, whatever the mode.

transformers' `output_attentions` for this module are not these weights: it writes each part into one n x n
matrix, and the random blocks' probabilities overwrite the global block's (rows sum to as little as 0.25).

`BlockSparseLayer` holds the middle query blocks as (heads, nb - 2, b, S * b) probabilities over S <= 5 + r key
block slots with each slot's key block (slots left empty by every head and block dropped: S = 5 in eval mode),
and the first and last blocks' rows whole, cropped to the true length n: O(n * S * b) per head. Its one pass
(received attention, the CLS row, top-k both ways, pooled block sums) reads those blocks, plus the whole columns
of the two global key blocks: the sums in one compiled loop (`_kernels.grouped_sums`), each row's and each key's
top-k from the few entries above a threshold (`streamed.rows_topk`, exact, ties included); a row, column or
dense head is made on demand (`streamed.RowStreamed`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from ..errors import LongvizError
from . import _kernels
from .layered import LayeredAttention
from .streamed import RowStreamed, Summary, rows_topk

PENALTY = -10000.0  # transformers' attn_mask_penalty for padding keys


class BlockSparseError(LongvizError, RuntimeError):
    """BigBird's block-sparse attention did not run as longviz reads it (a changed transformers module)."""


@dataclass(frozen=True)
class BlockSparseLayer(RowStreamed):
    """One block-sparse layer's applied attention (module docstring)."""

    full: torch.Tensor  # (heads, f, n) float32 rows of query blocks 0 and nb - 1 in the document (f rows)
    middle: torch.Tensor  # (heads, nb - 2, b, S * b) float32 query block q + 1 over its S key block slots
    blocks: torch.Tensor  # (heads, nb - 2, S) int64 each slot's key block; -1: no block (merged or not listed)
    block_size: int
    length: int  # n, the true length (the model ran at nb * b)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        H, m, b, width = self.middle.shape
        if b != self.block_size or self.blocks.shape != (H, m, width // b) or self.full.shape != (
                H, b + self.length - (m + 1) * b, self.length) or not 0 < self.length - (m + 1) * b <= b:
            raise ValueError(f"inconsistent block-sparse layer: full {tuple(self.full.shape)}, middle "
                             f"{tuple(self.middle.shape)}, blocks {tuple(self.blocks.shape)}, n = {self.length}")

    @property
    def num_heads(self) -> int:
        return self.middle.shape[0]

    @property
    def n(self) -> int:
        return self.length

    @property
    def num_blocks(self) -> int:
        return self.middle.shape[1] + 2

    @property
    def nbytes(self) -> int:
        cached = sum(a.nbytes for s in self._cache.values() for a in vars(s).values() if isinstance(a, np.ndarray))
        return (self.full.numel() + self.middle.numel()) * 4 + self.blocks.numel() * 8 + cached

    def probs(self, rows: slice, heads=None) -> torch.Tensor:
        """Attention of the queries in `rows` over all keys, (heads, rows, n) float32, zeros where not attended."""
        hs = slice(None) if heads is None else heads
        a, z, _ = rows.indices(self.n)
        b, nb = self.block_size, self.num_blocks
        q0, q1 = a // b, -(-z // b)  # the query blocks the rows lie in
        full, middle, blocks = self.full[hs], self.middle[hs], self.blocks[hs]
        out = full.new_zeros((full.shape[0], (q1 - q0) * b, nb * b))  # (heads, whole blocks' rows, N)
        if q0 == 0:
            out[:, :b, : self.n] = full[:, :b]
        if q1 == nb:
            last = (nb - 1 - q0) * b
            out[:, last : last + full.shape[1] - b, : self.n] = full[:, b:]
        m0, m1 = max(q0, 1), min(q1, nb - 1)
        if m0 < m1:
            slots = blocks[:, m0 - 1 : m1 - 1]  # (heads, m, S)
            cols = (slots.clamp(min=0)[..., None] * b + torch.arange(b)).flatten(-2)  # (heads, m, S * b)
            dest = out[:, (m0 - q0) * b : (m1 - q0) * b].view(out.shape[0], m1 - m0, b, nb * b)
            # slots of no block hold zeros: adding them to block 0 changes nothing
            dest.scatter_add_(-1, cols[:, :, None, :].expand(-1, -1, b, -1), middle[:, m0 - 1 : m1 - 1])
        return out[:, a - q0 * b : z - q0 * b, : self.n]

    # ---- one pass over the stored blocks: O(n * S * b) per head, plus whole rows and columns of the global blocks
    def _pass(self, k: int, block: int) -> Summary:
        H, n, b, nb = self.num_heads, self.n, self.block_size, self.num_blocks
        m, width = nb - 2, self.middle.shape[-1]
        keys = (self.blocks.clamp(min=0)[..., None] * b + torch.arange(b)).view(H, m, width)  # each column's key
        rows = torch.cat([torch.arange(b), torch.arange((nb - 1) * b, n)])  # the whole rows' queries
        received = np.zeros((H, n))
        g = -(-n // block) if block else 0
        sums = np.zeros((H, g, g))
        every = np.arange(n)[None]  # the whole rows' keys
        acc = np.empty(max(n, width))
        for h in range(H):  # received attention and block sums: the whole rows, then the middle blocks' rows
            for part, query0 in ((self.full[h, :b], 0), (self.full[h, b:], (nb - 1) * b)):
                _kernels.grouped_sums(part.numpy(), every, len(part), query0, block, acc, received[h], sums[h])
            _kernels.grouped_sums(self.middle[h].view(m * b, width).numpy(), keys[h].numpy(), b, b, block, acc,
                                  received[h], sums[h])
        dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32  # positions and -1, as views.counts
        attended = attending = None
        if k:
            attended = np.full((H, n, k), -1, dtype=dtype)
            for h in range(H):  # the whole rows over every key; a middle row over its slots' keys (empty: 0)
                rows_topk(self.full[h, :b].numpy(), every, b, n, attended[h, :b])
                rows_topk(self.full[h, b:].numpy(), every, b, n, attended[h, (nb - 1) * b : n])
                rows_topk(self.middle[h].view(m * b, width).numpy(), keys[h].numpy(), b, n,
                          attended[h, b : (nb - 1) * b])
            attending = self._attending(k, keys, rows, dtype)
        return Summary(received.astype(np.float32), self.full[:, 0].numpy().copy(), attended, attending, block,
                       sums if block else None)

    def _attending(self, k: int, keys: torch.Tensor, rows: torch.Tensor, dtype) -> np.ndarray:
        """Each key's top-k queries: keys of the global blocks 0 and nb - 1 over every query (whole columns); the
        others over the whole rows' queries and the middle query blocks that list the key's block (3 sliding
        ones, and any random ones), gathered into (heads, key blocks, b, candidates)."""
        H, n, b, nb = self.num_heads, self.n, self.block_size, self.num_blocks
        out = np.full((H, n, k), -1, dtype=dtype)
        every = np.arange(n)[None]
        for part in (slice(0, b), slice((nb - 1) * b, n)):
            columns = self._columns(part).numpy()
            for h in range(H):
                rows_topk(columns[h], every, b, n, out[h, part])
        local = (self.blocks > 0) & (self.blocks < nb - 1)  # (H, m, S) slots of the other key blocks
        h, q, s = torch.nonzero(local, as_tuple=True)
        group = h * nb + self.blocks[h, q, s]  # (head, key block) of each reference; nonzero orders by h, q, s
        order = torch.argsort(group, stable=True)
        h, q, s, group = h[order], q[order], s[order], group[order]
        first = torch.searchsorted(group, group, side="left")
        rank = torch.arange(len(group)) - first  # its place among its key block's references
        C = int(rank.max()) + 1 if len(rank) else 0
        mid = self.middle.view(H, nb - 2, b, -1, b)
        cand = self.full.new_zeros((H, nb, C, b, b))  # (head, key block, reference, query in block, key in block)
        cand[h, self.blocks[h, q, s], rank] = mid[h, q, :, s, :]
        who = torch.full((H, nb, C), -1, dtype=torch.long)
        who[h, self.blocks[h, q, s], rank] = q + 1
        cand = cand[:, 1:-1].permute(0, 1, 4, 2, 3).reshape(H, nb - 2, b, C * b)  # (H, key blocks, key, C b)
        whole = self.full[:, :, b : (nb - 1) * b].transpose(1, 2).reshape(H, nb - 2, b, -1)  # the whole rows
        values = torch.cat([cand, whole], dim=-1)  # empty references hold 0: never listed
        # candidate i of key block c: query who[c, i // b] * b + i % b, then the whole rows' queries
        queries = torch.cat([(who[:, 1:-1, :, None] * b + torch.arange(b)).flatten(-2),
                             rows.expand(H, nb - 2, -1)], dim=-1)  # (H, key blocks, C b + whole rows)
        for h in range(H):
            rows_topk(values[h].reshape((nb - 2) * b, -1).numpy(), queries[h].numpy(), b, n,
                      out[h, b : (nb - 1) * b])
        return out

    def _columns(self, keys: slice) -> torch.Tensor:
        """(heads, keys, n): the attention every query gives the keys in `keys`, whole columns."""
        a, z, _ = keys.indices(self.n)
        b, nb, H, n = self.block_size, self.num_blocks, self.num_heads, self.n
        k0, k1 = a // b, -(-z // b)
        out = self.full.new_zeros((H, (k1 - k0) * b, nb * b))  # (heads, whole blocks' keys, N queries)
        hi = min(k1 * b, n)
        out[:, : hi - k0 * b, :b] = self.full[:, :b, k0 * b : hi].transpose(1, 2)
        out[:, : hi - k0 * b, (nb - 1) * b : n] = self.full[:, b:, k0 * b : hi].transpose(1, 2)
        h, q, s = torch.nonzero((self.blocks >= k0) & (self.blocks < k1), as_tuple=True)
        if len(h):  # each (head, query block, key block) once: duplicates were merged
            values = self.middle.view(H, nb - 2, b, -1, b)[h, q, :, s, :]  # (found, query in block, key in block)
            dest = out.view(H, k1 - k0, b, nb, b)
            dest[h, self.blocks[h, q, s] - k0, :, q + 1, :] = values.transpose(1, 2)
        return out[:, a - k0 * b : z - k0 * b, :n]


def block_sparse_layer(query: torch.Tensor, key: torch.Tensor, random: torch.Tensor, to_mask: torch.Tensor,
                       block_size: int, n: int) -> BlockSparseLayer:
    """The applied attention of one layer from its queries and keys (heads, N, d), the random blocks R it drew
    (heads, nb - 2, r), its key mask (N,) (1 = token, 0 = padding) and the true length n."""
    query, key, random, to_mask = (t.detach().cpu() for t in (query, key, random, to_mask))
    H, N, d = query.shape
    b, nb = block_size, N // block_size
    scaling = 1.0 / float(np.sqrt(d))
    penalty = (1.0 - to_mask.float()) * PENALTY  # (N,)
    rows = torch.cat([torch.arange(b), torch.arange((nb - 1) * b, n)])
    full = torch.softmax(torch.matmul(query[:, rows], key.transpose(-1, -2)) * scaling + penalty, dim=-1)[..., :n]

    q = torch.arange(1, nb - 1)  # the middle query blocks
    structural = torch.stack([torch.zeros_like(q), q - 1, q, q + 1, torch.full_like(q, nb - 1)], dim=-1)
    structural[0, 1] = structural[-1, 3] = -1  # block 1's left and block nb-2's right neighbours are global: once
    slots = torch.cat([structural.expand(H, -1, -1), random.long()], dim=-1)  # (H, nb - 2, S)
    S, m = slots.shape[-1], nb - 2
    keys = key.view(H, nb, b, d)[torch.arange(H)[:, None, None], slots.clamp(min=0)]  # (H, m, S, b, d)
    scores = torch.matmul(query.view(H, nb, b, d)[:, 1:-1], keys.view(H, m, S * b, d).transpose(-1, -2))
    scores = scores.mul_(scaling).view(H, m, b, S, b)  # (H, m, query in block, slot, key in block)
    scores.add_(penalty.view(nb, b)[slots.clamp(min=0)][:, :, None])
    scores.masked_fill_((slots < 0)[:, :, None, :, None], float("-inf"))
    p = torch.softmax(scores.view(H, m, b, S * b), dim=-1).view(H, m, b, S, b)
    # a block listed again: its probabilities added to the block's first slot, the later slot emptied
    same = (slots[..., :, None] == slots[..., None, :]) & (slots[..., None, :] >= 0)  # (H, m, S, S): t, s
    first = torch.where(same.any(dim=-1), same.int().argmax(dim=-1), torch.arange(S))  # (H, m, S)
    if (first != torch.arange(S)).any():
        p = torch.zeros_like(p).scatter_add_(3, first[:, :, None, :, None].expand(-1, -1, b, -1, b), p)
        slots = torch.where(first == torch.arange(S), slots, -1)
    used = (slots >= 0).any(dim=0).any(dim=0)  # slots no head and no block uses (in eval mode the r random ones)
    p, slots = p[:, :, :, used], slots[..., used]
    return BlockSparseLayer(full.contiguous(), p.reshape(H, nb - 2, b, -1).contiguous(), slots, b, n)


def analyze_block_sparse(model, inputs: dict, n: int) -> tuple:
    """Run `model(**inputs)` once (a LoadedModel, batch of one, n tokens, block-sparse) and return (its output,
    LayeredAttention of BlockSparseLayer). Each attention module's call is watched: its input hidden states give
    Q and K through its own projections, its key mask comes as it is passed, and its random blocks are read from
    its own call of `_create_rand_mask_from_inputs`; all restored in `finally`."""
    net, family = model.model, model.family
    drawn: dict[int, torch.Tensor] = {}
    layers: dict[int, BlockSparseLayer] = {}

    def spy(layer, original, from_blocked, to_blocked, rand_attn, *rest):
        drawn[layer] = rand_attn[0].detach().clone()  # (heads, nb - 2, r)
        return original(from_blocked, to_blocked, rand_attn, *rest)

    def keep(layer, module, args, _out):
        hidden, to_mask = args[0], args[3]
        H, dh = module.num_attention_heads, module.attention_head_size
        heads = lambda t: t[0].view(-1, H, dh).transpose(0, 1).float().contiguous()  # noqa: E731  (H, N, d)
        if layer not in drawn:
            raise BlockSparseError(f"layer {layer}: its random blocks were not seen (transformers' BigBird changed?)")
        layers[layer] = block_sparse_layer(heads(module.query(hidden)), heads(module.key(hidden)), drawn.pop(layer),
                                           to_mask.reshape(-1), module.block_size, n)

    with family.running(net, n):
        modules = family.attention_modules(net)
        handles = []
        try:
            for l, module in enumerate(modules):
                if not hasattr(type(module), "_create_rand_mask_from_inputs"):
                    raise BlockSparseError(f"layer {l} runs {type(module).__name__}, not block-sparse attention")
                module._create_rand_mask_from_inputs = partial(spy, l, type(module)._create_rand_mask_from_inputs)
                handles.append(module.register_forward_hook(partial(keep, l)))
            out = model(**inputs)
        finally:
            for h in handles:
                h.remove()
            for module in modules:
                module.__dict__.pop("_create_rand_mask_from_inputs", None)
    if len(layers) != len(modules):
        raise BlockSparseError(f"saw block-sparse attention in {len(layers)} of the model's {len(modules)} layers")
    return out, LayeredAttention(tuple(layers[l] for l in range(len(modules))))
