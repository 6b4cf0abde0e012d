"""Benchmark: every explainer at long-document scale, against one forward+backward and the band tensor.

Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512; random weights, a small BPE
tokenizer), one process per size:

  explainers   for 1,024 / 2,048 / 4,096 tokens: each explainer's wall time (and CPU time) as a ratio to one
               forward+backward (the gradient of the target's logit with respect to the embeddings output, as an
               IG step) timed just before it, the median over --repeats such pairs, and its peak extra memory as
               a ratio to the band tensor (AttentionBands.nbytes). Peak extra memory = peak resident set
               (VmHWM, reset through /proc/self/clear_refs after malloc_trim) minus the resident set at the start,
               as Explanation.peak_bytes measures it; for the gradient explainers also the part above one
               forward+backward's own peak (RSS peaks vary by a few hundred MiB from run to run at these sizes).
               "traced": the peak of the explainer's own numpy / Python allocations (tracemalloc, a separate
               run; torch's tensors are not traced): the bands, gradient bands, products and vectors it builds
               beside the model's pass. raw_attention and rollout read the analysis's
               bands (the analysis forward is not counted: every page has it already). IG runs only at the sizes
               of --ig-at (its cost is n_steps forward+backwards by construction).
               Targets: every explainer except IG <= 3 x one forward+backward; rollout and GAE <= 0.5 x the band
               tensor in extra memory (GAE: above its forward+backward).

IG against captum's recipes (every internal batch size): benchmarks/attribution.py.

    /work/main/.venv/bin/python benchmarks/explainers.py [--sizes 1024 2048 4096] [--ig-at 1024] [--ig-steps 8]

The machine is shared: the load average is printed before every size; wall-clock ratios follow the neighbours'
load, CPU-time ratios follow the work.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from _models import base_model  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.attribution.backward import backward  # noqa: E402
from longviz_core.attribution.peak_memory import PeakMemory  # noqa: E402


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {gb:.0f} GiB, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def document(model, n: int) -> lv.DocumentAnalysis:
    from tiny import text_of

    a = lv.analyze(model, text_of(2 * n), max_tokens=n)
    assert a.n == n, (a.n, n)
    return a


def forward_backward(model, analysis) -> tuple[float, float, int | None]:
    """(wall s, CPU s, peak extra bytes) of one forward+backward: d logit / d embeddings output, no attentions."""
    with PeakMemory(model.device) as peak:
        w0, c0 = time.perf_counter(), time.process_time()
        backward(model, analysis, analysis.predicted, "logit", hidden=[0])
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return wall, cpu, peak.bytes


def explainers_part(model, sizes, ig_at, ig_steps, repeats) -> None:
    for n in sizes:
        print(f"\n[{n} tokens] {load()}", flush=True)
        t0 = time.perf_counter()
        analysis = document(model, n)
        band = analysis.attention.nbytes
        print(f"  analysis forward (with attentions) {time.perf_counter() - t0:.1f} s; band tensor "
              f"{band / 2**20:.0f} MiB", flush=True)
        ref = forward_backward(model, analysis)  # warm-up: first-touch page faults, allocator
        print(f"  {'explainer':<14}{'seconds':>9}{'x f+b':>8}{'x f+b CPU':>11}{'peak MiB':>10}{'x band':>8}"
              f"{'above f+b':>11}{'traced':>10}", flush=True)
        rows = []
        for method, info in lv.EXPLAINERS.items():
            opts = {}
            if method == "ig":
                if n not in ig_at:
                    continue
                opts = {"n_steps": ig_steps, "use_cache": False}
            gradient = info.cost not in ("none", "attention")
            pairs = []  # (explainer wall, CPU, peak), (reference wall, CPU, peak) timed just before it
            for _ in range(1 if method == "ig" else repeats):
                if gradient:
                    ref = forward_backward(model, analysis)
                c0 = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    e = lv.explain(model, analysis, method, **opts)
                pairs.append(((e.seconds, time.process_time() - c0, e.peak_bytes or 0), ref))
            traced = float("nan")
            if method != "ig":  # a separate run: tracemalloc slows allocation down
                tracemalloc.start()
                lv.explain(model, analysis, method, **opts)
                traced = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            med = lambda f: statistics.median(f(x, r) for x, r in pairs)  # noqa: E731
            seconds = min(x[0] for x, _ in pairs)
            ratio, cpu_ratio = med(lambda x, r: x[0] / r[0]), med(lambda x, r: x[1] / r[1])
            peak = min(x[2] for x, _ in pairs)
            above = med(lambda x, r: (x[2] - (r[2] or 0)) / band) if gradient else float("nan")
            name = method + (f" ({ig_steps} steps)" if method == "ig" else "")
            rows.append({"n": n, "method": method, "seconds": seconds, "ratio": ratio, "cpu_ratio": cpu_ratio,
                         "peak_mib": peak / 2**20, "peak_band": peak / band, "above_fb_band": above,
                         "traced_band": traced / band, "reference_seconds": min(r[0] for _, r in pairs)})
            print(f"  {name:<14}{seconds:9.2f}{ratio:8.2f}{cpu_ratio:11.2f}{peak / 2**20:10.0f}{peak / band:8.2f}"
                  f"{above:11.2f}{traced / band:10.3f}", flush=True)
        print(f"  one forward+backward: {ref[0]:.2f} s wall, {ref[1]:.2f} s CPU, peak extra {(ref[2] or 0) / 2**20:.0f}"
              f" MiB ({(ref[2] or 0) / band:.2f} x band) (the last one); {load()}", flush=True)
        print("  json " + json.dumps(rows), flush=True)
        del analysis


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--ig-at", type=int, nargs="*", default=[1024])
    ap.add_argument("--ig-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2, help="(reference, explainer) pairs per explainer")
    args = ap.parse_args()
    print("machine:", machine())
    print("GPU:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU only)")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "base"
        model = base_model(model_dir)
        explainers_part(model, args.sizes, set(args.ig_at), args.ig_steps, args.repeats)


if __name__ == "__main__":
    main()
