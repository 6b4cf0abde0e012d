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

  units        (--units) occlusion and Shapley sampling by sentence (attribution.perturbation) on the demo's
               document 0 (all its tokens) and on a Longformer-base document of --units-base tokens (sentences
               of about 250 words, so the run stays within an hour on a CPU; the figures per unit do not depend
               on sentence length): their copies per unit, their time as multiples of one forward of the intact
               document (batch 1, timed before and after, the mean; wall and CPU time: under nice -n 19 on a shared
               machine the wall clock follows the neighbours), against IG at its default 50 steps (run on the
               demo; at Longformer-base 50 x one forward+backward timed there, plus IG's two forwards).
               Shapley runs --shapley-samples orders (its cost is linear in them: 1 + samples x units copies) and
               is extrapolated to captum's default 25. On the demo also the Explainers page's default work
               (DEFAULT_METHODS: occlusion by sentence in, Shapley out; IG at 50 steps, the leaderboard's curves
               and first flips within 24 tokens): its forwards against the page's budget of 800.
               The explainers part leaves occlusion and Shapley out (their cost is counted in units, here).

IG against captum's recipes (every internal batch size): benchmarks/attribution.py.

    /work/main/.venv/bin/python benchmarks/explainers.py [--sizes 1024 2048 4096] [--ig-at 1024] [--ig-steps 8]
    /work/main/.venv/bin/python benchmarks/explainers.py --units [--units-base 4096] [--shapley-samples 2]

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
from longviz_core.attribution.explainers import DEFAULT_METHODS  # noqa: E402
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
            if method in UNIT_EXPLAINERS:  # forwards of copies per unit: the units part
                continue
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


UNIT_EXPLAINERS = ("occlusion", "shapley")
PAGE_BUDGET = 800  # forwards: the Explainers page's acceptance budget (docs/benchmarks.md, "Faithfulness")


def one_forward(model, analysis, repeats: int = 5) -> tuple[float, float]:
    """(wall, CPU) seconds of one forward of the intact document, batch 1, no attentions (medians of `repeats`)."""
    from longviz_core.model.copies import copy_logits

    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        copy_logits(model, analysis.encoded, analysis.encoded.input_ids[None])
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def measured(model, analysis, work):
    """(work(), (wall, CPU) seconds it took, (wall, CPU) of one forward: the mean of one measured just before
    and one just after): on a shared machine the wall clock follows the neighbours, the CPU time the work."""
    before = one_forward(model, analysis)
    w0, c0 = time.perf_counter(), time.process_time()
    out = work()
    took = (time.perf_counter() - w0, time.process_time() - c0)
    after = one_forward(model, analysis)
    return out, took, ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2)


def unit_row(name: str, took, forward, copies: int | None = None, units: int | None = None) -> float:
    """Prints one row; returns its CPU time in forwards."""
    wall, cpu = took[0] / forward[0], took[1] / forward[1]
    per_unit = "" if units is None else f"{copies / units:.2f} per unit, "
    what = "" if copies is None else f"  {copies:>6,} copies ({per_unit}{cpu / copies:.2f} forwards a copy)"
    print(f"  {name:<38}{took[0]:8.1f} s{wall:9.1f} wall /{cpu:7.1f} CPU forwards{what}  {load()}", flush=True)
    return cpu


def units_part(model, analysis, label: str, samples: int, ig_default: bool, cache_dir: Path) -> None:
    """Occlusion and Shapley sampling by sentence on one document, in forwards of it (see the docstring)."""
    import warnings

    from longviz_core.dataset import leaderboard as lb
    from longviz_core.evaluation.faithfulness import FLIP_BOUND

    units = len(lv.segment(analysis, "sentence"))
    # warm-up, not measured: a process's first forwards (one copy, then a batch of copies) run several times
    # slower than the later ones (allocator, first-touch pages)
    from longviz_core.model.copies import copy_logits, default_batch_size

    one_forward(model, analysis, 2)
    copy_logits(model, analysis.encoded, analysis.encoded.input_ids[None].repeat(default_batch_size(model, analysis.n), 0))
    forward = one_forward(model, analysis)
    print(f"\n[{label}: {analysis.n:,} tokens, {units} sentences] one forward {forward[0]:.2f} s wall, "
          f"{forward[1]:.2f} s CPU; {load()}", flush=True)
    made, cost = {}, {}
    made["occlusion"], took, f = measured(model, analysis, lambda: lv.explain(model, analysis, "occlusion",
                                                                              unit="sentence"))
    cost["occlusion"] = unit_row("occlusion by sentence", took, f, 1 + units, units)
    _, took, f = measured(model, analysis, lambda: lv.explain(model, analysis, "shapley", unit="sentence",
                                                              n_samples=samples))
    copies = 1 + samples * units
    per_copy = unit_row(f"shapley by sentence, {samples} samples", took, f, copies, units) / copies
    print(f"  {'shapley, 25 samples (extrapolated)':<38}{'':>28}{per_copy * (1 + 25 * units):7.1f} CPU forwards  "
          f"{1 + 25 * units:>6,} copies", flush=True)
    if not ig_default:
        fb = forward_backward(model, analysis), forward_backward(model, analysis)
        fb_cpu = statistics.median(x[1] for x in fb)
        f = one_forward(model, analysis)
        print(f"  {'IG, 50 steps (50 x f+b + 2 forwards)':<38}{'':>28}{50 * fb_cpu / f[1] + 2:7.1f} CPU forwards "
              f"(one forward+backward {fb_cpu:.2f} s CPU, {fb_cpu / f[1]:.2f} forwards)  {load()}", flush=True)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made["ig"], took, f = measured(model, analysis, lambda: lv.explain(model, analysis, "ig", n_steps=50,
                                                                           use_cache=False))
    cost["ig"] = unit_row("IG, 50 steps", took, f)
    # the Explainers page by default (DEFAULT_METHODS: occlusion by sentence in, Shapley out): every explanation,
    # then the leaderboard's curves and its first flips within FLIP_BOUND tokens
    methods = list(DEFAULT_METHODS)
    rest = [m for m in methods if m not in made]
    others, took, f = measured(model, analysis, lambda: {m: lv.explain(model, analysis, m) for m in rest})
    made.update(others)
    cost["the other explainers"] = unit_row(f"{len(rest)} other explainers", took, f)
    runs, took, f = measured(model, analysis, lambda: lb.document_leaderboard(
        model, analysis, methods, explanations=made, flip_bound=FLIP_BOUND, cache_dir=cache_dir, resume=True))
    cost["leaderboard"] = unit_row(f"leaderboard, curves + flips <= {FLIP_BOUND}", took, f,
                                   int(runs["copies"].sum()))
    print(f"  the Explainers page by default, occlusion by sentence in: {sum(cost.values()):.1f} CPU forwards "
          f"(" + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()) + f"), budget {PAGE_BUDGET}", flush=True)


def long_sentences(n_tokens: int) -> str:
    """Sentences of about 250 words from the tests' vocabulary, enough of them for `n_tokens` tokens."""
    from tiny import WORDS

    words = [w for w in WORDS if w not in (".", ",", ";")]
    sentences = [" ".join(words[(i + j) % len(words)] for j in range(250)) + "." for i in range(2 * n_tokens // 250)]
    return " ".join(sentences)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--ig-at", type=int, nargs="*", default=[1024])
    ap.add_argument("--ig-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2, help="(reference, explainer) pairs per explainer")
    ap.add_argument("--units", action="store_true", help="occlusion and Shapley by sentence instead (docstring)")
    ap.add_argument("--units-base", type=int, default=4096, help="Longformer-base tokens of the units part (0: none)")
    ap.add_argument("--shapley-samples", type=int, default=2)
    args = ap.parse_args()
    print("machine:", machine())
    print("GPU:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU only)")
    with tempfile.TemporaryDirectory() as tmp:
        if args.units:
            demo = lv.load_model("demo")
            text = lv.load_dataset("demo", id2label=demo.id2label)["text"].iloc[0]
            units_part(demo, lv.analyze(demo, text, demo.max_tokens), "the demo's document 0",
                       args.shapley_samples, True, Path(tmp) / "scans")
            if args.units_base:
                model = base_model(Path(tmp) / "base")
                a = lv.analyze(model, long_sentences(args.units_base), max_tokens=args.units_base)
                assert a.n == args.units_base, a.n
                units_part(model, a, "Longformer-base", args.shapley_samples, False, Path(tmp) / "scans")
            return
        model_dir = Path(tmp) / "base"
        model = base_model(model_dir)
        explainers_part(model, args.sizes, set(args.ig_at), args.ig_steps, args.repeats)


if __name__ == "__main__":
    main()
