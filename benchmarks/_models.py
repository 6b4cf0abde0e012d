"""The benchmarks' shared model: Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512) with
random weights and the tests' byte-level BPE tokenizer, saved once under a folder and loaded through load_model."""
from __future__ import annotations

from pathlib import Path

import torch

from longviz_core import load_model


def base_model(path: Path):
    """The model saved at `path` (built there first if the folder holds none), loaded on the CPU."""
    from transformers import LongformerConfig, LongformerForSequenceClassification

    from tiny import _bpe_tokenizer

    if not (path / "config.json").exists():
        tok = _bpe_tokenizer(path)
        torch.manual_seed(0)
        config = LongformerConfig(
            vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, attention_window=512, max_position_embeddings=4098, pad_token_id=1,
            bos_token_id=0, eos_token_id=2, sep_token_id=2, type_vocab_size=1, num_labels=2)
        LongformerForSequenceClassification(config).save_pretrained(path)
        tok.save_pretrained(path)
    return load_model(str(path), device="cpu")
