"""Loading models and datasets, encoding, and their typed errors."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import longviz_core as lv
from longviz_core.model.heads import SINGLE_LABEL, Head
from tiny import text_of

SINGLE = Head(SINGLE_LABEL)


def test_local_checkpoint_loads_in_eval_mode_with_fingerprint(tiny_longformer, tiny_longformer_dir):
    m = tiny_longformer
    assert not m.model.training
    assert m.family.name == "longformer" and m.num_layers == 2 and m.num_heads == 2
    assert m.max_tokens == 128 and m.position_offset == 2 and m.attention_window == 4
    again = lv.load_model(str(tiny_longformer_dir))
    assert again.fingerprint == m.fingerprint
    assert again.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_fingerprint_changes_with_weights(tmp_path):
    from tiny import make_tiny_longformer

    a = lv.load_model(str(make_tiny_longformer(tmp_path / "a", seed=0)))
    b = lv.load_model(str(make_tiny_longformer(tmp_path / "b", seed=1)))
    assert a.fingerprint != b.fingerprint


def test_missing_path_and_not_a_checkpoint(tmp_path):
    with pytest.raises(lv.ModelNotFoundError, match="No model directory"):
        lv.load_model(str(tmp_path / "nope"))
    with pytest.raises(lv.ModelNotFoundError, match="config.json"):
        lv.load_model(str(tmp_path))
    with pytest.raises(lv.ModelNotFoundError):
        lv.load_model("  ")


def test_hub_unreachable_offline_mentions_the_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises((lv.HubUnreachableError, lv.ModelNotFoundError)) as info:
        lv.load_model("danielhou13/longformer-finetuned_papers_v2")
    assert "HF_HUB_OFFLINE" in str(info.value) or "local" in str(info.value)


def test_not_a_sequence_classifier(tmp_path, tiny_longformer_dir):
    from transformers import LongformerConfig, LongformerForMaskedLM

    config = LongformerConfig.from_pretrained(tiny_longformer_dir)
    path = tmp_path / "mlm"
    LongformerForMaskedLM(config).save_pretrained(path)
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json"):
        if (tiny_longformer_dir / f).exists():
            (path / f).write_bytes((tiny_longformer_dir / f).read_bytes())
    with pytest.raises(lv.NotAClassifierError, match="not a sequence classifier"):
        lv.load_model(str(path))
    # same weights relabelled as a classifier: the head is missing, so still refused
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["LongformerForSequenceClassification"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(lv.NotAClassifierError, match="classification head"):
        lv.load_model(str(path))


def test_encoding_follows_the_notebook(tiny_longformer):
    tok = tiny_longformer.tokenizer
    enc = lv.encode(tok, text_of(200), max_tokens=50, position_offset=2)
    assert enc.n == 50 and enc.truncated and enc.n_text_tokens_original > 48
    assert enc.input_ids[0] == tok.cls_token_id and enc.input_ids[-1] == tok.sep_token_id
    assert (enc.baseline_ids[1:-1] == tok.pad_token_id).all()
    assert enc.baseline_ids[0] == tok.cls_token_id and enc.baseline_ids[-1] == tok.sep_token_id
    # the notebook's construction: cumsum of the non-pad mask + padding_idx
    mask = (enc.input_ids != tok.pad_token_id).astype(int)
    assert (enc.position_ids == np.cumsum(mask) * mask + tok.pad_token_id).all()
    assert enc.global_mask.tolist() == [1] + [0] * 49
    assert enc.tokens[0] == "<s>" and enc.tokens[-1] == "</s>"
    short = lv.encode(tok, "the model", max_tokens=50)
    assert not short.truncated and short.n == short.n_text_tokens_original + 2


@pytest.mark.parametrize("text", ["", "   \n\t", None, "a\x00b"])
def test_bad_text_is_a_typed_error(tiny_longformer, text):
    with pytest.raises(lv.InputTextError):
        lv.analyze(tiny_longformer, text)


def test_max_tokens_beyond_the_model(tiny_longformer):
    with pytest.raises(lv.InputTextError, match="exceeds"):
        lv.analyze(tiny_longformer, "the model", max_tokens=4096)


def test_analyze_probabilities_match_a_plain_forward(tiny_longformer):
    a = lv.analyze(tiny_longformer, text_of(30), max_tokens=64)
    with torch.no_grad():
        logits = tiny_longformer.model(**a.encoded.torch_inputs()).logits[0]
    assert np.allclose(a.probs, torch.softmax(logits, -1).numpy(), atol=1e-6)
    assert a.predicted == int(np.argmax(a.probs)) and a.probs.sum() == pytest.approx(1, abs=1e-6)
    assert a.key.startswith(tiny_longformer.fingerprint)


# ---------------------------------------------------------------------------------------------- datasets
ID2LABEL = {0: "programming_languages", 1: "artificial_intelligence"}


def test_csv_with_string_labels_and_detected_columns(tmp_path):
    p = tmp_path / "d.csv"
    pd.DataFrame({"id": [1, 2, 3], "body": ["a text", "b text", "  "],
                  "category": ["Artificial_Intelligence", "programming_languages", "programming_languages"]}).to_csv(p, index=False)
    df = lv.load_dataset(str(p), id2label=ID2LABEL)
    assert df["text"].tolist() == ["a text", "b text"] and df["label"].tolist() == [1, 0]
    assert "id" in df and df.attrs["dropped_rows"] == 1


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_parquet_and_jsonl(tmp_path, fmt):
    src = pd.DataFrame({"text": ["x y", "z"], "label": [0, 1]})
    p = tmp_path / f"d.{fmt}"
    src.to_parquet(p) if fmt == "parquet" else src.to_json(p, orient="records", lines=True)
    df = lv.load_dataset(str(p))
    assert df["text"].tolist() == ["x y", "z"] and df["label"].tolist() == [0, 1]


def test_uploaded_bytes_and_unlabelled_data():
    df = lv.load_dataset(b"document\nfirst doc\nsecond doc\n", filename="up.csv")
    assert df["text"].tolist() == ["first doc", "second doc"] and "label" not in df


@pytest.mark.parametrize(
    "data,name,match",
    [
        (b"", "e.csv", "empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "x.csv", "binary"),
        ("text,label\ncaf\u00e9,1\n".encode("latin-1"), "l.csv", "UTF-8"),
        (b"a,b\n1,2\n", "n.csv", "No text column"),
        (b"text,label\nhello,7\n", "o.csv", "outside the model's classes"),
        (b"text,label\nhello,biology\n", "s.csv", "not among the model's classes"),
    ],
)
def test_bad_datasets_are_typed_errors(data, name, match):
    with pytest.raises(lv.DatasetError, match=match):
        lv.load_dataset(data, filename=name, id2label=ID2LABEL)


def test_demo_dataset(demo_dataset):
    assert len(demo_dataset) >= 40
    assert set(demo_dataset["label"]) == {0, 1}
    assert lv.dataset_fingerprint(demo_dataset) == lv.dataset_fingerprint(demo_dataset.copy())


def test_pick_document_follows_appendix_a2():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7], [0.05, 0.95]])
    labels = np.array([0, 1, 1, 0, 1])
    assert lv.pick_document(probs, labels, "false negative", head=SINGLE) == 2
    assert lv.pick_document(probs, labels, "false positive", head=SINGLE) == 3
    assert lv.pick_document(probs, labels, "most confident positive", head=SINGLE) == 4
    assert lv.pick_document(probs, np.array([0, 1, 0, 0, 1]), "false negative", head=SINGLE) is None
