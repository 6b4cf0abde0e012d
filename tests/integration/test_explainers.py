"""Every explainer against an independent oracle on tiny Longformers (per-layer windows [16, 8] and [8, 16, 32],
a global <s>): rollout and GAE against dense matrix products of the attention recomputed from the weights
(tests/support/oracles.py), the cls-vector pass against the dense product's cls row, every gradient against
central finite differences on a float64 copy of the model, AttCAT against a direct loop over layers and tokens.

Finite differences: the model is copied to float64 and transformers' softmax, which Longformer runs in float32
whatever the model's dtype, is made to run in float64 too (the patch below), so the function differentiated is
smooth to float64 precision. Central differences with eps = 1e-6 then err by about eps^2 * f''' + 1e-16 / eps,
~1e-10 of the objective's scale; the captured attention gradients are stored in float32 (relative error 6e-8).
Tolerances: rtol 1e-5 with an absolute floor of 1e-6 x the largest value compared."""
from __future__ import annotations

import copy
import dataclasses
import warnings

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.attribution import backward
from longviz_core.attribution import explainers as ex
from longviz_core.evaluation.faithfulness import random_order, removal_order
from support.oracles import oracle_bert, oracle_longformer
from tiny import make_tiny_longformer, text_of

EPS = 1e-6


def close(got, want, rtol=1e-5, floor=1e-6):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=floor * max(np.abs(want).max(), 1e-30))


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture()
def float64_softmax(monkeypatch):
    """transformers' Longformer calls softmax(..., dtype=torch.float32); in a float64 model run it in float64.
    `perturb` adds a delta to the output of one softmax call of the next forward (calls counted per forward:
    layer l's local probabilities are call 2l, its global rows call 2l + 1)."""
    real = torch.nn.functional.softmax
    state = {"call": 0, "target": None, "index": None, "delta": 0.0}

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        out = real(x, dim=dim) if x.dtype == torch.float64 else real(x, dim=dim, dtype=dtype)
        if state["target"] is not None and state["call"] == state["target"]:
            out = out.clone()
            out[state["index"]] += state["delta"]
        state["call"] += 1
        return out

    monkeypatch.setattr(torch.nn.functional, "softmax", softmax)
    return state


@pytest.fixture(scope="module")
def windowed(tmp_path_factory):
    """The finite-difference tests' model: windows [16, 8] (one-sided 8 and 4), global <s>, large random weights
    (init 0.3) so attention is peaked and gradients are far from 0. The other tests also run on [8, 16, 32]."""
    path = make_tiny_longformer(tmp_path_factory.mktemp("windowed"), layers=2, window=[16, 8],
                                initializer_range=0.3, seed=5)
    return lv.load_model(str(path), device="cpu")


@pytest.fixture()
def model64(windowed, float64_softmax):
    return dataclasses.replace(windowed, model=copy.deepcopy(windowed.model).double())


def _doc(model, n_words=37):
    return lv.analyze(model, text_of(n_words), max_tokens=model.max_tokens)


def _objective(model, analysis, target, objective="logit", layer_delta=None):
    """z_t or p_t of one forward in float64, optionally with a delta added to one layer's input (the hook is
    removed afterwards)."""
    net = model.model
    handles = []
    if layer_delta is not None:
        layer, delta = layer_delta
        handles.append(net.longformer.encoder.layer[layer].register_forward_pre_hook(
            lambda m, args: (args[0] + delta, *args[1:])))
    try:
        with torch.no_grad():
            logits = net(**analysis.encoded.torch_inputs("cpu")).logits[0].double()
    finally:
        for h in handles:
            h.remove()
    return float(logits[target] if objective == "logit" else torch.softmax(logits, -1)[target])


def _softmax_fd(model, analysis, state, call, index, target, objective):
    def f(delta):
        state.update(call=0, target=call, index=index, delta=delta)
        try:
            return _objective(model, analysis, target, objective)
        finally:
            state.update(target=None, call=0)

    return (f(EPS) - f(-EPS)) / (2 * EPS)


def _captured(model, analysis, target, objective, layers):
    grads = {}
    backward.backward(model, analysis, target, objective, attention=layers,
                 consume=lambda layer, g: grads.__setitem__(layer, g))
    return grads


def _dense_oracle(model, analysis):
    """(layers, heads, n, n) attention recomputed from the weights in float64 (support.oracles)."""
    oracle = oracle_longformer if model.family.name == "longformer" else oracle_bert
    return np.stack([oracle(model, analysis, l) for l in range(model.num_layers)])


def _dense_rollout(mats, kind):
    """The cls row of the dense product, built as the papers write it (n x n matrices)."""
    n = mats[0].shape[0]
    eye = np.eye(n)
    if kind == "rollout":
        aug = [0.5 * (a + eye) for a in mats]
        aug = [a / a.sum(axis=1, keepdims=True) for a in aug]
        joint = aug[0]
        for a in aug[1:]:
            joint = a @ joint  # Ã_l (Ã_{l-1} ⋯ Ã_1), as Abnar & Zuidema's compute_joint_attention
    else:
        joint = eye.copy()
        for a in mats:
            joint = joint + a @ joint  # R <- R + Ḡ_l R (Chefer et al. eq. 6)
    return joint[0]


# ------------------------------------------------------------------------------------------ banded algebra
def test_vecmat_and_row_sums_equal_the_dense_matrix(layered_longformer):
    a = _doc(layered_longformer)
    bands, n = a.attention, a.n
    rng = np.random.default_rng(0)
    for l in range(bands.num_layers):
        for h in range(bands.num_heads):
            one = lv.AttentionBands(bands.local[l:l + 1, h:h + 1], bands.global_cols[l:l + 1, h:h + 1],
                                    bands.global_rows[l:l + 1, h:h + 1], bands.global_idx, bands.window,
                                    (bands.windows[l],))
            dense = bands.dense(l, h).astype(np.float64)
            v = rng.normal(size=n)
            close(ex.vecmat(v, one), v @ dense, rtol=1e-12, floor=1e-13)
            close(ex.row_sums(one), dense.sum(axis=1), rtol=1e-12, floor=1e-13)
    with pytest.raises(ex.ExplainerError, match="shape"):
        ex.vecmat(np.ones(n + 1), ex.head_mean(bands, 0))


@pytest.mark.parametrize("kind", ["rollout", "gae"])
def test_cls_vector_pass_equals_the_dense_products_cls_row(layered_longformer, kind):
    """Exact arithmetic: the same band values, as a vector pass and as dense n x n products (float64)."""
    a = _doc(layered_longformer, 120)
    bands = a.attention
    mats = [ex.head_mean(bands, l) for l in range(bands.num_layers)]
    dense = [np.mean([bands.dense(l, h) for h in range(bands.num_heads)], axis=0, dtype=np.float64)
             for l in range(bands.num_layers)]
    close(ex.cls_rollout(mats, kind), _dense_rollout(dense, kind), rtol=1e-12, floor=1e-14)


# ------------------------------------------------------------------------------------------ attention only
@pytest.mark.parametrize("n_words", [1, 37, 300], ids=["one-text-token", "odd-length", "max-length"])
def test_rollout_and_raw_attention_against_the_dense_oracle(layered_longformer, n_words):
    """Against the attention recomputed from the weights (float64): the model's float32 attention agrees to
    ~1e-6 (tests/unit/test_bands.py), and rollout multiplies L row-stochastic matrices, so 1e-5 of the vector's
    scale."""
    a = _doc(layered_longformer, n_words)
    dense = _dense_oracle(layered_longformer, a)  # (L, H, n, n)
    means = dense.mean(axis=1)  # (L, n, n)
    close(lv.explain(layered_longformer, a, "rollout").scores, _dense_rollout(list(means), "rollout"), floor=1e-5)
    close(lv.explain(layered_longformer, a, "raw_attention").scores, means[-1][0], floor=1e-5)
    close(lv.explain(layered_longformer, a, "raw_attention", row="received").scores, means[-1].sum(axis=0),
          floor=1e-5)


def test_random_follows_the_faithfulness_permutation(tiny_longformer):
    a = _doc(tiny_longformer, 40)
    for seed in range(5):
        e = lv.explain(tiny_longformer, a, "random", seed=seed)
        assert e.scores[0] == e.scores[-1] == 0
        np.testing.assert_array_equal(removal_order(e.scores), random_order(a.n, seed))
    assert not np.array_equal(lv.explain(tiny_longformer, a, "random", seed=0).scores,
                              lv.explain(tiny_longformer, a, "random", seed=1).scores)


# ------------------------------------------------------------------------------------------ gradients
def _layer_inputs(model, analysis):
    """Every layer's input h^l of one forward (padded to the window), h^0 = the embeddings output."""
    inputs = {}
    handles = [layer.register_forward_pre_hook(lambda m, args, l=l: inputs.__setitem__(l, args[0].clone()))
               for l, layer in enumerate(model.model.longformer.encoder.layer)]
    try:
        _objective(model, analysis, 0)
    finally:
        for hd in handles:
            hd.remove()
    return inputs


def _along(model, analysis, target, layer, delta, objective="logit"):
    """Central difference of the objective along `delta` added to layer `layer`'s input (delta already x EPS)."""
    return (_objective(model, analysis, target, objective, layer_delta=(layer, delta))
            - _objective(model, analysis, target, objective, layer_delta=(layer, -delta))) / (2 * EPS)


def test_grad_x_input_against_finite_differences(model64):
    """Σ_d e_{i,d} ∂z/∂e_{i,d} is the derivative of z along e_i at token i: one central difference per token."""
    a = _doc(model64)
    t = a.predicted
    emb = _layer_inputs(model64, a)[0]  # (1, n_padded, d)
    fd = []
    for i in range(a.n):
        delta = torch.zeros_like(emb)
        delta[0, i] = EPS * emb[0, i]
        fd.append(_along(model64, a, t, 0, delta))
    close(lv.explain(model64, a, "grad_x_input").scores, fd)
    assert np.abs(fd).max() > 1e-3  # the test model is not flat


def test_grad_norm_against_finite_differences(model64):
    """The full gradient at a few tokens, one central difference per embedding dimension, then its norm."""
    a = _doc(model64)
    got = lv.explain(model64, a, "grad_norm", target=1).scores
    emb = _layer_inputs(model64, a)[0]
    for i in (0, 1, a.n // 2, a.n - 1):
        grad = []
        for k in range(emb.shape[-1]):
            delta = torch.zeros_like(emb)
            delta[0, i, k] = EPS
            grad.append(_along(model64, a, 1, 0, delta))
        close(got[i], np.linalg.norm(grad))


def test_attention_gradients_against_finite_differences(model64, float64_softmax):
    """d z / d A for whole rows of every head and layer: a global-key column, the band of three non-global
    queries, and the global <s> row over every key; each entry perturbed in the model's own softmax output."""
    a = _doc(model64)
    bands, n, t = a.attention, a.n, a.predicted
    grads = _captured(model64, a, t, "logit", range(bands.num_layers))
    g = len(bands.global_idx)
    assert list(bands.global_idx) == [0]
    for l in range(bands.num_layers):
        w_l = bands.windows[l]
        for h in range(bands.num_heads):
            got = grads[l].dense(0, h)  # (n, n)
            fd, want = [], []
            for i in (1, n // 2, n - 1):
                fd.append(_softmax_fd(model64, a, float64_softmax, 2 * l, (0, i, h, 0), t, "logit"))  # key <s>
                want.append(got[i, 0])
                for j in range(max(1, i - w_l), min(n, i + w_l + 1)):
                    fd.append(_softmax_fd(model64, a, float64_softmax, 2 * l, (0, i, h, g + j - i + w_l), t,
                                          "logit"))
                    want.append(got[i, j])
            for j in range(n):
                fd.append(_softmax_fd(model64, a, float64_softmax, 2 * l + 1, (h, 0, j), t, "logit"))
                want.append(got[0, j])
            close(want, fd)
    assert max(np.abs(grads[l].dense(0, 0)).max() for l in grads) > 1e-3


def test_gae_against_the_dense_oracle(layered_longformer):
    """Ḡ_l = mean_h (∇A ⊙ A)⁺ from the attention recomputed from the weights and the captured ∇A (checked
    against finite differences above), rolled out densely; against the banded cls-vector GAE."""
    for n_words in (37, 300):
        a = _doc(layered_longformer, n_words)
        dense = _dense_oracle(layered_longformer, a)  # (L, H, n, n)
        grads = _captured(layered_longformer, a, a.predicted, "logit", range(a.attention.num_layers))
        mats = [np.mean([np.maximum(grads[l].dense(0, h) * dense[l, h], 0) for h in range(dense.shape[1])], axis=0)
                for l in range(dense.shape[0])]
        close(lv.explain(layered_longformer, a, "gae").scores, _dense_rollout(mats, "gae"), floor=1e-5)


def test_att_x_grad_against_finite_differences(model64, float64_softmax):
    """mean_h A_{L,h}[<s>, j] · ∂p_t/∂A_{L,h}[<s>, j]: <s> is global, so its last-layer row is the global
    softmax output; each entry differenced, A from the dense oracle."""
    a = _doc(model64)
    L, H, n = a.attention.num_layers, a.attention.num_heads, a.n
    t = 1 - a.predicted  # any class: p_t of the other class
    dense = oracle_longformer(model64, a, L - 1)  # (H, n, n)
    fd = np.array([[_softmax_fd(model64, a, float64_softmax, 2 * (L - 1) + 1, (h, 0, j), t, "prob")
                    for j in range(n)] for h in range(H)])
    want = (dense[:, 0, :] * fd).mean(axis=0)
    close(lv.explain(model64, a, "att_x_grad", target=t).scores, want)


@pytest.mark.parametrize("attention", ["received", "cls"])
def test_attcat_against_a_direct_loop(model64, attention):
    """A loop over layers l and tokens i: CAT^l_i = Σ_d h^l_{i,d} ∂z/∂h^l_{i,d} is the derivative along h^l_i
    (a central difference on layer l's input), weighted by the dense oracle's mean attention token i receives
    (or the <s> row), summed over layers."""
    a = _doc(model64)
    t, n = a.predicted, a.n
    dense = _dense_oracle(model64, a)  # (L, H, n, n)
    inputs = _layer_inputs(model64, a)
    want = np.zeros(n)
    for l in range(dense.shape[0]):
        weight = dense[l].mean(axis=0).mean(axis=0) if attention == "received" else dense[l].mean(axis=0)[0]
        for i in range(n):
            delta = torch.zeros_like(inputs[l])
            delta[0, i] = EPS * inputs[l][0, i]
            want[i] += _along(model64, a, t, l, delta) * weight[i]
    close(lv.explain(model64, a, "attcat", attention=attention).scores, want)


def test_attcat_first_layer_is_grad_x_input_weighted(layered_longformer):
    """Layer 0's class activation token is Σ_d e ⊙ ∂z/∂e, Gradient × Input (the embeddings are h^0)."""
    a = _doc(layered_longformer)
    passes = backward.backward(layered_longformer, a, a.predicted, "logit", hidden=[0, 1])
    close(backward.token_dot(*passes[0]), lv.explain(layered_longformer, a, "grad_x_input").scores, rtol=1e-12, floor=1e-14)


# ------------------------------------------------------------------------------------------ full attention
def test_full_attention_encoder(tiny_bert):
    """BERT returns the probabilities it multiplies with the values: GAE against the dense product of the
    recomputed attention and the captured gradient, rollout against the dense rollout."""
    a = lv.analyze(tiny_bert, text_of(25), max_tokens=40)
    dense = _dense_oracle(tiny_bert, a)
    grads = _captured(tiny_bert, a, a.predicted, "logit", range(tiny_bert.num_layers))
    mats = [np.mean([np.maximum(grads[l].dense(0, h) * dense[l, h], 0) for h in range(dense.shape[1])], axis=0)
            for l in range(dense.shape[0])]
    gae = lv.explain(tiny_bert, a, "gae").scores
    close(gae, _dense_rollout(mats, "gae"), floor=1e-5)
    close(lv.explain(tiny_bert, a, "rollout").scores, _dense_rollout(list(dense.mean(axis=1)), "rollout"), floor=1e-5)
    for method in ("att_x_grad", "attcat", "grad_x_input"):
        assert np.isfinite(lv.explain(tiny_bert, a, method).scores).all()


# ------------------------------------------------------------------------------------------ the contract
def test_every_explainer_returns_the_contract(layered_longformer, tmp_path):
    a = _doc(layered_longformer, 1)  # <s>, one token, </s>
    assert a.n == 3
    for method, info in lv.EXPLAINERS.items():
        opts = {"n_steps": 4, "cache_dir": tmp_path} if method == "ig" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = lv.explain(layered_longformer, a, method, **opts)
        assert isinstance(e, lv.Explanation) and e.method == method and e.label == info.label
        assert e.scores.dtype == np.float64 and e.scores.shape == (3,) and np.isfinite(e.scores).all()
        assert e.target == a.predicted and e.seconds >= 0
        assert e.peak_bytes is None or e.peak_bytes >= 0
        assert set(e.options) <= set(info.options)
        assert info.cost and info.source and info.label


def test_ig_is_integrated_gradients(layered_longformer, tmp_path):
    from longviz_core.attribution import integrated_gradients

    a = _doc(layered_longformer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = lv.explain(layered_longformer, a, "ig", target=0, n_steps=8, cache_dir=tmp_path)
        ref = integrated_gradients(layered_longformer, a, 0, 8, use_cache=False)
    close(e.scores, ref.scores, rtol=1e-6, floor=1e-7)
    assert e.options["n_steps"] == 8 and e.target == 0


def _hooks(net):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())


def test_hooks_are_removed_and_the_model_is_untouched(layered_longformer, monkeypatch):
    net = layered_longformer.model
    a = _doc(layered_longformer)
    before = _hooks(net)
    for method in ("grad_x_input", "grad_norm", "att_x_grad", "gae", "attcat"):
        lv.explain(layered_longformer, a, method)
        assert _hooks(net) == before
    assert all(p.grad is None for p in net.parameters())
    assert not net.training

    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(backward.AttentionGrads, "_hand_over", boom)
    with pytest.raises(RuntimeError, match="boom"):
        lv.explain(layered_longformer, a, "gae")
    assert _hooks(net) == before


def test_bad_calls_are_clear_errors(layered_longformer, tiny_longformer):
    a = _doc(layered_longformer)
    with pytest.raises(lv.ExplainerError, match="unknown explainer"):
        lv.explain(layered_longformer, a, "lime")
    with pytest.raises(lv.ExplainerError, match="has no option"):
        lv.explain(layered_longformer, a, "rollout", n_steps=3)
    with pytest.raises(lv.ExplainerError, match="target"):
        lv.explain(layered_longformer, a, "gae", target=2)
    with pytest.raises(lv.ExplainerError, match="another model"):
        lv.explain(tiny_longformer, a, "gae")
    with pytest.raises(lv.ExplainerError, match="row"):
        lv.explain(layered_longformer, a, "raw_attention", row="column")
    assert issubclass(lv.ExplainerError, lv.LongvizError)


# every option value an explainer cannot run with, refused before anything is computed
BAD_OPTIONS = [
    ("ig", {"n_steps": 1}, "n_steps"), ("ig", {"method": "simpson"}, "method must be one of"),
    ("ig", {"precision": "fp8"}, "precision"), ("ig", {"internal_batch_size": 0}, "internal_batch_size"),
    ("ig", {"use_cache": "yes"}, "use_cache"), ("ig", {"cache_dir": 3}, "cache_dir"),
    ("raw_attention", {"row": "column"}, "row must be one of cls, received"),
    ("attcat", {"attention": "max"}, "attention must be one of cls, received"),
    ("random", {"seed": -1}, "seed"), ("random", {"seed": 1.5}, "seed"),
    ("occlusion", {"unit": "chapter"}, "unit must be one of"), ("occlusion", {"replacement": "unk"}, "replacement"),
    ("occlusion", {"batch_size": 0}, "batch_size"), ("shapley", {"n_samples": 0}, "n_samples"),
    ("shapley", {"seed": -3}, "seed"), ("shapley", {"unit": "page"}, "unit must be one of"),
]


@pytest.mark.parametrize("method, options, message", BAD_OPTIONS, ids=[f"{m}-{next(iter(o))}" for m, o, _ in BAD_OPTIONS])
def test_an_option_value_is_refused_before_anything_is_computed(layered_longformer, monkeypatch, method, options,
                                                                message):
    from longviz_core.attribution import explainers as ex

    a = _doc(layered_longformer)
    ran = []
    monkeypatch.setitem(ex.EXPLAINERS, method, dataclasses.replace(ex.EXPLAINERS[method],
                                                                   compute=lambda *a, **k: ran.append(1)))
    with pytest.raises(lv.LongvizError, match=message):
        lv.explain(layered_longformer, a, method, **options)
    assert not ran


def test_a_replacement_the_tokenizer_lacks_is_refused_with_the_model(tmp_path):
    from longviz_core.attribution.explainers import check_options
    from longviz_core.model.copies import replacements_for
    from tiny import make_tiny_decoder

    model = lv.load_model(str(make_tiny_decoder(tmp_path / "llama", "llama", layers=1)))
    lacking = [r for r in ("mask", "pad", "baseline") if r not in replacements_for(model)]
    assert lacking, replacements_for(model)  # the decoder's tokenizer has no mask token
    assert check_options("occlusion", {"replacement": lacking[0]})["replacement"] == lacking[0]  # no model: a name
    with pytest.raises(lv.ExplainerError, match=f"no {lacking[0]} token"):
        check_options("occlusion", {"replacement": lacking[0]}, model)


def test_a_leaderboard_refuses_a_late_explainers_option_before_the_first_runs(layered_longformer, monkeypatch,
                                                                              tmp_path):
    from longviz_core.attribution import explainers as ex
    from longviz_core.dataset import leaderboard as lb

    a = _doc(layered_longformer)
    ran = []
    monkeypatch.setitem(ex.EXPLAINERS, "grad_x_input", dataclasses.replace(
        ex.EXPLAINERS["grad_x_input"], compute=lambda *args, **k: ran.append(1)))
    with pytest.raises(lv.ExplainerError, match="n_samples"):
        lb.document_leaderboard(layered_longformer, a, ["grad_x_input", "shapley"],
                                options={"shapley": {"n_samples": 0}}, seeds=())
    assert not ran
    # the dataset's settings refuse it before the store is made
    with pytest.raises(lv.ExplainerError, match="unit must be one of"):
        lv.leaderboard(layered_longformer, ["a short text. And another."], ["occlusion"], max_tokens=32,
                            options={"occlusion": {"unit": "chapter"}}, seeds=(), cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())
