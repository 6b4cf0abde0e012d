"""Arguments at the core's front door: counts, positions and limits that are negative, fractional, NaN, infinite
or huge end in a typed LongvizError naming what is accepted; a document's special-token spellings stay text;
checkpoints whose parts do not fit each other are refused at load with the reason."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.model.analysis import pick_document
from longviz_core.model.heads import SINGLE_LABEL, Head
from longviz_core.model.loading import distinct_labels, normalise_dataset
from longviz_core.views.attribution_tables import top_attributions
from longviz_core.model.topk import topk_indices

traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")
NOT_WHOLE = [float("nan"), float("inf"), float("-inf"), 2.5, True, "64", None]


# ------------------------------------------------------------------------------------------- max_tokens
@traceback
@pytest.mark.parametrize("max_tokens", [*NOT_WHOLE, -1, 0, 2, 10**30],
                         ids=lambda v: repr(v) if not isinstance(v, int) or v < 10**6 else "huge")
def test_max_tokens_that_is_not_a_usable_count_is_refused(tiny_longformer, max_tokens):
    with pytest.raises(lv.LongvizError, match="max_tokens"):
        lv.analyze(tiny_longformer, "the model learns", max_tokens=max_tokens)


@traceback
@pytest.mark.parametrize("max_tokens", [float("nan"), float("inf"), 2.5], ids=repr)
def test_a_precompute_with_max_tokens_that_is_not_a_count_writes_nothing(tiny_longformer, tmp_path, max_tokens):
    from longviz_core.dataset.kinds import Settings
    from longviz_core.dataset.run import precompute

    df = pd.DataFrame({"text": ["the model learns", "the data"], "label": [0, 1]})
    with pytest.raises(lv.SettingsError, match="max_tokens"):
        precompute(tiny_longformer, df, tmp_path / "s", "attention", Settings(max_tokens=max_tokens))
    with pytest.raises(lv.SettingsError, match="limit"):
        precompute(tiny_longformer, df, tmp_path / "s", "attention", Settings(max_tokens=32), limit=-1)
    assert not (tmp_path / "s").exists()


@wrong
def test_max_tokens_given_as_a_whole_float_is_that_count(tiny_longformer):
    a = lv.analyze(tiny_longformer, "the model learns attention over long documents", max_tokens=5.0)
    assert a.n == 5 and a.encoded.max_tokens == 5


# ------------------------------------------------------------------------------------ attribution tables
_TOKENS = ["<s>", "Ġthe", "Ġmodel", "Ġlearns", "</s>"]


@traceback
@pytest.mark.parametrize("k", [-1, 0, *NOT_WHOLE], ids=repr)
def test_top_attributions_refuses_a_k_that_is_not_a_count(k):
    with pytest.raises(lv.SettingsError, match="k"):
        top_attributions(_TOKENS, [0.0, 0.3, 0.1, 0.2, 0.0], k=k)


@wrong
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_scores_with_nan_or_inf_are_refused_not_ranked(bad):
    with pytest.raises(lv.AttributionError, match="NaN/inf"):
        top_attributions(_TOKENS, [0.0, 0.3, bad, 0.2, 0.0], k=2)


@wrong
def test_top_attributions_k_larger_than_the_document_returns_every_positive_token_in_order():
    out = top_attributions(_TOKENS, [0.0, 0.3, -0.1, 0.2, 0.0], k=10**12)
    assert out["position"].tolist() == [1, 3]


# ------------------------------------------------------------------------------------- bands and lists
@traceback
@pytest.mark.parametrize("position", [-1, "n", 10**30, 1.5, np.nan], ids=repr)
def test_a_position_outside_the_document_is_a_selection_error(tiny_longformer, position):
    bands = lv.analyze(tiny_longformer, "the model learns attention", max_tokens=32).attention
    position = bands.n if position == "n" else position
    for read in (bands.row, bands.column):
        with pytest.raises(lv.SelectionError, match="position"):
            read(0, 0, position)


@traceback
@pytest.mark.parametrize("k", [10**9, 2**40])
def test_topk_lists_too_large_to_hold_are_refused_before_allocating(tiny_longformer, k):
    bands = lv.analyze(tiny_longformer, "the model learns attention", max_tokens=32).attention
    with pytest.raises(lv.LongvizError, match="GiB of top-k lists"):
        topk_indices(bands, k=k)


@traceback
@pytest.mark.parametrize("positive", [2, -1, 1.5, np.nan, 10**20], ids=repr)
def test_pick_document_refuses_a_class_the_model_does_not_have(positive):
    probs = np.array([[0.9, 0.1], [0.2, 0.8]])
    with pytest.raises(lv.SelectionError, match="positive"):
        pick_document(probs, [0, 1], "most confident positive", positive=positive, head=Head(SINGLE_LABEL))


# ------------------------------------------------------------------------------------------- the device
@traceback
@pytest.mark.parametrize("device", ["cuda", "cuda:7", "gpu", "mps", "tpu", ""])
def test_a_device_this_machine_lacks_is_refused_at_load(tiny_longformer_dir, device):
    import torch

    if device.startswith("cuda") and torch.cuda.is_available() and device == "cuda":
        pytest.skip("this machine has CUDA")
    with pytest.raises(lv.SettingsError, match="[Dd]evice"):
        lv.load_model(str(tiny_longformer_dir), device=device)


# ------------------------------------------------------------------------------ text read as text
SPELLINGS = ["<s>", "</s>", "<pad>", "<mask>", "<unk>", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]",
             "<|endoftext|>", "<S>", "< s >", "<s><s>"]


@wrong
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_special_token_spellings_in_a_document_are_text(tiny_longformer, tiny_bert, spelling):
    text = f"the model {spelling} learns {spelling}"
    for model in (tiny_longformer, tiny_bert):
        tok = model.tokenizer
        a = lv.analyze(model, text, max_tokens=64)
        ids = a.input_ids.tolist()
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id  # the family's own, by position
        inner = set(ids[1:-1])
        assert not inner & (set(tok.all_special_ids) - {tok.unk_token_id})
        if model is tiny_longformer:  # byte-level BPE reads every character: the text comes back as written
            assert tok.decode(ids[1:-1]) == text


# ---------------------------------------------------------------------------------------- checkpoints
def _copy_with_config(src, dst, **changes):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@traceback
@pytest.mark.parametrize("labels", [1, 3, 5])
def test_a_head_for_another_number_of_classes_is_named_not_called_damaged(tiny_longformer_dir, tmp_path, labels):
    names = {str(i): f"c{i}" for i in range(labels)}
    path = _copy_with_config(tiny_longformer_dir, tmp_path / "m", id2label=names,
                             label2id={v: int(k) for k, v in names.items()})
    with pytest.raises(lv.ModelLoadError, match=f"trained for 2 classes but config.json lists {labels}") as info:
        lv.load_model(str(path))
    assert "damaged" not in str(info.value)


@traceback
def test_a_tokenizer_with_ids_past_the_embedding_table_is_refused_at_load(tiny_longformer_dir, tmp_path):
    from transformers import AutoConfig, LongformerForSequenceClassification

    config = AutoConfig.from_pretrained(tiny_longformer_dir)
    config.vocab_size -= 40
    dst = tmp_path / "small-table"
    LongformerForSequenceClassification(config).save_pretrained(dst)
    for f in tiny_longformer_dir.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, dst / f.name)
    with pytest.raises(lv.ModelLoadError, match="embedding table has"):
        lv.load_model(str(dst))


@wrong
@pytest.mark.parametrize("names", [["pos", "pos"], ["pos", "POS"], ["pos", " pos "], ["a", "b", "a"]],
                         ids=["same", "case", "spaces", "three"])
def test_repeated_class_names_are_told_apart_and_refused_as_dataset_labels(names):
    id2label = dict(enumerate(names))
    shown = distinct_labels(id2label)
    assert len({v.strip().lower() for v in shown.values()}) == len(names)
    assert all(shown[i].startswith(names[i]) for i in id2label)
    with pytest.raises(lv.DatasetError, match="repeat a name"):
        normalise_dataset(pd.DataFrame({"text": ["a b", "c d"], "label": [names[0]] * 2}), id2label=id2label)


@wrong
def test_a_checkpoint_with_repeated_class_names_loads_with_distinct_names(tiny_longformer_dir, tmp_path):
    path = _copy_with_config(tiny_longformer_dir, tmp_path / "m", id2label={"0": "pos", "1": "pos"},
                             label2id={"pos": 1})
    model = lv.load_model(str(path))
    assert [model.label_name(i) for i in range(2)] == ["pos (0)", "pos (1)"]


@wrong
def test_numeric_labels_still_load_with_repeated_class_names():
    out = normalise_dataset(pd.DataFrame({"text": ["a b", "c d"], "label": [1, 0]}), id2label={0: "pos", 1: "pos"})
    assert out["label"].tolist() == [1, 0]
