"""Checkpoint faults named for what they are (issue 29, class 6): an invalid config.json, a model too large for
memory, pickle weights refused for safety, a weight file cut off or overwritten, weights that do not fit the
config (sizes, layers), an unknown model type. Each message names the fault and a fix that works, and says
"damaged" only of a file that is; weights the config leaves out or lacks are refused, never run at random."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import longviz_core as lv
from tiny import make_tiny_bert, text_of

misleading = pytest.mark.guards("misleading")
wrong = pytest.mark.guards("wrong")


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("bert"))


def _copy(src: Path, dst: Path, drop=(), **config) -> Path:
    shutil.copytree(src, dst)
    path = dst / "config.json"
    settings = {**json.loads(path.read_text()), **config}
    for key in drop:
        settings.pop(key)
    path.write_text(json.dumps(settings))
    return dst


def _refused(path: Path, *says: str, error=lv.ModelLoadError) -> str:
    """load_model(path) raises `error` whose message holds every one of `says`, names the checkpoint and does not
    call a sound file damaged."""
    with pytest.raises(error) as info:
        lv.load_model(str(path))
    message = str(info.value)
    for words in says:
        assert words in message, message
    assert str(path) in message and "damaged" not in message, message
    return message


# ------------------------------------------------------------------------------------- an invalid config.json
INVALID = {  # config field -> (value, what the message says)
    "num_hidden_layers=-1": ({"num_hidden_layers": -1}, "num_hidden_layers must be at least 1, got -1"),
    "num_hidden_layers=0": ({"num_hidden_layers": 0}, "num_hidden_layers must be at least 1, got 0"),
    "num_attention_heads=0": ({"num_attention_heads": 0}, "num_attention_heads must be at least 1, got 0"),
    "hidden_size=-1": ({"hidden_size": -1}, "hidden_size must be at least 1, got -1"),
    "intermediate_size=0": ({"intermediate_size": 0}, "intermediate_size must be at least 1, got 0"),
    "vocab_size=-5": ({"vocab_size": -5}, "vocab_size must be at least 1, got -5"),
    "max_position_embeddings=-1": ({"max_position_embeddings": -1}, "max_position_embeddings must be at least 1"),
    "heads do not split hidden_size": ({"num_attention_heads": 3}, "hidden_size 32 is not a multiple of "
                                                                   "num_attention_heads 3"),
    "hidden_size as text": ({"hidden_size": "32"}, "hidden_size"),
}


@misleading
@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_config_is_named_with_the_field_and_where_to_fix_it(tiny_longformer_dir, tmp_path, case):
    change, says = INVALID[case]
    message = _refused(_copy(tiny_longformer_dir, tmp_path / "m", **change), "is invalid", says, "Fix config.json")
    assert "attention weights" not in message and "window" not in message  # not what it used to be blamed on


@misleading
def test_a_config_without_model_type_says_so(bert_dir, tmp_path):
    _refused(_copy(bert_dir, tmp_path / "m", drop=("model_type",)), "no model_type", "Fix config.json")


@misleading
def test_an_unknown_model_type_says_transformers_does_not_know_it(bert_dir, tmp_path):
    import transformers

    _refused(_copy(bert_dir, tmp_path / "m", model_type="nosuchmodel"), "model_type 'nosuchmodel'",
             f"transformers {transformers.__version__} does not know", "pip install -U transformers",
             "fix model_type in config.json")


# --------------------------------------------------------------------------------------------- memory
@misleading
def test_a_model_larger_than_memory_is_refused_from_its_config_before_allocating(tiny_longformer_dir, tmp_path):
    path = _copy(tiny_longformer_dir, tmp_path / "m", hidden_size=2**20, intermediate_size=2**22)
    message = _refused(path, "does not fit in memory", "GiB", "more memory")
    need = float(message.split("at least ")[1].split(" GiB")[0].replace(",", ""))
    # two layers of 4 h^2 + 2 h f weights and the token table, 4 bytes each: the config's own lower bound
    h, f, layers, vocab = 2**20, 2**22, 2, json.loads((path / "config.json").read_text())["vocab_size"]
    assert need == pytest.approx(4 * (layers * (4 * h * h + 2 * h * f) + vocab * h) / 2**30, rel=1e-3)


@misleading
@pytest.mark.parametrize("failure", [MemoryError(), RuntimeError(
    "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 bytes"),
    RuntimeError("not enough memory: you tried to allocate 99 bytes")], ids=["MemoryError", "allocator", "windows"])
def test_an_allocation_that_fails_while_loading_is_named_as_memory(tiny_longformer_dir, monkeypatch, failure):
    from transformers import AutoModelForSequenceClassification

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", fail)
    _refused(tiny_longformer_dir, "does not fit in the memory free now", "ran out of memory",
             "its config.json describes weights of at least", "Free memory")


# ----------------------------------------------------------------------------------------- pickle weights
class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())  # harmless, but any callable would run under a plain pickle.load


def _as_bin(src: Path, dst: Path, write) -> Path:
    """A copy of the checkpoint at `src` whose weights are pytorch_model.bin, written by write(state, path)."""
    from safetensors.torch import load_file

    shutil.copytree(src, dst)
    state = load_file(dst / "model.safetensors")
    (dst / "model.safetensors").unlink()
    write(state, dst / "pytorch_model.bin")
    return dst


PICKLES = {
    "torch.save with an object": lambda state, p: torch.save({**state, "extra": _Payload()}, p),
    "a bare pickle": lambda state, p: p.write_bytes(pickle.dumps({"weights": _Payload()})),
}


@misleading
@pytest.mark.parametrize("case", list(PICKLES))
def test_pickle_weights_are_refused_for_safety_with_the_conversion_to_do(tiny_longformer_dir, tmp_path, case):
    path = _as_bin(tiny_longformer_dir, tmp_path / "m", PICKLES[case])
    _refused(path, "not loaded for safety", "Convert the checkpoint to safetensors",
             "save_pretrained(<dir>, safe_serialization=True)", "trusted environment")


@wrong
def test_a_bin_of_plain_tensors_still_loads_the_same_model(tiny_longformer_dir, tiny_longformer, tmp_path):
    path = _as_bin(tiny_longformer_dir, tmp_path / "m", lambda state, p: torch.save(state, p))
    loaded = lv.load_model(str(path))
    same = tiny_longformer.model.state_dict()
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, same[name]), name  # the same weights, bit for bit
    a, b = lv.analyze(loaded, text_of(20), 32), lv.analyze(tiny_longformer, text_of(20), 32)
    # the same arithmetic on differently placed tensors: MKL on AMD picks kernels by alignment, so logits of about
    # 1e-2 (sums of 128 products) may differ by a few float32 ulps
    np.testing.assert_allclose(a.logits, b.logits, rtol=1e-5, atol=1e-7)


BAD_FILES = {  # (file, damage, what the message says): these files are damaged, and the message says how
    "bin not a torch file": ("pytorch_model.bin", lambda b: b"\x00" * 100, "is not a PyTorch weight file"),
    "bin cut off": ("pytorch_model.bin", lambda b: b[: len(b) // 3], "pytorch_model.bin is cut off"),
    "safetensors cut off": ("model.safetensors", lambda b: b[: len(b) // 3],
                            "model.safetensors is damaged: it is shorter than its header says"),
    "safetensors cut off in its header": ("model.safetensors", lambda b: b[:1000],
                                          "model.safetensors is damaged: it ends inside its header, cut off"),
    "safetensors header overwritten": ("model.safetensors", lambda b: b[:8] + b"\xff" * 16 + b[24:],
                                       "model.safetensors is damaged: its header is overwritten"),
    "safetensors empty": ("model.safetensors", lambda b: b"", "model.safetensors is damaged: it is empty"),
}


@misleading
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_damaged_weight_file_is_named_with_what_is_wrong_with_it(tiny_longformer_dir, tmp_path, case):
    name, damage, says = BAD_FILES[case]
    if name.endswith(".bin"):
        path = _as_bin(tiny_longformer_dir, tmp_path / "m", lambda state, p: torch.save(state, p))
    else:
        path = shutil.copytree(tiny_longformer_dir, tmp_path / "m")
    (path / name).write_bytes(damage((path / name).read_bytes()))
    with pytest.raises(lv.ModelLoadError) as info:
        lv.load_model(str(path))
    message = str(info.value)
    assert says in message and "Copy or download the checkpoint again" in message, message
    assert "safety" not in message and "config.json" not in message, message  # the file, not the config


# ------------------------------------------------------------------------------- weights that do not fit
@wrong
def test_a_config_with_more_layers_than_the_weights_is_refused_not_run_with_a_random_layer(bert_dir, tmp_path):
    _refused(_copy(bert_dir, tmp_path / "m", num_hidden_layers=3), "num_hidden_layers = 3",
             "no weights for layer(s) 2", "they would be random", "Fix config.json")


@wrong
def test_a_config_with_fewer_layers_than_the_weights_is_refused_not_run_short(bert_dir, tmp_path):
    _refused(_copy(bert_dir, tmp_path / "m", num_hidden_layers=1), "hold layer(s) 1",
             "num_hidden_layers = 1", "Fix num_hidden_layers")


@misleading
def test_a_config_of_another_size_is_not_blamed_on_the_classes(tiny_longformer_dir, tmp_path):
    message = _refused(_copy(tiny_longformer_dir, tmp_path / "m", hidden_size=64), "do not fit its config.json",
                       "another size of model", "fix config.json")
    assert "classes" not in message and "classifier" not in message, message  # an encoder weight is named


@misleading
def test_a_head_for_other_classes_is_still_named_as_such(tiny_longformer_dir, tmp_path):
    names = {str(i): f"c{i}" for i in range(3)}
    _refused(_copy(tiny_longformer_dir, tmp_path / "m", id2label=names, label2id={v: int(k) for k, v in names.items()}),
             "trained for 2 classes but config.json lists 3")


@misleading
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_tokenizer_file_that_is_not_json_is_named(tiny_longformer_dir, tmp_path, name):
    path = shutil.copytree(tiny_longformer_dir, tmp_path / "m")
    (path / name).write_bytes(b"{not json")
    _refused(path, "The tokenizer of", f"{name} is not valid JSON", "tokenizer.save_pretrained(<dir>)")
