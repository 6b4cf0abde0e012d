"""Benchmark: the attention views at long-document scale, against the model's forward pass.

Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512), random weights, for 1,024 / 2,048 /
4,096 tokens. Prints per size: the forward time (with attentions); the time and peak extra memory of all views
(received attention for every head, top-k attended and attending lists for every head, the pooled grid), each
view's time, the re-aggregation time of the count tables on cached lists, and the paper notebook's per-row
dense conversion, timed on a few heads and extrapolated to all 144.

The views' loops are compiled with numba: the first run in a process loads them from numba's on-disk cache (or
compiles them, once per machine); that one-off time is printed apart, before the per-document timings.

Targets: all views <= 0.25 x forward time and <= 0.5 x the band tensor's size in extra memory; nothing of size
layers x heads x n x n is allocated (the notebook's conversion would need that: its size is printed).

    /work/venv/bin/python benchmarks/attention.py [--sizes 1024 2048 4096] [--k 20] [--grid 64]
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from longviz_core.bands import AttentionBands  # noqa: E402
from longviz_core.views.counts import (  # noqa: E402
    BYS,
    DIRECTIONS,
    count_intersection,
    tally,
    token_counts,
    topk_indices,
)
from longviz_core.views.masking import build_mask  # noqa: E402
from longviz_core.views.pooling import normalised_maps, pool_attention  # noqa: E402


def build_model(window: int):
    from transformers import LongformerConfig, LongformerForSequenceClassification

    torch.manual_seed(0)
    config = LongformerConfig(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        attention_window=window, max_position_embeddings=4098, pad_token_id=1, type_vocab_size=1, num_labels=2,
    )
    return LongformerForSequenceClassification(config).eval()


def forward(model, n: int):
    gen = torch.Generator().manual_seed(n)
    ids = torch.randint(5, 50000, (1, n), generator=gen)
    ids[0, 0], ids[0, -1] = 0, 2
    glob = torch.zeros_like(ids)
    glob[0, 0] = 1
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), global_attention_mask=glob,
                  position_ids=torch.arange(2, n + 2)[None])
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    t_forward = time.perf_counter() - t0
    cpu_forward = time.process_time() - c0
    t0 = time.perf_counter()
    bands = AttentionBands.from_longformer(out.attentions, out.global_attentions, [0], n)
    t_bands = time.perf_counter() - t0
    return bands, out, t_forward, cpu_forward, t_bands


def synthetic_tokens(n: int) -> list[str]:
    """Byte-level BPE-like tokens with a few hundred types (random weights: any text will do)."""
    rng = np.random.default_rng(0)
    words = ["Ġthe", "Ġmodel", "Ġlearns", "Ġattention", "Ġover", "Ġlong", "Ġdocuments", ",", "Ġand", "Ġa", "s"]
    vocab = [words[i % len(words)] + (str(i) if i % 3 else "") for i in range(300)]
    return ["<s>", *rng.choice(vocab, n - 2).tolist(), "</s>"]


def all_views(bands: AttentionBands, k: int, grid: int) -> dict:
    """The per-document views of the target, on a fresh copy of the bands (no cached sums): received attention,
    top-k attended and attending lists, the pooled grid. The lists' tallies (what makes count reruns cheap)
    are timed apart: the app makes them once per document and mask state, on the first visit of that page."""
    fresh = AttentionBands(bands.local, bands.global_cols, bands.global_rows, bands.global_idx, bands.window)
    times = {}
    c0 = time.process_time()
    t0 = time.perf_counter()
    fresh.received_per_head()
    times["received"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    topk = topk_indices(fresh, k=k)
    times["top-k"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pooled = pool_attention(fresh, grid)
    normalised_maps(pooled)
    times["pooled"] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    times["cpu"] = time.process_time() - c0
    tokens = synthetic_tokens(bands.n)
    t0 = time.perf_counter()
    tally(topk, tokens)
    times["tallies"] = time.perf_counter() - t0
    times["_topk"] = topk
    return times


def warm_up(w: int, k: int, grid: int) -> float:
    """Run the compiled loops (`longviz_core._kernels`) once on small random bands, so that the timings below
    are per document."""
    rng = np.random.default_rng(0)
    n = 4 * w
    keys = np.arange(n)[:, None] - w + np.arange(2 * w + 1)
    local = np.where((keys >= 0) & (keys < n), rng.random((1, 1, n, 2 * w + 1), dtype=np.float32), 0)  # as a model
    bands = AttentionBands(local, rng.random((1, 1, n, 1), dtype=np.float32),
                           rng.random((1, 1, 1, n), dtype=np.float32), np.array([0]), w)
    t0 = time.perf_counter()
    all_views(bands, k, grid)
    return time.perf_counter() - t0


def peak_extra_bytes(bands: AttentionBands, k: int, grid: int) -> int:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    all_views(bands, k, grid)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def rerun_seconds(bands: AttentionBands, topk, n: int) -> tuple[float, float]:
    """One token-counts page rerun on cached data: the 4 count tables (attended/attending x type/position)
    with the stopword/punctuation mask, all heads, k = 10, their 2 intersections, plus the scaled received
    attention of all layers (the overlay). Also returns the one-off time to tally the lists for that mask."""
    rng = np.random.default_rng(0)
    doc = SimpleNamespace(tokens=synthetic_tokens(n), attention=bands)
    scale = rng.random((bands.num_layers, bands.num_heads))
    bands.received_per_head()  # cached per document
    mask = build_mask(doc.tokens)
    t0 = time.perf_counter()
    tallies = tally(topk, doc.tokens, mask)  # once per document and mask state
    t_tally = time.perf_counter() - t0
    t0 = time.perf_counter()
    tables = {(d, by): token_counts(doc, 10, d, by, mask=mask, tallies=tallies) for d in DIRECTIONS for by in BYS}
    for by in BYS:
        count_intersection(tables["attended", by], tables["attending", by], 10)
    bands.received(scale=scale)
    return time.perf_counter() - t0, t_tally


def notebook_conversion(out, n: int, w: int, heads: int) -> float:
    """The paper notebook's create_head_matrix (per-row loop over the banded output), timed on `heads` heads."""
    t0 = time.perf_counter()
    done = 0
    for layer in range(len(out.attentions)):
        for head in range(out.attentions[layer].shape[1]):
            if done == heads:
                return time.perf_counter() - t0
            att = out.attentions[layer][0, head, :n]  # (n, 1 + 2w + 1)
            glob = out.global_attentions[layer][0, head]  # (n_padded, 1)
            new = torch.zeros((n, n))
            for i in range(n):
                nz = torch.nonzero(att[i]).squeeze()
                vals = att[i][nz[1:]]
                new[i][nz[1:] - (w + 1) + i] = vals
                new[i][0] = att[i][0]
                new[0] = glob.squeeze()[:n]
            done += 1
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--k", type=int, default=20, help="top-k lists computed per document (the app's cache)")
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--notebook-heads", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}")
    print(f"model: Longformer-base dims, random weights, window {args.window}; top-k k={args.k}, grid {args.grid}")
    model = build_model(args.window)
    w = args.window // 2
    print(f"compiled loops built or loaded from numba's cache in {warm_up(w, args.k, args.grid):.2f} s "
          "(once per process)")
    rows = []
    for n in args.sizes:
        bands, out, t_fwd, cpu_fwd, t_bands = forward(model, n)
        t_nb = notebook_conversion(out, n, w, args.notebook_heads) * (144 / args.notebook_heads)
        del out
        gc.collect()
        views = all_views(bands, args.k, args.grid)
        extra = peak_extra_bytes(bands, args.k, args.grid)
        rerun, t_tally = rerun_seconds(bands, views["_topk"], n)
        dense_gb = 12 * 12 * n * n * 4 / 1e9
        rows.append((n, t_fwd, cpu_fwd, views, extra, bands.nbytes, rerun, t_tally, t_nb))
        print(
            f"\nn={n:>5}: forward {t_fwd:.2f} s wall, {cpu_fwd:.2f} s CPU (+ {t_bands:.2f} s to bands)\n"
            f"  views {views['total']:.2f} s wall = {views['total'] / t_fwd:.3f} x forward; {views['cpu']:.2f} s CPU = "
            f"{views['cpu'] / cpu_fwd:.3f} x forward CPU\n"
            f"    received {views['received']:.2f} s, top-k attended + attending {views['top-k']:.2f} s, "
            f"pooled grid {views['pooled']:.2f} s\n"
            f"  peak extra memory {extra / 1e6:.1f} MB = {extra / bands.nbytes:.3f} x the band "
            f"({bands.nbytes / 1e9:.2f} GB); the notebook's dense tensor would be {dense_gb:.2f} GB\n"
            f"  count tallies (once per document and mask state): {views['tallies']:.2f} s unmasked, "
            f"{t_tally:.2f} s masked; a rerun on cached data {rerun * 1000:.0f} ms\n"
            f"  notebook per-row loop: {t_nb:.1f} s (extrapolated from {args.notebook_heads} heads)",
            flush=True,
        )
        del bands, views
        gc.collect()
    print("\n| tokens | forward (s) | all views (s) | views / forward | views / forward, CPU | peak extra (MB) | "
          "extra / band | tallies (s) | rerun (ms) | notebook loop (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, t_fwd, cpu_fwd, views, extra, band, rerun, t_tally, t_nb in rows:
        print(f"| {n:,} | {t_fwd:.1f} | {views['total']:.2f} | {views['total'] / t_fwd:.3f} | "
              f"{views['cpu'] / cpu_fwd:.3f} | {extra / 1e6:.0f} | {extra / band:.3f} | "
              f"{views['tallies']:.2f} / {t_tally:.2f} | {rerun * 1000:.0f} | {t_nb:.1f} |")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
