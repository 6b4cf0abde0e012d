"""Attention by pattern against the models' own eager `output_attentions`: a tiny ModernBERT (radius 8, layers
0 and 3 global, so two banded and two streamed layers) and a tiny BERT (every layer streamed), large random
weights so attention is peaked. Every layer and head: the dense matrix, rows and columns, received attention,
the top-k lists (Algorithms 1 and 3) and counts (Algorithm 2) by brute force, the pooled grid. And a fresh
process at 8,192 tokens: peak memory and received attention against eager computed one layer at a time."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.model.capture import AttentionPatternError, analyze_layers, implementation
from longviz_core.model.families import BANDED, LayerPattern
from longviz_core.model.streamed import StreamedLayer
from longviz_core.views.counts import token_counts, topk_indices
from longviz_core.views.pooling import pool_attention
from support.oracles import block_means, brute_topk
from tiny import make_tiny_bert, make_tiny_modernbert, text_of

ATOL = 1e-5  # probabilities in [0, 1]: float32 softmax of sdpa-route vs eager scores differ by a few ulp


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    return lv.load_model(str(make_tiny_modernbert(tmp_path_factory.mktemp("modernbert"), heads=2,
                                                        initializer_range=0.3, max_positions=1024)))


@pytest.fixture(scope="module")
def peaked_bert(tmp_path_factory):
    return lv.load_model(str(make_tiny_bert(tmp_path_factory.mktemp("bert"), initializer_range=0.3)))


def _eager(model, analysis) -> np.ndarray:
    """(layers, heads, n, n): the model's own eager attention weights (its other forwards run longviz's chunked
    sdpa, which returns none)."""
    ids = torch.as_tensor(analysis.input_ids)[None]
    with torch.no_grad(), implementation(model.model, "eager"):
        out = model.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    np.testing.assert_allclose(analysis.logits, out.logits[0].numpy(), rtol=1e-5, atol=1e-5)  # the same forward
    return torch.stack(out.attentions)[:, 0].numpy()


def _check_heads(attention, eager):
    L, H, n, _ = eager.shape
    for layer in range(L):
        for head in range(H):
            ref = eager[layer, head]
            np.testing.assert_allclose(attention.dense(layer, head), ref, rtol=0, atol=ATOL)
            for i in {0, 1, n // 2, n - 1}:
                np.testing.assert_allclose(attention.row(layer, head, i), ref[i], rtol=0, atol=ATOL)
                np.testing.assert_allclose(attention.column(layer, head, i), ref[:, i], rtol=0, atol=ATOL)
            # a column sum adds n entries, each within ATOL
            np.testing.assert_allclose(attention.received_per_head()[layer, head], ref.sum(0), rtol=0, atol=n * ATOL)


@pytest.mark.parametrize("n_words", [1, 37, 300], ids=["one-token", "odd", "long"])
def test_modernbert_layers_match_eager(modernbert, n_words):
    a = lv.analyze(modernbert, text_of(n_words), max_tokens=1024)
    att = a.attention
    assert [att.streamed(l) for l in range(4)] == [True, False, False, True]
    assert att.windows == (a.n - 1, 8, 8, a.n - 1)
    assert att.layers[1].local.shape == (1, 2, a.n, 17)  # (1, heads, n, 2r+1): never n x n
    _check_heads(att, _eager(modernbert, a))


def test_modernbert_at_its_maximum_length(modernbert):
    a = lv.analyze(modernbert, text_of(1100), max_tokens=1024)
    assert a.n == 1024
    eager = _eager(modernbert, a)
    got = a.attention.received_per_head()
    np.testing.assert_allclose(got, eager.sum(axis=2), rtol=0, atol=a.n * ATOL)
    np.testing.assert_allclose(got.sum(axis=-1), a.n, rtol=1e-5)  # every row sums to one


def test_bert_layers_match_eager(peaked_bert):
    a = lv.analyze(peaked_bert, text_of(45), max_tokens=64)
    assert all(isinstance(layer, StreamedLayer) for layer in a.attention.layers)
    eager = _eager(peaked_bert, a)
    assert eager.max() > 0.5  # peaked, not uniform: the lists below are not decided by ties
    _check_heads(a.attention, eager)


@pytest.mark.parametrize("family", ["modernbert", "peaked_bert"])
def test_lists_counts_and_grid_by_brute_force(family, request):
    model = request.getfixturevalue(family)
    a = lv.analyze(model, text_of(120), max_tokens=min(model.max_tokens, 1024))
    eager = _eager(model, a)
    L, H, n, _ = eager.shape
    k = 12
    topk = topk_indices(a.attention, k=k)
    lists = {}
    for direction in ("attended", "attending"):
        got = topk.lists(direction)
        for layer in range(L):
            for head in range(H):
                m = eager[layer, head] if direction == "attended" else eager[layer, head].T
                ref = brute_topk(m, k)
                lists[direction, layer, head] = ref
                for i, listed in enumerate(ref):
                    assert got[layer, head, i].tolist() == listed + [-1] * (k - len(listed)), (direction, layer, head, i)
        # Algorithm 2 by position over all heads: owners whose set over the heads holds the position
        frame = token_counts(a, 5, direction, "position", topk=topk)
        expected = Counter()
        for owner in range(n):
            expected.update({j for layer in range(L) for head in range(H) for j in lists[direction, layer, head][owner][:5]})
        assert dict(zip(frame["position"], frame["count"])) == dict(expected)
    pooled = pool_attention(a.attention, 16)
    for layer in range(L):
        for head in range(H):
            np.testing.assert_allclose(pooled.cells[layer, head], block_means(eager[layer, head], pooled.edges),
                                       rtol=0, atol=ATOL)


def test_streamed_summary_serves_smaller_k_and_a_wrong_pattern_fails(modernbert):
    a = lv.analyze(modernbert, text_of(60), max_tokens=1024)
    full = a.attention.layers[0]
    big, small = full.summary(k=20), full.summary(k=7)
    np.testing.assert_array_equal(small.attended, big.attended[..., :7])
    np.testing.assert_array_equal(full.summary(k=7, block=4).attending, big.attending[..., :7])
    # one query row alone and the summary's chunks of rows take different matrix-product kernels (MKL on AMD rounds
    # them differently): probabilities in [0, 1] a few float32 ulps of 1 (1.2e-7 each) apart
    np.testing.assert_allclose(full.row(0, 0), full.summary().cls_row[0], rtol=0, atol=1e-6)
    # a pattern read wrongly from the config (layer 3 taken for a sliding layer) disagrees with the model's mask
    ids = torch.as_tensor(a.input_ids)[None]
    # set to another implementation than the capture's own ("longviz", ModernBERT's for every forward), so that
    # putting it back shows
    with implementation(modernbert.model, "eager"):
        with pytest.raises(AttentionPatternError, match="layer 3"), torch.no_grad():
            wrong = [*modernbert.family.attention_patterns(a.n)[:3], LayerPattern(BANDED, 8, a.n)]
            analyze_layers(modernbert, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, wrong)
        assert modernbert.model.config._attn_implementation == "eager"  # restored


@pytest.mark.slow  # a fresh process, an 8,192-token analysis, a plain forward and the eager oracle's n x n layers
def test_8192_tokens_in_far_less_memory_than_dense():
    script = Path(__file__).resolve().parents[1] / "support" / "stream_memory.py"
    done = subprocess.run([sys.executable, str(script), "8192"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["n"] == 8192 and result["streamed"] == [True, False, False, True]
    assert result["dense_bytes"] == 4 * 4 * 8192**2 * 4  # layers x heads x n^2 x 4 B: what eager returns
    # measured with the script's mmap threshold fixed (stream_memory.mmap_threshold): 147-151 MiB for the analysis
    # (bands, Q/K, one chunk of rows), also two runs at once, against 1,024 MiB for one plain forward with the
    # model's own sdpa attention (its n x n weights per head) and 4 GiB of dense weights
    assert result["growth"] < 256 * 2**20
    assert result["growth"] < result["forward_growth"]
    assert result["rel"] < 1e-4


def test_streamed_defaults_are_the_views_defaults():
    from longviz_core.model import streamed, topk
    from longviz_core.views import pooling

    assert (streamed.DEFAULT_K, streamed.DEFAULT_GRID) == (topk.TOPK_MAX, pooling.DEFAULT_GRID)


def test_a_full_layer_is_made_whole_only_up_to_its_limit(modernbert, monkeypatch):
    from longviz_core.errors import SettingsError
    from longviz_core.model import layered

    a = lv.analyze(modernbert, text_of(40), max_tokens=1024)
    whole = a.attention.layer_bands(0)  # (1, heads, n, 2n - 1): what the explainers read for one layer
    np.testing.assert_array_equal(whole.dense(0, 1), a.attention.dense(0, 1))
    assert a.attention.layer_bands(1) is a.attention.layers[1]
    monkeypatch.setattr(layered, "DENSE_LAYER_MAX", a.n - 1)
    with pytest.raises(SettingsError, match="lower Max tokens"):
        a.attention.layer_bands(0)
