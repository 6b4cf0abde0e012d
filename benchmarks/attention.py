"""Benchmark: the attention views at long-document scale, against the model's forward pass.

Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512), random weights, for 1,024 / 2,048 /
4,096 tokens and top-k lists of k = 20 and k = 64 (the app's ceiling). Prints per size and k: the forward time
(with attentions); the time and peak extra memory of all views (received attention for every head, top-k
attended and attending lists for every head, the pooled grid, and the token-count page's tables: counts by type
and by position for both directions over all heads with the paper's rule, Algorithm 2, and their intersections),
each view's time, a token-counts page rerun on the cached lists, and the paper notebook's per-row dense
conversion, timed on a few heads and extrapolated to all 144.

Side by side at k = 5 % of n (for the sizes where dense matrices are affordable): the seed's dense route
(Algorithms 1-3 as appendix A.5 writes them: each head's dense matrix, a full argsort of every row and of every
column, then each owner token's set over all heads as a boolean membership row, and the type counts from it)
against the app's (compiled top-k lists from the bands, then the compiled count from the owners' lists), both
giving the type counts of both directions, checked equal.

The views' loops are compiled with numba: the first run in a process loads them from numba's on-disk cache (or
compiles them, once per machine); that one-off time is printed apart, before the per-document timings.

Targets: all views <= 0.25 x forward time and <= 0.5 x the band tensor's size in extra memory, for k = 20 and
k = 64; nothing of size layers x heads x n x n is allocated (the notebook's conversion would need that: its size
is printed).

    /work/main/.venv/bin/python benchmarks/attention.py [--sizes 1024 2048 4096] [--k 20 64] [--dense-sizes 1024]
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

from longviz_core.model.bands import AttentionBands  # noqa: E402
from longviz_core.model.topk import DIRECTIONS, topk_indices  # noqa: E402
from longviz_core.views.counts import (  # noqa: E402
    count_intersection,
    tally,
    token_counts,
    token_types,
    type_counts,
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


PAGE_BYS = ("type", "position")  # the page's default tables (grouped by word is the other choice)


def count_tables(doc, tallies, k: int, mask=None) -> dict:
    """The token-counts page's tables: both directions by type and by position (paper's rule, all heads) and
    the two intersections."""
    tables = {(d, by): token_counts(doc, k, d, by, mask=mask, tallies=tallies) for d in DIRECTIONS for by in PAGE_BYS}
    for by in PAGE_BYS:
        count_intersection(tables["attended", by], tables["attending", by], 10)
    return tables


def all_views(bands: AttentionBands, k: int, grid: int) -> dict:
    """The per-document views of the target, on a fresh copy of the bands (no cached sums): received attention,
    top-k attended and attending lists, the pooled grid, the count tables at this k."""
    fresh = AttentionBands(bands.local, bands.global_cols, bands.global_rows, bands.global_idx, bands.window)
    doc = SimpleNamespace(tokens=synthetic_tokens(bands.n), attention=fresh)
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
    t0 = time.perf_counter()
    count_tables(doc, tally(topk, doc.tokens), k)
    times["counts"] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    times["cpu"] = time.process_time() - c0
    times["_topk"] = topk
    return times


def warm_up(w: int, k: int, grid: int) -> float:
    """Run the compiled loops (`longviz_core.model._kernels`) once on small random bands, so that the timings below
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
    """One token-counts page rerun on cached lists: the 4 count tables (attended/attending x type/position)
    with the stopword/punctuation mask, all heads, k = 10, their 2 intersections, plus the scaled received
    attention of all layers (the overlay). Also returns the one-off time to prepare the lists for that mask."""
    rng = np.random.default_rng(0)
    doc = SimpleNamespace(tokens=synthetic_tokens(n), attention=bands)
    scale = rng.random((bands.num_layers, bands.num_heads))
    bands.received_per_head()  # cached per document
    mask = build_mask(doc.tokens)
    t0 = time.perf_counter()
    tallies = tally(topk, doc.tokens, mask)  # once per document and mask state
    t_tally = time.perf_counter() - t0
    t0 = time.perf_counter()
    count_tables(doc, tallies, 10, mask)
    bands.received(scale=scale)
    return time.perf_counter() - t0, t_tally


def dense_route_type_counts(bands: AttentionBands, tokens, k: int) -> tuple[dict, float]:
    """The seed's route for the type counts of both directions: per head the dense (n, n) matrix, a full
    argsort of every row (Algorithm 1) and of every column (Algorithm 3), the first k positive entries; each
    owner's set over all heads kept as a boolean membership row (n, n); a type counts once per owner whose
    set holds one of its positions (Algorithm 2). Returns ({direction: (types,) counts}, seconds)."""
    n = bands.n
    type_ids, labels, _ = token_types(tokens)
    onehot = np.zeros((n, len(labels)), dtype=np.float32)  # (n, types)
    onehot[np.arange(n), type_ids] = 1
    owners = np.arange(n)[:, None]
    t0 = time.perf_counter()
    counts = {}
    for direction in DIRECTIONS:
        member = np.zeros((n, n), dtype=bool)  # (owners, positions): the owners' sets
        for layer in range(bands.num_layers):
            for head in range(bands.num_heads):
                dense = bands.dense(layer, head)  # (n, n)
                if direction == "attending":
                    dense = dense.T
                order = np.argsort(-dense, axis=1, kind="stable")[:, :k]  # (n, k), ties to the lower position
                member[owners, order] |= np.take_along_axis(dense, order, axis=1) > 0
        counts[direction] = ((member.astype(np.float32) @ onehot) > 0).sum(axis=0)  # (types,)
    return counts, time.perf_counter() - t0


def app_route_type_counts(bands: AttentionBands, tokens, k: int) -> tuple[dict, float, float]:
    """The app's route for the same numbers: compiled top-k lists from the bands, then the compiled count over
    the owners' lists (paper's rule). Returns ({direction: counts}, seconds for the lists, for the counts)."""
    t0 = time.perf_counter()
    topk = topk_indices(bands, k=k)
    t_lists = time.perf_counter() - t0
    t0 = time.perf_counter()
    tallies = tally(topk, tokens)
    counts = {d: type_counts(tallies, k, d) for d in DIRECTIONS}
    return counts, t_lists, time.perf_counter() - t0


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


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--k", type=int, nargs="+", default=[20, 64], help="top-k lists computed per document")
    parser.add_argument("--dense-sizes", type=int, nargs="*", default=[1024, 2048],
                        help="sizes (among --sizes) for the side by side with the dense route at k = 5 %% of n")
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--notebook-heads", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, torch "
          f"{torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}; {load()}")
    print(f"model: Longformer-base dims, random weights, window {args.window}; top-k k={args.k}, grid {args.grid}")
    model = build_model(args.window)
    w = args.window // 2
    print(f"compiled loops built or loaded from numba's cache in {warm_up(w, max(args.k), args.grid):.2f} s "
          "(once per process)")
    rows, sides = [], []
    for n in args.sizes:
        bands, out, t_fwd, cpu_fwd, t_bands = forward(model, n)
        t_nb = notebook_conversion(out, n, w, args.notebook_heads) * (144 / args.notebook_heads)
        del out
        gc.collect()
        dense_gb = 12 * 12 * n * n * 4 / 1e9
        print(f"\nn={n:>5}: forward {t_fwd:.2f} s wall, {cpu_fwd:.2f} s CPU (+ {t_bands:.2f} s to bands); "
              f"notebook per-row loop {t_nb:.1f} s (extrapolated from {args.notebook_heads} heads); the notebook's "
              f"dense tensor would be {dense_gb:.2f} GB; {load()}", flush=True)
        for k in args.k:
            views = all_views(bands, k, args.grid)
            extra = peak_extra_bytes(bands, k, args.grid)
            rerun, t_tally = rerun_seconds(bands, views["_topk"], n)
            rows.append((n, k, t_fwd, cpu_fwd, views, extra, bands.nbytes, rerun, t_tally, t_nb))
            print(
                f"  k={k}: views {views['total']:.2f} s wall = {views['total'] / t_fwd:.3f} x forward; "
                f"{views['cpu']:.2f} s CPU = {views['cpu'] / cpu_fwd:.3f} x forward CPU\n"
                f"    received {views['received']:.2f} s, top-k attended + attending {views['top-k']:.2f} s, "
                f"pooled grid {views['pooled']:.2f} s, count tables {views['counts']:.2f} s\n"
                f"    peak extra memory {extra / 1e6:.1f} MB = {extra / bands.nbytes:.3f} x the band "
                f"({bands.nbytes / 1e9:.2f} GB); lists {views['_topk'].nbytes / 1e6:.0f} MB\n"
                f"    a page rerun on cached lists (k = 10, masked) {rerun * 1000:.0f} ms; "
                f"preparing the lists for a new mask {t_tally * 1000:.0f} ms",
                flush=True,
            )
            del views
            gc.collect()
        if n in args.dense_sizes:
            kk = max(1, round(0.05 * n))
            tokens = synthetic_tokens(n)
            dense, t_dense = dense_route_type_counts(bands, tokens, kk)
            app, t_lists, t_count = app_route_type_counts(bands, tokens, kk)
            same = all(np.array_equal(dense[d], app[d]) for d in DIRECTIONS)
            sides.append((n, kk, t_dense, t_lists, t_count, same))
            print(f"  side by side, type counts of both directions at k = {kk} (5 % of n): dense route "
                  f"{t_dense:.2f} s; app {t_lists + t_count:.2f} s (lists {t_lists:.2f} s, counts "
                  f"{t_count * 1000:.0f} ms) = {(t_lists + t_count) / t_dense:.3f} x the dense route; "
                  f"counts equal: {same}; {load()}", flush=True)
        del bands
        gc.collect()
    print("\n| tokens | k | forward (s) | all views (s) | views / forward | views / forward, CPU | peak extra (MB) | "
          "extra / band | of which top-k (s) | count tables (s) | rerun (ms) | notebook loop (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, k, t_fwd, cpu_fwd, views, extra, band, rerun, t_tally, t_nb in rows:
        print(f"| {n:,} | {k} | {t_fwd:.1f} | {views['total']:.2f} | {views['total'] / t_fwd:.3f} | "
              f"{views['cpu'] / cpu_fwd:.3f} | {extra / 1e6:.0f} | {extra / band:.3f} | {views['top-k']:.2f} | "
              f"{views['counts']:.2f} | {rerun * 1000:.0f} | {t_nb:.1f} |")
    if sides:
        print("\n| tokens | k (5 % of n) | dense route (s) | app: lists + counts (s) | app / dense | equal |")
        print("|---:|---:|---:|---:|---:|:---:|")
        for n, kk, t_dense, t_lists, t_count, same in sides:
            print(f"| {n:,} | {kk} | {t_dense:.2f} | {t_lists:.2f} + {t_count:.3f} | "
                  f"{(t_lists + t_count) / t_dense:.3f} | {same} |")
    print(f"({load()} at the end)")


if __name__ == "__main__":
    main()
