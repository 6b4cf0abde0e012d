"""Integrated Gradients overhead: wall time of integrated_gradients against the floor n_steps x one
forward+backward on the same input (gradient of p_target w.r.t. the embeddings output, as each IG step does).

    python benchmarks/attribution.py [--demo-steps 20] [--base-steps 8] [--skip-base] [--skip-demo] [--repeats 3]

Cases: the demo model at 2,048 tokens; longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512,
random weights) at 1,024 tokens. Target: overhead ratio <= 1.10. Both wall and CPU time of this process are
reported: on a shared machine the wall clock follows the neighbours' load, the CPU time follows the work.
The demo comes from $LONGVIZ_CACHE_DIR (built there on first use, which takes long). The two forwards captum needs for the
embeddings of the input and the baseline are the fixed cost (about 2/3 of one step), so few-step runs pay
relatively more. Also prints estimate_ig_seconds' prediction next to the measured time.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from _models import base_model  # noqa: E402

from longviz_core import analyze, load_model  # noqa: E402
from longviz_core import attribution as A  # noqa: E402
from longviz_core.attribution.cost import time_passes  # noqa: E402


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    load = os.getloadavg()[0]
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"load average {load:.1f} at start")


def floor(model, enc, repeats: int) -> tuple[float, float, list[float]]:
    """Median (wall, CPU) seconds of one forward+backward, and every wall timing."""
    time_passes(model, enc, "fp32")  # warm-up (allocator, kernels)
    runs = [time_passes(model, enc, "fp32") for _ in range(repeats)]
    print("  forward+backward: " + ", ".join(f"{p.step:.2f} s ({p.step_cpu:.2f} s CPU)" for p in runs), flush=True)
    walls = [p.step for p in runs]
    return statistics.median(walls), statistics.median(p.step_cpu for p in runs), walls


def case(name: str, model, text: str, n_tokens: int, n_steps: int, cache: Path, repeats: int) -> None:
    print(f"\n[{name}] timing ...", flush=True)
    analysis = analyze(model, text, max_tokens=n_tokens)
    enc = analysis.encoded
    before = floor(model, enc, repeats)
    estimate = A.estimate_ig_seconds(model, enc.n, n_steps, cache_dir=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.ConvergenceWarning)
        starts = []  # (wall time, steps done) at the start of each batch (captum's forward calls, via progress)

        def progress(_fraction, message):
            done = re.search(r"steps (\d+)/", message)
            if message.startswith("Batch") and done:
                starts.append((time.perf_counter(), int(done.group(1))))

        w0, c0 = time.perf_counter(), time.process_time()
        attr = A.integrated_gradients(model, analysis, n_steps=n_steps, use_cache=False, cache_dir=cache,
                                      progress=progress)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    ends = starts[1:] + [(w0 + wall, n_steps)]
    batches = [(t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in zip(starts, ends)]  # seconds per step
    after = floor(model, enc, repeats)
    fb, fb_cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    print(f"[{name}] {enc.n} tokens, {n_steps} steps (gausslegendre), internal batch {attr.internal_batch_size}")
    print(f"  one forward+backward   {fb:8.2f} s wall {fb_cpu:8.2f} s CPU")
    print(f"  floor n_steps x f+b    {n_steps * fb:8.2f} s wall {n_steps * fb_cpu:8.2f} s CPU")
    print(f"  integrated_gradients   {wall:8.2f} s wall {cpu:8.2f} s CPU")
    print(f"  overhead ratio         {wall / (n_steps * fb):8.3f} wall {cpu / (n_steps * fb_cpu):8.3f} CPU"
          "   (target <= 1.10)")
    print(f"  IG per step (batches)  {min(batches):8.2f} s min {statistics.median(batches):8.2f} s median"
          f"   vs one f+b {min(before[2] + after[2]):.2f} s min")
    print(f"  estimate beforehand    {estimate:8.2f} s   (estimate / actual wall = {estimate / wall:.2f})")
    print(f"  |delta| / |F(x)-F(x')| {attr.relative_delta:8.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo-steps", type=int, default=20)
    ap.add_argument("--base-steps", type=int, default=8)
    ap.add_argument("--skip-base", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="forward+backward timings before and after IG")
    args = ap.parse_args()
    print("machine:", machine())
    if torch.cuda.is_available():
        print("GPU:", torch.cuda.get_device_name(0), "(GPU timings: run with CUDA_VISIBLE_DEVICES set)")
    else:
        print("GPU: none on this machine; the GPU part (CUDA, bf16/fp16 autocast) is skipped.")
    import captum.attr  # noqa: F401  (a one-off import cost of the process, not of a run)

    from tiny import text_of

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        if not args.skip_demo:
            from longviz_core import load_dataset

            demo = load_model("demo", device="cpu")
            text = " ".join(load_dataset("demo", id2label=demo.id2label)["text"].head(30))
            case("demo model", demo, text, 2048, args.demo_steps, cache, args.repeats)
        if not args.skip_base:
            base = base_model(Path(tmp) / "base")
            case("base dims, random weights", base, text_of(1400), 1024, args.base_steps, cache, args.repeats)


if __name__ == "__main__":
    main()
