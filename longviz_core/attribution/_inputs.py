"""What Integrated Gradients (ig) and its cost estimates (cost) share: the precisions, the inputs at the
length the model runs at, the layer attributed to, and the cache folder both write to."""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from .. import _disk
from ..errors import AttributionError
from ..model.encoding import Encoded
from ..model.families import FamilyLayoutError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def cache_folder(cache_dir=None) -> Path:
    """Where IG results, the dataset-wide sums and the timings are cached (under the cache root)."""
    return _disk.cache_folder("attributions", cache_dir)


def padded_length(model, n: int) -> int:
    """The length the model runs at (Family.padded_length): Longformer pads to a multiple of its largest full
    window, block-sparse BigBird to a multiple of its block size."""
    return model.family.padded_length(n)


def padded_tensors(model, enc: Encoded):
    """(additional forward args, input ids, baseline ids), each (1, n_padded): inputs padded as the model itself
    would pad them (pad token, pad position id, attention mask 0), so captum's embeddings and the model's agree in
    length; the padding rows are equal in x and x'. The args are (attention mask, position ids[, global mask]):
    Family.kwargs takes them in that order."""
    tok = model.tokenizer
    extra = padded_length(model, enc.n) - enc.n
    # padding exists only where a family pads inside its forward (Longformer, BigBird), and those have a pad token
    pad_id = int(tok.pad_token_id) if tok.pad_token_id is not None else 0

    def t(a, fill):
        a = np.concatenate([np.asarray(a, dtype=np.int64), np.full(extra, fill, dtype=np.int64)])
        return torch.as_tensor(a, device=model.device).unsqueeze(0)  # (1, n_padded)

    position_pad = pad_id if model.position_offset else 0
    args = [t(np.ones(enc.n), 0), t(enc.position_ids, position_pad)]
    if model.family.global_tokens:
        args.append(t(enc.global_mask, 0))
    return tuple(args), t(enc.input_ids, pad_id), t(enc.baseline_ids, pad_id)


def embeddings_layer(model):
    """The module IG attributes to (Family.embeddings): the whole embeddings layer where it holds the position
    table, the token table for RoPE families."""
    try:
        return model.family.embeddings(model.model)
    except FamilyLayoutError as exc:
        raise AttributionError(f"{exc} Integrated Gradients attributes to the encoder's embeddings.") from exc


def autocast(device, precision):
    """The autocast context of a precision ("fp32": none)."""
    dtype = PRECISIONS[precision]
    return nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)
