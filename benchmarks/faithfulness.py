"""Cost of the deletion test on the demo: the exact first-flip scan per ranking and random seed, per batch size,
next to IG's cost.

    python benchmarks/faithfulness.py [--tokens 2048] [--docs 0,2] [--batch-sizes 1,8] [--seeds 5]

--docs: demo rows; 0 is a document whose decision never flips (every scan runs to the end: the worst case),
2 one whose decision flips under every ranking.

Prints, per document: tokens, IG seconds, one forward; then per batch size the copies scored, the wall time and
the per-copy cost, and each scan's first flip (tokens removed) and its copies; and the agreement table's cost for
the same document.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.attribution import ConvergenceWarning, integrated_gradients  # noqa: E402
from longviz_core.runtime import default_device  # noqa: E402
from longviz_core.views import agreement as ag  # noqa: E402
from longviz_core.views import faithfulness as fa  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--docs", default="0,2")
    parser.add_argument("--ig-steps", type=int, default=50)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--seeds", type=int, default=len(fa.DEFAULT_SEEDS))
    parser.add_argument("--max-removed", type=float, default=1.0)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, device {default_device()}, load average {os.getloadavg()[0]:.1f}")
    model = lv.load_model("demo")
    df = lv.load_dataset("demo", id2label=model.id2label)
    for text in df["text"].iloc[[int(d) for d in args.docs.split(",")]]:
        analysis = lv.analyze(model, text, args.tokens)
        started = time.perf_counter()
        ig = integrated_gradients(model, analysis, None, args.ig_steps, use_cache=False)
        print(f"\n{analysis.n} tokens: IG {args.ig_steps} steps {time.perf_counter() - started:.2f} s")
        inputs = analysis.encoded.torch_inputs(model.device)
        started = time.perf_counter()
        with torch.no_grad():
            model.model(**inputs)
        print(f"  one forward (batch 1): {time.perf_counter() - started:.3f} s")
        for b in (int(v) for v in args.batch_sizes.split(",")):
            res = fa.faithfulness(model, analysis, ig.scores, batch_size=b, seeds=range(args.seeds),
                                  max_removed=args.max_removed)
            print(f"  batch {b:>2}: {res.forward_passes:>5} copies in {res.seconds:7.2f} s "
                  f"({res.seconds / res.forward_passes:.4f} s/copy); load average {os.getloadavg()[0]:.1f}")
            runs = [*res.curves.values(), *(res.random.runs if res.random is not None else ())]
            for c in runs:
                name = fa.RANKING_LABELS[c.name] + ("" if c.seed is None else f" seed {c.seed}")
                flip = ("no flip" if c.flip_removed is None
                        else f"first flip at {c.flip_removed} ({c.flip_fraction:.3f})")
                print(f"    {name:<18} {flip:<28} scanned {c.scanned:>5} counts")
        started = time.perf_counter()
        mask = ag.mask_for(analysis.tokens, ag.MASK_KINDS)
        ag.agreement_table(analysis, ig.scores, importance=torch.rand(model.num_layers, model.num_heads).numpy(),
                           mask=mask, layer_range=(0, 1))
        t_table = time.perf_counter() - started
        started = time.perf_counter()
        for metric in ag.HEAD_METRICS:
            for mode in ag.MASK_MODES:
                ag.head_agreement(analysis, ig.scores, metric, mask, mode)
        print(f"  agreement table (18 configurations) {t_table:.2f} s; 6 per-head grids "
              f"{time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
