"""Precompute throughput on the demo: documents per minute for attention only and for Integrated Gradients
(50 steps), with 1 and 2 workers (shard processes), and the time a dataset of the paper's size would take.

    LONGVIZ_CACHE_DIR=.longviz-cache /work/venv/bin/python benchmarks/precompute.py [--docs-attention 24]
        [--docs-ig 4] [--max-tokens 2048] [--base [--base-threads 1]]

Each configuration runs `python -m longviz_core precompute` as N concurrent shard processes (`--shard i/N`)
into a fresh store: one worker on every core, one single-threaded worker, one single-threaded worker per
core. Throughput counts compute only (the sum of each worker's per-unit seconds from the store's logs; the
slowest worker sets the pace); the wall time, which adds process start-up and model loading (seconds, once
per worker), is printed beside it. The extrapolation to 5,350
documents scales by the mean token count (Longformer's cost is linear in length), so it is for documents
truncated at --max-tokens like the paper's ~5,000-word papers, with THIS model; the paper's model is
longformer-base (12 x 12, hidden 768): --base times one document at those dimensions (random weights) and
projects the paper's dataset from it.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PAPER_DOCS = 5350


def run(what: str, workers: int, threads: int, docs: int, n_steps: int, max_tokens: int, out: Path) -> dict:
    from longviz_core.dataset.run import read_logs
    from longviz_core.dataset.store import ResultStore

    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "longviz_core", "precompute", "--model", "demo", "--dataset",
                               "demo", "--what", what, "--n-steps", str(n_steps), "--max-tokens", str(max_tokens),
                               "--limit", str(docs), "--shard", f"{i}/{workers}", "--threads", str(threads),
                               "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(workers)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"precompute failed:\n{err[-3000:]}")
    wall = time.monotonic() - started
    logs = read_logs(out)
    busy = logs.groupby("writer")["seconds"].sum().max()
    tokens = ResultStore(out).documents()["n_tokens"].mean()
    return {"docs": docs, "wall": wall, "busy": busy, "per_min": docs / busy * 60, "tokens": tokens,
            "threads": threads}


def base_projection(max_tokens: int, n_steps: int) -> None:
    """One document at longformer-base dimensions (12 x 12, hidden 768, window 512; random weights, the demo
    tokenizer): the attention unit, and IG at 2 and 4 steps to split its cost into fixed + per step."""
    import torch
    from transformers import AutoTokenizer, LongformerConfig, LongformerForSequenceClassification

    from longviz_core import load_dataset, load_model
    from longviz_core.dataset.kinds import Settings
    from longviz_core.dataset.run import precompute, read_logs
    from longviz_core.demo import ensure_demo

    demo = ensure_demo()
    tok = AutoTokenizer.from_pretrained(demo.model_dir)
    config = LongformerConfig(vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                              intermediate_size=3072, attention_window=512, max_position_embeddings=4098,
                              pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, type_vocab_size=1,
                              num_labels=2)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        LongformerForSequenceClassification(config).save_pretrained(Path(tmp) / "base")
        tok.save_pretrained(Path(tmp) / "base")
        model = load_model(str(Path(tmp) / "base"))
        df = load_dataset("demo", id2label=model.id2label)
        longest = df.iloc[[int(df["text"].str.len().idxmax())]].reset_index(drop=True)
        seconds = {}
        for what, steps in (("attention", 2), ("attribution", 2), ("attribution", 4)):
            out = Path(tmp) / f"store-{what}-{steps}"
            precompute(model, longest, out, what, Settings(max_tokens=max_tokens, n_steps=steps))
            logs = read_logs(out).set_index("kind")["seconds"]
            seconds[(what, steps)] = float(logs[what])
    per_step = (seconds[("attribution", 4)] - seconds[("attribution", 2)]) / 2
    ig = seconds[("attribution", 2)] + (n_steps - 2) * per_step
    att = seconds[("attention", 2)]
    threads = torch.get_num_threads()
    print(f"longformer-base, random weights, {max_tokens} tokens, {threads} thread(s): attention unit "
          f"{att:.1f} s, IG {per_step:.1f} s per step -> {n_steps} steps {ig:.0f} s per document")
    print(f"  5,350 documents: attention only {PAPER_DOCS * att / 3600:.1f} h, attention + IG {n_steps} steps "
          f"{PAPER_DOCS * (att + ig) / 3600:.0f} h on this machine (one worker, {threads} thread(s))")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs-attention", type=int, default=24)
    ap.add_argument("--docs-ig", type=int, default=4)
    ap.add_argument("--n-steps", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--base", action="store_true", help="also project longformer-base dimensions (slow)")
    ap.add_argument("--base-threads", type=int, default=None, help="torch threads for --base (default: all cores)")
    a = ap.parse_args()

    from longviz_core.demo import ensure_demo

    metrics = ensure_demo().metrics
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    print(f"demo model: {metrics.get('n_parameters', '?'):,} parameters; documents truncated at {a.max_tokens} tokens")
    print(f"{'kind':<26}{'workers':>8}{'threads':>8}{'docs':>6}{'tokens':>8}{'docs/min':>10}{'wall s':>8}"
          f"{'5,350 docs':>13}")
    cores = os.cpu_count() or 1
    # one worker on every core; one single-threaded worker; one single-threaded worker per core
    layouts = sorted({(1, cores), (1, 1), (cores, 1)}) if cores > 1 else [(1, 1)]
    for what, docs, steps in (("attention", a.docs_attention, a.n_steps),
                              ("attribution", a.docs_ig, a.n_steps)):
        for workers, threads in layouts if docs else ():
            with tempfile.TemporaryDirectory() as tmp:
                r = run(what, workers, threads, docs, steps, a.max_tokens, Path(tmp) / "store")
            # the paper's documents are all at the truncation length: scale by tokens (linear cost)
            per_min = r["per_min"] * r["tokens"] / a.max_tokens
            hours = PAPER_DOCS / per_min / 60
            label = "attention only" if what == "attention" else f"attention + IG {steps} steps"
            print(f"{label:<26}{workers:>8}{r['threads']:>8}{docs:>6}{r['tokens']:>8.0f}{r['per_min']:>10.1f}"
                  f"{r['wall']:>8.0f}{hours:>11.1f} h", flush=True)
    print("docs/min: compute only, at the documents' own lengths; 5,350 docs: rescaled to documents of "
          f"{a.max_tokens} tokens, this model, this machine.")
    if a.base:
        if a.base_threads:
            import torch

            torch.set_num_threads(a.base_threads)
        base_projection(a.max_tokens, a.n_steps)


if __name__ == "__main__":
    main()
