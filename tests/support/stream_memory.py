"""Run as a script in a fresh process: a tiny ModernBERT (4 layers, 4 heads, hidden 64) analysed at 8,192
tokens; prints JSON with the process's peak memory growth during `analyze` + received attention, and the
largest relative difference between that received attention and the model's own eager attention's column sums,
computed one layer at a time (a forward hook sums each layer's weights as eager returns them)."""
from __future__ import annotations

import json
import resource
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from support.tiny_families import make_tiny_modernbert  # noqa: E402
from tiny import text_of  # noqa: E402


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = lv.load_model(str(make_tiny_modernbert(Path(tmp) / "m", layers=4, heads=4, hidden=64,
                                                       local_attention=128, max_positions=n, initializer_range=0.3)))
    lv.analyze(model, text_of(50), max_tokens=n).attention.received_per_head()  # imports and first calls
    before = _rss()
    analysis = lv.analyze(model, text_of(n + 100), max_tokens=n)
    received = analysis.attention.received_per_head().astype(np.float64)  # (layers, heads, n)
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    sums = {}

    def hook(layer, module, args, out):
        sums[layer] = out[1][0].sum(dim=-2, dtype=torch.float64).numpy()  # (heads, n) eager column sums

    layers = model.model.model.layers
    handles = [layer.attn.register_forward_hook(lambda m, a, o, i=i: hook(i, m, a, o)) for i, layer in enumerate(layers)]
    try:
        model.model.config._attn_implementation = "eager"
        ids = torch.as_tensor(analysis.input_ids)[None]
        with torch.no_grad():
            model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for h in handles:
            h.remove()
    eager = np.stack([sums[i] for i in range(len(layers))])
    print(json.dumps({"n": analysis.n, "growth": growth, "dense_bytes": int(eager.size * analysis.n * 4),
                      "streamed": [analysis.attention.streamed(i) for i in range(len(layers))],
                      "rel": float((np.abs(received - eager) / eager).max())}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8192)
