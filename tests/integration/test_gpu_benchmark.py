"""benchmarks/gpu.py, the GPU run, at its tiny size on the CPU: every stage runs, is timed and measured, and makes
what the full run makes (the same code, smaller models), checked against what the tiny models must give."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ["forward", "analyze", "received", "topk64", "pooled64", "counts"]
KS, SEEDS, FLIP_BOUND = 5, 5, 24  # evaluation.deletion's defaults: fractions, random seeds, the flip bound


def _entries(n: int, k: int, kind: str, radius: int) -> int:
    """Entries of one head's top-k lists (either direction: both patterns are symmetric in count) when every
    attended key has positive attention: each row lists min(k, the keys its pattern reaches)."""
    if kind == "full":
        return n * min(k, n)
    if kind == "causal" and radius == 0:
        return sum(min(k, i + 1) for i in range(n))
    assert kind == "banded", kind
    return sum(min(k, min(i + radius, n - 1) - max(i - radius, 0) + 1) for i in range(n))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "figures.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--size", "tiny", "--device", "cpu",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


@pytest.mark.slow
def test_every_stage_is_timed_and_measured(run):
    figures, printed = run
    assert figures["device_type"] == "cpu" and figures["size"] == "tiny" and figures["device"].startswith("CPU: ")
    assert figures["versions"]["torch"] and figures["versions"]["transformers"] and figures["versions"]["captum"]
    stages = [(r["group"], r["stage"]) for r in figures["stages"]]
    assert stages == [
        *(("tiny Longformer", s) for s in ["forward", "analyze", "integrated_gradients", "faithfulness_curves",
                                           f"faithfulness_flips_{FLIP_BOUND}"]),
        *(("tiny ModernBERT", s) for s in VIEWS), *(("tiny Qwen3", s) for s in VIEWS)]
    for r in figures["stages"]:
        assert r["seconds"] > 0 and r["cpu_seconds"] >= 0, r
        assert math.isfinite(r["forward_multiple"]) and r["forward_multiple"] > 0, r
        assert isinstance(r["peak_growth_bytes"], int) and r["peak_growth_bytes"] >= 0, r
        if r["stage"] == "forward":
            assert r["forward_multiple"] == 1.0
        assert r["forward_multiple"] == pytest.approx(
            r["seconds"] / next(f["seconds"] for f in figures["stages"]
                                if f["group"] == r["group"] and f["stage"] == "forward"))
    # the decoder's dimensions have 2 layers and 1 ran: its times are extrapolated x 2 and said to be
    decoder = [r for r in figures["stages"] if r["group"] == "tiny Qwen3"]
    assert all(r["extrapolated_seconds"] == pytest.approx(2 * r["seconds"]) for r in decoder)
    assert "EXTRAPOLATION: only 1 of 2 layers" in printed
    assert not any("extrapolated_seconds" in r for r in figures["stages"] if r["group"] != "tiny Qwen3")
    assert "| tiny ModernBERT | topk64 |" in printed  # the summary table
    assert figures["total_seconds"] >= sum(r["seconds"] for r in figures["stages"])


@pytest.mark.slow
def test_integrated_gradients_reports_its_completeness(run):
    figures, _ = run
    ig = next(r for r in figures["stages"] if r["stage"] == "integrated_gradients")
    assert ig["steps"] == 8 and ig["precision"] == "bf16" and ig["internal_batch_size"] >= 1
    assert ig["target_seconds"] is None  # the 30 s target is the full size's, on one H100
    assert ig["seconds_per_step"] == pytest.approx(ig["seconds"] / 8)
    # completeness: the raw sums add up to F(x) - F(x') up to delta, each a finite number
    assert all(math.isfinite(ig[f]) for f in ("delta", "expected", "raw_total"))
    assert -1 <= ig["expected"] <= 1  # a difference of two probabilities
    assert ig["raw_total"] - ig["expected"] == pytest.approx(ig["delta"], abs=1e-12)


@pytest.mark.slow
def test_faithfulness_stages_score_the_curves_then_the_flips(run):
    figures, _ = run
    curves, flips = (r for r in figures["stages"] if r["stage"].startswith("faithfulness_"))
    for stage, bound in ((curves, 0), (flips, FLIP_BOUND)):
        runs = stage["runs"]
        assert [r["name"] for r in runs] == ["attention", "ig", "ig_x_attention", *["random"] * SEEDS]
        assert [r["seed"] for r in runs[3:]] == list(range(SEEDS))
        assert all(math.isfinite(r["aopc"]) for r in runs)
        assert stage["flip_limit"] == bound  # 126 removable tokens: the bound applies
        for r in runs:  # every count up to the bound, or up to the first flip
            assert (r["flip_removed"] is None and r["scanned"] == bound) or (
                r["flip_removed"] == r["scanned"] and 1 <= r["scanned"] <= bound), r
        assert stage["copies_needed"] == 1 + sum(KS + r["scanned"] for r in runs)
        assert 1 <= stage["copies"] <= stage["copies_needed"]
    assert [r["aopc"] for r in curves["runs"]] == [r["aopc"] for r in flips["runs"]]  # the same curves


@pytest.mark.slow
@pytest.mark.parametrize("group", ["tiny ModernBERT", "tiny Qwen3"])
def test_views_make_every_list_and_total(run, group):
    figures, _ = run
    g = next(x for x in figures["groups"] if x["group"] == group)
    n, k, heads = g["n"], g["k"], g["heads"]
    assert (n, k, g["grid"]) == ({"tiny ModernBERT": 256, "tiny Qwen3": 512}[group], 64, 64)
    kinds = {"tiny ModernBERT": [("full", 0), ("banded", 8), ("banded", 8), ("full", 0)],
             "tiny Qwen3": [("causal", 0)]}[group]
    assert [tuple(p) for p in g["patterns"]] == kinds
    # every row of attention sums to 1: each head's received attention, and its pooled block sums, total n
    assert g["received_total_per_head"] == pytest.approx(n, rel=1e-5)
    assert g["pooled_total_per_head"] == pytest.approx(n, rel=1e-5)
    expected = heads * sum(_entries(n, k, kind, r) for kind, r in kinds)
    assert g["attended_entries"] == g["attending_entries"] == expected
    assert expected == {"tiny ModernBERT": 4 * (2 * 256 * 64 + 2 * (256 * 17 - 72)),
                        "tiny Qwen3": 4 * (64 * 65 // 2 + (512 - 64) * 64)}[group]
    rows = g["count_rows"]
    assert rows["attended"] > 0 and rows["attending"] > 0 and 0 <= rows["both"] <= 10
    assert all(0 < c <= n for c in g["top_count"].values())
    assert g["kept_bytes"] > 0
