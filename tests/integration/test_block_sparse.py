"""BigBird's block-sparse attention as its layers apply it (longviz_core.model.block_sparse), on a tiny BigBird
with blocks of 16 tokens and 3 random blocks (block-sparse above (5 + 2 * 3) * 16 = 176 tokens): at 192 tokens
(12 whole blocks) and at 183 (padded to 192 inside the model). Oracle: each attention module's own output,
captured by a hook of the test, is the longviz weights times the module's values; and, on the dense matrices
those weights make, the rows, columns, received attention, top-k lists (Algorithms 1 and 3), counts (Algorithm
2) by brute force and the pooled grid. The random blocks are all block 0 in eval mode; the attention modules put
in training mode draw real ones (seeded by the layer), which exercises every other key block."""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
import torch

import longviz_core as lv
from longviz_core.model.block_sparse import BlockSparseLayer
from longviz_core.views.counts import token_counts, topk_indices
from longviz_core.views.pooling import pool_attention
from support.oracles import block_means, brute_topk
from tiny import make_tiny_bigbird, text_of

EPS32 = float(np.finfo(np.float32).eps)
CASES = [("eval", 190), ("eval", 181), ("train", 181)]  # words: 192 tokens, 183 tokens (padded to 192)


@pytest.fixture(scope="module")
def bigbird(tmp_path_factory):
    return lv.load_model(str(make_tiny_bigbird(tmp_path_factory.mktemp("bigbird"))), device="cpu")


@contextmanager
def _watched(model, mode):
    """Each attention module's values and output context (heads, N, d) as it runs, from hooks of the test."""
    seen = {}

    def hook(layer, module, args, out):
        H, d = module.num_attention_heads, module.attention_head_size
        heads = lambda t: t[0].view(-1, H, d).transpose(0, 1).double()  # noqa: E731
        seen[layer] = (heads(module.value(args[0])), heads(out[0]), module.training)

    modules = [layer.attention.self for layer in model.model.bert.encoder.layer]
    handles = [m.register_forward_hook(lambda m, a, o, l=l: hook(l, m, a, o)) for l, m in enumerate(modules)]
    for m in modules:
        m.train(mode == "train")
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
        for m in modules:
            m.eval()


@pytest.mark.parametrize("mode, words", CASES, ids=[f"{m}-{w}" for m, w in CASES])
def test_weights_reproduce_each_module_output(bigbird, mode, words):
    with _watched(bigbird, mode) as seen, torch.no_grad():
        a = lv.analyze(bigbird, text_of(words), 400)
    att, n, b = a.attention, a.n, 16
    assert n == {190: 192, 181: 183}[words] and n > bigbird.family.sparse_from
    assert all(isinstance(layer, BlockSparseLayer) for layer in att.layers)
    assert bigbird.model.bert.attention_type == "block_sparse" and not bigbird.model.training
    for l, layer in enumerate(att.layers):
        value, context, training = seen[l]
        assert training == (mode == "train")
        if mode == "eval":  # every random block is block 0, merged into the global slot: 5 slots are left
            assert layer.blocks.shape[-1] == 5 and (layer.blocks[..., 0] == 0).all()
        else:
            assert layer.blocks.shape[-1] == 8 and (layer.blocks[..., 5:] > 0).any()
        assert layer.middle.shape == (2, 10, b, layer.blocks.shape[-1] * b)  # (heads, middle blocks, b, S b)
        for h in range(att.num_heads):
            dense = torch.as_tensor(att.dense(l, h)).double()  # (n, n)
            # a row sums at most n float32 products, weights summing to 1: n eps32 |V|max
            tol = n * EPS32 * value[h].abs().max().item()
            np.testing.assert_allclose((dense @ value[h, :n]).numpy(), context[h, :n].numpy(), rtol=0, atol=tol)
            np.testing.assert_allclose(dense.sum(-1).numpy(), 1.0, rtol=0, atol=n * EPS32)
            assert (dense[b:-b] > 0).sum(-1).max() <= layer.blocks.shape[-1] * b  # a middle row: its S blocks


def test_padding_keys_get_nothing_and_the_rows_are_the_document(bigbird):
    a = lv.analyze(bigbird, text_of(181), 400)
    layer = a.attention.layers[0]
    assert layer.full.shape == (2, 16 + 183 - 11 * 16, 183)  # block 0's rows and the last block's inside n
    keys = torch.arange(12 * 16).view(12, 16)
    last = layer.blocks == 11
    cut = layer.middle.view(2, 10, 16, -1, 16).permute(0, 1, 3, 2, 4)[last][..., keys[11] >= 183]
    assert cut.numel() and (cut == 0).all()  # a padding key's weight is exactly 0 (the -10,000 penalty)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_views_by_brute_force_on_the_dense_weights(bigbird, mode):
    with _watched(bigbird, mode), torch.no_grad():
        a = lv.analyze(bigbird, text_of(181), 400)
    att, n, k = a.attention, a.n, 12
    dense = np.stack([[att.dense(l, h) for h in range(att.num_heads)] for l in range(att.num_layers)])
    L, H = dense.shape[:2]
    for l in range(L):
        for h in range(H):
            for i in (0, 5, 17, 100, n - 2, n - 1):
                np.testing.assert_array_equal(att.row(l, h, i), dense[l, h, i])
                np.testing.assert_array_equal(att.column(l, h, i), dense[l, h, :, i])
    np.testing.assert_allclose(att.received_per_head(), dense.sum(axis=2), rtol=0, atol=n * EPS32)
    topk = topk_indices(att, k=k)
    for direction in ("attended", "attending"):
        got, lists = topk.lists(direction), {}
        for l in range(L):
            for h in range(H):
                ref = brute_topk(dense[l, h] if direction == "attended" else dense[l, h].T, k)
                lists[l, h] = ref
                for i, listed in enumerate(ref):
                    assert got[l, h, i].tolist() == listed + [-1] * (k - len(listed)), (direction, l, h, i)
        frame = token_counts(a, 5, direction, "position", topk=topk)
        expected = Counter()
        for owner in range(n):
            expected.update({j for l in range(L) for h in range(H) for j in lists[l, h][owner][:5]})
        assert dict(zip(frame["position"], frame["count"])) == dict(expected)
    pooled = pool_attention(att, 16)
    for l in range(L):
        for h in range(H):
            np.testing.assert_allclose(pooled.cells[l, h], block_means(dense[l, h], pooled.edges), rtol=0,
                                       atol=n * EPS32)


def test_attention_x_gradient_reads_the_applied_weights(bigbird):
    """Serrano & Smith's A ⊙ dp/dA on the CLS row of the last layer: the module's output is A V, so
    dp/dA[0, j] = (dp / d output[0]) . V[j]; the output's gradient and V from the test's own hook and autograd."""
    a = lv.analyze(bigbird, text_of(181), 400)
    module, kept = bigbird.model.bert.encoder.layer[-1].attention.self, {}

    def hook(mod, args, out):
        kept["out"], kept["value"] = out[0], mod.value(args[0]).detach()

    handle = module.register_forward_hook(hook)
    try:
        logits = bigbird.model(**bigbird.family.inputs(a.encoded)).logits
    finally:
        handle.remove()
    p = torch.softmax(logits[0].float(), -1)[a.predicted]
    (grad,) = torch.autograd.grad(p, kept["out"])
    H, n = a.attention.num_heads, a.n
    per_head = lambda t: t[0].view(t.shape[1], H, -1).transpose(0, 1).double()  # noqa: E731  (heads, N, d)
    dp_da = torch.einsum("hd,hjd->hj", per_head(grad)[:, 0], per_head(kept["value"])[:, :n])  # (heads, n)
    want = np.mean([a.attention.row(1, h, 0) * dp_da[h].numpy() for h in range(H)], axis=0)
    got = lv.explain(bigbird, a, "att_x_grad").scores
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert all(p.grad is None for p in bigbird.model.parameters())
