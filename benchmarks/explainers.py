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
  ig-batch     Integrated Gradients at 512 tokens: captum's default recipe (internal_batch_size=None: every step
               in one batch) with b steps for every b of --batches, and a --batch-steps run with longviz's
               internal_batch_size_for (nothing timed yet: its first choice); seconds per step and peak extra
               memory, each in a fresh process. Runs that would not fit in the free memory are skipped.

    /work/main/.venv/bin/python benchmarks/explainers.py [--part explainers|ig-batch|all] [--sizes 1024 2048 4096]
        [--ig-at 1024] [--ig-steps 8] [--batch-steps 50] [--batches 2 4 8 12 16]

The machine is shared: the load average is printed before every size; wall-clock ratios follow the neighbours'
load, CPU-time ratios follow the work.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
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
from longviz_core import attribution as A  # noqa: E402
from longviz_core.attribution import cost  # noqa: E402
from longviz_core.attribution import explainers as ex  # noqa: E402


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
    with ex._PeakMemory(model.device) as peak:
        w0, c0 = time.perf_counter(), time.process_time()
        ex._backward(model, analysis, analysis.predicted, "logit", hidden=[0])
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


def ig_child(model_dir: str, n: int, steps: int, batch: int) -> None:
    """One IG run in this (fresh) process: seconds and peak extra memory, as JSON on stdout."""
    model = base_model(Path(model_dir))
    analysis = document(model, n)
    if batch == 0:
        batch = A.internal_batch_size_for(model, n, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import captum.attr  # noqa: F401  (its import is not part of the run)

        with ex._PeakMemory(model.device) as peak:
            w0, c0 = time.perf_counter(), time.process_time()
            A.integrated_gradients(model, analysis, None, steps, internal_batch_size=batch, use_cache=False)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(json.dumps({"batch": batch, "seconds": wall, "cpu": cpu, "peak": peak.bytes}))


def ig_batch_part(model_dir: Path, n: int, steps: int, batches) -> None:
    """captum's recipe with b steps (internal_batch_size=None: all b steps in one batch) for every b, then
    longviz's choice for `steps` steps; per step, the two endpoint forwards included."""
    print(f"\n[IG internal batch] {n} tokens, one fresh process per run; {load()}", flush=True)
    print(f"  {'run':<44}{'batch':>6}{'seconds':>9}{'s/step':>8}{'CPU s/step':>11}{'peak MiB':>10}{'MiB/step':>10}")
    per_step = cost._bytes_per_step(lv.load_model(str(model_dir), device="cpu"), n, "fp32")
    results = []
    model = lv.load_model(str(model_dir), device="cpu")
    with tempfile.TemporaryDirectory() as empty:
        first = A.internal_batch_size_for(model, n, steps, cache_dir=empty)
    print(f"  longviz's first choice for {steps} steps (nothing timed yet): {first}", flush=True)
    for b, k in [*((b, b) for b in batches), (0, steps)]:
        # longviz's run holds the batch it will choose from the timings recorded so far, not all its steps
        need = (b or A.internal_batch_size_for(model, n, steps)) * per_step * 1.3
        if need > cost._free_memory_bytes(torch.device("cpu")):
            print(f"  skipped batch {b}: needs about {need / 2**30:.0f} GiB, more than is free", flush=True)
            continue
        out = subprocess.run([sys.executable, __file__, "--ig-child", str(model_dir), str(n), str(k), str(b)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        # the captum runs record their speeds (as every run does): longviz's run chooses from them
        label = f"captum's recipe, {k} steps in one batch" if b else f"longviz (from the timings above), {k} steps"
        results.append({**r, "steps": k, "label": label})
        print(f"  {label:<44}{r['batch']:>6}{r['seconds']:9.1f}{r['seconds'] / k:8.2f}{r['cpu'] / k:11.2f}"
              f"{r['peak'] / 2**20:10.0f}{r['peak'] / 2**20 / r['batch']:10.0f}  ({load()})", flush=True)
    print("  json " + json.dumps(results), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ig-child":
        model_dir, n, steps, batch = sys.argv[2], *map(int, sys.argv[3:6])
        return ig_child(model_dir, n, steps, batch)
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="all", choices=("explainers", "ig-batch", "all"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--ig-at", type=int, nargs="*", default=[1024])
    ap.add_argument("--ig-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2, help="(reference, explainer) pairs per explainer")
    ap.add_argument("--batch-tokens", type=int, default=512)
    ap.add_argument("--batch-steps", type=int, default=50, help="steps of longviz's run (default 50)")
    ap.add_argument("--batches", type=int, nargs="+", default=[2, 4, 8, 12, 16],
                    help="captum's recipe with b steps, all in one batch (captum needs 2 steps at least)")
    args = ap.parse_args()
    print("machine:", machine())
    print("GPU:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU only)")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "base"
        model = base_model(model_dir)
        if args.part in ("ig-batch", "all"):
            ig_batch_part(model_dir, args.batch_tokens, args.batch_steps, args.batches)
        if args.part in ("explainers", "all"):
            explainers_part(model, args.sizes, set(args.ig_at), args.ig_steps, args.repeats)


if __name__ == "__main__":
    main()
