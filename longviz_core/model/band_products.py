"""Longformer's sliding-window products computed block by block, instead of transformers' overlapping chunks.

transformers' `LongformerSelfAttention` computes the windowed scores q_i . k_(i-w+c) (c = 0 .. 2w) on chunks of 2w
queries against 2w keys that overlap by w (Beltagy et al., 2020, sliding chunks): every in-window score is
computed twice, and the band is then cut out through a pad, a transposed view, a zeroed (n, 2w+1) tensor, four
sliced copies and a second full-size pass that writes -inf at the document's ends. Here each block of w queries
meets its 3w keys once (one batched matmul), the band is one strided view of that, and the ends are two masked
fills of w x w corners. The weights-times-values product places each row's 2w+1 weights as transformers does,
in a zeroed (w, 3w) block per w rows, and multiplies it with the same 3w values, so that product has transformers'
own shapes.

Every score and every output is the same dot product over the same terms; on the development machine (Intel Xeon,
torch 2.13's CPU BLAS) both products, the logits, hidden states and attention weights came out bit for bit equal
to transformers', and a forward of the demo's Longformer at 2,597 tokens took 0.92 x its time
(benchmarks/longformer_mask.py). A BLAS that orders a dot product's terms by the matrix's shape may round them
differently: tests/unit/test_band_products.py bounds the difference by float32's dot-product error instead."""
from __future__ import annotations

import types

import torch
from torch import nn


def use_band_products(model: nn.Module) -> None:
    """Every Longformer self-attention module of `model` computes its window products block by block."""
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    for module in model.modules():
        if isinstance(module, LongformerSelfAttention):
            module._sliding_chunks_query_key_matmul = types.MethodType(window_scores, module)
            module._sliding_chunks_matmul_attn_probs_value = types.MethodType(window_values, module)


def _blocks(x: torch.Tensor, w: int, pad_value: float) -> torch.Tensor:
    """(batch, n, heads, d) -> (batch * heads, n // w, 3w, d): block t holds rows t*w - w .. t*w + 2w - 1 of `x`
    padded with `pad_value` by w rows at both ends (a strided view: no copy of the blocks' overlap)."""
    B, n, H, d = x.shape
    padded = nn.functional.pad(x.transpose(1, 2).reshape(B * H, n, d), (0, 0, w, w), value=pad_value)  # (BH, n+2w, d)
    s0, s1, s2 = padded.stride()
    return padded.as_strided((B * H, n // w, 3 * w, d), (s0, w * s1, s1, s2))


def diagonal_band(x: torch.Tensor, width: int) -> torch.Tensor:
    """(..., rows, cols) -> the view (..., rows, width) whose row t is columns t .. t + width - 1 of row t: a
    window's band read off scores of consecutive queries against keys that start `width // 2` before the first."""
    *lead, rows_stride, col_stride = x.stride()
    return x.as_strided((*x.shape[:-1], width), (*lead, rows_stride + col_stride, col_stride))


def _start(w: int, device) -> torch.Tensor:
    """(w, w) bool: query r's columns c < w - r, whose keys r - w + c lie before the document."""
    r = torch.arange(w, device=device)[:, None]
    return torch.arange(w, device=device)[None, :] < w - r


def window_scores(self, query: torch.Tensor, key: torch.Tensor, window_overlap: int) -> torch.Tensor:
    """transformers' `_sliding_chunks_query_key_matmul`: (batch, n, heads, 2w+1), column c of row i is
    q_i . k_(i-w+c), -inf where i - w + c is outside the document; n a multiple of 2w."""
    B, n, H, d = query.shape
    w = window_overlap
    if n % (2 * w) or key.shape != query.shape:
        raise ValueError(f"window products need equal shapes and a length that is a multiple of {2 * w}")
    q = query.transpose(1, 2).reshape(B * H, n // w, w, d)  # (BH, nb, w, d)
    scores = torch.matmul(q, _blocks(key, w, 0.0).transpose(-1, -2))  # (BH, nb, w, 3w)
    out = diagonal_band(scores, 2 * w + 1).reshape(B, H, n, 2 * w + 1)  # a copy: (B, H, n, 2w+1)
    start = _start(w, out.device)
    out[:, :, :w, :w].masked_fill_(start, -float("inf"))
    out[:, :, n - w:, w + 1:].masked_fill_(start.flip(0, 1), -float("inf"))  # keys past the end
    return out.transpose(1, 2)  # (B, n, H, 2w+1)


def window_values(self, attn_probs: torch.Tensor, value: torch.Tensor, window_overlap: int) -> torch.Tensor:
    """transformers' `_sliding_chunks_matmul_attn_probs_value`: (batch, n, heads, d), row i is
    sum_c p[i, c] v_(i-w+c). The values outside the document are padded with -1, as transformers pads them:
    their weights are 0."""
    B, n, H, d = value.shape
    w = window_overlap
    if n % (2 * w) or attn_probs.shape != (B, n, H, 2 * w + 1):
        raise ValueError(f"window products need weights (batch, n, heads, {2 * w + 1}) for values {tuple(value.shape)}")
    probs = attn_probs.transpose(1, 2).reshape(B * H, n // w, w, 2 * w + 1)  # (BH, nb, w, 2w+1)
    dense = probs.new_zeros((B * H, n // w, w, 3 * w))  # (BH, nb, w, 3w)
    diagonal_band(dense, 2 * w + 1).copy_(probs)
    context = torch.matmul(dense, _blocks(value, w, -1.0))  # (BH, nb, w, d)
    return context.view(B, H, n, d).transpose(1, 2)  # (B, n, H, d)
