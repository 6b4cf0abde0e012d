"""Benchmark: attention by pattern for ModernBERT, BigBird and decoders at long-document scale, against one forward.

ModernBERT-base dimensions (22 layers x 12 heads, hidden 768, GLU 1,152, sliding window 128 = radius 64, one
global layer in three: 8 full layers), random weights, the tests' byte-level BPE tokenizer, saved once under a
folder. For each size (default 2,048 / 4,096 / 8,192 tokens), each measured in a fresh process so that its peak
memory is its own:
Times are wall / CPU seconds (CPU of all the process's threads: the steadier figure on a shared machine).
- one sdpa forward (the reference: what the model costs without longviz), its time and peak memory growth;
- `lv.analyze` (the forward through longviz's attention function: sliding layers kept as bands (heads, n, 129),
  full layers as their queries and keys), time and peak growth;
- the views on that analysis: received attention of every head (the one streamed pass over each full layer,
  which makes the top-64 lists both ways and the 64 x 64 grid's block sums too), the top-k attended and
  attending lists at k = 64 (the app's ceiling: the sliding layers' band kernels, the full layers' from the
  pass), the pooled 64 x 64 grid, and the token-count tables (Algorithm 2) from the lists; time of each as a
  multiple of the forward, and the peak growth of analysis and views together (a warm-up runs them once on a
  short document first: numba loads each compiled loop on its first call);
- the dense eager route (every layer's n x n weights, what longviz stored before): its size is layers x heads x
  n^2 x 4 B; measured (eager forward with output_attentions) only for --dense-sizes, the others printed.

With --family bigbird: BigBird-base dimensions (12 layers x 12 heads, hidden 768, blocks of 64 tokens, 3 random
blocks: block-sparse above 704 tokens), random weights; the reference is its own block-sparse forward, and
`lv.analyze` keeps each layer's applied block-sparse weights (model/block_sparse.py).

With --family decoder: Qwen3-0.6B dimensions (28 layers, 16 query and 8 key/value heads of 128, hidden 1,024,
intermediate 3,072, every layer causal full attention, positions to 32,768), random weights, the tests' tiny
decoder tokenizer (a small vocabulary instead of 151,936: the embedding table is no part of the attention's cost).
The reference is the model's own sdpa forward without a key/value cache; `lv.analyze` keeps every layer as a
causal `StreamedLayer` (Q (16, n, 128) and K (8, n, 128)), and the views stream them. --layers L builds the same
dimensions with L layers: the per-layer cost, for sizes where all 28 take too long (the total is then an
extrapolation, and says so).

    /work/main/.venv/bin/python benchmarks/families.py [--sizes 2048 4096 8192] [--dense-sizes 1024]
    /work/main/.venv/bin/python benchmarks/families.py --family bigbird --sizes 2048 4096 --dense-sizes
    /work/main/.venv/bin/python benchmarks/families.py --family decoder --sizes 2048 --dense-sizes [--layers 1]
    /work/main/.venv/bin/python benchmarks/families.py --family decoder --sizes 32768 --dense-sizes --layers 1 \
        --analyze-only
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from _models import cpu_name  # noqa: E402

LAYERS, HEADS = 22, 12


def base_modernbert(path: Path, device: str = "cpu"):
    """ModernBERT-base dimensions, random weights, saved at `path` once; loaded on `device` through load_model
    (eager)."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    from longviz_core import load_model
    from tiny import _bpe_tokenizer

    if not (path / "config.json").exists():
        tok = _bpe_tokenizer(path)
        torch.manual_seed(0)
        config = ModernBertConfig(
            vocab_size=len(tok), hidden_size=768, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=1152, local_attention=128, global_attn_every_n_layers=3, max_position_embeddings=8192,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, cls_token_id=0, num_labels=2)
        ModernBertForSequenceClassification(config).save_pretrained(path)
        tok.save_pretrained(path)
    return load_model(str(path), device=device)


def base_bigbird(path: Path, device: str = "cpu"):
    """BigBird-base dimensions, random weights, block-sparse, saved at `path` once; loaded on `device` through
    load_model."""
    from transformers import BigBirdConfig, BigBirdForSequenceClassification

    from longviz_core import load_model
    from tiny import _bpe_tokenizer

    if not (path / "config.json").exists():
        tok = _bpe_tokenizer(path)
        torch.manual_seed(0)
        config = BigBirdConfig(
            vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=4096, attention_type="block_sparse", block_size=64,
            num_random_blocks=3, pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, num_labels=2)
        BigBirdForSequenceClassification(config).save_pretrained(path)
        tok.save_pretrained(path)
    return load_model(str(path), device=device)


def base_qwen3(path: Path, layers: int = 28, device: str = "cpu"):
    """Qwen3-0.6B dimensions with `layers` layers, random weights, saved at `path` once; loaded on `device`
    through load_model (every forward through longviz's chunked attention)."""
    from longviz_core import load_model
    from tiny import make_tiny_decoder

    if not (path / "config.json").exists():
        make_tiny_decoder(path, "qwen3", layers=layers, heads=16, kv_heads=8, hidden=1024, head_dim=128,
                          intermediate_size=3072, initializer_range=0.02, max_positions=32768)
    return load_model(str(path), device=device)


MODELS = {"modernbert": base_modernbert, "bigbird": base_bigbird, "decoder": base_qwen3}
NAMES = {"modernbert": "ModernBERT-base", "bigbird": "BigBird-base", "decoder": "Qwen3-0.6B"}
REFERENCE = {"modernbert": "sdpa", "bigbird": "block-sparse", "decoder": "sdpa"}


def _build(family: str, path: Path, layers: int | None):
    return MODELS[family](path, layers) if layers else MODELS[family](path)


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def _reset_peak() -> None:
    """The kernel's resident high-water mark restarts from the current size (loading a model peaks higher than
    it ends, and that peak is no part of what is measured)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak() -> int:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024  # the kernel writes kB


VIEWS = ("received", "topk64", "pooled64", "counts")  # the default views, in the order the pages make them


def views(analysis, timed) -> dict:
    """The default views of `analysis`, each made through `timed(name, make)` (a name of VIEWS; it returns
    make()): received attention of every head (for a streamed layer the one pass, which makes the top-64 lists
    both ways and the 64 x 64 grid's block sums too), the top-64 attended and attending lists, the pooled
    64 x 64 grid, the token-count tables both ways by type and their intersection. What each made, by name."""
    from longviz_core.views.counts import count_intersection, tally, token_counts, topk_indices
    from longviz_core.views.pooling import pool_attention

    made = {"received": timed("received", lambda: analysis.attention.received_per_head())}
    made["topk64"] = timed("topk64", lambda: topk_indices(analysis.attention, 64))
    made["pooled64"] = timed("pooled64", lambda: pool_attention(analysis.attention, 64))

    def counts():
        tallies = tally(made["topk64"], analysis.tokens)
        tables = {d: token_counts(analysis, 10, d, "type", tallies=tallies) for d in ("attended", "attending")}
        return {**tables, "both": count_intersection(tables["attended"], tables["attending"])}

    made["counts"] = timed("counts", counts)
    return made


def warm_up(model, family: str) -> None:
    """Imports, numba's cached loops (each loads on its first call), first calls: the views as measured (k = 64:
    a narrow band's lists take other loops than k = 8) on a short document of the same layer patterns (BigBird
    is block-sparse above 704 tokens only)."""
    import longviz_core as lv
    from tiny import text_of

    views(lv.analyze(model, text_of(1100), max_tokens=1024 if family == "bigbird" else 256), lambda _, make: make())


def one(path: Path, n: int, route: str, family: str = "modernbert", layers: int | None = None) -> dict:
    """One size and route in this process: {"seconds": {...}, "growth": bytes, "n": tokens}."""
    import longviz_core as lv
    from tiny import text_of

    model = _build(family, path, layers)
    text = text_of(n + 200)
    warm_up(model, family)
    enc = model.encode(text, n)
    ids = torch.as_tensor(enc.input_ids)[None]
    _reset_peak()
    before, seconds = _rss(), {}

    def timed(name, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        seconds[name] = (time.perf_counter() - wall, time.process_time() - cpu)  # (wall, CPU of all threads)
        return result

    if route in ("sdpa", "eager"):
        if family != "bigbird":  # BigBird's reference is its own block-sparse attention
            model.model.config._attn_implementation = route
        # a decoder's key/value cache would hold every layer's keys and values: no part of a classifier's forward
        extra = {"use_cache": False} if family == "decoder" else {}
        with torch.no_grad():
            timed("forward", lambda: model.model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                                 output_attentions=route == "eager", **extra))
        kept = 0
    else:
        analysis = timed("analyze", lambda: lv.analyze(model, text, max_tokens=n))
        if route == "longviz":
            views(analysis, timed)
        kept = analysis.attention.nbytes
    return {"n": int(ids.shape[1]), "seconds": seconds, "growth": _peak() - before, "kept": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--dense-sizes", type=int, nargs="*", default=[1024])
    parser.add_argument("--family", choices=sorted(MODELS), default="modernbert")
    parser.add_argument("--analyze-only", action="store_true", help="no views: for sizes where they take hours")
    parser.add_argument("--layers", type=int, default=None, help="decoder only: fewer layers, same dimensions")
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--one", nargs=2, metavar=("N", "ROUTE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.layers and args.family != "decoder":
        parser.error("--layers is for --family decoder")
    args.folder = args.folder or Path(f"/tmp/longviz-bench-{args.family}{f'-{args.layers}' if args.layers else ''}")
    if args.one:
        print(json.dumps(one(args.folder, int(args.one[0]), args.one[1], args.family, args.layers)))
        return
    model = _build(args.family, args.folder, args.layers)  # built once, before the timed processes
    layers, heads = model.num_layers, model.num_heads
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{NAMES[args.family]} dimensions: {layers} layers x {heads} heads "
          f"({model.model.config.num_key_value_heads if args.family == 'decoder' else heads} key/value); patterns "
          f"{sorted({p.kind for p in model.family.attention_patterns(max(args.sizes))})}")
    del model  # each size runs in a process of its own

    def run(n, route):
        done = subprocess.run([sys.executable, __file__, "--folder", str(args.folder), "--family", args.family,
                               *(["--layers", str(args.layers)] if args.layers else []), "--one", str(n), route],
                              capture_output=True, text=True)
        if done.returncode:
            return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
        return json.loads(done.stdout.strip().splitlines()[-1])

    gib = 2**30
    for n in sorted(set(args.sizes) | set(args.dense_sizes)):
        ref = run(n, "sdpa")
        if "error" in ref:
            print(f"n={n}: sdpa forward failed: {ref['error']}")
            continue
        fwd = ref["seconds"]["forward"]
        print(f"\nn={ref['n']}: {REFERENCE[args.family]} forward {_wc(fwd)}, peak growth {ref['growth'] / gib:.2f} GiB "
              f"(load {os.getloadavg()[0]:.1f})")
        if n in args.sizes:
            got = run(n, "analyze" if args.analyze_only else "longviz")
            if "error" in got:
                print(f"  longviz failed: {got['error']}")
            elif args.analyze_only:
                print(f"  analyze {_wc(got['seconds']['analyze'])} = {_ratio(got['seconds']['analyze'], fwd)} x "
                      f"forward; peak growth {got['growth'] / gib:.2f} GiB; attention kept {got['kept'] / gib:.2f} "
                      f"GiB (load {os.getloadavg()[0]:.1f})")
            else:
                s = got["seconds"]
                made = [sum(s[v][i] for v in VIEWS) for i in (0, 1)]
                print(f"  analyze {_wc(s['analyze'])} = {_ratio(s['analyze'], fwd)} x forward; views {_wc(made)} = "
                      f"{_ratio(made, fwd)} x forward (received {_wc(s['received'])}, top-64 lists "
                      f"{_wc(s['topk64'])}, pooled grid {_wc(s['pooled64'])}, count tables {_wc(s['counts'])})")
                print(f"  peak growth, analysis + views: {got['growth'] / gib:.2f} GiB; attention kept "
                      f"{got['kept'] / gib:.2f} GiB (load {os.getloadavg()[0]:.1f})")
        dense = layers * heads * n * n * 4
        line = f"  dense eager route: layers x heads x n^2 x 4 B = {dense / gib:.1f} GiB of weights"
        if n in args.dense_sizes:
            eager = run(n, "eager")
            line += (f"; eager forward with output_attentions: {_wc(eager['seconds']['forward'])}, peak growth "
                     f"{eager['growth'] / gib:.2f} GiB" if "error" not in eager else f"; eager failed: {eager['error']}")
        print(line)


def _wc(pair) -> str:
    return f"{pair[0]:.1f} / {pair[1]:.1f} s"


def _ratio(a, b) -> str:
    return f"{a[0] / b[0]:.2f} / {a[1] / b[1]:.2f}"


if __name__ == "__main__":
    main()
