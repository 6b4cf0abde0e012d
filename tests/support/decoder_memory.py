"""Run as a script in a fresh process: a tiny Qwen3 decoder (grouped-query, full and sliding causal layers)
analysed at 32,768 tokens; prints JSON with the process's peak memory growth during `analyze` and during
`received_per_head`, each step's seconds, and the largest relative difference between that received attention
and an oracle's: the model's own eager attention (transformers' `eager_attention_forward` for Qwen3, on masks
from transformers' `eager_mask`) computed layer by layer on chunks of query rows against every key, its column
sums accumulated in float64. Dense eager on the whole would hold heads x n x n floats per layer (8 GiB here).

The oracle shares no code with longviz's route: it is registered under its own name with transformers'
`AttentionInterface` and `AttentionMaskInterface`, so the model builds each layer's mask recipe (causal, or
causal within the sliding window) for it, and each chunk's mask rows come from transformers' builder with the
chunk's query offset. Peaks are measured as in stream_memory.py (its `peak_growth`)."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from stream_memory import mmap_threshold, peak_growth  # noqa: E402  (the high-water mark, reset before each step)
from tiny import make_tiny_decoder, text_of  # noqa: E402

ORACLE = "oracle"
# one layer of each type and 2 query heads on 1 key/value head: each full layer's head costs a row pass and a key
# pass over 32,768^2 / 2 scores in longviz and one more in the oracle (about a minute of CPU per head here)
LAYER_TYPES = ["full_attention", "sliding_attention"]
_ROWS = 64  # query rows per oracle chunk: (heads, 64, n) float32 weights, 16 MiB at 32,768 tokens, 2 heads


def _oracle_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, dtype=torch.float32, device="cpu", **kwargs):
    """The layer's mask as a function of a row range: rows a..b-1 of transformers' eager (additive) mask."""
    from transformers.masking_utils import eager_mask

    def rows(a, b):
        return eager_mask(batch_size, b - a, kv_length, q_offset=q_offset + a, kv_offset=kv_offset,
                          mask_function=mask_function, attention_mask=attention_mask, dtype=dtype, device=device)

    return rows


def _oracle_attention(sums, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Qwen3's eager attention on chunks of query rows; each layer's column sums into `sums[layer]`, (heads, n)
    float64. Returns eager's output, (batch, n, heads, d).

    Each chunk runs on the keys from the first to the last its mask rows allow: eager adds the dtype's minimum to
    the others, and exp(minimum + score - row max) is exactly 0 in float32, so leaving them out changes no weight
    and spares the causal upper half and a sliding layer's far keys."""
    from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

    n = query.shape[-2]
    total = torch.zeros(query.shape[1], key.shape[-2], dtype=torch.float64)
    parts = []
    for a in range(0, n, _ROWS):
        b = min(a + _ROWS, n)
        mask = attention_mask(a, b)  # (batch, 1, rows, keys): 0 where allowed, the minimum elsewhere
        # eager's additive mask holds 0 (allowed) or the minimum: a key is reached where its column's max is 0
        # (a max over the rows, ~7x faster than torch's bool `any` over leading dimensions: 8 s of this script)
        reached = torch.nonzero(mask.flatten(0, 2).amax(dim=0) == 0).flatten()
        lo, hi = int(reached[0]), int(reached[-1]) + 1
        out, weights = eager_attention_forward(module, query[:, :, a:b], key[:, :, lo:hi], value[:, :, lo:hi],
                                               mask[..., lo:hi], scaling=scaling, dropout=dropout)
        total[:, lo:hi] += weights[0].sum(dim=-2, dtype=torch.float64)
        parts.append(out)
    sums[module.layer_idx] = total.numpy()
    return torch.cat(parts, dim=1), None


def oracle_received(model, ids) -> np.ndarray:
    """(layers, heads, n) float64 column sums of the model's own eager attention, one layer at a time."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    sums = {}
    AttentionInterface.register(ORACLE, partial(_oracle_attention, sums))
    AttentionMaskInterface.register(ORACLE, _oracle_mask)
    config = model.model.config
    kept, config._attn_implementation = config._attn_implementation, ORACLE
    try:
        with torch.no_grad():
            model.model.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    finally:
        config._attn_implementation = kept
    return np.stack([sums[i] for i in range(len(sums))])


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = lv.load_model(str(make_tiny_decoder(
            Path(tmp) / "m", "qwen3", layers=len(LAYER_TYPES), heads=2, kv_heads=1, hidden=64, head_dim=16,
            layer_types=LAYER_TYPES, use_sliding_window=True, sliding_window=128, max_positions=n)))
    mmap_threshold(4 << 20)
    lv.analyze(model, text_of(50), max_tokens=n).attention.received_per_head()  # imports and first calls
    seconds = {}

    def timed(name, step):
        start = time.perf_counter()
        out = step()
        seconds[name] = time.perf_counter() - start
        return out

    analysis, growth = peak_growth(lambda: timed("analyze", lambda: lv.analyze(model, text_of(n + 100),
                                                                                max_tokens=n)))
    received, received_growth = peak_growth(lambda: timed("received", analysis.attention.received_per_head))
    ids = torch.as_tensor(analysis.input_ids)[None]
    mmap_threshold(32 << 20)
    oracle = timed("oracle", lambda: oracle_received(model, ids))
    layers = analysis.attention.layers
    print(json.dumps({"n": analysis.n, "analyze_growth": growth, "received_growth": received_growth,
                      "dense_bytes": int(oracle.size * analysis.n * 4), "seconds": seconds,
                      "kinds": [(layer.causal, layer.reach, layer.group) for layer in layers],
                      "peak": float(received.max()), "mean": float(received.mean()),
                      "rel": float((np.abs(received.astype(np.float64) - oracle) / oracle).max())}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 32768)
