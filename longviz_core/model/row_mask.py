"""Longformer's padding mask built as the one row it reads, instead of transformers' whole (batch, 1, n, n) mask.

transformers 5's `LongformerModel.forward` asks `create_bidirectional_mask` for the full 4-D additive mask and
keeps only `[:, 0, 0, :]`: its banded kernels take a per-key mask. At 2,624 padded tokens and a batch of 8 perturbed
copies that is 55 M cells built as bools and then as float32 (275 MB) for every forward, and 7 % of the
Faithfulness page's CPU (py-spy, demo document 0); at 4,096 tokens and IG's batches of 16, 1.3 GB. A bidirectional
mask with padding is the same in every query row, so transformers' own builder asked for the first row gives that
row, value for value. Registered under its own name with `AttentionMaskInterface`; Longformer's attention ignores
the attention implementation, so nothing else changes."""
from __future__ import annotations

import torch

ROW_MASK = "longviz-row-mask"


def _first_row(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
               **kwargs) -> torch.Tensor:
    """transformers' eager mask for query row `q_offset` only: (batch, 1, 1, kv_length)."""
    from transformers.masking_utils import eager_mask

    return eager_mask(batch_size, 1, kv_length, q_offset=q_offset, kv_offset=kv_offset, **kwargs)


def use_row_mask(model: torch.nn.Module) -> None:
    """Every later forward of `model` (a Longformer) builds its padding mask as one row."""
    from transformers.masking_utils import AttentionMaskInterface

    AttentionMaskInterface.register(ROW_MASK, _first_row)
    model.config._attn_implementation = ROW_MASK
