"""One forward of a non-Longformer encoder with each layer's attention kept by its pattern: banded or streamed.

transformers 5 returns attention weights only from its eager implementation, and then as n x n for every layer
(sliding layers included, zeros outside the window). Instead a longviz attention function is registered with
`AttentionInterface` (and sdpa's mask builder, run on chunks of rows, under the same name with `AttentionMaskInterface`): it calls
sdpa for the layer's output, so the model computes what it computes under sdpa (a sliding layer's sdpa on
chunks of rows and the keys their window reaches), and hands each layer's queries and keys (after RoPE) and its
mask to a sink. The sink keeps
- a *banded* layer (ModernBERT's sliding layers, radius r = local_attention // 2) as its band, (heads, n,
  2r+1): softmax over the keys |i - j| <= r inside the document, computed from Q and K in chunks of rows;
- a *full* layer (ModernBERT's global layers, BERT / RoBERTa / EuroBERT / GTE) as a `StreamedLayer` (Q, K).
The layer's pattern comes from the model family (`model/families.py`); the sink checks that the mask the model built for the
layer allows exactly that pattern, so a config read wrongly fails loudly instead of giving other weights.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import torch

from ..errors import LongvizError
from .bands import AttentionBands
from .layered import LayeredAttention
from .streamed import StreamedLayer

IMPLEMENTATION = "longviz"
_ROWS = 256  # query rows per chunk of a banded layer
_MASK_ROWS = 1024  # query rows per chunk of the mask


class AttentionPatternError(LongvizError, RuntimeError):
    """The model attends in another pattern than its config names (or through a path longviz cannot see)."""


def analyze_layers(model, inputs: dict, radii) -> tuple:
    """Run `model(**inputs)` once (a LoadedModel, batch of one) and return (its output, LayeredAttention); `radii`
    gives each layer's one-sided radius r (banded) or None (full), from the model family's patterns."""
    patterns, num_layers = list(radii), len(radii)
    layers: list = []

    def sink(module, query, key, mask, scaling):
        if len(layers) >= num_layers:
            raise AttentionPatternError(f"the model called attention more than its {num_layers} layers")
        r = patterns[len(layers)]
        q, k = query[0].detach().float().contiguous(), key[0].detach().float().contiguous()  # (heads, n, d)
        scaling = float(scaling if scaling is not None else q.shape[-1] ** -0.5)
        _check_mask(mask, q.shape[1], r, len(layers))
        layers.append(StreamedLayer(q, k, scaling) if r is None else band_of(q, k, scaling, r))
        return r

    with _capturing(model.model, sink):
        out = model(**inputs)
    if len(layers) != num_layers:
        raise AttentionPatternError(f"saw attention in {len(layers)} of the model's {num_layers} layers: this "
                                    "model computes attention outside transformers' attention interface.")
    return out, LayeredAttention(tuple(layers))


def band_of(q: torch.Tensor, k: torch.Tensor, scaling: float, r: int) -> AttentionBands:
    """A sliding layer's attention as a one-layer band (1, heads, n, 2r+1): query i over keys i - r .. i + r
    inside the document, exact float32 softmax; column c is key i - r + c (the bands' layout)."""
    H, n, d = q.shape
    width = 2 * r + 1
    local = np.zeros((1, H, n, width), dtype=np.float32)  # (1, heads, n, 2r+1)
    padded = torch.zeros((H, n + 2 * r, d), dtype=q.dtype)
    padded[:, r : r + n] = k  # key j at j + r
    inside = torch.zeros(n + 2 * r, dtype=torch.bool)
    inside[r : r + n] = True
    for a in range(0, n, _ROWS):
        b = min(a + _ROWS, n)
        scores = torch.matmul(q[:, a:b], padded[:, a : b + 2 * r].transpose(-1, -2)) * scaling  # (H, c, c+2r)
        scores = scores.masked_fill(~inside[a : b + 2 * r], float("-inf"))
        s0, s1, s2 = scores.stride()
        band = scores.as_strided((H, b - a, width), (s0, s1 + s2, s2))  # row t, column c = key a + t - r + c
        local[0, :, a:b] = torch.softmax(band, dim=-1, dtype=torch.float32).numpy()
    empty_c, empty_r = np.zeros((1, H, n, 0), np.float32), np.zeros((1, H, 0, n), np.float32)
    return AttentionBands(local, empty_c, empty_r, np.zeros(0, dtype=np.int64), r, (r,))


def _check_mask(mask, n: int, r: int | None, layer: int) -> None:
    """The model's mask for this layer (bool, True = attend, or None = all) must allow exactly the pattern."""
    if mask is None:
        allowed = n * n
    else:
        m = mask[0, 0] if mask.dim() == 4 else mask
        allowed = int(torch.count_nonzero(m)) if m.dtype == torch.bool else int(torch.count_nonzero(m == 0))
        if m.shape[-2:] != (n, n):
            raise AttentionPatternError(f"layer {layer}: a mask of shape {tuple(m.shape)} for {n} tokens")
    if r is None or r >= n - 1:
        expected = n * n
    else:
        i = np.arange(n)
        expected = int((np.minimum(n, i + r + 1) - np.maximum(0, i - r)).sum())
    if allowed != expected:
        what = "full attention" if r is None else f"a sliding window of radius {r}"
        raise AttentionPatternError(f"layer {layer}: the config names {what} ({expected} query-key pairs), but the "
                                    f"model's mask allows {allowed}: longviz cannot show this layer's attention.")


# ---------------------------------------------------------------------------------------------- plumbing
_LOCAL = threading.local()


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' sdpa attention for the output; queries, keys and mask to the current sink first, which
    answers the layer's radius (None: full). A banded layer's sdpa runs on chunks of query rows with the keys
    and mask columns that the chunk's window reaches: the keys left out are masked for those rows, so every
    row's softmax and output are the ones sdpa computes on the whole, without sdpa's (heads, n, n) scores."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    sink = getattr(_LOCAL, "sink", None)
    r = sink(module, query, key, attention_mask, scaling) if sink is not None else None
    n = query.shape[-2]
    if r is None or attention_mask is None or n <= _ROWS:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    parts = []
    for a in range(0, n, _ROWS):
        b = min(a + _ROWS, n)
        lo, hi = max(0, a - r), min(n, b + r)
        parts.append(sdpa_attention_forward(module, query[..., a:b, :], key[..., lo:hi, :], value[..., lo:hi, :],
                                            attention_mask[..., a:b, lo:hi], dropout=dropout, scaling=scaling,
                                            **kwargs)[0])  # (1, rows, heads, d)
    return torch.cat(parts, dim=1), None


def _mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, **kwargs):
    """transformers' sdpa mask, built for chunks of query rows: on the whole it broadcasts int64 index tensors
    of n x n (1 GiB at 8,192 tokens for a sliding window) to give an n x n bool mask (64 MiB)."""
    from transformers.masking_utils import sdpa_mask

    parts = [sdpa_mask(batch_size, min(_MASK_ROWS, q_length - a), kv_length, q_offset=q_offset + a, **kwargs)
             for a in range(0, q_length, _MASK_ROWS)]
    if all(p is None for p in parts):
        return None  # full attention without padding: sdpa needs no mask
    full = torch.ones((batch_size, 1, 1, kv_length), dtype=torch.bool)
    return torch.cat([full.expand(-1, -1, min(_MASK_ROWS, q_length - i * _MASK_ROWS), -1) if p is None else p
                      for i, p in enumerate(parts)], dim=2)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, _attention)
    AttentionMaskInterface.register(IMPLEMENTATION, _mask)


@contextmanager
def _capturing(model: torch.nn.Module, sink):
    """The model runs through longviz's attention with `sink` receiving each layer; restored in `finally`."""
    _register()
    config = model.config
    before = config._attn_implementation
    _LOCAL.sink = sink
    config._attn_implementation = IMPLEMENTATION
    try:
        yield
    finally:
        config._attn_implementation = before
        _LOCAL.sink = None
