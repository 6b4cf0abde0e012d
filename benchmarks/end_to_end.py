"""Benchmark: one long document end to end at ModernBERT-base dimensions on this CPU (the analysis, the default views,
Integrated Gradients, the Faithfulness curves), each stage as a multiple of one sdpa forward of the same document.

ModernBERT-base dimensions with random weights (benchmarks/families.py's `base_modernbert`: 22 layers x 12 heads,
hidden 768, 8 full layers and 14 sliding ones), saved once under --folder. For each size, in this one process:
- one sdpa forward (the unit), timed before and after every stage, the stage's unit the mean of the two (as
  benchmarks/faithfulness.py `timed` does: on a shared machine the load moves);
- `lv.analyze` at that size;
- the default views exactly as families.py measures them (`views`: received attention, the top-64 lists both
  ways, the pooled 64 x 64 grid, the token-count tables), after its warm-up;
- Integrated Gradients of the predicted class with --steps steps (default 4: a step at 8,192 tokens is about
  three forwards, and 50 steps would take hours of this CPU), no result cache, its internal batch as the app
  chooses it (attribution.cost.internal_batch_size_for, on a fresh timing cache);
- the Faithfulness page's curves (evaluation.faithfulness with flip_bound=0: AOPC / LOdds of attention, |IG|,
  |IG| x attention and five random seeds, batches of copies as the app runs them) on a fresh scan store.
Each stage: wall and CPU seconds (CPU of all the process's threads: the figure to read on a shared machine), its
multiple of the forward, the peak resident growth over the stage (freed memory is handed back to the system
first, malloc_trim, so a stage is not measured inside what an earlier one left allocated), and the wall time the
pages' estimates gave before it started (attribution.budget.analysis_notice's analysis and views,
estimate_ig_seconds, evaluation.forecast.deletion_seconds; timings in a fresh cache). Before IG and the curves
their memory is checked against the memory available (attribution.cost's per-step formula); a stage that would
not fit is said so and skipped (the curves then rank by random scores: the orders' source does not change what
they cost).

    /work/main/.venv/bin/python benchmarks/end_to_end.py [--sizes 8192] [--steps 4] [--folder DIR]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

# a fresh cache (IG's timings, the scan store): nothing this machine measured before is reused
os.environ["LONGVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="longviz-bench-e2e-cache-")

import longviz_core as lv  # noqa: E402
from _models import cpu_name  # noqa: E402
from families import VIEWS, _peak, _reset_peak, _rss, base_modernbert, views, warm_up  # noqa: E402
from longviz_core.attribution import ConvergenceWarning, budget, cost, integrated_gradients  # noqa: E402
from longviz_core.evaluation import faithfulness as fa  # noqa: E402
from longviz_core.evaluation import forecast  # noqa: E402
from longviz_core.evaluation.deletion import default_batch_size  # noqa: E402
from longviz_core.model.capture import implementation  # noqa: E402
from tiny import text_of  # noqa: E402

GIB = 2**30


def sdpa_forward(model, ids) -> tuple[float, float]:
    """(wall, CPU) seconds of one forward of `ids` through transformers' sdpa attention, no gradients."""
    with torch.no_grad(), implementation(model.model, "sdpa"):
        wall, cpu = time.perf_counter(), time.process_time()
        model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
        return time.perf_counter() - wall, time.process_time() - cpu


def fits(what: str, need: float, model) -> bool:
    free = cost._free_memory_bytes(model.device)
    if need <= free:
        print(f"  {what}: about {need / GIB:.1f} GiB by attribution.cost's formula, {free / GIB:.1f} GiB available",
              flush=True)
        return True
    print(f"  {what} does NOT fit: about {need / GIB:.1f} GiB by attribution.cost's formula, {free / GIB:.1f} GiB "
          "available; skipped", flush=True)
    return False


def _trim() -> None:
    """Freed heap handed back to the system (glibc), so the resident size is what is alive."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: growth is then measured from what the allocator keeps
        pass


def one_size(model, n: int, steps: int) -> list[dict]:
    """Every stage at n tokens: [{"stage", "wall", "cpu", "unit": (wall, cpu), "growth", "estimate"}]."""
    text = text_of(n + 200)
    ids = torch.as_tensor(model.encode(text, n).input_ids)[None]  # (1, n)
    started = time.perf_counter()
    forward = cost.estimate_forward(model, ids.shape[1])
    estimates = {"analysis": budget.ANALYSIS_FORWARDS * forward.seconds,
                 "ig": cost.estimate_ig_seconds(model, ids.shape[1], steps)}
    print(f"\n{ids.shape[1]:,} tokens: the pages' estimates took {time.perf_counter() - started:.1f} s: one forward "
          f"{forward.seconds:.1f} s wall from {forward.basis}; IG {cost.estimate_basis(model, ids.shape[1])}",
          flush=True)
    rows, forwards = [], [sdpa_forward(model, ids)]
    print(f"sdpa forward {forwards[0][0]:.1f} / {forwards[0][1]:.1f} s (wall / CPU), load {os.getloadavg()[0]:.1f}",
          flush=True)

    def stage(name, work, estimate=None):
        _trim()
        _reset_peak()
        before = _rss()
        wall, cpu = time.perf_counter(), time.process_time()
        out = work()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        growth = _peak() - before
        forwards.append(sdpa_forward(model, ids))
        unit = tuple((a + b) / 2 for a, b in zip(forwards[-2], forwards[-1]))
        rows.append({"stage": name, "wall": wall, "cpu": cpu, "unit": unit, "growth": growth, "estimate": estimate})
        print(f"  {name:<34} {wall:8.1f} / {cpu:8.1f} s  = {wall / unit[0]:6.2f} / {cpu / unit[1]:6.2f} x forward "
              f"(forward {unit[0]:.1f} / {unit[1]:.1f} s)  peak growth {growth / GIB:5.2f} GiB  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        return out

    analysis = stage("analysis (lv.analyze)", lambda: lv.analyze(model, text, max_tokens=n), estimates["analysis"])
    parts = {}

    def timed(name, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        parts[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        return out

    stage("views (" + ", ".join(VIEWS) + ")", lambda: views(analysis, timed))
    print("    " + "; ".join(f"{v} {parts[v][0]:.1f} / {parts[v][1]:.1f} s" for v in VIEWS), flush=True)

    per_step = cost._bytes_per_step(model, n, "fp32")
    scratch = Path(tempfile.mkdtemp(prefix="longviz-bench-e2e-"))  # fresh timing and scan stores: nothing reused
    batch = cost.internal_batch_size_for(model, n, steps, cache_dir=scratch / "ig")
    scores = None
    if fits(f"IG, {steps} steps in batches of {batch} ({per_step / GIB:.1f} GiB a step)", batch * per_step, model):
        def ig():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # a few steps do not converge: said below
                return integrated_gradients(model, analysis, None, n_steps=steps, use_cache=False,
                                            cache_dir=scratch / "ig")

        attribution = stage(f"Integrated Gradients, {steps} steps", ig, estimates["ig"])
        scores = attribution.scores
        print(f"    batches of {attribution.internal_batch_size}; completeness gap {attribution.delta:+.4f} of "
              f"F(x) - F(x') = {attribution.expected:+.4f} ({steps} steps do not converge: the cost is the point)",
              flush=True)
    if scores is None:
        scores = np.random.default_rng(0).normal(size=analysis.n)  # stands in for |IG|: the same cost
        print("    the curves rank by random scores instead of IG's", flush=True)
    copies = default_batch_size(model, analysis.n)
    # a forward without gradients frees each layer's activations once the next layer has its output: about one
    # layer's share of a gradient step per copy at a time
    if fits(f"the curves, batches of {copies} copies", copies * per_step / model.num_layers, model):
        runs = len(fa.RANKINGS) - 1 + len(fa.DEFAULT_SEEDS)  # the score rankings and the random seeds
        result = stage("Faithfulness curves (flip_bound=0)",
                       lambda: fa.faithfulness(model, analysis, scores, flip_bound=0, cache_dir=scratch / "scans"),
                       forecast.deletion_seconds(model, analysis, runs))
        print(f"    copies scored {result.forward_passes:,} of {result.copies_needed:,} needed", flush=True)
    return rows


def table(rows: list[dict]) -> None:
    """The stages as a Markdown table; the analysis's estimate covers the views too (one notice for both)."""
    print("\n| stage | wall | CPU | × forward (wall / CPU) | peak growth | estimated beforehand (wall) |\n"
          "|---|---:|---:|---:|---:|---:|")
    for r in rows:
        estimate = "" if r["estimate"] is None else f"{r['estimate']:.0f} s"
        print(f"| {r['stage']} | {r['wall']:.1f} s | {r['cpu']:.1f} s | {r['wall'] / r['unit'][0]:.2f} / "
              f"**{r['cpu'] / r['unit'][1]:.2f}** | {r['growth'] / GIB:.2f} GiB | {estimate} |")
    wall, cpu = sum(r["wall"] for r in rows), sum(r["cpu"] for r in rows)
    units = [sum(r[k] / r["unit"][i] for r in rows) for i, k in enumerate(("wall", "cpu"))]
    print(f"| all stages | {wall:.1f} s | {cpu:.1f} s | {units[0]:.2f} / **{units[1]:.2f}** | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192])
    parser.add_argument("--steps", type=int, default=4, help="Integrated Gradients steps (captum's minimum is 2)")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "longviz-bench-modernbert")
    args = parser.parse_args()
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, {cost._free_memory_bytes(torch.device('cpu')) / GIB:.1f} GiB "
          f"available; torch {torch.__version__}, {torch.get_num_threads()} threads; load average "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} at start", flush=True)
    model = base_modernbert(args.folder)
    print(f"ModernBERT-base dimensions: {model.num_layers} layers x {model.num_heads} heads, random weights "
          f"({args.folder}); forwards but the analysis through {model.family.forward_implementation} attention",
          flush=True)
    warm_up(model, "modernbert")
    with warnings.catch_warnings():  # first calls: captum, autograd, the deletion test's imports
        warnings.simplefilter("ignore", ConvergenceWarning)
        warm = lv.analyze(model, text_of(100), max_tokens=64)
        integrated_gradients(model, warm, None, n_steps=2, use_cache=False,
                             cache_dir=Path(tempfile.mkdtemp(prefix="longviz-bench-e2e-warm-")))
    for n in args.sizes:
        rows = one_size(model, n, args.steps)
        table(rows)
    print(f"\nload average {' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end", flush=True)


if __name__ == "__main__":
    main()
