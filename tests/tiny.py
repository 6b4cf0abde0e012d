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


def make_tiny_bert(path: Path, layers=2, heads=2, hidden=32, labels=2, initializer_range=0.02, seed=0) -> Path:
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


def _labels(labels):
    return {"num_labels": labels, "id2label": {i: f"class_{i}" for i in range(labels)},
            "label2id": {f"class_{i}": i for i in range(labels)}}


def make_tiny_modernbert(path: Path, layers=4, heads=4, hidden=32, local_attention=16, global_every=3,
                         global_layers=None, pooling="cls", labels=2, initializer_range=0.5, max_positions=8192,
                         seed=0) -> Path:
    """ModernBERT with sliding radius local_attention // 2 (8) and full layers 0 and 3 (global_every=3, or the
    layers listed in `global_layers`); the BPE tokenizer's <s>, </s>, <pad> serve as its [CLS], [SEP], [PAD]."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    path = Path(path)
    tok = _bpe_tokenizer(path)
    torch.manual_seed(seed)
    config = ModernBertConfig(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=hidden * 2, local_attention=local_attention, global_attn_every_n_layers=global_every,
        layer_types=None if global_layers is None else
        ["full_attention" if i in global_layers else "sliding_attention" for i in range(layers)],
        max_position_embeddings=max_positions, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
        sep_token_id=2, classifier_pooling=pooling, initializer_range=initializer_range, **_labels(labels),
    )
    ModernBertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_tiny_bigbird(path: Path, layers=2, heads=2, hidden=32, block_size=16, random_blocks=3, labels=2,
                      attention_type="block_sparse", initializer_range=0.3, max_positions=1024, seed=0) -> Path:
    """BigBird with blocks of 16 tokens: block-sparse above (5 + 2 * 3) * 16 = 176 tokens, full attention below."""
    from transformers import BigBirdConfig, BigBirdForSequenceClassification

    path = Path(path)
    tok = _bpe_tokenizer(path)
    torch.manual_seed(seed)
    config = BigBirdConfig(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=hidden * 2, max_position_embeddings=max_positions, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, sep_token_id=2, attention_type=attention_type, block_size=block_size,
        num_random_blocks=random_blocks, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=initializer_range, **_labels(labels),
    )
    BigBirdForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def text_of(n_words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n_words))


_DECODERS = {
    # model type: (config class, classifier class, extra config, BOS before the text)
    "llama": ("LlamaConfig", "LlamaForSequenceClassification", {}, True),
    "qwen3": ("Qwen3Config", "Qwen3ForSequenceClassification", {"head_dim": 8}, False),
    "mistral": ("MistralConfig", "MistralForSequenceClassification", {"sliding_window": 12}, True),
    "gemma2": ("Gemma2Config", "Gemma2ForSequenceClassification",
               {"sliding_window": 12, "head_dim": 8, "query_pre_attn_scalar": 24, "attn_logit_softcapping": 2.0,
                "final_logit_softcapping": None}, True),
    "qwen2": ("Qwen2Config", "Qwen2ForSequenceClassification",
              {"use_sliding_window": True, "sliding_window": 10, "max_window_layers": 1}, False),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForSequenceClassification",
               {"sliding_window": 10, "head_dim": 8, "query_pre_attn_scalar": 24,
                "layer_types": ["sliding_attention", "full_attention"]}, True),
    "gemma": ("GemmaConfig", "GemmaForSequenceClassification", {"head_dim": 8}, True),
    "phi3": ("Phi3Config", "Phi3ForSequenceClassification", {}, True),
    "smollm3": ("SmolLM3Config", "SmolLM3ForSequenceClassification", {}, True),
    "olmo2": ("Olmo2Config", "Olmo2ForSequenceClassification", {}, True),
}


def make_tiny_decoder(path: Path, kind: str = "llama", layers=2, heads=4, kv_heads=2, hidden=32, labels=2,
                      pad=True, initializer_range=0.5, max_positions=32768, seed=0, **config) -> Path:
    """A decoder sequence classifier (GenericForSequenceClassification) of `kind` (a key of _DECODERS) with grouped-query attention (`kv_heads` key/value heads), a large initializer range so attention is
    far from uniform, and the BPE vocabulary under the decoder's own template (Llama, Mistral, Gemma: <s> before
    the text; Qwen: nothing). `pad=False`: no pad token, as most Llama checkpoints. Extra keywords go to the
    config (e.g. layer_types, or intermediate_size instead of 2 x hidden)."""
    import transformers
    from tokenizers import processors

    config_cls, model_cls, extra, bos = _DECODERS[kind]
    path = Path(path)
    tok = _bpe_tokenizer(path)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, bos_token="<s>",
                                                eos_token="</s>", unk_token="<unk>",
                                                pad_token="<pad>" if pad else None)
    fast.backend_tokenizer.post_processor = (processors.TemplateProcessing(single="<s> $A", special_tokens=[
        ("<s>", 0)]) if bos else processors.ByteLevel(trim_offsets=False))
    torch.manual_seed(seed)
    cfg = getattr(transformers, config_cls)(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        pad_token_id=1 if pad else None, bos_token_id=0, eos_token_id=2, initializer_range=initializer_range,
        tie_word_embeddings=False, **{"intermediate_size": hidden * 2, **extra, **config}, **_labels(labels))
    getattr(transformers, model_cls)(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def as_multi_label(path: Path) -> Path:
    """The saved checkpoint's config marked problem_type "multi_label_classification" (independent sigmoids)."""
    import json

    config = Path(path) / "config.json"
    settings = json.loads(config.read_text())
    settings["problem_type"] = "multi_label_classification"
    config.write_text(json.dumps(settings, indent=2))
    return Path(path)
