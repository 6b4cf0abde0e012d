"""The deletion pages' first run on the demo's document 0, as multiples of one forward of the same document.

    python benchmarks/pages.py [--doc 0] [--max-tokens N]

What a reader waits for, through Streamlit's AppTest in this process (the app as `streamlit run` serves it, without
the browser), with the page defaults (Max tokens empty: all of the document's tokens, the model's limit):
    forward          one forward of the intact document (batch 1), the unit of every other row: the median of three
                     before the pages and of three after them, averaged (the machine may be shared)
    Faithfulness     the page's first run, from opening it until its script ends, after Integrated Gradients (in
                     the disk cache at the page's default steps, as after the Attribution page): the curves'
                     numbers and charts; the first flips within the bound are then scanned in the background
    flips after it   from the script's end until that background scan is over (the fragment then redraws the page)
    Explainers       the click on "Run the explainers and the deletion test" until its script ends: every explainer
                     (IG from the cache), the leaderboard's curves and charts; its flips then fill in likewise
Wall seconds and CPU seconds of the whole process (every thread: the background scan's CPU counts while the script
runs) are both given; the targets (issue 31) are ≤ 400 forwards for the Faithfulness page and ≤ 800 for the
Explainers run. A fresh LONGVIZ_CACHE_DIR (the demo copied in, IG computed there first, no scan resumed).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ["LONGVIZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="longviz-bench-pages-")

import torch  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.attribution import STEP_PRESETS, ConvergenceWarning, integrated_gradients  # noqa: E402
from longviz_core.evaluation import faithfulness as fa  # noqa: E402
from longviz_core.runtime import JOBS  # noqa: E402
from pages._ui.deletion import FLIPS  # noqa: E402
from pages._ui.keys import K  # noqa: E402
from support.apps import app_test, page  # noqa: E402


def forward(model, analysis, repeats: int = 3) -> tuple[float, float]:
    """(wall, CPU) seconds of one forward: the median of `repeats`."""
    inputs = analysis.encoded.torch_inputs(model.device)
    times = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            model.model(**inputs)
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return tuple(sorted(t[i] for t in times)[len(times) // 2] for i in (0, 1))


def timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def flips_over() -> tuple[float, float]:
    """(wall, CPU) seconds until every background first-flip scan is over."""
    return timed(lambda: [job.join() for job in JOBS.running(FLIPS)])


def check(at) -> None:
    problems = [e.value for e in (*at.exception, *at.error)]
    if problems:
        raise SystemExit(f"the page failed: {problems}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the page's (all tokens)")
    args = parser.parse_args()
    model = lv.load_model("demo")
    text = lv.load_dataset("demo", id2label=model.id2label)["text"].iloc[args.doc]
    analysis = lv.analyze(model, text, args.max_tokens or model.max_tokens)
    steps = next(iter(STEP_PRESETS.values()))  # the pages' default
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        integrated_gradients(model, analysis, None, steps)  # into the disk cache, as the Attribution page leaves it
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}; demo document {args.doc}, "
          f"{analysis.n:,} tokens, IG {steps} steps (cached), flip bound {fa.FLIP_BOUND}", flush=True)
    before = forward(model, analysis)

    at = app_test()
    at.session_state[K.DOC_INDEX] = args.doc
    if args.max_tokens:
        at.session_state[K.MAX_TOKENS] = args.max_tokens
    at.run()
    check(at)
    at.switch_page(page("faithfulness"))
    rows = {"Faithfulness: first run": timed(at.run)}
    check(at)
    rows["Faithfulness: flips after it"] = flips_over()
    at.switch_page(page("explainers")).run()
    check(at)
    rows["Explainers: run"] = timed(at.button(key=K.page("explainers", "run")).click().run)
    check(at)
    rows["Explainers: flips after it"] = flips_over()
    after = forward(model, analysis)
    unit = tuple((a + b) / 2 for a, b in zip(before, after))
    print(f"one forward: {unit[0]:.2f} s wall, {unit[1]:.2f} s CPU (before {before[0]:.2f}, after {after[0]:.2f}); "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, (wall, cpu) in rows.items():
        print(f"  {name:<30} {wall:7.1f} s wall {wall / unit[0]:7.1f} forwards   {cpu:7.1f} s CPU "
              f"{cpu / unit[1]:7.1f} forwards", flush=True)


if __name__ == "__main__":
    main()
