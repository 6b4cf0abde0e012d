"""Longformer's padding mask built as one row (model/row_mask.py): the same mask row as transformers' whole mask,
and the same logits, hidden states and attention, bit for bit, on padded batches with global tokens."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from longviz_core.model.capture import implementation
from longviz_core.model.row_mask import ROW_MASK


def test_a_loaded_longformer_builds_its_mask_as_one_row(tiny_longformer):
    assert tiny_longformer.model.config._attn_implementation == ROW_MASK


@pytest.mark.parametrize("lengths", [(1, 1), (5, 17), (16, 3, 11)])
def test_the_row_equals_the_first_row_of_transformers_whole_mask(lengths):
    from transformers import LongformerConfig
    from transformers.masking_utils import create_bidirectional_mask

    from longviz_core.model.row_mask import use_row_mask

    n = max(lengths)
    padding = torch.tensor([[1] * k + [0] * (n - k) for k in lengths])  # (batch, n)
    embeds = torch.zeros(len(lengths), n, 4)
    config = LongformerConfig()
    config._attn_implementation = "eager"
    whole = create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=padding,
                                      allow_is_bidirectional_skip=False)
    use_row_mask(SimpleNamespace(config=config))  # registers the name and sets it
    row = create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=padding,
                                    allow_is_bidirectional_skip=False)
    assert whole.shape == (len(lengths), 1, n, n) and row.shape == (len(lengths), 1, 1, n)
    assert torch.equal(row[:, 0, 0], whole[:, 0, 0])
    assert torch.equal(whole, row.expand_as(whole))  # a padding mask is the same in every row
    assert (row[:, 0, 0] == 0).sum(dim=1).tolist() == list(lengths)


@pytest.mark.parametrize("lengths", [(7,), (9, 30), (30, 2, 17)])
def test_the_model_computes_the_same_with_either_mask(tiny_longformer, lengths):
    net = tiny_longformer.model
    n = max(lengths)
    generator = torch.Generator().manual_seed(sum(lengths))
    ids = torch.randint(3, net.config.vocab_size, (len(lengths), n), generator=generator)
    padding = torch.tensor([[1] * k + [0] * (n - k) for k in lengths])
    ids[padding == 0] = net.config.pad_token_id
    ids[:, 0] = net.config.bos_token_id
    global_mask = torch.zeros_like(ids)
    global_mask[:, 0] = 1
    global_mask[0, min(3, lengths[0] - 1)] = 1  # a second global token in the first document
    inputs = dict(input_ids=ids, attention_mask=padding, global_attention_mask=global_mask,
                  output_attentions=True, output_hidden_states=True)
    with torch.no_grad():
        row = net(**inputs)
        with implementation(net, "eager"):
            whole = net(**inputs)
    assert torch.equal(row.logits, whole.logits)
    for a, b in zip(row.hidden_states + row.attentions + row.global_attentions,
                    whole.hidden_states + whole.attentions + whole.global_attentions):
        assert torch.equal(a, b)
