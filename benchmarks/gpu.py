"""Benchmark: the GPU run, one command. Each stage's wall time as a multiple of one forward of the same model and
length, and its peak memory, with the device's name and the library versions.

    python benchmarks/gpu.py [--size full|tiny] [--device cuda|cpu] [--json OUT] [--folder DIR]
                             [--decoder-layers L] [--ig-batch B] [--groups longformer,modernbert,decoder]

Stages (--size full; the budget is 8 minutes on one H100, docs/development.md "A GPU run" says how to run it there):
- Longformer-base dimensions (benchmarks/_models.py) at 4,096 tokens: one forward (the model's own attention,
  float32), `lv.analyze`, `integrated_gradients` with 500 steps under bf16 autocast (target: 30 s; the batch of
  steps is the automatic one, attribution/cost.py's: one step on a first run, unless --ig-batch), then the
  Faithfulness page's stages on that document with those scores, as benchmarks/faithfulness.py calls them: the
  curves (flip_bound=0), then curves + every flip count up to FLIP_BOUND;
- ModernBERT-base dimensions (benchmarks/families.py) at 8,192 tokens: one sdpa forward, `lv.analyze`, the
  default views as families.py measures them (received attention, top-64 lists both ways, the pooled 64 x 64
  grid, the count tables);
- the decoder (Qwen3-0.6B dimensions, families.py) at 32,768 tokens: the same stages. The views run on the CPU
  (numba's loops), some 15 s a layer there (1.9 min of CPU time a layer, docs/benchmarks.md, over the pass's 8
  worker threads: an estimate), so only --decoder-layers of the 28 layers are built and run (default 4): the
  ratios to the forward hold per layer, and the 28-layer times printed beside them are extrapolations.
Each stage runs after a warm-up of its code (a forward; the views on a short document: numba loads its loops on
first call). Wall time is read after torch.cuda.synchronize. Memory: on a GPU the stage's peak allocation
(torch.cuda.max_memory_allocated after reset_peak_memory_stats) and its growth above the stage's start, and the
process's peak resident growth on the host; on the CPU that resident growth (attribution/peak_memory.py).

--size tiny runs the same code on the tests' tiny models (tests/tiny.py) at 128 / 256 / 512 tokens and 8 IG steps,
in seconds on a CPU (tests/integration/test_gpu_benchmark.py runs it so). Models are built with random weights,
saved under --folder (default: a temporary folder, removed at the end; a folder given is kept and its models
reused) and loaded with `lv.load_model(path, device=...)`; the IG and flip-scan caches are fresh for every run.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _models import base_model, cpu_name  # noqa: E402
from families import base_modernbert, base_qwen3, views, warm_up  # noqa: E402

import longviz_core as lv  # noqa: E402
from longviz_core.attribution import ConvergenceWarning, integrated_gradients  # noqa: E402
from longviz_core.attribution.peak_memory import PeakMemory  # noqa: E402
from longviz_core.errors import SettingsError  # noqa: E402
from longviz_core.evaluation import faithfulness as fa  # noqa: E402
from longviz_core.model.capture import implementation  # noqa: E402
from longviz_core.runtime import usable_device  # noqa: E402

GIB = 2**30
BUDGET_S = 8 * 60  # the whole --size full run on one H100
GROUPS = ("longformer", "modernbert", "decoder")  # --groups' names, in the order they run


@dataclass(frozen=True)
class Size:
    """What one --size builds and runs; every stage's code is the same for each."""

    longformer: Callable  # (folder, device) -> LoadedModel, built in the folder once
    longformer_n: int
    ig_steps: int
    ig_target_s: float | None  # the target for the IG stage (one H100)
    modernbert: Callable  # (folder, device) -> LoadedModel
    modernbert_n: int
    decoder: Callable  # (folder, device, layers) -> LoadedModel with `layers` layers of the dimensions' kind
    decoder_n: int
    decoder_layers: int  # the dimensions' layers
    decoder_run: int  # layers built and run by default (the rest extrapolated)
    names: tuple[str, str, str]  # Longformer, ModernBERT, decoder


def _tiny(maker, folder: Path, device: str, **config):
    """A tiny model of tests/tiny.py's `maker`, saved in `folder` once, loaded on `device`."""
    if not (folder / "config.json").exists():
        maker(folder, **config)
    return lv.load_model(str(folder), device=device)


def _sizes() -> dict[str, Size]:
    from tiny import make_tiny_decoder, make_tiny_longformer, make_tiny_modernbert

    return {
        "full": Size(base_model, 4096, 500, 30.0, base_modernbert, 8192,
                     lambda folder, device, layers: base_qwen3(folder, layers, device), 32768, 28, 4,
                     ("Longformer-base", "ModernBERT-base", "Qwen3-0.6B")),
        # small initializer ranges, as the full models': softmax rows without exact zeros, so every top-k list
        # holds as many keys as its row (or column) attends
        "tiny": Size(partial(_tiny, make_tiny_longformer), 128, 8, None,
                     partial(_tiny, make_tiny_modernbert, initializer_range=0.02), 256,
                     lambda folder, device, layers: _tiny(make_tiny_decoder, folder, device, kind="qwen3",
                                                          layers=layers, initializer_range=0.02, max_positions=512),
                     512, 2, 1, ("tiny Longformer", "tiny ModernBERT", "tiny Qwen3")),
    }


class Stages:
    """Runs and records the stages: wall time (synchronized on a GPU), CPU time, peak memory."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.rows = device, []
        self.cuda = device.type == "cuda"

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def run(self, group: str, stage: str, make, **extra):
        """make() timed as `stage` of `group`; its result."""
        host = PeakMemory("cpu") if self.cuda else nullcontext()
        with PeakMemory(self.device) as peak, host as on_host:
            self._sync()
            wall, cpu = time.perf_counter(), time.process_time()
            out = make()
            self._sync()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        row = {"group": group, "stage": stage, "seconds": wall, "cpu_seconds": cpu, "peak_growth_bytes": peak.bytes}
        if self.cuda:
            row["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
            row["host_growth_bytes"] = on_host.bytes
        self.rows.append({**row, **extra})
        return out

    def group(self, name: str) -> list[dict]:
        return [r for r in self.rows if r["group"] == name]

    def finish_group(self, name: str, forward: float, layers_run: int | None = None,
                     layers: int | None = None) -> None:
        """Each stage of `name` as a multiple of its forward (`forward` seconds); extrapolated to `layers` where
        only `layers_run` of them ran (times grow with the layers, the ratios hold per layer)."""
        factor = layers / layers_run if layers and layers_run and layers != layers_run else None
        for r in self.group(name):
            r["forward_multiple"] = r["seconds"] / forward
            if factor:
                r["extrapolated_seconds"] = r["seconds"] * factor
        for r in self.group(name):
            self._print(r, factor)

    def release(self) -> None:
        """What the last group held goes (the next group's peaks are its own)."""
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def _print(self, r: dict, factor: float | None) -> None:
        memory = (f"GPU peak {_gib(r['gpu_peak_bytes'])} (+{_gib(r['peak_growth_bytes'])}), host "
                  f"+{_gib(r['host_growth_bytes'])}" if self.cuda else f"peak growth {_gib(r['peak_growth_bytes'])}")
        line = (f"  {r['stage']:<26}{r['seconds']:9.2f} s {r['forward_multiple']:9.2f} x forward   {memory}")
        if factor:
            line += f"   [{r['extrapolated_seconds']:.1f} s extrapolated x {factor:g}]"
        if r.get("target_seconds"):
            met = "met" if r["seconds"] <= r["target_seconds"] else "MISSED"
            line += f"   target <= {r['target_seconds']:g} s: {met}"
        print(line, flush=True)


def _gib(b) -> str:
    return "n/a" if b is None else f"{b / GIB:.2f} GiB"


def _finite(x) -> float | None:
    """JSON has no infinity or NaN: None for them."""
    return float(x) if x is not None and math.isfinite(x) else None


def _document(model, n: int):
    """n tokens of the tests' words (tests/tiny.py), encoded for `model`."""
    from tiny import text_of

    text = text_of(2 * n)
    enc = model.encode(text, n)
    if enc.n != n:
        raise SystemExit(f"the document has {enc.n} tokens, not {n}")
    return text, enc


def _forward(stages: Stages, group: str, model, enc, attention: str | None) -> float:
    """One forward of `enc` (the app's inputs) through `attention` ("sdpa"; None: the model's own) after a
    warm-up forward; its seconds.

    A decoder on CUDA: the reference is the model's own float32 forward (longviz's route, capture._sdpa_expanded:
    sdpa's memory-efficient kernel on K/V heads repeated), and transformers' sdpa is timed beside it under bf16
    autocast ("forward_sdpa_bf16"). In float32 transformers' sdpa asks for grouped-query attention, which there
    only sdpa's math kernel serves, with the whole n x n scores of every head: the first H200 run asked for 16 GiB
    at a time at 32,768 tokens and ran out of its 139 GiB."""
    inputs = model.family.inputs(enc, model.device)
    grouped = attention == "sdpa" and model.device.type == "cuda" and model.family.name == "decoder"

    def forward(attention=attention, bf16=False):
        with torch.no_grad(), (implementation(model.model, attention) if attention else nullcontext()), (
                torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else nullcontext()):
            model(**inputs)

    reference = partial(forward, None) if grouped else forward
    reference()  # kernels' first calls, the allocator's first blocks
    stages.run(group, "forward", reference, **({"reference": "the model's own (float32)"} if grouped else {}))
    seconds = stages.group(group)[-1]["seconds"]
    if grouped:
        forward(bf16=True)
        stages.run(group, "forward_sdpa_bf16", partial(forward, bf16=True))
    return seconds


def views_stages(stages: Stages, group: str, analysis) -> dict:
    """The default views (families.views), each a stage, and what they made in numbers a reader can check."""
    made = views(analysis, lambda name, make: stages.run(group, name, make))
    received = made["received"]  # (layers, heads, n): each row of attention sums to 1, so each head's to n
    topk, pooled = made["topk64"], made["pooled64"]
    sizes = np.diff(pooled.edges)  # (g,) tokens per block: a cell is a block's mean
    tables = made["counts"]
    return {"received_total_per_head": float(received.sum(axis=-1).mean()),
            "attended_entries": int((topk.attended >= 0).sum()), "attending_entries": int((topk.attending >= 0).sum()),
            "k": int(topk.k), "grid": int(pooled.grid),
            "pooled_total_per_head": float((pooled.cells * sizes[:, None] * sizes[None, :]).sum(axis=(-1, -2)).mean()),
            "count_rows": {d: int(len(tables[d])) for d in ("attended", "attending", "both")},
            "top_count": {d: int(tables[d]["count"].max()) if len(tables[d]) else 0 for d in ("attended", "attending")}}


def longformer_group(stages: Stages, size: Size, folder: Path, device: str, caches: Path, ig_batch) -> dict:
    group, n = size.names[0], size.longformer_n
    model = size.longformer(folder / "longformer", device)
    text, enc = _document(model, n)
    forward = _forward(stages, group, model, enc, None)
    analysis = stages.run(group, "analyze", lambda: lv.analyze(model, text, max_tokens=n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # random weights: reported below, not raised
        ig = stages.run(group, "integrated_gradients", lambda: integrated_gradients(
            model, analysis, None, size.ig_steps, precision="bf16", internal_batch_size=ig_batch, use_cache=False,
            cache_dir=caches / "ig"), target_seconds=size.ig_target_s)
    stages.group(group)[-1].update(
        steps=ig.n_steps, precision=ig.precision, internal_batch_size=ig.internal_batch_size,
        seconds_per_step=stages.group(group)[-1]["seconds"] / ig.n_steps, delta=_finite(ig.delta),
        expected=_finite(ig.expected), raw_total=_finite(ig.raw_total), relative_delta=_finite(ig.relative_delta),
        converged=bool(ig.converged))
    # the Faithfulness page's stages, as benchmarks/faithfulness.py calls them: a fresh scan store, resumable
    scans = dict(resume=True, cache_dir=caches / "scans")
    for stage, bound in (("faithfulness_curves", 0), (f"faithfulness_flips_{fa.FLIP_BOUND}", fa.FLIP_BOUND)):
        res = stages.run(group, stage, lambda: fa.faithfulness(model, analysis, ig.scores, flip_bound=bound, **scans))
        stages.group(group)[-1].update(
            copies=res.forward_passes, copies_needed=res.copies_needed, flip_limit=res.flip_limit,
            runs=[{"name": r.name, "seed": r.seed, "aopc": _finite(r.aopc), "scanned": r.scanned,
                   "flip_removed": r.flip_removed} for r in res.runs])
    print(f"\n{group} dimensions ({model.num_layers} layers x {model.num_heads} heads), {n:,} tokens; IG "
          f"{ig.n_steps} steps in {ig.precision}, batches of {ig.internal_batch_size}: |delta| {abs(ig.delta):.3g} "
          f"for F(x) - F(x') = {ig.expected:+.3g}; curves of {len(res.runs)} rankings, flips up to "
          f"{res.flip_limit} tokens", flush=True)
    stages.finish_group(group, forward)
    return {"group": group, "n": n, "layers": model.num_layers, "heads": model.num_heads}


def views_group(stages: Stages, group: str, family: str, model, n: int, attention: str, layers: int | None = None,
                layers_run: int | None = None) -> dict:
    """Forward, analysis and the default views of one model at n tokens (families.py's `one`, timed here)."""
    warm_up(model, family)
    text, enc = _document(model, n)
    forward = _forward(stages, group, model, enc, attention)
    analysis = stages.run(group, "analyze", lambda: lv.analyze(model, text, max_tokens=n))
    checks = views_stages(stages, group, analysis)
    patterns = [(p.kind, p.radius) for p in model.family.attention_patterns(n)]
    dims = f"{layers_run} of the dimensions' {layers} layers" if layers and layers != layers_run else (
        f"{model.num_layers} layers")
    print(f"\n{group} dimensions ({dims}, {model.num_heads} heads), {n:,} tokens; attention kept "
          f"{_gib(analysis.attention.nbytes)}; views: each head's received attention totals "
          f"{checks['received_total_per_head']:,.1f} (n = {n:,}), {checks['attended_entries']:,} / "
          f"{checks['attending_entries']:,} top-{checks['k']} entries", flush=True)
    if layers and layers != layers_run:
        print(f"  EXTRAPOLATION: only {layers_run} of {layers} layers built and run; the {layers}-layer figures "
              f"in brackets are x {layers / layers_run:g}, not measurements", flush=True)
    stages.finish_group(group, forward, layers_run, layers)
    return {"group": group, "n": n, "layers": model.num_layers, "heads": model.num_heads, "patterns": patterns,
            "kept_bytes": int(analysis.attention.nbytes), **checks,
            **({"layers_dims": layers, "extrapolated": layers != layers_run} if layers else {})}


def summary(stages: Stages) -> None:
    print("\nSummary (seconds; x one forward of the same model and length; peak memory):")
    head = "| model | stage | seconds | x forward | " + (
        "GPU peak | GPU growth | host growth |" if stages.cuda else "peak growth |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in stages.rows:
        extra = f" ({r['extrapolated_seconds']:.1f} s extrapolated)" if "extrapolated_seconds" in r else ""
        memory = (f"{_gib(r['gpu_peak_bytes'])} | {_gib(r['peak_growth_bytes'])} | {_gib(r['host_growth_bytes'])}"
                  if stages.cuda else _gib(r["peak_growth_bytes"]))
        multiple = f"{r['forward_multiple']:.2f}" if "forward_multiple" in r else "n/a (its group failed)"
        print(f"| {r['group']} | {r['stage']} | {r['seconds']:.2f}{extra} | {multiple} | {memory} |")


def _versions() -> dict:
    """The versions of the modules imported (a carried wheel's, where it shadows the machine's own)."""
    return {"python": sys.version.split()[0],
            **{name: importlib.import_module(name).__version__
               for name in ("torch", "transformers", "captum", "numba", "numpy")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    parser.add_argument("--json", type=Path, default=None, help="the figures as JSON, written here")
    parser.add_argument("--folder", type=Path, default=None, help="where the models are built (kept); default: "
                        "a temporary folder")
    parser.add_argument("--decoder-layers", type=int, default=None, help="layers of the decoder built and run "
                        "(default: 4 of 28 at full size, 1 of 2 tiny); the rest extrapolated")
    parser.add_argument("--ig-batch", type=int, default=None, help="IG steps per batch (default: automatic)")
    parser.add_argument("--groups", default="longformer,modernbert,decoder", help="the groups to run, by family, "
                        "comma-separated (a rerun on a lent device takes only what it still needs)")
    args = parser.parse_args()
    for needed in ("captum", "numba"):  # before any model is built: the wheels to carry, docs/development.md
        try:
            importlib.import_module(needed)
        except ImportError:
            raise SystemExit(f"{needed} is not installed: see docs/development.md, 'A GPU run'") from None
    try:
        device = usable_device(args.device)
    except SettingsError as exc:  # "cuda" asked for where torch sees no GPU
        parser.error(str(exc))
    size = _sizes()[args.size]
    chosen = args.groups.split(",")
    if not chosen or set(chosen) - set(GROUPS):
        parser.error(f"--groups: comma-separated names from {', '.join(GROUPS)}")
    layers_run = args.decoder_layers or size.decoder_run
    if not 1 <= layers_run <= size.decoder_layers:
        parser.error(f"--decoder-layers must be 1 .. {size.decoder_layers}")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU: {cpu_name()}"
    versions = _versions()
    print(f"device: {name}; {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, load average "
          f"{os.getloadavg()[0]:.1f}; " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    print(f"size {args.size}" + (f"; budget {BUDGET_S // 60} minutes on one H100" if args.size == "full" else ""),
          flush=True)
    started = time.perf_counter()
    stages = Stages(device)
    groups, failed = [], []

    def write() -> None:  # after every group: a run stopped at the lease's limit still leaves what it measured
        if args.json:
            args.json.write_text(json.dumps({
                "device": name, "device_type": device.type, "size": args.size, "versions": versions,
                "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()[0],
                "groups": groups, "failed": failed, "stages": stages.rows,
                "total_seconds": time.perf_counter() - started, "budget_seconds": BUDGET_S}, indent=1))

    with (tempfile.TemporaryDirectory(prefix="longviz-gpu-") if args.folder is None else nullcontext(args.folder)) \
            as folder, tempfile.TemporaryDirectory(prefix="longviz-gpu-caches-") as caches:
        folder, caches = Path(folder) / args.size, Path(caches)
        runs = {  # GROUPS' names: (the group's name as printed, its run)
            "longformer": (size.names[0], lambda: longformer_group(stages, size, folder, str(device), caches,
                                                                   args.ig_batch)),
            "modernbert": (size.names[1], lambda: views_group(stages, size.names[1], "modernbert",
                                                              size.modernbert(folder / "modernbert", str(device)),
                                                              size.modernbert_n, "sdpa")),
            "decoder": (size.names[2], lambda: views_group(
                stages, size.names[2], "decoder", size.decoder(folder / f"decoder-{layers_run}", str(device),
                                                               layers_run),
                size.decoder_n, "sdpa", size.decoder_layers, layers_run))}
        for group, make in (runs[family] for family in GROUPS if family in chosen):
            # a lent device runs this once (docs/development.md): one group's failure (a library version there,
            # memory) is printed and recorded, and the other groups still run
            try:
                groups.append(make())
            except Exception as exc:  # noqa: BLE001 - reported whole, and the exit status says so
                traceback.print_exc()
                failed.append({"group": group, "error": f"{type(exc).__name__}: {exc}"})
            stages.release()
            write()
    total = time.perf_counter() - started
    summary(stages)
    print(f"\nwhole run {total:.0f} s" + (f" (budget {BUDGET_S} s on one H100)" if args.size == "full" else ""),
          flush=True)
    write()
    if failed:
        raise SystemExit("failed: " + "; ".join(f"{f['group']}: {f['error']}" for f in failed))


if __name__ == "__main__":
    main()
