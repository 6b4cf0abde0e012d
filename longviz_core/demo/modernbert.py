"""The ModernBERT demo's recipe: a tiny ModernBERT classifier (sliding-window and full layers, RoPE) trained on the
same corpus, with the same tokenizer and training loop as the Longformer demo (demo/train.py).

It shows the family working on a trained model, not a random one: `load_model("demo-modernbert")`.
"""

from __future__ import annotations

import torch

from .train import BOS_ID, EOS_ID, ID2LABEL, LABEL2ID, PAD_ID, Recipe, rope_inputs, with_auxiliary

VERSION = "1"
MAX_POSITIONS = 8192  # ModernBERT's own maximum: RoPE has no position table to size


def _make_model(vocab_size: int):
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    config = ModernBertConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=256,  # GLU: the first projection is twice as wide
        local_attention=64,  # sliding radius 32, as the Longformer demo's one-sided window
        global_attn_every_n_layers=3,  # layers 1 and 4 attend over the whole document
        max_position_embeddings=MAX_POSITIONS,
        classifier_pooling="cls",
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        cls_token_id=BOS_ID,
        sep_token_id=EOS_ID,
        embedding_dropout=0.05,
        attention_dropout=0.05,
        mlp_dropout=0.05,
        num_labels=2,
        id2label=dict(ID2LABEL),
        label2id=dict(LABEL2ID),
    )
    return ModernBertForSequenceClassification(config)


def _loss(model, inputs: dict[str, torch.Tensor], labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the [CLS] classification plus the two auxiliary ones of the Longformer recipe (on the mean
    of the last layer's token states and of the embeddings, through the same head): every token carries the class
    early, and [CLS], which reads them in the full layers, learns to at any length."""
    out = model.model(**inputs, output_hidden_states=True)
    hidden = out.last_hidden_state  # (b, L, h)

    def classify(states):  # (b, h) -> (b, labels)
        return model.classifier(model.drop(model.head(states)))

    logits = classify(hidden[:, 0])
    # last layer, embeddings: (b, L, h) each
    return logits, with_auxiliary(logits, (classify(states.mean(dim=1)) for states in (hidden, out.hidden_states[0])),
                                  labels)


MODERNBERT = Recipe(family="ModernBERT", version=VERSION, make_model=_make_model, inputs=rope_inputs, loss=_loss,
                    max_positions=MAX_POSITIONS)
