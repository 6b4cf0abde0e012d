"""AttentionBands against an independent dense recomputation softmax(QK^T / sqrt(d)) from each layer's own
query/key/query_global/key_global weights and the hidden states entering that layer."""
from __future__ import annotations

import numpy as np
import pytest

from longviz_core import AttentionBands, analyze, head_weights
from support.oracles import oracle_bert, oracle_longformer
from tiny import text_of


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
            # received attention (Algorithm 4) is the oracle's column sums; rows sum to 1 (float32 sums)
            np.testing.assert_allclose(bands.received(layers=[layer], heads=[head]), dense_ref[head].sum(0),
                                       rtol=1e-5)
            np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-5)


def test_tiny_longformer_matches_dense_oracle(tiny_longformer):
    window = tiny_longformer.attention_window * 2
    analysis = analyze(tiny_longformer, text_of(67), max_tokens=100)
    assert analysis.n % window != 0, "sequence length must not be a multiple of the window"
    assert analysis.attention.window == tiny_longformer.attention_window
    _check_against_oracle(tiny_longformer, analysis, oracle_longformer, range(tiny_longformer.num_layers))


@pytest.mark.parametrize("n_words", [1, 37, 300], ids=["one-text-token", "odd-length", "max-length"])
def test_per_layer_windows_match_dense_oracle(layered_longformer, n_words):
    """Layer l sees |i - j| <= w_l with its own window; the bands hold every layer at the largest window with
    zeros outside the layer's own, and reassemble to the oracle's matrices (which use each layer's window)."""
    model = layered_longformer
    full = list(model.model.config.attention_window)  # per layer, as transformers keeps it
    analysis = analyze(model, text_of(n_words), max_tokens=model.max_tokens)
    bands, n = analysis.attention, analysis.n
    if n_words == 1:
        assert n == 3
    elif n_words == 37:
        assert n % 2 == 1 and n % max(full) != 0  # the model pads this input
    else:
        assert n == model.max_tokens
    assert model.attention_windows == bands.windows == tuple(w // 2 for w in full)
    assert model.attention_window == bands.window == max(full) // 2
    assert bands.local.shape == (len(full), model.num_heads, n, max(full) + 1)
    w = bands.window
    for layer, w_l in enumerate(bands.windows):
        outside = np.r_[0 : w - w_l, w + w_l + 1 : 2 * w + 1]  # band columns beyond this layer's window
        assert not bands.local[layer][..., outside].any()
    _check_against_oracle(model, analysis, oracle_longformer, range(model.num_layers))
    assert bands.received().sum() == pytest.approx(n * bands.num_layers * bands.num_heads, rel=1e-5)


def test_per_layer_windows_are_validated():
    n, w = 5, 2
    local = np.zeros((2, 1, n, 2 * w + 1), np.float32)
    parts = (np.zeros((2, 1, n, 0), np.float32), np.zeros((2, 1, 0, n), np.float32), np.zeros(0, np.int64), w)
    assert AttentionBands(local, *parts).windows == (2, 2)  # not given: every layer has the band's window
    assert AttentionBands(local, *parts, windows=[1, 2]).windows == (1, 2)
    for bad in ([1], [3, 2], [-1, 2]):
        with pytest.raises(ValueError, match="per-layer windows"):
            AttentionBands(local, *parts, windows=bad)


def test_demo_model_matches_dense_oracle(demo_model, demo_dataset):
    analysis = analyze(demo_model, demo_dataset["text"].iloc[0], max_tokens=700)
    assert analysis.n % (2 * demo_model.attention_window) != 0
    _check_against_oracle(demo_model, analysis, oracle_longformer, [0, demo_model.num_layers - 1])


def test_full_attention_encoder_uses_the_same_interface(tiny_bert):
    analysis = analyze(tiny_bert, text_of(25), max_tokens=40)
    assert analysis.attention.window == analysis.n - 1
    assert len(analysis.attention.global_idx) == 0
    _check_against_oracle(tiny_bert, analysis, oracle_bert, range(tiny_bert.num_layers))


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
