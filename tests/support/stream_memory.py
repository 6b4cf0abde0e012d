"""Run as a script in a fresh process: a tiny ModernBERT (4 layers, 4 heads, hidden 64) analysed at 8,192
tokens; prints JSON with the process's peak memory growth during `analyze` + received attention, the growth
during one plain forward with the model's own sdpa attention (the floor: its sliding layers' n x n mask), and
the largest relative difference between that received attention and the model's own eager attention's column
sums, computed one layer at a time (a forward hook sums each layer's weights as eager returns them).

Peaks are the kernel's high-water mark of resident memory, reset before each measured step (writing 5 to
/proc/self/clear_refs), so neither the model's making nor an earlier step's peak counts, with glibc's mmap
threshold fixed while measuring (`mmap_threshold`)."""
from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from tiny import make_tiny_modernbert, text_of  # noqa: E402


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def mmap_threshold(size: int) -> None:
    """Fix glibc's mmap threshold at `size` bytes. By default it rises after a large free (the warm-up's) up to
    32 MiB, and blocks below it freed by one chunk of rows stay in the heap, so the high-water mark then counts
    memory the process no longer uses, by how the threads' frees happen to interleave. Measured at 8,192 tokens on
    a 2-core AMD EPYC: 147-303 MiB for the analysis by default run to run (533 MiB once in CI), against 147-151 MiB
    with the threshold fixed at 4 MiB, also two runs at once; at 32,768 tokens 600 MiB - 1.1 GiB against 119 MiB.
    Fixed, the mark is the memory the analysis holds at once. An oracle, which is not measured, runs at 32 MiB (the
    default's ceiling): at 4 MiB its every chunk is mmapped and zeroed afresh, 25 s of the kernel's time at
    32,768 tokens."""
    ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, size)


def _status(field: str) -> int:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # the kernel writes kB


def peak_growth(step):
    """What `step()` returns, and how far the resident high-water mark rose above the resident size before it."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    out = step()
    return out, _status("VmHWM") - before


def _sdpa_forward(model, ids):
    config = model.model.config
    kept, config._attn_implementation = config._attn_implementation, "sdpa"
    try:
        with torch.no_grad():
            return model.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    finally:
        config._attn_implementation = kept


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = lv.load_model(str(make_tiny_modernbert(Path(tmp) / "m", layers=4, heads=4, hidden=64,
                                                       local_attention=128, max_positions=n, initializer_range=0.3)))
    mmap_threshold(4 << 20)
    lv.analyze(model, text_of(50), max_tokens=n).attention.received_per_head()  # imports and first calls
    analysis, growth = peak_growth(lambda: lv.analyze(model, text_of(n + 100), max_tokens=n))
    received, received_growth = peak_growth(lambda: analysis.attention.received_per_head())  # (layers, heads, n)
    ids = torch.as_tensor(analysis.input_ids)[None]
    _, forward_growth = peak_growth(lambda: _sdpa_forward(model, ids))
    mmap_threshold(32 << 20)
    sums = {}

    def hook(layer, module, args, out):
        sums[layer] = out[1][0].sum(dim=-2, dtype=torch.float64).numpy()  # (heads, n) eager column sums

    layers = model.model.model.layers
    handles = [layer.attn.register_forward_hook(lambda m, a, o, i=i: hook(i, m, a, o)) for i, layer in enumerate(layers)]
    try:
        model.model.config._attn_implementation = "eager"
        with torch.no_grad():
            model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for h in handles:
            h.remove()
    eager = np.stack([sums[i] for i in range(len(layers))])
    print(json.dumps({"n": analysis.n, "growth": max(growth, received_growth), "forward_growth": forward_growth,
                      "dense_bytes": int(eager.size * analysis.n * 4),
                      "streamed": [analysis.attention.streamed(i) for i in range(len(layers))],
                      "rel": float((np.abs(received.astype(np.float64) - eager) / eager).max())}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8192)
