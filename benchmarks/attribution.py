"""Integrated Gradients: longviz against captum's recipes side by side, and its overhead over the floor.

    python benchmarks/attribution.py [--part captum|overhead|all] [--sizes 512 2048] [--steps 16] [--middle 4]
        [--demo-steps 20] [--base-steps 8] [--skip-base] [--skip-demo] [--repeats 3]

captum (default): Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512, random weights) at
each of --sizes tokens, --steps Gauss-Legendre steps, one run of each recipe, each in a fresh process:
  longviz fresh    integrated_gradients on an empty cache (a new model or length, as a user meets it)
  longviz cached   integrated_gradients again, with the timings the fresh run recorded
  captum b         the notebook's LayerIntegratedGradients call (softmax forward, pad baseline, explicit position
                   ids) with internal_batch_size = 1, --middle, and None (every step in one batch, captum's default
                   and the notebook's call), without return_convergence_delta (its fastest form)
Runs alternate captum and longviz (captum 1, longviz fresh, captum middle, longviz cached, captum all) so that a
change in the machine's load falls on both; wall and CPU seconds of the run and its peak extra memory (the
process's peak resident set above its level at the start of the run) are printed with the load average. A
recipe that would not fit in half of the free memory (its batch times the peak per step measured at batch 1) is
skipped with that arithmetic.

overhead: wall time of integrated_gradients against the floor n_steps x one forward+backward on the same input
(gradient of p_target w.r.t. the embeddings output, as each IG step does): the demo model at 2,048 tokens and
Longformer-base dimensions at 1,024 tokens. The demo comes from $LONGVIZ_CACHE_DIR (built there on first use).
The two forwards captum needs for the embeddings of the input and the baseline are the fixed cost (about 2/3 of
one step), so few-step runs pay relatively more. Also prints estimate_ig_seconds' prediction.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
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
from longviz_core.attribution import cost  # noqa: E402
from longviz_core.attribution.cost import time_passes  # noqa: E402
from longviz_core.attribution.peak_memory import PeakMemory  # noqa: E402


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


# ------------------------------------------------------------------------------- against captum's recipes
def child(kind: str, model_dir: str, n: int, steps: int, batch: int, cache: str) -> None:
    """One run in this fresh process; prints its batch, wall and CPU seconds and peak extra bytes as JSON."""
    from captum.attr import LayerIntegratedGradients

    from tiny import text_of

    model = base_model(Path(model_dir))
    analysis = analyze(model, text_of(2 * n), max_tokens=n)
    assert analysis.n == n, (analysis.n, n)
    enc, net, target = analysis.encoded, model.model, analysis.predicted
    if kind == "captum":  # the notebook's call ("Get Attributions"), on the unpadded input
        def custom_forward(inputs, position_ids=None, attention_mask=None):
            return torch.softmax(net(inputs, position_ids=position_ids, attention_mask=attention_mask).logits, dim=1)

        ids = torch.as_tensor(enc.input_ids).unsqueeze(0)  # (1, n)
        ref = torch.as_tensor(enc.baseline_ids).unsqueeze(0)  # (1, n) <s> <pad>... </s>
        positions = torch.as_tensor(enc.position_ids).unsqueeze(0)  # (1, n)
        lig = LayerIntegratedGradients(custom_forward, net.longformer.embeddings)

        def run():
            lig.attribute(inputs=ids, baselines=ref, additional_forward_args=(positions, torch.ones_like(ids)),
                          target=target, n_steps=steps, internal_batch_size=batch or None)
            return batch or steps
    else:
        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", A.ConvergenceWarning)
                return A.integrated_gradients(model, analysis, n_steps=steps, use_cache=False,
                                              cache_dir=cache).internal_batch_size
    with PeakMemory(model.device) as peak:
        w0, c0 = time.perf_counter(), time.process_time()
        used = run()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    print(json.dumps({"batch": used, "seconds": wall, "cpu": cpu, "peak": peak.bytes}))


def captum_part(model_dir: Path, sizes, steps: int, middle: int, cache_root: Path) -> None:
    print(f"\n[longviz against captum's recipes] Longformer-base dimensions, {steps} steps (gausslegendre), one "
          "fresh process per run", flush=True)
    print(f"  {'tokens':>6}  {'recipe':<28}{'batch':>6}{'wall s':>9}{'CPU s':>9}{'peak MiB':>10}  load average",
          flush=True)
    rows = []
    for n in sizes:
        cache = cache_root / f"cache-{n}"  # empty: the first longviz run meets a new model and length
        order = [("captum", 1), ("longviz", "fresh"), ("captum", middle), ("longviz", "cached"), ("captum", 0)]
        per_step = None  # peak bytes per step, measured by captum at batch 1
        for kind, what in order:
            label = f"longviz {what}" if kind == "longviz" else (
                f"captum, batch {what}" if what else f"captum, all {steps} steps in one batch")
            batch = what if kind == "captum" else 0
            free = cost._free_memory_bytes(torch.device("cpu"))
            need = (batch or steps) * per_step if kind == "captum" and per_step else 0
            if need > 0.5 * free:
                print(f"  {n:>6}  {label:<28} skipped: {batch or steps} steps x {per_step / 2**30:.2f} GiB (peak per "
                      f"step at batch 1) = {need / 2**30:.1f} GiB, more than half of the {free / 2**30:.1f} GiB free",
                      flush=True)
                rows.append({"n": n, "recipe": label, "skipped_need": need, "free": free})
                continue
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--child", kind, str(model_dir), str(n), str(steps),
                                  str(batch), str(cache)], capture_output=True, text=True)
            if out.returncode:
                print(f"  {n:>6}  {label:<28} failed ({out.returncode}): {out.stderr.strip()[-300:]}", flush=True)
                rows.append({"n": n, "recipe": label, "failed": out.returncode})
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            if kind == "captum" and batch == 1:
                per_step = r["peak"]
            rows.append({"n": n, "recipe": label, **r, "load_before": load, "load_after": os.getloadavg()[0]})
            print(f"  {n:>6}  {label:<28}{r['batch']:>6}{r['seconds']:9.1f}{r['cpu']:9.1f}{r['peak'] / 2**20:10.0f}"
                  f"  {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    print("  json " + json.dumps(rows), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, model_dir, n, steps, batch, cache = sys.argv[2:8]
        return child(kind, model_dir, int(n), int(steps), int(batch), cache)
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="captum", choices=("captum", "overhead", "all"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--middle", type=int, default=4, help="captum's middle recipe: internal_batch_size")
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
        if args.part in ("captum", "all"):
            base_model(Path(tmp) / "base")
            captum_part(Path(tmp) / "base", args.sizes, args.steps, args.middle, Path(tmp))
        if args.part == "captum":
            return
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
