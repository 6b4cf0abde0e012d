"""Integrated Gradients: completeness against independent forwards, the notebook's captum call as an oracle,
zero attribution on <s>/</s>/padding, targets, adaptive steps, progress, the disk cache, estimates, tables."""
from __future__ import annotations

import math
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import analyze, encode, load_model
from longviz_core import attribution as A
from longviz_core.attribution import (
    Attribution,
    ConvergenceWarning,
    attribution_by_token,
    cached_attribution,
    dataset_attributions,
    estimate_ig_seconds,
    integrated_gradients,
    internal_batch_size_for,
    token_detail,
    top_attributions,
)
from tiny import make_tiny_longformer, text_of

# Low step counts keep the tests fast; their convergence warnings are expected (one test checks them).
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
N_WORDS = 37  # -> a token count that is not a multiple of the window (8), so padding is exercised


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
    if model.is_longformer:
        kwargs["global_attention_mask"] = t(enc.global_mask)
    with torch.no_grad():
        return float(torch.softmax(model.model(**kwargs).logits, -1)[0, target])


def _completeness(model, analysis_or_enc, attr):
    enc = getattr(analysis_or_enc, "encoded", analysis_or_enc)
    p_x = _p_target(model, enc.input_ids, enc, attr.target)
    p_b = _p_target(model, enc.baseline_ids, enc, attr.target)
    assert attr.prob_input == pytest.approx(p_x, abs=1e-5)
    assert attr.prob_baseline == pytest.approx(p_b, abs=1e-5)
    assert abs(attr.scores.sum() - (p_x - p_b)) <= abs(attr.delta) + 1e-4
    return p_x - p_b


def test_completeness_on_a_tiny_model(steep, doc, cache_dir):
    attr = integrated_gradients(steep, doc, n_steps=24, cache_dir=cache_dir)
    assert attr.target == doc.predicted and attr.n_steps == 24 and attr.method == "gausslegendre"
    gap = _completeness(steep, doc, attr)
    assert abs(gap) > 0.05, "the test model is too flat for completeness to mean anything"
    assert attr.delta == pytest.approx(attr.total - attr.expected, abs=1e-9)


def test_specials_and_padding_get_zero_and_length_is_the_token_count(steep, doc, cache_dir):
    assert doc.n % (2 * steep.attention_window) != 0  # the model pads this input: make sure we slice it off
    attr = integrated_gradients(steep, doc, n_steps=8, cache_dir=cache_dir)
    assert attr.scores.shape == (doc.n,)
    assert attr.scores[0] == 0.0 and attr.scores[-1] == 0.0
    assert np.count_nonzero(attr.scores[1:-1]) == doc.n - 2


def test_matches_the_notebooks_captum_call(steep, doc, cache_dir):
    """Oracle: the paper's notebook code (LayerIntegratedGradients on the embeddings, softmax forward, position
    ids as an additional argument, captum's own convergence delta), on the unpadded input."""
    from captum.attr import LayerIntegratedGradients

    net, enc, target = steep.model, doc.encoded, 1

    def custom_forward(inputs, position_ids=None, attention_mask=None):
        return torch.softmax(net(inputs, position_ids=position_ids, attention_mask=attention_mask).logits, dim=1)

    lig = LayerIntegratedGradients(custom_forward, net.longformer.embeddings)
    t = lambda a: torch.as_tensor(a, dtype=torch.long)[None]  # noqa: E731
    ref, ref_delta = lig.attribute(
        inputs=t(enc.input_ids), baselines=t(enc.baseline_ids), return_convergence_delta=True,
        additional_forward_args=(t(enc.position_ids), t(np.ones(enc.n))), target=target, n_steps=12,
        internal_batch_size=4,
    )
    ref_scores = ref.sum(dim=-1)[0, : enc.n].double().numpy()
    ours = integrated_gradients(steep, doc, target=target, n_steps=12, internal_batch_size=5, cache_dir=cache_dir)
    np.testing.assert_allclose(ours.scores, ref_scores, atol=2e-6)
    assert ours.delta == pytest.approx(float(ref_delta), abs=2e-5)


def test_endpoints_are_recomputed_if_captum_does_not_pass_them_through(steep, doc, cache_dir, monkeypatch):
    normal = integrated_gradients(steep, doc, n_steps=4, use_cache=False, cache_dir=cache_dir)
    monkeypatch.setattr(A._Tracker, "endpoint", lambda self, ids, probs: None)
    fallback = integrated_gradients(steep, doc, n_steps=4, use_cache=False, cache_dir=cache_dir)
    assert fallback.prob_input == pytest.approx(normal.prob_input, abs=1e-6)
    assert fallback.prob_baseline == pytest.approx(normal.prob_baseline, abs=1e-6)
    assert fallback.delta == pytest.approx(normal.delta, abs=1e-6)


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
    assert abs(attr.total - attr.expected - attr.delta) < 1e-9
    assert abs(attr.prob_input - _p_target(steep, doc.input_ids, doc.encoded, attr.target)) < 0.05


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


def test_convergence_warning_and_message():
    def make(delta, expected=0.4):
        return Attribution(scores=np.array([0.0, expected + delta, 0.0]), delta=delta, target=1, n_steps=50,
                           method="gausslegendre", prob_input=0.9, prob_baseline=0.9 - expected, precision="fp32",
                           internal_batch_size=5, seconds=1.0, key="k")

    assert make(0.019).converged and make(0.019).warning is None
    bad = make(0.021)
    assert not bad.converged and "delta +0.0210" in bad.warning and "5 %" in bad.warning
    assert bad.total == pytest.approx(0.421) and bad.expected == pytest.approx(0.4)


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
    with np.load(files[0], allow_pickle=False) as z:  # plain arrays: no pickle needed to read it back
        assert set(z.files) == {"scores", "meta"}


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
    with pytest.raises(A.CacheCorruptError):
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
    monkeypatch.setattr(A, "_free_memory_bytes", lambda device: 10**9)
    cfg = steep.model.config
    n_pad = 48  # 45 tokens padded to a multiple of 2w = 8
    per_step = cfg.num_hidden_layers * n_pad * 4 * (
        12 * cfg.hidden_size + 2 * cfg.intermediate_size + 3 * cfg.num_attention_heads * (2 * 4 + 2)
    )
    assert A._bytes_per_step(steep, 45, "fp32") == per_step
    assert A._bytes_per_step(steep, 45, "bf16") == per_step / 2
    assert internal_batch_size_for(steep, 45, 500) == 50  # memory is plentiful: capped for progress updates
    assert internal_batch_size_for(steep, 45, 4) == 1
    monkeypatch.setattr(A, "_free_memory_bytes", lambda device: int(per_step * 6.5))
    assert internal_batch_size_for(steep, 45, 500) == 3  # half of the free memory holds 3 steps
    monkeypatch.setattr(A, "_free_memory_bytes", lambda device: 1)
    assert internal_batch_size_for(steep, 45, 500) == 1


def test_estimate_is_cached_linear_and_refined_by_runs(steep, doc, cache_dir, monkeypatch):
    timed = []
    monkeypatch.setattr(A, "_time_passes", lambda model, enc, precision: timed.append(enc.n) or (0.5, 2.0))
    # the tiny model's max is 128 tokens: every length falls in the 128 bucket (padded 128)
    assert estimate_ig_seconds(steep, 128, 10, cache_dir=cache_dir) == pytest.approx(10 * 2.0 + 2 * 0.5)
    assert estimate_ig_seconds(steep, 64, 10, cache_dir=cache_dir) == pytest.approx((10 * 2.0 + 2 * 0.5) / 2)
    assert timed == [128]  # measured once per bucket
    with pytest.raises(ValueError, match="exceed"):
        estimate_ig_seconds(steep, 10_000, 10, cache_dir=cache_dir)
    attr = integrated_gradients(steep, doc, n_steps=4, cache_dir=cache_dir)
    scale = A._padded(steep, doc.n) / 128
    factor = attr.seconds / (scale * (4 * 2.0 + 2 * 0.5))  # measured / predicted for that run
    assert estimate_ig_seconds(steep, 128, 10, cache_dir=cache_dir) == pytest.approx((10 * 2.0 + 2 * 0.5) * factor)
    # the refined estimate predicts the run it learned from, however quick or slow it was
    assert estimate_ig_seconds(steep, doc.n, 4, cache_dir=cache_dir) == pytest.approx(attr.seconds)


def test_time_passes_measures_the_real_model(steep, doc):
    passes = A._time_passes(steep, doc.encoded, "fp32")
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


def test_dataset_attributions_average_per_document_sums(steep, cache_dir, monkeypatch):
    texts = [text_of(12), text_of(20), "neural network trains on data"]
    first = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir)
    # oracle: each document's own attributions, summed per type, averaged over the documents with that type
    per_doc = []
    for t in texts:
        enc = encode(steep.tokenizer, t, 64, position_offset=steep.position_offset)
        attr = integrated_gradients(steep, enc, 1, 3, cache_dir=cache_dir)
        assert attr.from_cache  # the dataset run filled the per-document cache
        per_doc.append(attribution_by_token(enc.tokens, attr.scores, [x in ("<s>", "</s>") for x in enc.tokens]))
    allrows = pd.concat(per_doc)
    expect = allrows.groupby("token")["attribution"].agg(["mean", "size"])
    got = first.table.set_index("token")
    assert set(got.index) == set(expect.index)
    np.testing.assert_allclose(got.loc[expect.index, "mean_attribution"], expect["mean"], atol=1e-12)
    assert (got.loc[expect.index, "n_docs"].to_numpy() == expect["size"].to_numpy()).all()
    assert first.table["mean_attribution"].is_monotonic_decreasing and first.n_docs == 3
    calls = _count_compute(monkeypatch)
    again = dataset_attributions(steep, texts, target=1, n_steps=3, max_tokens=64, cache_dir=cache_dir)
    assert again.from_cache and calls == []
    pd.testing.assert_frame_equal(again.table, first.table)


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
def test_completeness_on_the_demo_model(demo_model, demo, cache_dir):
    text = " ".join(pd.read_parquet(demo.dataset_path)["text"].head(40))
    doc_ = analyze(demo_model, text, max_tokens=1000)
    assert doc_.n == 1000
    attr = integrated_gradients(demo_model, doc_, target=1, n_steps=16, cache_dir=cache_dir)
    gap = _completeness(demo_model, doc_, attr)
    assert attr.scores[0] == 0.0 and attr.scores[-1] == 0.0 and attr.scores.shape == (1000,)
    assert math.isfinite(gap)
