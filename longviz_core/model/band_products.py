"""Longformer's sliding-window products computed block by block, instead of transformers' overlapping chunks.

transformers' `LongformerSelfAttention` computes the windowed scores q_i . k_(i-w+c) (c = 0 .. 2w) on chunks of 2w
queries against 2w keys that overlap by w (Beltagy et al., 2020, sliding chunks): every in-window score is
computed twice, and the band is then cut out through a pad, a transposed view, a zeroed (n, 2w+1) tensor, four
sliced copies and a second full-size pass that writes -inf at the document's ends. Here each block of w queries
meets its 3w keys once, the band is one strided view of that, and the ends are two masked fills of w x w corners.
The weights-times-values product places each row's 2w+1 weights as transformers does, in a zeroed (w, 3w) block
per w rows, and multiplies it with the same 3w values.

The keys (values) are copied once into one buffer, each head's rows padded by w before and after (`_blocks`), so
that block after block starts w rows further on whatever the head: the overlapping (3w, d) blocks are then a
strided view that one batched matmul reads in place, where a view per head would have to be copied out (three
times the keys' size) before the matmul.

Every score and every output is the same dot product over the same terms; on the development machine (Intel Xeon,
torch 2.13's CPU BLAS) both products, the logits, hidden states and attention weights came out bit for bit equal
to transformers', and a forward of the demo's Longformer at 2,597 tokens took 0.90 x its time, a forward and
backward (IG's step) 0.71-0.79 x (benchmarks/longformer_mask.py; docs/benchmarks.md). A BLAS that orders a dot
product's terms by the matrix's shape may round them differently: tests/unit/test_band_products.py bounds the
difference by float32's dot-product error instead; the gradients, added back in another order than autograd's,
agree in float64 to 1e-12."""
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
    """(batch, n, heads, d) -> the ((U + 2) w, d) buffer whose rows u*w .. u*w + 3w - 1 are block u, U = batch *
    heads * (n // w + 2): block u = (b * heads + h) * (n // w + 2) + t holds rows t*w - w .. t*w + 2w - 1 of head h
    of batch b, padded with `pad_value` by w rows at both ends. The heads lie one after another, w pad rows before
    and after each, so every block starts w rows after the one before: the blocks are one strided view with a
    uniform stride, which a batched matmul reads in place (their overlap included). Blocks t = n // w and
    n // w + 1 of a head are fillers: they run into the next head (the last head's into the 2w rows at the end),
    and their products are dropped."""
    B, n, H, d = x.shape
    nb = n // w
    buf = x.new_empty(((B * H * (nb + 2) + 2) * w, d))  # (rows, d)
    heads = buf[: B * H * (nb + 2) * w].view(B, H, nb + 2, w, d)
    heads[:, :, 0].fill_(pad_value)
    heads[:, :, nb + 1].fill_(pad_value)
    heads[:, :, 1 : nb + 1].copy_(x.unflatten(1, (nb, w)).permute(0, 3, 1, 2, 4))  # (B, H, nb, w, d): one copy
    buf[B * H * (nb + 2) * w :].fill_(pad_value)
    return buf


class _TimesBlocks(torch.autograd.Function):
    """a @ blocks (a: (U, w, 3w)) or, transposed, a @ blocks^T (a: (U, w, d)), the blocks the overlapping (U, 3w, d)
    view of a _blocks buffer. The gradient of the buffer adds each block's three w-row parts to the rows they came
    from (three strided adds), where autograd's own way back through an overlapping view scatters every element
    with index_add into a copy of the whole storage."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, buf: torch.Tensor, w: int, transposed: bool) -> torch.Tensor:
        ctx.save_for_backward(a, buf)
        ctx.w, ctx.transposed = w, transposed
        blocks = _view(buf, a.shape[0], w)  # (U, 3w, d)
        return torch.bmm(a, blocks.transpose(1, 2) if transposed else blocks)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, buf = ctx.saved_tensors
        U, w = a.shape[0], ctx.w
        blocks = _view(buf, U, w)
        if ctx.transposed:  # out = a blocks^T: (U, w, 3w)
            grad_a = torch.bmm(grad, blocks) if ctx.needs_input_grad[0] else None
            grad_blocks = torch.bmm(grad.transpose(1, 2), a) if ctx.needs_input_grad[1] else None  # (U, 3w, d)
        else:  # out = a blocks: (U, w, d)
            grad_a = torch.bmm(grad, blocks.transpose(1, 2)) if ctx.needs_input_grad[0] else None
            grad_blocks = torch.bmm(a.transpose(1, 2), grad) if ctx.needs_input_grad[1] else None  # (U, 3w, d)
        grad_buf = None
        if grad_blocks is not None:
            grad_buf = torch.zeros_like(buf)
            rows = grad_buf.view(U + 2, w, -1)  # the buffer in blocks of w rows
            for s in range(3):  # block u's rows s*w .. s*w + w - 1 are the buffer's block u + s
                rows[s : s + U] += grad_blocks[:, s * w : (s + 1) * w]
        return grad_a, grad_buf, None, None


def _view(buf: torch.Tensor, U: int, w: int) -> torch.Tensor:
    """The U overlapping (3w, d) blocks of a _blocks buffer, one strided view."""
    d = buf.shape[1]
    return buf.as_strided((U, 3 * w, d), (w * d, d, 1))


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
    nb = n // w
    U = B * H * (nb + 2)
    # the queries laid out as the keys, one block on: block u holds the w queries of key block u (a filler's are
    # padding, 0, so that their dropped products carry no NaN back)
    q = _blocks(query, w, 0.0)[w : (U + 1) * w].view(U, w, d)
    scores = _TimesBlocks.apply(q, _blocks(key, w, 0.0), w, True)  # (U, w, 3w)
    scores = scores.view(B, H, nb + 2, w, 3 * w)[:, :, :nb]  # (B, H, nb, w, 3w): the fillers dropped
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
    nb = n // w
    dense = attn_probs.new_zeros((B, H, nb + 2, w, 3 * w))  # each block's weights over its 3w values
    diagonal_band(dense[:, :, :nb], 2 * w + 1).copy_(attn_probs.transpose(1, 2).unflatten(2, (nb, w)))
    context = _TimesBlocks.apply(dense.view(-1, w, 3 * w), _blocks(value, w, -1.0), w, False)  # (U, w, d)
    return context.view(B, H, nb + 2, w, d)[:, :, :nb].flatten(2, 3).transpose(1, 2)  # (B, n, H, d)
