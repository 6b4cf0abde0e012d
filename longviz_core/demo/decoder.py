"""The decoder demo's recipe: a tiny Qwen3 classifier (grouped-query attention, sliding-window and full layers, RoPE
to 32,768) trained on the same corpus, with the same vocabulary and training loop as the Longformer demo
(demo/train.py).

Its encoding is the saved tokenizer's own single-sequence template, Llama's: <s> + text, no </s>, positions from 0;
the classification head reads the last token. It shows the decoder family on a trained model:
`load_model("demo-decoder")`.
"""

from __future__ import annotations

import torch

from .train import BOS_ID, EOS_ID, ID2LABEL, LABEL2ID, PAD_ID, SPECIAL_TOKENS, Recipe, rope_inputs, with_auxiliary

VERSION = "1"
MAX_POSITIONS = 32768  # RoPE has no position table to size; Qwen3's own context length
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
SLIDING_WINDOW = 64  # each token and the 63 before it, as the other demos' windows span 64 tokens


def _make_model(vocab_size: int):
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,  # SwiGLU: gate and up projections
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention: two query heads share each key/value head
        head_dim=32,
        # use_sliding_window: Qwen3Config drops sliding_window (and with it every sliding layer's window) without it
        use_sliding_window=True,
        sliding_window=SLIDING_WINDOW,
        layer_types=list(LAYER_TYPES),
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},  # Qwen3's base
        attention_dropout=0.05,
        tie_word_embeddings=False,
        use_cache=False,  # a classifier: no generation, no key/value cache to keep
        pad_token_id=PAD_ID,  # the head reads the rightmost token that is not <pad>
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        num_labels=2,
        id2label=dict(ID2LABEL),
        label2id=dict(LABEL2ID),
    )
    return Qwen3ForSequenceClassification(config)


def _loss(model, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the last token's classification plus the two auxiliary ones of the other recipes (on the mean
    of the last layer's token states and of the embeddings, through the same head): every token carries the class
    early, and the last token, which reads them in the full layers, learns to at any length."""
    out = model.model(**inputs, output_hidden_states=True)
    hidden = out.last_hidden_state  # (b, L, h)
    logits = model.score(hidden[:, -1])  # crops hold no <pad>: the last token is the one the head reads
    # last layer, embeddings: (b, L, h) each
    auxiliary = (model.score(states.mean(dim=1)) for states in (hidden, out.hidden_states[0]))
    return logits, with_auxiliary(logits, auxiliary, labels)


def _tokenizer(trained):
    """The trained tokenizer (same vocabulary, merges, pre-tokenizer and decoder) with Llama's template: one sequence
    becomes <s> + text, a pair <s> + A + <s> + B; no </s>."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(trained.backend_tokenizer.to_str())
    backend.post_processor = TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1",
                                                special_tokens=[("<s>", BOS_ID)])
    bos, pad, eos, unk, mask = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos, pad_token=pad,
                                   unk_token=unk, mask_token=mask)


DECODER = Recipe(family="Qwen3", version=VERSION, make_model=_make_model, inputs=rope_inputs, loss=_loss,
                 max_positions=MAX_POSITIONS, eos=False, saved_tokenizer=_tokenizer)
