"""Integrated Gradients: completeness of the raw sums against independent forwards, the notebook's captum call
and captum's summarize_attributions as the oracle of the normalised scores, zero attribution on <s>/</s>/padding,
targets, adaptive steps, progress, the weak-explanation message, the disk cache, estimates, tables and the
dataset-wide table against a loop over documents."""
from __future__ import annotations

import io
import math
import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import analyze, encode, load_model
from longviz_core._disk import unsealed
from longviz_core.attribution import (
    Attribution,
    ConvergenceWarning,
    cached_attribution,
    cost,
    estimate_ig_seconds,
    integrated_gradients,
    internal_batch_size_for,
)
from longviz_core.attribution import ig as A
from longviz_core.attribution._inputs import padded_length
from longviz_core.dataset.api import dataset_attributions
from longviz_core.errors import CacheCorruptError
from longviz_core.views.attribution_tables import (
    attribution_by_token,
    token_detail,
    top_attributions,
)
from tiny import make_tiny_longformer, text_of

# Low step counts keep the tests fast; their convergence warnings are expected (one test checks them).
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
N_WORDS = 37  # -> 39 tokens: odd, and not a multiple of the window (8), so padding is exercised
EPS32 = float(np.finfo(np.float32).eps)


def _f32_tol(model, *magnitudes) -> float:
    """Rounding allowance for a float32 result built from terms of these total magnitudes: the model's
    arithmetic is dot products over its hidden size d, each within d * eps32 * sum|terms| (Higham's gamma_d)."""
    return model.model.config.hidden_size * EPS32 * float(sum(abs(m) for m in magnitudes))


@pytest.fixture(scope="module")
def steep(tmp_path_factory):
    """A tiny Longformer with large random weights: F(x) - F(baseline) is far from 0."""
    path = make_tiny_longformer(tmp_path_factory.mktemp("steep"), initializer_range=0.3, seed=3)
    return load_model(str(path), device="cpu")


@pytest.fixture(scope="module")
def steep3(tmp_path_factory):
    path = make_tiny_longformer(tmp_path_factory.mktemp("steep3"), initializer_range=0.3, labels=3, seed=1)
    return load_model(str(path), device="cpu")


@pytest.fixture(scope="module")
def doc(steep):
    return analyze(steep, text_of(N_WORDS), max_tokens=128)


@pytest.fixture()
def cache_dir(tmp_path):
    return tmp_path / "cache"


def _p_target(model, ids, enc, target):
    """An independent plain forward: p_target for `ids` with the document's position ids, no padding by us."""
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long)[None]  # noqa: E731
    kwargs = dict(input_ids=t(ids), attention_mask=t(np.ones(len(ids))), position_ids=t(enc.position_ids))
    if model.family.name == "longformer":
        kwargs["global_attention_mask"] = t(enc.global_mask)
    with torch.no_grad():
        return float(torch.softmax(model.model(**kwargs).logits, -1)[0, target])


def _completeness(model, analysis_or_enc, attr, converged=False):
    """F(x), F(x') from independent forwards; the raw sums add up to their difference up to the reported delta
    (converged=True: up to float32 rounding alone, for a run with enough steps that the quadrature is exact at
    float32 precision). The normalised scores are the raw sums over their L2 norm."""
    enc = getattr(analysis_or_enc, "encoded", analysis_or_enc)
    p_x = _p_target(model, enc.input_ids, enc, attr.target)
    p_b = _p_target(model, enc.baseline_ids, enc, attr.target)
    assert abs(attr.prob_input - p_x) <= _f32_tol(model, p_x)
    assert abs(attr.prob_baseline - p_b) <= _f32_tol(model, p_b)
    rounding = _f32_tol(model, np.abs(attr.raw).sum(), p_x, p_b)
    assert abs(attr.raw.sum() - (p_x - p_b)) <= (0.0 if converged else abs(attr.delta)) + rounding
    norm = np.sqrt(np.sum(attr.raw ** 2))
    assert norm > 0 and np.all(np.abs(attr.scores * norm - attr.raw) <= 4 * np.finfo(float).eps * np.abs(attr.raw))
    return p_x - p_b


def test_completeness_on_a_tiny_model(steep, doc, cache_dir):
    # 48 Gauss-Legendre steps integrate this model's path to float32 precision (|delta| ~ 1e-7 measured)
    attr = integrated_gradients(steep, doc, n_steps=48, cache_dir=cache_dir)
    assert attr.target == doc.predicted and attr.n_steps == 48 and attr.method == "gausslegendre"
    gap = _completeness(steep, doc, attr, converged=True)
    assert abs(gap) > 0.05, "the test model is too flat for completeness to mean anything"
    assert attr.delta == pytest.approx(attr.raw_total - attr.expected, abs=4 * np.finfo(float).eps * doc.n)
    # the header's attribution score is captum's attr_score: the sum of the normalised scores, not of the raw
    assert attr.total == pytest.approx(attr.raw_total / np.linalg.norm(attr.raw), rel=1e-12)
    assert np.linalg.norm(attr.scores) == pytest.approx(1.0, rel=1e-12)


def test_specials_and_padding_get_zero_and_length_is_the_token_count(steep, doc, cache_dir):
    assert doc.n % (2 * steep.attention_window) != 0  # the model pads this input: make sure we slice it off
    attr = integrated_gradients(steep, doc, n_steps=8, cache_dir=cache_dir)
    assert attr.scores.shape == attr.raw.shape == (doc.n,)
    assert attr.scores[0] == attr.raw[0] == 0.0 and attr.scores[-1] == attr.raw[-1] == 0.0
    assert np.count_nonzero(attr.scores[1:-1]) == doc.n - 2


@pytest.mark.parametrize("target", [0, 1])
def test_matches_the_notebooks_captum_call(steep, doc, cache_dir, target):
    """Oracle: the paper's notebook ("Get Attributions") on the unpadded input: LayerIntegratedGradients on the
    embeddings of a softmax forward, baseline <s> <pad>... </s>, position ids built as the notebook builds them
    and passed explicitly, captum's own convergence delta; then captum's tutorial `summarize_attributions`
    (sum over the embedding dimension, divided by the L2 norm): our normalised scores."""
    from captum.attr import LayerIntegratedGradients

    net, enc, tok = steep.model, doc.encoded, steep.tokenizer
    assert enc.n % 2 == 1

    def custom_forward(inputs, position_ids=None, attention_mask=None):
        return torch.softmax(net(inputs, position_ids=position_ids, attention_mask=attention_mask).logits, dim=1)

    def summarize_attributions(attributions):
        attributions = attributions.sum(dim=-1).squeeze(0)
        return attributions / torch.norm(attributions)

    ref_token_id = tok.pad_token_id
    text_ids = tok.encode(text_of(N_WORDS), add_special_tokens=False)
    input_ids = torch.tensor([[tok.cls_token_id] + text_ids + [tok.sep_token_id]])
    ref_input_ids = torch.tensor([[tok.cls_token_id] + [ref_token_id] * len(text_ids) + [tok.sep_token_id]])
    mask = input_ids.ne(ref_token_id).int()  # the notebook's construct_input_ref_pos_id_pair
    position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + ref_token_id
    lig = LayerIntegratedGradients(custom_forward, net.longformer.embeddings)
    ref, ref_delta = lig.attribute(
        inputs=input_ids, baselines=ref_input_ids, return_convergence_delta=True,
        additional_forward_args=(position_ids, torch.ones_like(input_ids)), target=target, n_steps=12,
        internal_batch_size=4,
    )  # (1, n padded to the window by the model, hidden)
    ref = ref[:, : enc.n]  # the padding rows are 0 (same token and position in the input and the baseline)
    ref_raw = ref.sum(dim=-1)[0].double().numpy()  # (n,)
    ref_scores = summarize_attributions(ref).double().numpy()  # (n,)

    ours = integrated_gradients(steep, doc, target=target, n_steps=12, internal_batch_size=5, cache_dir=cache_dir)
    # Tolerances from float32 arithmetic: each per-dimension term comes out of hidden-size accumulations in
    # another batch shape (5 steps padded by us vs 4 unpadded), so a token's sum may move by d * eps32 * the
    # sum of its terms' magnitudes; normalising moves a score by (its own error + |score| * ||errors||) / ||raw||.
    d = steep.model.config.hidden_size
    tol_raw = d * EPS32 * ref.abs().sum(dim=-1)[0].double().numpy()  # (n,)
    np.testing.assert_array_less(np.abs(ours.raw - ref_raw), tol_raw + 1e-300)
    tol_scores = (tol_raw + np.abs(ref_scores) * np.linalg.norm(tol_raw)) / np.linalg.norm(ref_raw)
    np.testing.assert_array_less(np.abs(ours.scores - ref_scores), tol_scores + 1e-300)
    assert ours.total == pytest.approx(float(ref_scores.sum()), abs=float(tol_scores.sum()))
    # captum's delta sums n * d float32 terms with torch's cascade reduction: log2(n d) eps32 per unit magnitude
    tol_delta = (tol_raw.sum() + _f32_tol(steep, ours.prob_input, ours.prob_baseline)
                 + math.ceil(math.log2(ref.numel())) * EPS32 * float(ref.abs().sum()))
    assert abs(ours.delta - float(ref_delta)) <= tol_delta


def test_endpoints_are_recomputed_if_captum_does_not_pass_them_through(steep, doc, cache_dir, monkeypatch):
    normal = integrated_gradients(steep, doc, n_steps=4, use_cache=False, cache_dir=cache_dir)
    monkeypatch.setattr(A._Tracker, "endpoint", lambda self, ids, probs: None)
    fallback = integrated_gradients(steep, doc, n_steps=4, use_cache=False, cache_dir=cache_dir)
    # The fallback runs both endpoints in one batch of 2, which changes float32 summation orders inside the
    # model: each probability may move by d * eps32 * its magnitude, and the delta (sum of the raw sums minus
    # the two probabilities) by d * eps32 * the sum of its terms' magnitudes (measured: 1.07e-6 on AMD EPYC
    # against a bound of 8.7e-6).
    np.testing.assert_array_equal(fallback.raw, normal.raw)
    assert abs(fallback.prob_input - normal.prob_input) <= _f32_tol(steep, normal.prob_input)
    assert abs(fallback.prob_baseline - normal.prob_baseline) <= _f32_tol(steep, normal.prob_baseline)
    assert abs(fallback.delta - normal.delta) <= _f32_tol(steep, np.abs(normal.raw).sum(), normal.prob_input,
                                                          normal.prob_baseline)


def test_any_target_of_a_multiclass_model(steep3, cache_dir):
    doc3 = analyze(steep3, text_of(30), max_tokens=128)
    assert 0 <= integrated_gradients(steep3, doc3, n_steps=4, cache_dir=cache_dir).target == doc3.predicted
    for target in (0, 2):
        attr = integrated_gradients(steep3, doc3, target=target, n_steps=16, cache_dir=cache_dir)
        assert attr.target == target
        _completeness(steep3, doc3, attr)
    with pytest.raises(ValueError, match="target"):
        integrated_gradients(steep3, doc3, target=3, cache_dir=cache_dir)


def test_full_attention_model_and_encoded_input(tiny_bert, cache_dir):
    enc = encode(tiny_bert.tokenizer, text_of(20), 64, model_max=tiny_bert.max_tokens,
                 position_offset=tiny_bert.position_offset)
    with pytest.raises(ValueError, match="target"):
        integrated_gradients(tiny_bert, enc, cache_dir=cache_dir)
    attr = integrated_gradients(tiny_bert, enc, target=0, n_steps=8, cache_dir=cache_dir)
    assert attr.scores.shape == (enc.n,) and attr.scores[0] == 0.0 and attr.scores[-1] == 0.0
    _completeness(tiny_bert, enc, attr)


def test_bf16_autocast_runs_and_stays_complete(steep, doc, cache_dir):
    attr = integrated_gradients(steep, doc, n_steps=8, precision="bf16", cache_dir=cache_dir)
    assert attr.precision == "bf16" and np.all(np.isfinite(attr.scores))
    # completeness of the bf16 path against its own endpoints (the fp32 forward differs by rounding)
    assert abs(attr.raw_total - attr.expected - attr.delta) <= 4 * np.finfo(float).eps * doc.n
    assert abs(attr.prob_input - _p_target(steep, doc.input_ids, doc.encoded, attr.target)) < 0.05


@pytest.mark.slow
def test_more_steps_shrink_the_delta_and_adaptive_doubles(steep, doc, cache_dir):
    coarse = integrated_gradients(steep, doc, n_steps=2, method="riemann_right", cache_dir=cache_dir)
    fine = integrated_gradients(steep, doc, n_steps=32, method="riemann_right", cache_dir=cache_dir)
    adaptive = integrated_gradients(steep, doc, n_steps=2, method="riemann_right", adaptive=True,
                                    tolerance=abs(fine.delta) / abs(fine.expected) * 1.01, max_steps=64,
                                    cache_dir=cache_dir)
    assert abs(fine.delta) < abs(coarse.delta)
    # the tolerance is met at 32 steps at the latest; doubling from 2 visits 2, 4, 8, 16, 32
    assert adaptive.n_steps in (2, 4, 8, 16, 32)
    assert abs(adaptive.delta) <= abs(fine.delta) * 1.01 * abs(adaptive.expected) / abs(fine.expected) + 1e-6


def _made(raw, prob_input, prob_baseline, delta=0.0):
    return Attribution(raw=np.asarray(raw, dtype=float), delta=delta, target=1, n_steps=50, method="gausslegendre",
                       prob_input=prob_input, prob_baseline=prob_baseline, precision="fp32", internal_batch_size=5,
                       seconds=1.0, key="k", head="single_label")


def test_convergence_warning_and_message():
    def make(delta, expected=0.4):
        return _made([0.0, expected + delta, 0.0], 0.9, 0.9 - expected, delta)

    assert make(0.019).converged and make(0.019).warning is None
    bad = make(0.021)
    assert not bad.converged and "delta +0.0210" in bad.warning and "5 %" in bad.warning
    assert "add up to +0.4210" in bad.warning  # the raw sums, not the normalised scores
    assert bad.raw_total == pytest.approx(0.421) and bad.expected == pytest.approx(0.4) and bad.total == 1.0


def test_scores_are_the_raw_sums_over_their_l2_norm():
    a = _made([0.0, 0.3, -0.4, 0.0], 0.8, 0.1, delta=-0.8)
    np.testing.assert_array_equal(a.scores, [0.0, 0.6, -0.8, 0.0])  # 0.3 / 0.5, sign kept
    assert a.total == pytest.approx(-0.2) and a.raw_total == pytest.approx(-0.1)
    zero = _made([0.0, 0.0, 0.0], 0.5, 0.5)
    np.testing.assert_array_equal(zero.scores, [0.0, 0.0, 0.0])  # no NaN (captum's would divide 0 by 0)
    assert zero.total == 0.0


def test_weak_explanation_when_the_baseline_already_decides_or_little_moves():
    # the demo's case: the baseline alone gives the class p = 0.9966
    demo_like = _made([0.0, 0.002, 0.001, 0.0], 0.9996, 0.9966)
    msg = demo_like.weak_explanation
    assert msg is not None and "F(x) − F(baseline) = 0.9996 − 0.9966 = +0.0030" in msg
    assert "p(baseline) = 0.9966" in msg and "no flip" in msg and "less than 0.1" in msg
    # baseline decided, but the text moves the probability a lot: no "less than" claim
    confirmed = _made([0.0, 0.4, 0.0], 0.95, 0.55)
    assert "no flip" in confirmed.weak_explanation and "less than" not in confirmed.weak_explanation
    # little moves although the baseline does not decide
    flat = _made([0.0, 0.05, 0.0], 0.35, 0.30)
    assert "less than 0.1" in flat.weak_explanation and "no flip" not in flat.weak_explanation
    # a decisive explanation: the text takes the class from 0.1 to 0.9, or from 0.7 down to 0.2
    assert _made([0.0, 0.8, 0.0], 0.9, 0.1).weak_explanation is None
    assert _made([0.0, -0.5, 0.0], 0.2, 0.7).weak_explanation is None
    assert A.WEAK_BASELINE_PROB == 0.5 and A.WEAK_OUTPUT_DIFFERENCE == 0.1


@pytest.mark.slow
def test_weak_explanation_on_a_model_whose_baseline_is_already_the_class(steep, doc, cache_dir):
    """On the tiny model, class 1 already has p >= 0.5 at the baseline and at the input (as the demo's AI class)."""
    attr = integrated_gradients(steep, doc, target=1, n_steps=8, cache_dir=cache_dir)
    assert attr.prob_baseline >= 0.5 and attr.prob_input >= 0.5
    assert attr.weak_explanation is not None and f"p(baseline) = {attr.prob_baseline:.4f}" in attr.weak_explanation
    other = integrated_gradients(steep, doc, target=0, n_steps=8, cache_dir=cache_dir)
    assert other.prob_baseline < 0.5 and abs(other.expected) >= 0.1 and other.weak_explanation is None


def test_warns_when_not_converged(steep, doc, cache_dir):
    with pytest.warns(ConvergenceWarning, match="not converged"):
        attr = integrated_gradients(steep, doc, n_steps=2, method="riemann_left", cache_dir=cache_dir)
    assert not attr.converged


def test_progress_is_monotone_and_counts_batches(steep, doc, cache_dir):
    seen = []
    integrated_gradients(steep, doc, n_steps=10, internal_batch_size=3, cache_dir=cache_dir,
                         progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert all(0.0 <= f <= 1.0 for f in fractions) and fractions == sorted(fractions) and fractions[-1] == 1.0
    batches = [m for _, m in seen if m.startswith("Batch")]
    assert [b.split()[1] for b in batches] == ["1/4", "2/4", "3/4", "4/4"]
    assert "left" in batches[-1]  # an ETA once a batch has been timed


def test_model_is_left_untouched(steep, doc, cache_dir):
    emb = steep.model.longformer.embeddings
    before = [p.requires_grad for p in steep.model.parameters()]
    integrated_gradients(steep, doc, n_steps=2, use_cache=False, cache_dir=cache_dir)
    assert not steep.model.training
    assert not emb._forward_hooks and not emb._forward_pre_hooks
    assert [p.requires_grad for p in steep.model.parameters()] == before
    assert all(p.grad is None for p in steep.model.parameters())


# ------------------------------------------------------------------------------------------------ cache
def _count_compute(monkeypatch):
    calls = []
    real = A._compute

    def counting(*args, **kwargs):
        calls.append(args[3])  # n_steps
        return real(*args, **kwargs)

    monkeypatch.setattr(A, "_compute", counting)
    return calls


def test_cache_hit_skips_compute_and_keys_on_settings(steep, doc, cache_dir, monkeypatch):
    calls = _count_compute(monkeypatch)
    first = integrated_gradients(steep, doc, n_steps=4, cache_dir=cache_dir)
    again = integrated_gradients(steep, doc, n_steps=4, cache_dir=cache_dir)
    assert calls == [4] and not first.from_cache and again.from_cache
    np.testing.assert_array_equal(first.raw, again.raw)
    np.testing.assert_array_equal(first.scores, again.scores)
    assert (again.delta, again.target, again.prob_input, again.key) == (first.delta, first.target,
                                                                         first.prob_input, first.key)
    assert cached_attribution(steep, doc, n_steps=4, cache_dir=cache_dir).from_cache
    assert cached_attribution(steep, doc, n_steps=5, cache_dir=cache_dir) is None
    assert cached_attribution(steep, doc, target=1 - doc.predicted, n_steps=4, cache_dir=cache_dir) is None
    integrated_gradients(steep, doc, n_steps=4, precision="bf16", cache_dir=cache_dir)
    assert calls == [4, 4]
    files = list((cache_dir / "attributions").glob("*.npz"))
    assert len(files) == 2
    with np.load(io.BytesIO(unsealed(files[0].read_bytes())), allow_pickle=False) as z:  # plain arrays: no pickle needed to read it back
        assert set(z.files) == {"raw", "meta"}
    with np.load(io.BytesIO(unsealed(A._cache_path(cache_dir, first.key).read_bytes())), allow_pickle=False) as z:
        np.testing.assert_array_equal(z["raw"], first.raw)  # the raw sums; the normalised scores are derived


def test_corrupt_cache_is_recomputed_not_fatal(steep, doc, cache_dir, monkeypatch, caplog):
    first = integrated_gradients(steep, doc, n_steps=3, cache_dir=cache_dir)
    (path,) = (cache_dir / "attributions").glob("*.npz")
    path.write_bytes(b"PK\x03\x04 not really a zip")
    calls = _count_compute(monkeypatch)
    assert cached_attribution(steep, doc, n_steps=3, cache_dir=cache_dir) is None
    again = integrated_gradients(steep, doc, n_steps=3, cache_dir=cache_dir)
    assert calls == [3] and not again.from_cache
    np.testing.assert_allclose(again.scores, first.scores, atol=1e-9)
    assert "unreadable" in caplog.text
    assert cached_attribution(steep, doc, n_steps=3, cache_dir=cache_dir) is not None  # rewritten whole
    with pytest.raises(CacheCorruptError):
        path.write_bytes(b"")
        A._read_cache(path, first.key, doc.n)


def test_concurrent_writers_leave_one_whole_file(steep, doc, cache_dir):
    attr = integrated_gradients(steep, doc, n_steps=2, use_cache=False, cache_dir=cache_dir)
    path = A._cache_path(cache_dir, attr.key)
    errors = []

    def write():
        try:
            for _ in range(20):
                A._write_cache(path, attr)
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert not list(path.parent.glob("*.tmp"))  # no temporary files left behind
    np.testing.assert_array_equal(A._read_cache(path, attr.key, doc.n).scores, attr.scores)


# ------------------------------------------------------------------------------------ sizes and estimates
def test_internal_batch_size_formula(steep, monkeypatch):
    monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: 10**9)
    cfg = steep.model.config
    n_pad = 48  # 45 tokens padded to a multiple of 2w = 8
    per_step = cfg.num_hidden_layers * n_pad * 4 * (
        12 * cfg.hidden_size + 2 * cfg.intermediate_size + 3 * cfg.num_attention_heads * (2 * 4 + 2)
    )
    assert cost._bytes_per_step(steep, 45, "fp32") == per_step
    assert cost._bytes_per_step(steep, 45, "bf16") == per_step / 2
    monkeypatch.setattr(cost, "_batch_speeds", lambda *args: {})  # nothing timed yet: no probing
    # a tiny model's steps are batched up to _START_BYTES of activations, within a quarter of the steps
    assert internal_batch_size_for(steep, 45, 500) == min(125, cost._START_BYTES // per_step)
    assert internal_batch_size_for(steep, 45, 40) == 10
    assert internal_batch_size_for(steep, 45, 2) == 1
    with monkeypatch.context() as m:  # a real model's step is larger than _START_BYTES: one step at a time
        m.setattr(cost, "_bytes_per_step", lambda *args: cost._START_BYTES + 1)
        assert internal_batch_size_for(steep, 45, 500) == 1
    # a larger batch measured faster is chosen only while its memory fits
    monkeypatch.setattr(cost, "_batch_speeds", lambda *args: {1: 2.0, 3: 1.5, 8: 1.0})
    assert internal_batch_size_for(steep, 45, 500) == 8
    assert internal_batch_size_for(steep, 45, 40) == 8
    assert internal_batch_size_for(steep, 45, 16) == 3  # a quarter of captum's all-steps batch at most
    monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: int(per_step * 6.5))
    assert internal_batch_size_for(steep, 45, 500) == 3  # half of the free memory holds 3 steps
    monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: 1)
    assert internal_batch_size_for(steep, 45, 500) == 1
    # an accelerator with nothing timed starts at 16 steps a batch, or the largest power of two that fits
    gpu = replace(steep, device=torch.device("cuda"))
    monkeypatch.setattr(cost, "_batch_speeds", lambda *args: {})
    for free, steps, expected in ((10**12, 500, 16), (10**12, 40, 8), (per_step * 13, 500, 4), (1, 500, 1),
                                  (10**12, 7, 1)):
        monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: free)
        assert internal_batch_size_for(gpu, 45, steps) == expected, (free, steps)


CPU, GPU = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("device, timed, expected", [
    (CPU, {1: 1.0}, 1),  # a CPU never tries a larger batch unmeasured
    (CPU, {1: 1.0, 2: 0.8}, 2),  # ... but uses one measured faster (a run with an explicit size)
    (CPU, {1: 1.0, 2: 1.1, 4: 2.0}, 1),
    (CPU, {1: 1.0, 2: 1.0}, 1),  # a tie: the smaller batch, less memory
    (CPU, {2: 1.0}, 1),  # one step per batch not timed yet: try it
    (CPU, {4: 1.0, 8: 1.3}, 2),  # the smallest timed is the fastest: try half
    (CPU, {2: 1.1, 4: 1.0, 8: 1.3}, 4),  # both neighbours timed and slower: stay at the fastest
    (CPU, {1: 1.0, 4: 0.5, 64: 0.1}, 4),  # sizes above the cap (a quarter of 40 steps) are not candidates
    (GPU, {1: 1.0}, 2),  # an accelerator tries twice the fastest ...
    (GPU, {1: 1.0, 2: 0.5}, 4),  # ... while doubling gains
    (GPU, {1: 1.0, 2: 0.98}, 2),  # it gained 2 %: stay
    (GPU, {1: 1.0, 2: 1.2}, 1),  # slower: back to one step
    (GPU, {8: 1.0, 16: 0.9, 1: 3.0}, 10),  # the doubling of the largest is capped at a quarter of 40
    (GPU, {10: 1.0, 1: 3.0}, 10),  # at the cap already
])
def test_internal_batch_follows_measured_throughput(steep, monkeypatch, device, timed, expected):
    monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: 10**12)
    monkeypatch.setattr(cost, "_batch_speeds", lambda *args: timed)
    assert internal_batch_size_for(replace(steep, device=device), 45, 40) == expected


@pytest.mark.parametrize("device", [CPU, GPU])
def test_internal_batch_never_takes_a_size_measured_slower(steep, monkeypatch, device):
    """Whatever was recorded, the choice is the fastest size measured inside the memory budget or a size not
    measured yet (never one measured slower per step than another candidate), and never over the budget."""
    model = replace(steep, device=device)
    per_step = cost._bytes_per_step(steep, 45, "fp32")
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.choice(np.arange(1, 41), size=rng.integers(0, 6), replace=False)
        timed = {int(b): float(rng.choice([0.5, 1.0, 1.5, rng.uniform(0.1, 3.0)])) for b in sizes}
        free = float(per_step * rng.choice([1, 7, 30, 1000]))
        steps = int(rng.integers(2, 80))
        monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: free)
        monkeypatch.setattr(cost, "_batch_speeds", lambda *args: timed)
        chosen = internal_batch_size_for(model, 45, steps)
        cap = max(1, min(steps, int(0.5 * free // per_step), steps // 4))
        assert 1 <= chosen <= cap, (timed, free, steps, chosen)
        candidates = {b: s for b, s in timed.items() if b <= cap}
        if chosen in candidates:
            assert candidates[chosen] == min(candidates.values()), (timed, cap, chosen)
        if not candidates and device.type == "cpu":  # nothing timed inside the budget: as many steps as
            assert chosen == max(1, min(cap, int(cost._START_BYTES // per_step)))  # _START_BYTES hold, at least one
        elif not candidates:  # on an accelerator: the largest power of two inside the budget, at most 16
            assert chosen == max(b for b in (1, 2, 4, 8, 16) if b <= cap), (free, steps, chosen)


def test_runs_record_their_throughput_per_batch(steep, doc, cache_dir, monkeypatch):
    """A finished run stores its seconds per step (at the bucket's length, the endpoint forwards taken out) under
    its batch size; the next choice reads it, and the fastest time seen per size is kept."""
    monkeypatch.setattr(cost, "time_passes", lambda model, enc, precision: (0.5, 2.0))
    estimate_ig_seconds(steep, doc.n, 8, cache_dir=cache_dir)
    attr = integrated_gradients(steep, doc, n_steps=8, internal_batch_size=2, cache_dir=cache_dir, use_cache=False)
    scale = padded_length(steep, doc.n) / 128
    forward = 0.5 * attr.seconds / (scale * (8 * 2.0 + 2 * 0.5))  # the bucket's forward after this run's rescale
    speeds = cost._batch_speeds(steep, doc.n, "fp32", cache_dir)
    assert speeds == {2: pytest.approx((attr.seconds - 2 * scale * forward) / scale / 8)}
    monkeypatch.setattr(cost, "_free_memory_bytes", lambda device: 10**12)
    assert internal_batch_size_for(steep, doc.n, 16, cache_dir=cache_dir) == 1  # 2 is all it knows: try one step
    cost.record_timing(steep, doc.n, "fp32", replace(attr, seconds=attr.seconds * 10), cache_dir)
    assert cost._batch_speeds(steep, doc.n, "fp32", cache_dir)[2] == pytest.approx(speeds[2])  # the fastest is kept


def test_estimate_is_cached_linear_and_refined_by_runs(steep, doc, cache_dir, monkeypatch):
    timed = []
    monkeypatch.setattr(cost, "time_passes", lambda model, enc, precision: timed.append(enc.n) or (0.5, 2.0))
    # the tiny model's max is 128 tokens: every length falls in the 128 bucket (padded 128)
    assert estimate_ig_seconds(steep, 128, 10, cache_dir=cache_dir) == pytest.approx(10 * 2.0 + 2 * 0.5)
    assert estimate_ig_seconds(steep, 64, 10, cache_dir=cache_dir) == pytest.approx((10 * 2.0 + 2 * 0.5) / 2)
    assert timed == [128]  # measured once per bucket
    with pytest.raises(ValueError, match="exceed"):
        estimate_ig_seconds(steep, 10_000, 10, cache_dir=cache_dir)
    attr = integrated_gradients(steep, doc, n_steps=4, cache_dir=cache_dir)
    scale = padded_length(steep, doc.n) / 128
    factor = attr.seconds / (scale * (4 * 2.0 + 2 * 0.5))  # measured / predicted for that run
    assert estimate_ig_seconds(steep, 128, 10, cache_dir=cache_dir) == pytest.approx((10 * 2.0 + 2 * 0.5) * factor)
    # the refined estimate predicts the run it learned from, however quick or slow it was
    assert estimate_ig_seconds(steep, doc.n, 4, cache_dir=cache_dir) == pytest.approx(attr.seconds)


def test_time_passes_measures_the_real_model(steep, doc):
    passes = cost.time_passes(steep, doc.encoded, "fp32")
    assert all(t > 0 for t in passes) and passes.step == passes[1]


# ------------------------------------------------------------------------------------------------ tables
TOKENS = ["<s>", "Ġalgorithms", "Ġare", "Ġfun", "Ġalgorithms", "Ġprogramming", "algorithms", ".", "</s>"]
SCORES = np.array([0.0, 0.30, -0.05, 0.10, 0.20, -0.40, 0.05, -0.01, 0.0])


def test_top_attributions_positive_and_negative():
    pos = top_attributions(TOKENS, SCORES, k=3)
    assert list(pos.columns) == ["token", "position", "attribution"]
    assert pos["position"].tolist() == [1, 4, 3] and pos["token"].tolist() == ["algorithms", "algorithms", "fun"]
    neg = top_attributions(TOKENS, SCORES, k=10, sign="negative")
    assert neg["position"].tolist() == [5, 2, 7]  # only the negative ones, most negative first
    masked = top_attributions(TOKENS, SCORES, k=2, mask=[False, True] + [False] * 7)
    assert masked["position"].tolist() == [4, 3]
    with pytest.raises(ValueError):
        top_attributions(TOKENS, SCORES[:-1])


def test_attribution_by_token_sums_per_type():
    agg = attribution_by_token(TOKENS, SCORES, mask=[t in ("<s>", "</s>") for t in TOKENS])
    by = dict(zip(agg["token"], agg["attribution"]))
    assert by["algorithms"] == pytest.approx(0.55) and by["programming"] == pytest.approx(-0.40)
    assert dict(zip(agg["token"], agg["count"]))["algorithms"] == 3
    assert "<s>" not in by and agg["attribution"].is_monotonic_decreasing


def test_token_detail_ranks(steep, doc, cache_dir):
    attr = integrated_gradients(steep, doc, n_steps=3, cache_dir=cache_dir)
    received = np.arange(doc.n, dtype=float)
    best = int(np.argmax(attr.scores))
    d = token_detail(doc, attr, best, received=received)
    assert d["position"] == best and d["attribution_rank"] == 1 and d["attribution"] == attr.scores[best]
    assert d["attention_rank"] == doc.n - best and d["received_attention"] == best
    d2 = token_detail(doc, attr, 0)  # the summed attention from the bands
    assert d2["received_attention"] == pytest.approx(doc.attention.received()[0])
    with pytest.raises(ValueError):
        token_detail(doc, attr, doc.n)


def test_dataset_attributions_is_a_mean_over_all_documents(steep, cache_dir, monkeypatch):
    """Oracle: a loop over the documents and their tokens (issue 13 item 4): a type's score in a document is the
    sum of its normalised scores there; its dataset score is the sum over documents / the number of documents
    (absent = 0). "compiler" is absent from the last document; the mask drops stopwords such as "the"."""
    from longviz_core.tokens import token_label
    from longviz_core.views.masking import build_mask

    texts = [text_of(12), text_of(20), "neural network trains on data"]
    specials = set(steep.tokenizer.all_special_tokens)
    docs = []  # per document: type -> (summed score, occurrences), for the unmasked and the masked table
    for t in texts:
        enc = encode(steep.tokenizer, t, 64, position_offset=steep.position_offset)
        scores = integrated_gradients(steep, enc, 1, 3, cache_dir=cache_dir).scores
        paper_mask = build_mask(enc.tokens, special_tokens=list(specials))
        plain, masked = {}, {}
        for i, tok in enumerate(enc.tokens):
            if tok in specials:
                continue
            for table, skip in ((plain, False), (masked, paper_mask[i])):
                if not skip:
                    s, c = table.get(token_label(tok), (0.0, 0))
                    table[token_label(tok)] = (s + scores[i], c + 1)
        docs.append((plain, masked))
    assert "compiler" in docs[0][0] and "compiler" not in docs[2][0] and "the" not in docs[0][1]

    def oracle(which, min_docs):
        per_doc = [d[which] for d in docs]
        out = {}
        for tok in {t for d in per_doc for t in d}:
            present = [d[tok] for d in per_doc if tok in d]
            if len(present) >= min_docs:
                total, occ = sum(s for s, _ in present), sum(c for _, c in present)
                out[tok] = (total / len(texts), len(present), occ, total / occ, total,
                            sum(abs(s) for s, _ in present))
        return out

    first = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir)
    assert first.n_docs == 3 and not first.masked and first.min_docs == 1
    for masked, min_docs in ((False, 1), (True, 1), (False, 2), (True, 3)):
        got = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir,
                                   masked=masked, min_docs=min_docs)
        want = oracle(int(masked), min_docs)
        assert list(got.table.columns) == ["token", "mean_attribution", "n_docs", "occurrences",
                                           "mean_per_occurrence", "total_attribution"]
        assert sorted(got.table["token"]) == sorted(want) and got.table["mean_attribution"].is_monotonic_decreasing
        for row in got.table.itertuples(index=False):
            mean, n_docs, occ, per_occ, total, magnitude = want[row.token]
            assert (row.n_docs, row.occurrences) == (n_docs, occ)
            tol = 2 * len(texts) * np.finfo(float).eps * magnitude  # the same sums in another order
            assert abs(row.total_attribution - total) <= tol and abs(row.mean_attribution - mean) <= tol / 3
            assert abs(row.mean_per_occurrence - per_occ) <= tol / occ
    compiler = first.table.set_index("token").loc["compiler"]
    assert compiler["n_docs"] == 2 and compiler["mean_attribution"] == pytest.approx(compiler["total_attribution"] / 3)
    assert "Dataset-wide attribution for class 'AI'" in first.title("AI") and "L2-normalised" in first.title("AI")
    calls = _count_compute(monkeypatch)
    again = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir)
    assert again.from_cache and calls == []
    pd.testing.assert_frame_equal(again.table, first.table)
    again_masked = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir,
                                        masked=True, min_docs=2)
    assert again_masked.from_cache and again_masked.masked and again_masked.min_docs == 2
    assert (again_masked.table["n_docs"] >= 2).all() and calls == []
    with pytest.raises(ValueError, match="min_docs"):
        dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir, min_docs=0)


def test_input_validation(steep, doc, cache_dir):
    with pytest.raises(ValueError, match="n_steps"):
        integrated_gradients(steep, doc, n_steps=0, cache_dir=cache_dir)
    with pytest.raises(ValueError, match="method"):
        integrated_gradients(steep, doc, method="simpson", cache_dir=cache_dir)
    with pytest.raises(ValueError, match="precision"):
        integrated_gradients(steep, doc, precision="int8", cache_dir=cache_dir)
    with pytest.raises(ValueError, match="DocumentAnalysis"):
        integrated_gradients(steep, "some text", cache_dir=cache_dir)
    with pytest.raises(ValueError, match="max_steps"):
        integrated_gradients(steep, doc, n_steps=64, adaptive=True, max_steps=32, cache_dir=cache_dir)


# ------------------------------------------------------------------------------------------- demo model
@pytest.mark.slow
def test_completeness_on_the_demo_model(demo_model, demo, cache_dir):
    text = " ".join(pd.read_parquet(demo.dataset_path)["text"].head(40))
    doc_ = analyze(demo_model, text, max_tokens=1000)
    assert doc_.n == 1000
    attr = integrated_gradients(demo_model, doc_, target=1, n_steps=16, cache_dir=cache_dir)
    gap = _completeness(demo_model, doc_, attr)
    assert attr.scores[0] == 0.0 and attr.scores[-1] == 0.0 and attr.scores.shape == (1000,)
    assert math.isfinite(gap)
