"""Grouped K/V on CUDA in float32 (model.capture._sdpa_expanded): the same attention output as transformers' own
sdpa route, and the same logits through a whole decoder, checked on the CPU by sending every full or causal layer
down that route. The route exists because there transformers' enable_gqa leaves sdpa only its math kernel, whose
n x n scores ran out of an H200's memory at 32,768 tokens (docs/benchmarks.md "GPU")."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import longviz_core as lv
from longviz_core.model import capture
from tiny import make_tiny_decoder, text_of

# both routes are one float32 softmax over the same scores, summed in a different order by different kernels:
# a few ulp of values of order one
ATOL = 1e-5


@pytest.mark.parametrize("n", [1, 2, 7, 130])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("heads,kv", [(4, 2), (6, 1), (4, 4)])
def test_expanded_heads_give_transformers_sdpa_output(n, causal, heads, kv):
    g = torch.Generator().manual_seed(n * 31 + heads * 7 + kv)
    q, k, v = (torch.randn(2, h, n, 16, generator=g) * 2 for h in (heads, kv, kv))  # (B, heads | kv, n, d)
    module = SimpleNamespace(num_key_value_groups=heads // kv, is_causal=causal)
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.3, is_causal=causal)  # (B, n, heads, d)
    got = capture._sdpa_expanded(q, k, v, causal, 0.0, 0.3)
    assert got.shape == want.shape == (2, n, heads, 16)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=ATOL, rtol=0)
    if causal and n > 1:  # the first query sees only the first key: its output is that key's value, per group
        first = v[:, :, 0].repeat_interleave(heads // kv, dim=1)  # (B, heads, d)
        np.testing.assert_allclose(got[:, 0].numpy(), first.numpy(), atol=ATOL, rtol=0)


def test_the_route_is_taken_only_where_sdpa_would_fall_to_its_math_kernel():
    def t(device, dtype, heads):
        return SimpleNamespace(device=torch.device(device), dtype=dtype, shape=(1, heads, 8, 16))

    q = t("cuda", torch.float32, 8)
    assert capture._math_only(q, t("cuda", torch.float32, 2))
    assert not capture._math_only(q, t("cuda", torch.float32, 8))  # no groups: the efficient kernel serves it
    assert not capture._math_only(t("cuda", torch.bfloat16, 8), t("cuda", torch.bfloat16, 2))  # flash serves it
    assert not capture._math_only(t("cpu", torch.float32, 8), t("cpu", torch.float32, 2))  # the CPU's flash does


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_a_decoder_gives_the_same_logits_and_keys_down_either_route(kind, tmp_path, monkeypatch):
    model = lv.load_model(str(make_tiny_decoder(tmp_path / kind, kind, heads=4, kv_heads=2)), device="cpu")
    text = text_of(300)
    before = lv.analyze(model, text, max_tokens=97)
    taken = []
    monkeypatch.setattr(capture, "_math_only", lambda q, k: taken.append(q.shape[1]) or k.shape[1] < q.shape[1])
    after = lv.analyze(model, text, max_tokens=97)
    assert len(taken) == model.num_layers and set(taken) == {4}  # every layer went down the expanded route
    np.testing.assert_allclose(after.logits, before.logits, atol=ATOL, rtol=0)
    assert after.predicted == before.predicted
    received = [a.attention.received_per_head() for a in (before, after)]  # (layers, heads, n)
    assert received[0].shape == (model.num_layers, 4, 97)
    np.testing.assert_allclose(received[1], received[0], atol=ATOL * 97, rtol=0)
