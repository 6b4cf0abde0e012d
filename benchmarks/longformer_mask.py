"""CPU seconds of Longformer forwards with its padding mask built as the one row it reads (model/row_mask.py)
against transformers' whole (batch, 1, n, n) mask, and with its window products computed block by block
(model/band_products.py) against transformers' overlapping chunks, forwards and forward + backward (IG's step), in
this process with one torch thread, alternating, so all see the same machine; and Streamlit's full garbage
collection after a script run with the libraries frozen (pages/_ui/imports.py) against without, in a fresh
subprocess each.

    python benchmarks/longformer_mask.py [--tokens 2597] [--batches 1 8] [--repeats 3]

The model is the demo's Longformer (4 layers of 4 heads, hidden 128) or, with --base, Longformer-base dimensions
(12 x 12, hidden 768, random weights); the document is the demo's document 0 at --tokens. Results in
docs/benchmarks.md, "Reruns and Longformer's mask" and "Longformer's window products".
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

GC_SCRIPT = """
import gc, sys, time
sys.path.insert(0, sys.argv[1])
from pages._ui import imports
if sys.argv[2] == "frozen":
    imports.settle()
else:
    imports.import_libraries()
import longviz_core as lv
lv.load_model("demo")
times = []
for _ in range(5):
    start = time.process_time()
    gc.collect(2)
    times.append(time.process_time() - start)
print(sorted(times)[2], len(gc.get_objects()))
"""


PRODUCTS = ("_sliding_chunks_query_key_matmul", "_sliding_chunks_matmul_attn_probs_value")


@contextmanager
def _chunked(net):
    """transformers' own window products for the duration (the loaded model's block products set aside)."""
    kept = [(m, {name: m.__dict__.pop(name) for name in PRODUCTS}) for m in net.modules()
            if all(name in m.__dict__ for name in PRODUCTS)]
    try:
        yield
    finally:
        for m, methods in kept:
            m.__dict__.update(methods)


def _step(net, ids, backward: bool) -> float:
    """CPU seconds of one forward (and, with `backward`, the gradient of the logits by the input embeddings)."""
    import torch

    global_mask = torch.zeros_like(ids)  # (batch, n): the first token global, as the classifier sets it itself
    global_mask[:, 0] = 1
    start = time.process_time()
    if backward:
        embeds = net.get_input_embeddings()(ids).detach().requires_grad_(True)
        net(inputs_embeds=embeds, global_attention_mask=global_mask).logits.sum().backward()
    else:
        with torch.no_grad():
            net(input_ids=ids, global_attention_mask=global_mask)
    return time.process_time() - start


def _forwards(model, ids, repeats: int) -> dict[str, list[float]]:
    from longviz_core.model.capture import implementation

    net = model.model
    kept = net.config._attn_implementation
    runs = {"row": (kept, False, False), "whole": ("eager", False, False), "chunks": (kept, True, False),
            "row+backward": (kept, False, True), "chunks+backward": (kept, True, True)}
    out = {name: [] for name in runs}
    _step(net, ids, False)  # first calls
    for _ in range(repeats):
        for name, (mask, chunked, backward) in runs.items():
            with implementation(net, mask), (_chunked(net) if chunked else nullcontext()):
                out[name].append(_step(net, ids, backward))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2597)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", action="store_true", help="Longformer-base dimensions, random weights (saved "
                        "once under the temporary folder)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    import longviz_core as lv

    if args.base:
        sys.path.insert(0, str(ROOT / "tests"))  # the tests' tokenizer, for the base model's folder
        from _models import base_model

        model = base_model(Path(tempfile.gettempdir()) / "longviz-bench-longformer-base")
    else:
        model = lv.load_model("demo")
    text = lv.load_dataset("demo", id2label=model.id2label)["text"].iloc[0]
    analysis = lv.analyze(model, text, max_tokens=args.tokens)
    from _models import cpu_name

    n = model.family.padded_length(analysis.n)
    print(f"{cpu_name()}, {os.cpu_count()} CPUs, torch threads 1, load average {os.getloadavg()[0]:.1f}; "
          f"{'Longformer-base dimensions' if args.base else 'the demo Longformer'}, {analysis.n:,} tokens "
          f"(padded to {n:,})")
    for batch in args.batches:
        ids = torch.as_tensor(analysis.input_ids)[None].repeat(batch, 1)  # (batch, n)
        got = _forwards(model, ids, args.repeats)
        med = {name: statistics.median(times) for name, times in got.items()}
        row, whole = med["row"], med["whole"]
        print(f"  batch {batch}: one row {row:.3f} s CPU, whole mask {whole:.3f} s CPU ({whole / row:.2f} x); the "
              f"whole mask's cells: {batch * n * n / 1e6:.0f} M (bool, then float32: {batch * n * n * 5 / 2**20:.0f} "
              "MiB)", flush=True)
        print(f"    window products in blocks (both with the one row): forward {row:.3f} s CPU, transformers' chunks "
              f"{med['chunks']:.3f} s ({med['chunks'] / row:.2f} x); forward + backward {med['row+backward']:.3f} s, "
              f"chunks {med['chunks+backward']:.3f} s ({med['chunks+backward'] / med['row+backward']:.2f} x)",
              flush=True)
    for mode in ("frozen", "not frozen"):
        done = subprocess.run([sys.executable, "-c", GC_SCRIPT, str(ROOT), mode], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        seconds, tracked = done.stdout.split()
        print(f"  full collection after loading the demo, libraries {mode}: {float(seconds):.4f} s CPU, "
              f"{int(tracked):,} objects walked")


if __name__ == "__main__":
    main()
