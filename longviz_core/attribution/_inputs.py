"""What Integrated Gradients (ig) and its cost estimates (cost) share: the precisions, the inputs at the
length the model runs at, the layer attributed to, and the cache folder both write to."""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from .. import _disk
from ..model.encoding import Encoded

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def cache_folder(cache_dir=None) -> Path:
    """Where IG results, the dataset-wide sums and the timings are cached (under the cache root)."""
    return _disk.cache_folder("attributions", cache_dir)


def padded_length(model, n: int) -> int:
    """The length the model runs at: transformers pads a Longformer input to a multiple of the largest full
    window, max(config.attention_window) = 2 * model.attention_window, whatever the other layers' windows."""
    w2 = 2 * model.attention_window if model.is_longformer and model.attention_window else 1
    return -(-int(n) // w2) * w2


def padded_tensors(model, enc: Encoded):
    """(additional forward args, input ids, baseline ids), each (1, n_padded): Longformer inputs padded to a
    multiple of its window as the model itself would (pad token, pad position id, attention mask 0), so
    captum's embeddings and the model's agree in length; the padding rows are equal in x and x'."""
    tok = model.tokenizer
    extra = padded_length(model, enc.n) - enc.n
    pad_id = int(tok.pad_token_id)

    def t(a, fill):
        a = np.concatenate([np.asarray(a, dtype=np.int64), np.full(extra, fill, dtype=np.int64)])
        return torch.as_tensor(a, device=model.device).unsqueeze(0)  # (1, n_padded)

    position_pad = pad_id if model.position_offset else 0
    args = [t(np.ones(enc.n), 0), t(enc.position_ids, position_pad)]
    if model.is_longformer:
        args.append(t(enc.global_mask, 0))
    return tuple(args), t(enc.input_ids, pad_id), t(enc.baseline_ids, pad_id)


def embeddings_layer(net):
    """The module IG attributes to: the whole embeddings layer of the encoder."""
    layer = getattr(getattr(net, "base_model", net), "embeddings", None)
    if layer is None:
        raise ValueError(f"{type(net).__name__} has no `embeddings` module to attribute to")
    return layer


def autocast(device, precision):
    """The autocast context of a precision ("fp32": none)."""
    dtype = PRECISIONS[precision]
    return nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)
