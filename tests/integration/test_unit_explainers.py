"""Occlusion and Shapley sampling over units (attribution.perturbation) against independent oracles: a loop
over the units replacing each one and scoring the copy alone, Shapley's efficiency (the unit values add up to
p(x) - p(every unit replaced)), the exact Shapley values of three units against the enumeration of their six
orders, on tiny random models of every family (Longformer with its global <s>, ModernBERT, BigBird block-sparse,
decoders with and without a token before the text) and on a regression head."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.attribution import perturbation
from longviz_core.attribution.explainers import DEFAULT_METHODS
from longviz_core.model.copies import default_batch_size, replacement_id
from tiny import make_tiny_bigbird, make_tiny_decoder, make_tiny_longformer, make_tiny_modernbert, text_of

TEXT = ("the model learns attention. the compiler checks types! programs, semantics; learning agents search.\n\n"
        "a neural network trains on data. 2019 results show that")


def _p(model, analysis, ids, target) -> float:
    """Oracle: the head's explained quantity of one copy, scored alone (batch of one)."""
    inputs = model.family.inputs(analysis.encoded, model.device, ids=np.asarray(ids)[None])
    with torch.no_grad():
        logits = model(**inputs).logits[0].double()
    return float(model.head.explained(logits, target))


def _replaced(analysis, segments, units, token_id) -> np.ndarray:
    ids = analysis.encoded.input_ids.copy()
    for u in units:
        a, b = segments.spans[u]
        ids[a:b] = token_id
    return ids


# The explainers score copies in batches, the oracle one at a time: the matrix products take different kernels (MKL
# on AMD rounds them differently), so a probability differs by a few float32 ulps of 1 (1.2e-7 each), and a Shapley
# value or a sum of them differences two such probabilities.
P_ATOL = 1e-6


def _value(model, analysis, segments, coalition, target, token_id) -> float:
    """p of the document with every unit outside `coalition` replaced."""
    return _p(model, analysis, _replaced(analysis, segments, set(range(len(segments))) - set(coalition),
                                         token_id), target)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("unit-explainers")
    dirs = {
        "longformer": make_tiny_longformer(root / "lf", layers=2, window=[16, 8], initializer_range=0.5, seed=3,
                                           max_positions=400),
        "modernbert": make_tiny_modernbert(root / "mb", initializer_range=0.3),
        "bigbird": make_tiny_bigbird(root / "bb"),
        "llama": make_tiny_decoder(root / "llama", "llama", pad=False),
        "qwen3": make_tiny_decoder(root / "qwen3", "qwen3"),
        "regression": make_tiny_longformer(root / "reg", labels=1, initializer_range=0.5, seed=4),
    }
    return {name: lv.load_model(str(path), device="cpu") for name, path in dirs.items()}


def _replacement(model) -> str:
    return "mask" if model.tokenizer.mask_token_id is not None else "baseline"  # the decoders have no <mask>


@pytest.mark.parametrize("name,unit,words", [
    ("longformer", "sentence", 0), ("modernbert", "sentence", 0), ("bigbird", "paragraph", 200),
    ("llama", "sentence", 0), ("qwen3", "word", 0), ("regression", "sentence", 0)])
def test_occlusion_equals_replacing_each_unit_alone(models, name, unit, words):
    """Every family: φ_u = p(x) - p(x with unit u replaced), each copy scored alone; batches of 3 copies (a
    last, partial batch) against the oracle's batch of one. BigBird at 200 words runs block-sparse."""
    model = models[name]
    text = TEXT + ("\n\n" + text_of(words) + "." if words else "")
    a = lv.analyze(model, text, max_tokens=min(400, model.max_tokens))
    if name == "bigbird":
        assert a.n > model.family.sparse_from
    replacement = _replacement(model)
    token_id = replacement_id(model, replacement)
    e = lv.explain(model, a, "occlusion", unit=unit, replacement=replacement, batch_size=3)
    seg = lv.segment(a, unit)
    assert 3 <= len(seg) and e.options["unit"] == unit and e.method == "occlusion"
    intact = _p(model, a, a.encoded.input_ids, a.predicted)
    want = [intact - _p(model, a, _replaced(a, seg, [u], token_id), a.predicted) for u in range(len(seg))]
    got = lv.aggregate(e.scores, seg)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * max(1.0, np.abs(want).max()))
    assert np.abs(want).max() > 1e-4  # the units matter: the comparison is not of zeros
    # each token holds its unit's share, the special tokens nothing
    enc = a.encoded
    assert (e.scores[: enc.prefix] == 0).all() and (e.scores[enc.n - enc.suffix :] == 0).all()
    a0, b0 = seg.spans[0]
    np.testing.assert_allclose(e.scores[a0:b0], got[0] / (b0 - a0))


def test_shapley_is_efficient_and_exact_on_three_units(models):
    model = models["longformer"]
    token_id = model.tokenizer.mask_token_id
    # three sentences: 3! = 6 orders <= n_samples, so every order is taken: the exact Shapley values
    a = lv.analyze(model, "the model learns attention. the compiler checks types. programs show results.", 128)
    seg = lv.segment(a, "sentence")
    assert len(seg) == 3
    t = a.predicted
    v = {s: _value(model, a, seg, s, t, token_id) for r in range(4) for s in itertools.combinations(range(3), r)}
    exact = np.zeros(3)
    for order in itertools.permutations(range(3)):
        for i, u in enumerate(order):
            exact[u] += v[tuple(sorted(order[: i + 1]))] - v[tuple(sorted(order[:i]))]
    exact /= 6
    e = lv.explain(model, a, "shapley", unit="sentence", n_samples=6)
    np.testing.assert_allclose(lv.aggregate(e.scores, seg), exact, rtol=1e-5, atol=P_ATOL)
    assert np.abs(exact).max() > 1e-4
    # sampled orders (5 units, 3 samples): not exact, but efficient — they add up to p(x) - p(all replaced)
    a = lv.analyze(model, TEXT, 128)
    seg = lv.segment(a, "sentence")
    assert len(seg) == 5
    e = lv.explain(model, a, "shapley", unit="sentence", n_samples=3, seed=7, batch_size=4)
    total = _value(model, a, seg, range(5), a.predicted, token_id) - _value(model, a, seg, (), a.predicted, token_id)
    assert lv.aggregate(e.scores, seg).sum() == pytest.approx(total, rel=1e-5, abs=P_ATOL)
    again = lv.explain(model, a, "shapley", unit="sentence", n_samples=3, seed=7, batch_size=1)
    np.testing.assert_allclose(again.scores, e.scores, rtol=1e-5, atol=P_ATOL)  # the seed fixes the orders
    other = lv.explain(model, a, "shapley", unit="sentence", n_samples=3, seed=8)
    assert not np.allclose(other.scores, e.scores)


def test_copies_and_progress_match_the_cost_class(models, monkeypatch):
    """Occlusion scores 1 + units copies, Shapley sampling 1 + n_samples x units; progress ends at 1."""
    model = models["modernbert"]
    a = lv.analyze(model, TEXT, 128)
    units = len(lv.segment(a, "sentence"))
    scored = []
    real = perturbation.copy_logits
    monkeypatch.setattr(perturbation, "copy_logits", lambda m, enc, ids: scored.append(len(ids)) or real(m, enc, ids))
    reports = []
    lv.explain(model, a, "occlusion", progress=lambda f, msg: reports.append(f))
    assert sum(scored) == 1 + units and reports[-1] == 1.0
    assert max(scored) <= default_batch_size(model, a.encoded.n)
    scored.clear()
    lv.explain(model, a, "shapley", n_samples=2)
    assert sum(scored) == 1 + 2 * units
    assert "forwards" in lv.EXPLAINERS["occlusion"].cost and "n_samples" in lv.EXPLAINERS["shapley"].cost
    # Shapley's n_samples x units copies keep it out of what runs when no explainers are named
    assert "occlusion" in DEFAULT_METHODS and "shapley" not in DEFAULT_METHODS
    assert set(DEFAULT_METHODS) | {"shapley"} == set(lv.EXPLAINERS)


def test_bad_options_are_clear_errors(models):
    model = models["llama"]
    a = lv.analyze(model, TEXT, 128)
    with pytest.raises(lv.ExplainerError, match="no mask token"):
        lv.explain(model, a, "occlusion")
    with pytest.raises(lv.ExplainerError, match="unit must be one of"):
        lv.explain(model, a, "occlusion", unit="chapter", replacement="baseline")
    with pytest.raises(lv.ExplainerError, match="n_samples"):
        lv.explain(model, a, "shapley", n_samples=0, replacement="baseline")
