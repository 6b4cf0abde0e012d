"""Checkpoints a lab may point longviz at: missing, not a classifier, not a Longformer, without (all or some of)
its tokenizer files, with damaged weights or configuration. Each is a ModelLoadError naming the problem and
the fix, or loads and gives the right numbers."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import longviz_core as lv
from tiny import make_tiny_bert, text_of

traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert"))


def _variant(src: Path, dst: Path, drop=(), damage=None) -> Path:
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    if damage is not None:
        name, fn = damage
        (dst / name).write_bytes(fn((dst / name).read_bytes()))
    return dst


def _flip_middle(data: bytes) -> bytes:
    b = bytearray(data)
    b[8 + len(b) // 100] ^= 0xFF  # inside the safetensors JSON header (it starts at byte 8)
    return bytes(b)


LONGFORMER_CASES = {
    "no-tokenizer-files": (dict(drop=("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")),
                           r"no complete tokenizer: no tokenizer\.json; of merges\.txt, vocab\.json it lacks merges\.txt, vocab\.json"),
    "merges-missing": (dict(drop=("tokenizer.json", "merges.txt")), r"it lacks merges\.txt\b"),
    "vocab-missing": (dict(drop=("tokenizer.json", "vocab.json")), r"it lacks vocab\.json"),
    "empty-tokenizer-json": (dict(drop=("vocab.json", "merges.txt"), damage=("tokenizer.json", lambda b: b"")),
                             r"no complete tokenizer"),
    "garbage-tokenizer-json": (dict(damage=("tokenizer.json", lambda b: b"{not json")),
                               r"tokenizer of .* cannot be read: tokenizer\.json is not valid JSON .*save_pretrained"),
    "weights-missing": (dict(drop=("model.safetensors",)), r"no file named model\.safetensors"),
    "weights-truncated": (dict(damage=("model.safetensors", lambda b: b[: len(b) // 2])),
                          r"model\.safetensors is damaged: it is shorter than its header says, cut off"),
    "weights-garbage": (dict(damage=("model.safetensors", lambda b: b"\x00" * 64 + b[64:])),
                        r"model\.safetensors is damaged: its header is overwritten"),
    "weights-header-bit-flip": (dict(damage=("model.safetensors", _flip_middle)),
                                r"model\.safetensors is damaged: its header is overwritten"),
    "weights-empty": (dict(damage=("model.safetensors", lambda b: b"")),
                      r"model\.safetensors is damaged: it is empty or ends before its header"),
    "config-garbage": (dict(damage=("config.json", lambda b: b"\x00garbage")), r"config.*not a valid JSON.*Check"),
    "config-missing": (dict(drop=("config.json",)), r"no config\.json"),
}


@traceback
@pytest.mark.parametrize("case", list(LONGFORMER_CASES))
def test_damaged_or_incomplete_checkpoint_is_a_model_load_error(tiny_longformer_dir, tmp_path, case):
    kwargs, message = LONGFORMER_CASES[case]
    path = _variant(tiny_longformer_dir, tmp_path / case, **kwargs)
    with pytest.raises(lv.ModelLoadError, match=message) as info:
        lv.load_model(str(path))
    assert str(path) in str(info.value)  # names the checkpoint


@traceback
def test_bert_without_vocab_is_a_model_load_error(tiny_bert_dir, tmp_path):
    path = _variant(tiny_bert_dir, tmp_path / "bert", drop=("tokenizer.json", "vocab.txt"))
    with pytest.raises(lv.ModelLoadError, match=r"of vocab\.txt it lacks vocab\.txt.*save_pretrained"):
        lv.load_model(str(path))


@traceback
def test_missing_path_and_not_a_classifier(tiny_longformer_dir, tmp_path):
    from transformers import LongformerConfig, LongformerForMaskedLM

    with pytest.raises(lv.ModelNotFoundError, match="No model directory"):
        lv.load_model(str(tmp_path / "nowhere"))
    mlm = tmp_path / "mlm"
    LongformerForMaskedLM(LongformerConfig.from_pretrained(tiny_longformer_dir)).save_pretrained(mlm)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_longformer_dir / f, mlm / f)
    with pytest.raises(lv.NotAClassifierError, match="not a sequence classifier"):
        lv.load_model(str(mlm))


@wrong
def test_slow_tokenizer_files_alone_load_the_same_tokenizer(tiny_longformer_dir, tmp_path, tiny_longformer):
    path = _variant(tiny_longformer_dir, tmp_path / "slow", drop=("tokenizer.json",))
    m = lv.load_model(str(path))
    text = text_of(50)
    assert m.tokenizer(text)["input_ids"] == tiny_longformer.tokenizer(text)["input_ids"]
    a, b = lv.analyze(m, text, 64), lv.analyze(tiny_longformer, text, 64)
    np.testing.assert_array_equal(a.logits, b.logits)  # the same weights and inputs: bit-identical


@wrong
def test_a_non_longformer_classifier_loads_and_its_attention_is_the_models(tiny_bert_dir):
    m = lv.load_model(str(tiny_bert_dir))
    assert m.family.name != "longformer" and m.attention_windows == ()
    a = lv.analyze(m, text_of(20), max_tokens=32)
    ids = torch.as_tensor(a.input_ids)[None]
    with torch.no_grad():
        out = m.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    dense = torch.stack(out.attentions)[:, 0].numpy()  # (layers, heads, n, n)
    for layer in range(m.num_layers):
        for head in range(m.num_heads):  # attention weights are in [0, 1] and rows sum to 1: float32 rounding
            np.testing.assert_allclose(a.attention.dense(layer, head), dense[layer, head], rtol=1e-5, atol=1e-7)
