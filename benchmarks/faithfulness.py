"""Cost of the deletion test's stages as multiples of one forward of the same document, and copies scored against
copies needed (what sharing removed sets and batching saved).

    python benchmarks/faithfulness.py [--demo-doc 0] [--base 1024,4096] [--exact-s 600] [--explainers]
                                      [--base-dir /tmp/longviz-base] [--base-stages curves,bound]

Rows, per document (the demo's document at the page default, all its tokens; random Longformer-base dimensions
at each --base length, benchmarks/_models.py):
    forward          one forward of the intact document (batch 1), the unit of every other row
    curves           the first numbers: AOPC / LOdds of the Faithfulness page's rankings (attention, |IG|,
                     |IG| x attention, 5 random seeds)
    flips <= N       curves + every count up to the default flip bound (evaluation.deletion.FLIP_BOUND)
    exact            curves + every count to the end (resumable: stopped after --exact-s seconds, then the part
                     scored and the copies left are printed)
    explainers       (--explainers, demo only) every explainer but IG (cached once the Attribution page has run),
                     then the leaderboard's curves and its flips within the bound
IG's scores come from integrated_gradients with 8 steps on the demo (the ranking's cost is not part of the deletion
test); on the random Longformer-base weights a random score vector stands in for them (the orders' source does not
change what a stage costs).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
import types
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.attribution import ConvergenceWarning, integrated_gradients  # noqa: E402
from longviz_core.dataset import leaderboard as lb  # noqa: E402
from longviz_core.runtime import default_device  # noqa: E402
from longviz_core.evaluation import faithfulness as fa  # noqa: E402


def one_forward(model, analysis, repeats: int = 3) -> float:
    inputs = analysis.encoded.torch_inputs(model.device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        with torch.no_grad():
            model.model(**inputs)
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def line(name: str, seconds: float, forward: float, res=None) -> None:
    copies = "" if res is None else f"  copies {res.forward_passes:>6,} of {res.copies_needed:>6,} needed"
    print(f"  {name:<24} {seconds:8.1f} s  {seconds / forward:7.1f} forwards (one: {forward:.2f} s){copies}  "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)


def timed(model, analysis, work):
    """(work(), the forward's time as the mean of one measured just before and one just after): on a shared
    machine the load moves, and the ratio is only meaningful against a forward taken at the same time."""
    before = one_forward(model, analysis, 1)
    out = work()
    return out, (before + one_forward(model, analysis, 1)) / 2


def deletion_stages(model, analysis, stages, exact_s: float, cache_dir: Path, ig_steps: int = 8) -> None:
    forward = one_forward(model, analysis)
    print(f"\n{analysis.n:,} tokens: one forward {forward:.2f} s", flush=True)
    if ig_steps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            scores = integrated_gradients(model, analysis, None, ig_steps, use_cache=False).scores
    else:  # the orders' source does not change the cost: random scores stand in for |IG| (random weights anyway)
        scores = np.random.default_rng(0).normal(size=analysis.n)
    ig = types.SimpleNamespace(scores=scores)
    kwargs = dict(resume=True, cache_dir=cache_dir)
    if "curves" in stages:
        res, unit = timed(model, analysis, lambda: fa.faithfulness(model, analysis, ig.scores, flip_bound=0, **kwargs))
        line("curves", res.seconds, unit, res)
    if "bound" in stages:
        res, unit = timed(model, analysis, lambda: fa.faithfulness(model, analysis, ig.scores,
                                                                   flip_bound=fa.FLIP_BOUND, **kwargs))
        line(f"curves + flips <= {fa.FLIP_BOUND}", res.seconds, unit, res)
        print("    " + "; ".join(f"{res.label(r)}{'' if r.seed is None else f' {r.seed}'}: "
                                 f"{r.flip_text(res.n_removable)}" for r in res.runs), flush=True)
    if "exact" in stages:
        stop = threading.Event()
        timer = threading.Timer(exact_s, stop.set)
        timer.start()
        res, unit = timed(model, analysis, lambda: fa.faithfulness(model, analysis, ig.scores, **kwargs, stop=stop))
        timer.cancel()
        left = sum(res.n_removable - r.scanned for r in res.runs if r.flip_removed is None)
        state = "stopped" if res.stopped else "done"
        line(f"exact ({state})", res.seconds, unit, res)
        print(f"    copies left to the end: {left:,}; {res.seconds / max(1, res.forward_passes):.3f} s a copy "
              f"({res.seconds / max(1, res.forward_passes) / unit:.2f} forwards)", flush=True)


# every explainer but Shapley sampling, whose 1 + 25 x sentences copies are benchmarks/explainers.py --units
METHODS = [m for m in lv.EXPLAINERS if m != "shapley"]


def explainers(model, analysis, cache_dir: Path) -> None:
    def explain_all():
        started = time.perf_counter()
        made = {m: lv.explain(model, analysis, m) for m in METHODS if m not in ("ig", "random")}
        return made, time.perf_counter() - started

    (made, explained), forward = timed(model, analysis, explain_all)
    line("explainers (no IG)", explained, forward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        made["ig"] = lv.explain(model, analysis, "ig", n_steps=8, use_cache=False)
    for bound in (0, fa.FLIP_BOUND):
        runs, unit = timed(model, analysis, lambda: lb.document_leaderboard(
            model, analysis, METHODS, explanations=made, flip_bound=bound, resume=True,
            cache_dir=cache_dir))
        seconds = float(runs["deletion_seconds"].sum())
        line(f"leaderboard flips <= {bound}", seconds, unit)
        print(f"    explainers + this stage: {explained / forward + seconds / unit:.1f} forwards; copies "
              f"{int(runs['copies'].sum()):,}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--demo-doc", type=int, default=0)
    parser.add_argument("--demo-stages", default="curves,bound,exact")
    parser.add_argument("--base", default="1024,4096", help="Longformer-base lengths ('' for none)")
    parser.add_argument("--base-stages", default="curves,bound,exact")
    parser.add_argument("--base-dir", default=str(Path(tempfile.gettempdir()) / "longviz-bench-base"))
    parser.add_argument("--exact-s", type=float, default=600.0)
    parser.add_argument("--explainers", action="store_true")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, device {default_device()}, load average {os.getloadavg()[0]:.1f}, "
          f"flip bound {fa.FLIP_BOUND}", flush=True)
    cache_dir = Path(tempfile.mkdtemp(prefix="longviz-bench-scans-"))  # a fresh scan store: nothing resumed
    if args.demo_doc >= 0:
        model = lv.load_model("demo")
        text = lv.load_dataset("demo", id2label=model.id2label)["text"].iloc[args.demo_doc]
        analysis = lv.analyze(model, text, model.max_tokens)
        if args.explainers:
            explainers(model, analysis, cache_dir / "explainers")  # its own scans: none resumed by the next
        deletion_stages(model, analysis, args.demo_stages.split(","), args.exact_s, cache_dir)
    if args.base:
        from _models import base_model
        from tiny import text_of

        model = base_model(Path(args.base_dir))
        for n in (int(v) for v in args.base.split(",")):
            analysis = lv.analyze(model, text_of(2 * n), n)
            deletion_stages(model, analysis, args.base_stages.split(","), args.exact_s, cache_dir, ig_steps=0)


if __name__ == "__main__":
    main()
