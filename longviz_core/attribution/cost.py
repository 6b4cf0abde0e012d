"""What the model's work costs on this machine: wall time of Integrated Gradients and of one forward
(estimate_ig_seconds, estimate_forward) and IG's memory per step (internal_batch_size_for).

Time: one forward and one forward+backward timed at a length bucket, cached on disk per model, bucket and
precision, and rescaled by every finished run (record_timing). A bucket whose own timing would take longer than
_TIMING_BUDGET_S is not run: a smaller bucket's timing is scaled by the model's arithmetic (forward_flops).
Memory: a formula per step of activations kept for the backward pass (see internal_batch_size_for), against the
free memory of the device.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .._disk import digest, read_sealed, write_sealed
from ..errors import AttributionError, whole_number
from ..model.encoding import Encoded, special_ids
from ..model.loading import LoadedModel
from ..progress import Progress, report
from ..runtime import COMPUTE
from . import _inputs
from ._inputs import PRECISIONS, autocast, embeddings_layer, padded_length, padded_tensors

# Share of the free memory one batch of steps may take (the rest: weights, fragmentation, other tenants).
_MEMORY_FRACTION = 0.5
# Share of the steps one batch may hold: captum's default recipe (internal_batch_size=None) runs every step in one
# batch and needs n_steps times a step's memory; longviz never holds more than a quarter of that.
_MAX_STEP_SHARE = 0.25
# On an accelerator, a batch twice the fastest one timed is tried only while the last doubling gained this factor.
_DOUBLING_GAIN = 1.05
# Before anything is timed, a batch holds at most this many bytes of activations (and at least one step): a step of
# longformer-base dimensions (0.8 GiB at 512 tokens) runs alone, as captum's fastest recipe on a memory-bound CPU;
# smaller models' steps are batched, since their fixed cost (Python, kernel calls) weighs more than their arithmetic
# (2 layers, hidden 32, 102 tokens, 50 steps: 15 s CPU one step at a time, 1.8 s in batches of 12; the demo model
# at 2,048 tokens, 105 MiB a step: batches of 2).
_START_BYTES = 256 * 2**20
# On an accelerator with nothing timed, a first run starts here (or at the largest power of two inside the memory
# budget, if smaller), and later runs double while it gains: one step a batch leaves most of a GPU idle. Measured on
# an NVIDIA H200 (benchmarks/gpu.py, docs/benchmarks.md "GPU"): Longformer-base dimensions, 4,096 tokens, 500 steps
# under bf16 took 77.5 s one step a batch and 29.6 s sixteen a batch (67 GiB at its peak).
_ACCELERATOR_START = 16
# A bucket is timed only while its timing (one forward, one forward+backward), scaled from a smaller bucket's by
# forward_flops, is predicted within this; a longer one is estimated by that scaling: a page would otherwise wait
# minutes, unannounced, before it could say how long anything takes (ModernBERT-base at 8,192 tokens: a forward
# and a step take about 1.5 + 5 minutes of this 2-core CPU).
_TIMING_BUDGET_S = 20.0
# In that scaling an attention FLOP weighs this many of a linear layer's: attention's kernels (softmax, the flash
# kernel's recomputation in the backward) run slower per FLOP than matrix products. Fitted on the 2-core Xeon
# (idle, ModernBERT-base dimensions, its chunked sdpa route) so that 512 tokens' timing predicts 8,192 tokens'
# (a forward 0.77 -> 25.5 s, 33 x against 28.6 x in FLOPs; a forward+backward 1.88 -> 80.4 s, 42.7 x); at 2,048
# and 4,096 tokens the same weights predict 5-14 % over what was measured.
_FORWARD_ATTENTION, _STEP_ATTENTION = 1.4, 2.3


def internal_batch_size_for(model: LoadedModel, n_tokens: int, n_steps: int, precision: str = "fp32",
                            cache_dir: str | os.PathLike | None = None) -> int:
    """Steps per batch: one step at a time, unless a larger batch inside the memory budget was measured faster.

    Memory: a batch of b steps keeps b steps' activations for the backward pass, so b is at most what
    _MEMORY_FRACTION of the free memory holds and at most a quarter of the steps (_MAX_STEP_SHARE).
    Speed: every finished run records its seconds per step for its batch size, per model, device, precision and
    length bucket (record_timing, beside estimate_ig_seconds' timing). The choice is the fastest size recorded
    inside the budget, the smaller on a tie: a batch measured slower per step than another is never chosen, and
    memory is spent only where it was measured to buy speed.
    Nothing recorded, on an accelerator: the largest power of two up to _ACCELERATOR_START inside the budget.
    Nothing recorded, on a CPU: as many steps as _START_BYTES of activations hold, at least one, so one step per
    batch at longformer-base dimensions. That is captum's fastest recipe on a memory-bound CPU (2-core AMD EPYC, Longformer-base
    dimensions, 512 tokens: 28-29 s for 16 steps at batch 1, 78 s with all 16 in one batch; at 1,024 tokens
    3.5 / 3.7 / 7.6 s per step in batches of 1 / 2 / 4), the least memory, and no probing run.
    Larger sizes are tried only where they can pay: on an accelerator, where one step of a document leaves most
    of the device idle, the next run tries twice the fastest size while it is the largest timed and the last
    doubling gained at least _DOUBLING_GAIN; on a CPU, a larger size is used only once a run at that size (an
    explicit internal_batch_size) was measured faster. Records without batch 1 whose smallest size is the fastest
    make the next run try half of it.

    Free memory: torch.cuda.mem_get_info on a GPU, MemAvailable of /proc/meminfo on CPU (sysconf pages as a
    fallback). Memory per step (activations kept for the backward pass), with L layers, hidden size d,
    intermediate size f, A heads, one-sided window w_l of layer l, n the window-padded length and b bytes per
    element (4; 2 under bf16/fp16 autocast):
        bytes = n * b * (L (12 d + 2 f) + 3 A sum_l (2 w_l + 2))
    i.e. about a dozen (n, d) tensors per layer (q, k, v, context, projections, layer norms, residuals),
    two (n, f) for the feed-forward, and three copies of the banded scores (scores, softmax, dropout).
    Other layers have 2 w_l + 2 replaced by the keys each query scores (model.families.LayerPattern.keys). Checked against the peak resident memory on CPU at
    longformer-base dimensions, 1,024 tokens: 141 MB per layer per additional step measured, 139 MB predicted.
    Families whose forwards run longviz's chunked sdpa (ModernBERT, decoders: Family.forward_implementation)
    keep no scores, so the attention term is 0; at ModernBERT-base dimensions (GLU, RoPE) the peak grew by
    1.35 / 2.91 / 6.13 GiB at 1,024 / 2,048 / 4,096 tokens against 0.97 / 1.93 / 3.87 GiB predicted (Intel Xeon,
    one forward+backward): the formula is a third under there, inside _MEMORY_FRACTION's margin."""
    per_step = _bytes_per_step(model, n_tokens, precision)
    fit = int(_MEMORY_FRACTION * _free_memory_bytes(model.device) // per_step)
    cap = max(1, min(n_steps, fit, int(n_steps * _MAX_STEP_SHARE)))
    timed = {b: s for b, s in _batch_speeds(model, n_tokens, precision, cache_dir).items() if b <= cap}
    if not timed:
        if model.device.type != "cpu":  # the largest power of two inside the budget, at most _ACCELERATOR_START
            return 1 << (min(cap, _ACCELERATOR_START).bit_length() - 1)
        return max(1, min(cap, int(_START_BYTES // per_step)))
    best = min(timed, key=lambda b: (timed[b], b))
    if best == min(timed) and best > 1 and best // 2 not in timed:
        return best // 2
    larger = min(2 * best, cap)
    still_gaining = best // 2 not in timed or timed[best // 2] >= _DOUBLING_GAIN * timed[best]
    if (model.device.type != "cpu" and best == max(timed) and larger > best and larger not in timed
            and still_gaining):
        return larger
    return best


def _batch_speeds(model, n_tokens, precision, cache_dir) -> dict[int, float]:
    """Seconds per step recorded by finished runs, by batch size, for n_tokens' length bucket."""
    try:
        bucket = _bucket(model, n_tokens)
    except ValueError:
        return {}
    timing = _read_timing(model, bucket, precision, cache_dir) or {}
    speeds = timing.get("batches", {})
    return {int(b): float(s) for b, s in speeds.items() if float(s) > 0} if isinstance(speeds, dict) else {}

def estimate_ig_seconds(
    model: LoadedModel,
    n_tokens: int,
    n_steps: int,
    precision: str = "fp32",
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> float:
    """Expected wall time of integrated_gradients on a document of n_tokens.

    Based on one forward and one forward+backward timed at a length bucket (512, 1024, 2048, ... capped at
    the model's maximum; scaled linearly to n_tokens, as Longformer's cost is linear in length), cached on
    disk per model + bucket + precision, and refined by every finished run. The first call for a bucket
    runs the model (seconds at base dimensions); later calls are instant. A bucket whose timing would itself
    take longer than _TIMING_BUDGET_S is not run: the nearest smaller bucket's timing (the smallest bucket's,
    timed first if none is) is scaled by forward_flops (`estimate_basis` says which)."""
    n_tokens = whole_number(n_tokens, "n_tokens (<s>, one token, </s> at least)", lo=3, error=AttributionError)
    n_steps = whole_number(n_steps, "n_steps (captum's minimum is 2)", lo=2, error=AttributionError)
    _check_precision(precision)
    timing, bucket, _ = _timing(model, n_tokens, precision, cache_dir, progress)
    scale = padded_length(model, n_tokens) / padded_length(model, bucket)
    return scale * (n_steps * timing["step"] + 2 * timing["forward"])


class Estimate(NamedTuple):
    seconds: float  # expected wall seconds of one forward on this machine
    tokens: int  # the length estimated
    timed_at: int  # the length of the forward timed (its bucket's, or a smaller bucket's)
    scaled: bool  # timed at a smaller bucket and scaled by forward_flops

    @property
    def basis(self) -> str:
        """What the estimate rests on, in words for a page."""
        timed = f"one forward timed at {self.timed_at:,} tokens on this machine"
        return timed + (f", scaled to {self.tokens:,} tokens by the model's arithmetic" if self.scaled else "")


def estimate_forward(model: LoadedModel, n_tokens: int, precision: str = "fp32", *,
                     cache_dir: str | os.PathLike | None = None, progress: Progress | None = None) -> Estimate:
    """Expected wall time of one forward (batch 1, no gradients) of n_tokens: the forward of the timing
    estimate_ig_seconds uses (its bucket's, or a smaller bucket's scaled by forward_flops), scaled linearly
    within the bucket. A bucket whose forward only a finished run recorded (no forward of its own) counts as
    not timed."""
    n_tokens = whole_number(n_tokens, "n_tokens (<s>, one token, </s> at least)", lo=3, error=AttributionError)
    _check_precision(precision)
    timing, bucket, timed_at = _timing(model, n_tokens, precision, cache_dir, progress, forward=True)
    scale = padded_length(model, n_tokens) / padded_length(model, bucket)
    return Estimate(scale * timing["forward"], int(n_tokens), timed_at, timed_at < bucket)


def estimate_basis(model: LoadedModel, n_tokens: int, precision: str = "fp32", *,
                   cache_dir: str | os.PathLike | None = None) -> str:
    """What estimate_ig_seconds' figure for n_tokens rests on, in words for a page (after that estimate: it
    times nothing itself)."""
    bucket = _bucket(model, n_tokens)
    timed = None if _read_timing(model, bucket, precision, cache_dir) else _timed_below(model, bucket, precision,
                                                                                          cache_dir, False)
    said = f"one forward and one forward+backward timed at {timed[0] if timed else bucket:,} tokens on this machine"
    return said + (f", scaled to {int(n_tokens):,} tokens by the model's arithmetic" if timed else "")


def forward_flops(model: LoadedModel, n_tokens: int, attention_weight: float = 1.0) -> float:
    """Floating-point operations of one forward of n_tokens (batch 1), from the model's dimensions: two per weight
    of every linear layer per token (projections, feed-forward, head; the embedding table is a lookup) and, per
    layer, 4 x heads x head size per key a query scores (Q K^T, then the weighted sum of V; the family's
    patterns: a band's keys, or every token's), those counted `attention_weight` times. ModernBERT-base
    dimensions: 10.0 M a token a layer, and 4 n x 768 a full layer's attention."""
    cfg = model.model.config
    n = padded_length(model, n_tokens)
    heads = int(cfg.num_attention_heads)
    width = heads * int(getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // heads)
    weights = sum(m.weight.numel() for m in model.model.modules() if isinstance(m, torch.nn.Linear))
    keys = sum(p.keys for p in model.family.attention_patterns(n))
    return float(2 * n * weights + attention_weight * 4 * n * width * keys)


def _timing(model, n_tokens, precision, cache_dir, progress, forward: bool = False) -> tuple[dict, int, int]:
    """(timing of n_tokens' bucket, the bucket, the length timed): the bucket's own timing; else the nearest
    smaller bucket's scaled by forward_flops (attention weighted _FORWARD_ATTENTION for the forward,
    _STEP_ATTENTION for the forward+backward) when the bucket's timing would take longer than _TIMING_BUDGET_S
    (the smallest bucket timed first when none is); else the bucket timed now. `forward`: timings whose forward
    is unknown (written by a run alone) do not count."""
    bucket = _bucket(model, n_tokens)
    timing = _read_timing(model, bucket, precision, cache_dir)
    if timing is not None and (timing["forward"] > 0 or not forward):
        return timing, bucket, bucket
    below = [b for b in _buckets(model) if b < bucket]
    timed = _timed_below(model, bucket, precision, cache_dir, forward)
    if timed is None and below:
        timed = below[0], _time_bucket(model, below[0], precision, cache_dir, progress)
    if timed is not None:
        at, known = timed
        scaled = {part: known[part] * forward_flops(model, bucket, w) / forward_flops(model, at, w)
                  for part, w in (("forward", _FORWARD_ATTENTION), ("step", _STEP_ATTENTION))}
        if scaled["forward"] + scaled["step"] > _TIMING_BUDGET_S:
            return scaled, bucket, at
    return _time_bucket(model, bucket, precision, cache_dir, progress), bucket, bucket


def _timed_below(model, bucket, precision, cache_dir, forward) -> tuple[int, dict] | None:
    """(bucket, timing) of the longest bucket shorter than `bucket` that is timed, or None."""
    for b in reversed([b for b in _buckets(model) if b < bucket]):
        timing = _read_timing(model, b, precision, cache_dir)
        if timing is not None and (timing["forward"] > 0 or not forward):
            return b, timing
    return None


def _time_bucket(model, bucket, precision, cache_dir, progress) -> dict:
    """One forward and one forward+backward timed at `bucket` tokens, written to the timing cache."""
    with COMPUTE.hold():
        report(progress, 0.0, f"Timing one forward+backward at {bucket} tokens")
        t_fwd, t_fb = time_passes(model, _synthetic(model, bucket), precision)[:2]
    timing = {"forward": t_fwd, "step": t_fb}
    old = _read_timing(model, bucket, precision, cache_dir)  # a run's record: its batch sizes' speeds stay
    if old and "batches" in old:
        timing["batches"] = old["batches"]
    _write_timing(model, bucket, precision, timing, cache_dir)
    report(progress, 1.0, "Timed")
    return timing


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise AttributionError(f"precision must be one of {', '.join(sorted(PRECISIONS))}; got {precision!r}.")

class Passes(NamedTuple):
    forward: float  # wall seconds of one forward without gradients
    step: float  # wall seconds of one forward+backward (an IG step at batch 1)
    forward_cpu: float  # the same in CPU seconds of this process (all threads): steadier on a shared machine
    step_cpu: float

def time_passes(model, enc: Encoded, precision: str, target: int = 0) -> Passes:
    """One forward (no gradients) and one forward+backward as an IG step does it: gradients of p_target with
    respect to the embeddings output only (no parameter gradients)."""
    args, input_ids, _ = padded_tensors(model, enc)
    kwargs = model.family.kwargs(input_ids, *args)
    context = autocast(model.device, precision)
    w0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad(), context:
        model(**kwargs)
    w1, c1 = time.perf_counter(), time.process_time()
    held = []

    def swap(_module, _inputs, out):  # what LayerIntegratedGradients does: the layer output becomes a leaf
        leaf = out.detach().requires_grad_()
        held.append(leaf)
        return leaf

    hook = embeddings_layer(model).register_forward_hook(swap)
    try:
        with context:
            logits = model(**kwargs).logits
        torch.autograd.grad(model.head.explained(logits.float(), target)[0], held[0])
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
    finally:
        hook.remove()
    w2, c2 = time.perf_counter(), time.process_time()
    return Passes(w1 - w0, w2 - w1, c1 - c0, c2 - c1)


# ----------------------------------------------------------------------------------------- memory
def _bytes_per_step(model, n_tokens, precision) -> float:
    cfg = model.model.config
    n = padded_length(model, n_tokens)
    d = int(cfg.hidden_size)
    f = int(getattr(cfg, "intermediate_size", 4 * d))
    heads = int(cfg.num_attention_heads)
    layers = int(cfg.num_hidden_layers)
    # each layer's scores are as wide as the keys its queries score (Longformer's windows may differ by layer);
    # longviz's chunked sdpa (capture.py) keeps none for the backward (its kernels keep a log-sum-exp per row)
    chunked = model.family.forward_implementation == "longviz"
    bands = 0 if chunked else sum(p.keys for p in model.family.attention_patterns(n))
    b = 4 if PRECISIONS[precision] is None else 2
    return float(n * b * (layers * (12 * d + 2 * f) + 3 * heads * bands))

def _free_memory_bytes(device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


# ----------------------------------------------------------------------------------------- timings
def _timing_path(model, bucket, precision, cache_dir) -> Path:
    name = digest({"model": model.fingerprint, "bucket": bucket, "precision": precision,
                    "device": model.device.type})
    return _inputs.cache_folder(cache_dir) / f"timing-{name}.sealed.json"

def _read_timing(model, bucket, precision, cache_dir) -> dict | None:
    def decode(body: bytes) -> dict:
        t = json.loads(body)
        if not (t.get("step", 0) > 0 and t.get("forward", -1) >= 0):
            raise ValueError("no positive step time")
        return t

    return read_sealed(_timing_path(model, bucket, precision, cache_dir), decode)

def _write_timing(model, bucket, precision, timing, cache_dir) -> None:
    write_sealed(_timing_path(model, bucket, precision, cache_dir), json.dumps(timing).encode())

def record_timing(model, n_tokens, precision, result, cache_dir=None) -> None:
    """A finished run (an ig.Attribution) is the best timing there is: rescale the bucket's timing so it predicts this run.

    Forward and step times are scaled by one factor (measured / predicted) rather than solving for the step
    alone, which would go negative when a quick run on an idle machine follows a timing taken under load."""
    if result.seconds <= 0:
        return
    bucket = _bucket(model, n_tokens)
    scale = padded_length(model, n_tokens) / padded_length(model, bucket)
    old = _read_timing(model, bucket, precision, cache_dir)
    if old is None:
        timing = {"forward": 0.0, "step": result.seconds / scale / result.n_steps}
    else:
        factor = result.seconds / (scale * (result.n_steps * old["step"] + 2 * old["forward"]))
        timing = {"forward": old["forward"] * factor, "step": old["step"] * factor}
    # the run's own seconds per step at its batch size (internal_batch_size_for): the fastest seen is kept, a
    # run slowed down by other work on the machine does not count against its batch size
    per_step = max(result.seconds - 2 * scale * timing["forward"], 0.0) / scale / result.n_steps
    batches = dict((old or {}).get("batches", {}))
    key = str(result.internal_batch_size)
    if per_step > 0:
        batches[key] = min(per_step, float(batches.get(key, math.inf)))
    timing["batches"] = batches
    _write_timing(model, bucket, precision, timing, cache_dir)

def _buckets(model) -> list[int]:
    """The model's length buckets, shortest first: 512, 1024, ... below its maximum, then the maximum."""
    out, b = [], 512
    while b < model.max_tokens:
        out.append(b)
        b *= 2
    return out + [model.max_tokens]

def _bucket(model, n_tokens: int) -> int:
    if n_tokens > model.max_tokens:
        raise AttributionError(f"{n_tokens} tokens exceed what this model accepts ({model.max_tokens}): "
                               f"ask for at most {model.max_tokens} tokens.")
    b = 512
    while b < n_tokens:
        b *= 2
    return min(b, model.max_tokens)

def _synthetic(model, n: int) -> Encoded:
    """A document of n tokens for timing (speed does not depend on which tokens)."""
    tok = model.tokenizer
    filler = next(i for i in range(len(tok)) if i not in set(tok.all_special_ids))
    cls_id, sep_id, _ = special_ids(tok)
    ids = np.asarray([cls_id] + [filler] * (n - 2) + [sep_id], dtype=np.int64)
    off = model.position_offset
    gm = np.zeros(n, dtype=np.int64)
    gm[0] = 1
    return Encoded(input_ids=ids, baseline_ids=ids.copy(), position_ids=np.arange(off, off + n, dtype=np.int64),
                   global_mask=gm, tokens=[""] * n, n_text_tokens_original=n - 2, max_tokens=n)
