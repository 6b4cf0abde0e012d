"""Tiny random ModernBERT checkpoints for the attention-by-pattern oracles (saved to disk, loaded through
`load_model`); large initializer ranges so attention is far from uniform."""
from __future__ import annotations

from pathlib import Path

import torch

from tiny import _bpe_tokenizer


def make_tiny_modernbert(path: Path, layers=4, heads=2, hidden=32, local_attention=16, global_layers=(0, 3),
                         initializer_range=0.3, max_positions=1024, labels=2, seed=0) -> Path:
    """ModernBERT with sliding radius local_attention // 2 and full attention in `global_layers`."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    path = Path(path)
    tok = _bpe_tokenizer(path)
    torch.manual_seed(seed)
    config = ModernBertConfig(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=hidden * 2, local_attention=local_attention, max_position_embeddings=max_positions,
        layer_types=["full_attention" if i in global_layers else "sliding_attention" for i in range(layers)],
        pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, cls_token_id=0, num_labels=labels,
        initializer_range=initializer_range, embedding_dropout=0.0, attention_dropout=0.0, mlp_dropout=0.0,
        id2label={i: f"class_{i}" for i in range(labels)}, label2id={f"class_{i}": i for i in range(labels)},
    )
    ModernBertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
