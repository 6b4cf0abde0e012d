"""AttentionBands against an independent dense recomputation softmax(QK^T / sqrt(d)) from each layer's own
query/key/query_global/key_global weights and the hidden states entering that layer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from longviz_core import AttentionBands, analyze, head_weights
from tiny import text_of


def _hidden_states(model, analysis):
    inputs = analysis.encoded.torch_inputs(model.device)
    if not model.is_longformer:
        inputs.pop("global_attention_mask")
    with torch.no_grad():
        out = model.model(**inputs, output_hidden_states=True)
    return [h[0].double() for h in out.hidden_states]  # entering layer l: hidden_states[l]


@torch.no_grad()
def _oracle_longformer(model, analysis, layer):
    """Dense (heads, n, n) attention of one Longformer layer, from its weights."""
    att = model.model.longformer.encoder.layer[layer].attention.self
    x = _hidden_states(model, analysis)[layer]
    n, H = x.shape[0], att.num_heads
    d = att.head_dim
    w = att.one_sided_attn_window_size
    lin = lambda m: (x @ m.weight.double().T + m.bias.double()).view(n, H, d).transpose(0, 1)  # noqa: E731
    q, k, qg, kg = lin(att.query), lin(att.key), lin(att.query_global), lin(att.key_global)
    glob = torch.as_tensor(analysis.encoded.global_mask.astype(bool))
    i = torch.arange(n)
    allowed = ((i[:, None] - i[None, :]).abs() <= w) | glob[None, :]  # band + global keys
    scores = torch.where(allowed, q @ k.transpose(1, 2) / d**0.5, torch.tensor(float("-inf"), dtype=torch.double))
    dense = torch.softmax(scores, dim=-1)
    g_scores = qg @ kg.transpose(1, 2) / d**0.5  # global queries see every key
    dense[:, glob] = torch.softmax(g_scores, dim=-1)[:, glob]
    return dense.detach().numpy()


@torch.no_grad()
def _oracle_bert(model, analysis, layer):
    att = model.model.bert.encoder.layer[layer].attention.self
    x = _hidden_states(model, analysis)[layer]
    n = x.shape[0]
    H, d = att.num_attention_heads, att.attention_head_size
    lin = lambda m: (x @ m.weight.double().T + m.bias.double()).view(n, H, d).transpose(0, 1)  # noqa: E731
    q, k = lin(att.query), lin(att.key)
    return torch.softmax(q @ k.transpose(1, 2) / d**0.5, dim=-1).detach().numpy()


def _check_against_oracle(model, analysis, oracle, layers, tol=1e-5):
    bands = analysis.attention
    for layer in layers:
        dense_ref = oracle(model, analysis, layer)  # (heads, n, n)
        for head in range(bands.num_heads):
            got = bands.dense(layer, head)
            assert np.abs(got - dense_ref[head]).max() <= tol, (layer, head)
            # both ends of the sequence and the global row, checked explicitly
            for i in (0, 1, analysis.n // 2, analysis.n - 2, analysis.n - 1):
                assert np.abs(bands.row(layer, head, i) - dense_ref[head, i]).max() <= tol
                assert np.abs(bands.column(layer, head, i) - dense_ref[head, :, i]).max() <= tol
            assert np.abs(bands.received(layers=[layer], heads=[head]) - dense_ref[head].sum(0)).max() <= tol * 10
        assert np.abs(got.sum(1) - 1).max() <= tol


def test_tiny_longformer_matches_dense_oracle(tiny_longformer):
    window = tiny_longformer.attention_window * 2
    analysis = analyze(tiny_longformer, text_of(67), max_tokens=100)
    assert analysis.n % window != 0, "sequence length must not be a multiple of the window"
    assert analysis.attention.window == tiny_longformer.attention_window
    _check_against_oracle(tiny_longformer, analysis, _oracle_longformer, range(tiny_longformer.num_layers))


def test_demo_model_matches_dense_oracle(demo_model, demo_dataset):
    analysis = analyze(demo_model, demo_dataset["text"].iloc[0], max_tokens=700)
    assert analysis.n % (2 * demo_model.attention_window) != 0
    _check_against_oracle(demo_model, analysis, _oracle_longformer, [0, demo_model.num_layers - 1])


def test_full_attention_encoder_uses_the_same_interface(tiny_bert):
    analysis = analyze(tiny_bert, text_of(25), max_tokens=40)
    assert analysis.attention.window == analysis.n - 1
    assert len(analysis.attention.global_idx) == 0
    _check_against_oracle(tiny_bert, analysis, _oracle_bert, range(tiny_bert.num_layers))


def test_received_weights_and_selection(tiny_longformer):
    bands = analyze(tiny_longformer, text_of(40), max_tokens=64).attention
    per_head = np.stack([[bands.dense(l, h).sum(0) for h in range(bands.num_heads)] for l in range(bands.num_layers)])
    scale = np.arange(1, bands.num_layers * bands.num_heads + 1, dtype=float).reshape(bands.num_layers, -1)
    expected = np.einsum("lhn,lh->n", per_head, scale)
    assert np.allclose(bands.received(scale=scale), expected, atol=1e-5)
    assert np.allclose(bands.received(layers=[1], heads=[0]), per_head[1, 0], atol=1e-6)
    # every query row sums to one, so total received attention equals the number of queries per head
    assert bands.received().sum() == pytest.approx(bands.n * bands.num_layers * bands.num_heads, rel=1e-5)


def test_bad_selections_raise(tiny_longformer):
    bands = analyze(tiny_longformer, text_of(20), max_tokens=64).attention
    with pytest.raises(ValueError, match="layer"):
        bands.received(layers=[5])
    with pytest.raises(ValueError, match="scale"):
        bands.received(scale=np.ones((3, 3)))
    with pytest.raises(ValueError):
        bands.dense(0, 9)
    with pytest.raises(ValueError, match="at least one"):
        head_weights(2, 2, layers=[])


def test_bands_are_read_only(tiny_longformer):
    bands = analyze(tiny_longformer, text_of(20), max_tokens=64).attention
    assert isinstance(bands, AttentionBands)
    with pytest.raises(ValueError):
        bands.local[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        bands.received_per_head()[0, 0, 0] = 1.0
