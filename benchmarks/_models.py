"""The benchmarks' shared model: Longformer-base dimensions (12 layers x 12 heads, hidden 768, window 512) with
random weights and the tests' byte-level BPE tokenizer, saved once under a folder and loaded through load_model;
and the machine's CPU by name, for the figures' headers."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from longviz_core import load_model


def base_model(path: Path, device: str = "cpu"):
    """The model saved at `path` (built there first if the folder holds none), loaded on `device`."""
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
    return load_model(str(path), device=device)


def cpu_name() -> str:
    """The CPU's model name (lscpu's), else what platform knows."""
    line = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), "")
    return line.split(":", 1)[1].strip() if line else platform.processor() or platform.machine()
