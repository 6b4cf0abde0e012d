"""Tiny models built from configs, saved to disk and loaded back through `load_model` (no Hub needed)."""
from __future__ import annotations

from pathlib import Path

import torch

WORDS = (
    "the model learns attention over long documents while the compiler checks types and a neural network "
    "trains on data . programs , semantics ; learning agents search 2019 results show that"
).split()


def _bpe_tokenizer(path: Path):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    bpe = ByteLevelBPETokenizer()
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]
    bpe.train_from_iterator(corpus, vocab_size=600, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    path.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(path))
    # transformers 5 tokenizers take the vocabulary and merges as files' paths via `vocab=`/`merges=`
    tok = RobertaTokenizerFast(vocab=str(path / "vocab.json"), merges=str(path / "merges.txt"))
    return tok


def make_tiny_longformer(path: Path, layers=2, heads=2, hidden=32, window=8, labels=2,
                         initializer_range=0.02, max_positions=130, seed=0) -> Path:
    from transformers import LongformerConfig, LongformerForSequenceClassification

    path = Path(path)
    tok = _bpe_tokenizer(path)
    torch.manual_seed(seed)
    config = LongformerConfig(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=hidden * 2, attention_window=window, max_position_embeddings=max_positions,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2, type_vocab_size=1, num_labels=labels,
        initializer_range=initializer_range, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        id2label={i: f"class_{i}" for i in range(labels)}, label2id={f"class_{i}": i for i in range(labels)},
    )
    model = LongformerForSequenceClassification(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_tiny_bert(path: Path, layers=2, heads=2, hidden=32, labels=2, seed=0, initializer_range=0.02) -> Path:
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS)), *"abcdefghijklmnopqrstuvwxyz"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(path / "vocab.txt"))  # transformers 5 ignores vocab_file=: [UNK] for all
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=hidden * 2, max_position_embeddings=64, num_labels=labels,
        initializer_range=initializer_range, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        id2label={i: f"class_{i}" for i in range(labels)}, label2id={f"class_{i}": i for i in range(labels)},
    )
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def text_of(n_words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n_words))
