"""Longformer's window products computed block by block (model/band_products.py) against transformers' own
sliding-chunk methods: the same -inf cells, every value within float32's dot-product rounding and, in float64,
equal to 1e-12 with equal gradients; a loaded model, padded and with extra global tokens, gives transformers'
logits, hidden states and attention weights."""
from __future__ import annotations

from types import MethodType, SimpleNamespace

import pytest
import torch

from longviz_core.model.band_products import use_band_products, window_scores, window_values

U32 = 2.0 ** -24  # float32's unit roundoff

SHAPES = [  # batch, n, heads, head size, one-sided window w (n a multiple of 2w, as Longformer pads it)
    (1, 4, 1, 1, 2),  # one chunk of the smallest window transformers runs (w = 1 fails in its own slicing)
    (2, 8, 2, 3, 4),  # one chunk: both ends in one block
    (1, 96, 3, 8, 16),
    (3, 64, 2, 16, 8),
    (1, 512, 4, 32, 32),  # the demo's heads and window
]


def _hf():
    """transformers' own methods, callable without a module (they read only `config.onnx_export`)."""
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention as LSA

    owner = SimpleNamespace(config=SimpleNamespace())
    for name in ("_chunk", "_pad_and_transpose_last_two_dims", "_mask_invalid_locations", "_pad_and_diagonalize"):
        setattr(owner, name, getattr(LSA, name))
    return (MethodType(LSA._sliding_chunks_query_key_matmul, owner),
            MethodType(LSA._sliding_chunks_matmul_attn_probs_value, owner))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_scores_and_values_equal_transformers_within_float32_rounding(shape):
    B, n, H, d, w = shape
    g = torch.Generator().manual_seed(n + d)
    q, k, v = (torch.randn(B, n, H, d, generator=g) for _ in range(3))
    hf_scores, hf_values = _hf()
    ref, ours = hf_scores(q, k, w), window_scores(None, q, k, w)
    assert ours.shape == ref.shape == (B, n, H, 2 * w + 1)
    assert torch.equal(torch.isinf(ours), torch.isinf(ref)) and int(torch.isinf(ref).sum()) == B * H * w * (w + 1)
    # each score is one d-term dot product, rounded in some order: |error| <= d u sum |q_t k_t| on either side
    bound = 2 * d * U32 * hf_scores(q.abs(), k.abs(), w)
    finite = torch.isfinite(ref)
    assert bool(((ours - ref).abs()[finite] <= bound[finite]).all())
    probs = torch.softmax(ref, dim=-1)  # (B, n, H, 2w+1); 0 at the -inf cells
    ref_v, ours_v = hf_values(probs, v, w), window_values(None, probs, v, w)
    assert ours_v.shape == ref_v.shape == (B, n, H, d)
    # each output a sum of 3w products (the padded ones 0): |error| <= 3w u sum |p_c v_c| on either side
    assert bool(((ours_v - ref_v).abs() <= 2 * 3 * w * U32 * hf_values(probs, v.abs(), w) + 1e-30).all())


@pytest.mark.parametrize("shape", SHAPES[1:4], ids=lambda s: "x".join(map(str, s)))
def test_in_float64_values_and_gradients_equal_transformers(shape):
    """In float64 the rounding is 2^-53: what is left to differ is which keys and weights are paired."""
    B, n, H, d, w = shape
    g = torch.Generator().manual_seed(7 * n + d)
    hf_scores, hf_values = _hf()
    grads = []
    for scores, values in ((hf_scores, hf_values), (lambda *a: window_scores(None, *a),
                                                    lambda *a: window_values(None, *a))):
        g.manual_seed(7 * n + d)
        q, k, v = (torch.randn(B, n, H, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
        s = scores(q, k, w)
        out = values(torch.softmax(s, dim=-1), v, w)
        weight = torch.randn(out.shape, generator=g, dtype=torch.float64)
        (out * weight).sum().backward()
        grads.append((s.detach(), out.detach(), q.grad, k.grad, v.grad))
    for ref, ours in zip(*grads):
        assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_a_loaded_longformer_uses_the_block_products(tiny_longformer):
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    modules = [m for m in tiny_longformer.model.modules() if isinstance(m, LongformerSelfAttention)]
    assert len(modules) == tiny_longformer.num_layers
    for m in modules:
        assert m._sliding_chunks_query_key_matmul.__func__ is window_scores
        assert m._sliding_chunks_matmul_attn_probs_value.__func__ is window_values


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(7,), (30, 2, 17)])
def test_the_model_computes_what_transformers_computes(tiny_longformer_dir, dtype, lengths):
    """The same checkpoint with transformers' products and with the blocks: padded batches, a second global token;
    logits, hidden states, local and global attention and the gradient IG takes (logits by input embeddings)."""
    from transformers import AutoModelForSequenceClassification

    nets = []
    for blocks in (False, True):
        net = AutoModelForSequenceClassification.from_pretrained(str(tiny_longformer_dir), attn_implementation="eager")
        net = net.to(dtype).eval()
        if blocks:
            use_band_products(net)
        nets.append(net)
    n = max(lengths)
    g = torch.Generator().manual_seed(sum(lengths))
    ids = torch.randint(3, nets[0].config.vocab_size, (len(lengths), n), generator=g)
    padding = torch.tensor([[1] * k + [0] * (n - k) for k in lengths])
    ids[padding == 0] = nets[0].config.pad_token_id
    ids[:, 0] = nets[0].config.bos_token_id
    global_mask = torch.zeros_like(ids)
    global_mask[:, 0] = 1
    global_mask[-1, min(3, lengths[-1] - 1)] = 1
    outs = []
    for net in nets:
        embeds = net.get_input_embeddings()(ids).detach().requires_grad_(True)
        out = net(inputs_embeds=embeds, attention_mask=padding, global_attention_mask=global_mask,
                  output_attentions=True, output_hidden_states=True)
        out.logits.sum().backward()
        outs.append((out.logits, *out.hidden_states, *out.attentions, *out.global_attentions, embeds.grad))
    # float32: a few ulp per score through two small layers; float64: only the pairing can differ. transformers'
    # global weights are NaN in a global slot a document does not fill (the padded batch): there on both sides
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for ref, ours in zip(*outs):
        assert ref.shape == ours.shape
        assert torch.allclose(ours.detach(), ref.detach(), rtol=tol, atol=tol, equal_nan=True)
