"""CPU and wall seconds of `lv.analyze` on a tiny Qwen3 decoder whose layers alternate full and sliding causal
attention (window 128), at one length, in this process with one torch thread; `--root` measures another checkout
of longviz (an older commit) the same way, for a before/after within one run of the machine.

Where the time goes on such a model: transformers' mask builder evaluates the composed mask function on every
query x key pair, and each sliding layer read its mask's rows again (model.capture.LazyMask.pieces now builds
them once per forward). Results in docs/benchmarks.md, "Sliding masks".

    python benchmarks/sliding_masks.py --tokens 16384 [--root /path/to/other/checkout] [--layers 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=4, help="alternating full and sliding layers")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sys.path[:0] = [str(args.root), str(args.root / "tests")]
    import torch

    torch.set_num_threads(1)
    import longviz_core as lv
    from tiny import make_tiny_decoder, text_of

    n = args.tokens
    with tempfile.TemporaryDirectory() as tmp:
        types = (["full_attention", "sliding_attention"] * args.layers)[: args.layers]
        model = lv.load_model(str(make_tiny_decoder(
            Path(tmp) / "m", "qwen3", layers=args.layers, heads=2, kv_heads=1, hidden=64, head_dim=16,
            layer_types=types, use_sliding_window=True, sliding_window=128, max_positions=n)))
        lv.analyze(model, text_of(50), max_tokens=n)  # imports and first calls
        text = text_of(n + 100)
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            lv.analyze(model, text, max_tokens=n)
            print(f"{args.root}: {n:,} tokens, {args.layers} layers ({types.count('sliding_attention')} sliding): "
                  f"analyze {time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
