"""Bad texts, uploads and tables through the core: a typed error whose message says what to do, or the right
result. Property-based cases (hypothesis) look for what the lists miss."""
from __future__ import annotations

import gzip
import io
import pickle
import zipfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import longviz_core as lv
from longviz_core import encode
from longviz_core.model.loading import load_dataset, normalise_dataset
from tiny import text_of

ID2LABEL = {0: "neg", 1: "pos"}
traceback = pytest.mark.guards("traceback")
wrong = pytest.mark.guards("wrong")


# ------------------------------------------------------------------------------------------------- texts
@traceback
@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("   ", "empty"),
    ("\n\t \r\n", "empty"),
    ("\x00", "NUL bytes"),
    ("the model\x00learns", "NUL bytes"),
    ("a lone \ud800 surrogate", "not valid Unicode"),
    (b"bytes, not text", "Expected the document as text"),
    (None, "Expected the document as text"),
], ids=["empty", "spaces", "whitespace", "nul", "nul-inside", "lone-surrogate", "bytes", "none"])
def test_bad_text_is_an_input_text_error(tiny_longformer, text, message):
    with pytest.raises(lv.InputTextError, match=message):
        lv.analyze(tiny_longformer, text, max_tokens=64)


@wrong
def test_a_20000_token_text_is_truncated_to_the_maximum(tiny_longformer):
    text = text_of(20_000)
    full = tiny_longformer.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(full) >= 20_000
    a = lv.analyze(tiny_longformer, text, max_tokens=128)
    assert a.n == 128 and a.encoded.truncated
    assert a.input_ids[1:-1].tolist() == full[:126]  # the document's first tokens, in order, between <s> and </s>


@wrong
@pytest.mark.parametrize("text", ["<s></s><pad><mask>", "🙂" * 40, "e\u0301 \u200b\ufeff x", "x"],
                         ids=["special-token-text", "emoji", "combining-and-zero-width", "one-character"])
def test_odd_but_valid_texts_are_analysed_as_text(tiny_longformer, text):
    a = lv.analyze(tiny_longformer, text, max_tokens=64)
    tok = tiny_longformer.tokenizer
    assert a.input_ids[0] == tok.cls_token_id and a.input_ids[-1] == tok.sep_token_id
    inner = a.input_ids[1:-1].tolist()
    assert inner == tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"][: a.n - 2]  # as read
    assert not set(inner) & set(tok.all_special_ids)  # a special token's spelling in the text is text
    assert np.isclose(a.probs.sum(), 1.0, rtol=1e-6) and np.all(np.isfinite(a.logits))


@traceback
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_any_text_encodes_or_is_refused_with_a_typed_error(tiny_longformer, text):
    try:
        enc = encode(tiny_longformer.tokenizer, text, 64, model_max=tiny_longformer.max_tokens,
                     position_offset=tiny_longformer.position_offset)
    except lv.InputTextError as exc:
        assert str(exc)
        return
    assert 3 <= len(enc.input_ids) <= 64 and text.strip()


# ----------------------------------------------------------------------------------------------- uploads
def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


_GOOD = pd.DataFrame({"text": ["the model learns", "the compiler checks"], "label": [0, 1]})
UPLOADS = {
    "empty": (b"", "data.csv", "empty"),
    "whitespace-only": (b" \n\n\t", "data.csv", "empty"),
    "latin-1": ("text,label\ncafé crème,0\n".encode("latin-1"), "data.csv", "not UTF-8"),
    "png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "data.csv", "binary"),
    "utf-16": ("text,label\nx,0\n".encode("utf-16"), "data.csv", "binary"),
    "pickle": (pickle.dumps({"text": ["x"], "label": [0]}), "data.csv", "binary"),
    "gzip": (gzip.compress(b"text,label\nx,0\n"), "data.csv", "binary|UTF-8"),
    "zip": (None, "data.csv", "binary|UTF-8|parse"),
    "truncated-parquet": (_parquet_bytes(_GOOD)[:60], "data.parquet", "Could not parse"),
    "garbage-parquet": (b"PAR1" + b"\x07" * 200, "data.parquet", "Could not parse"),
    "broken-json": (b'{"text": "x", "label": ', "data.jsonl", "Could not parse"),
    "unclosed-quote-csv": (b'text,label\n"the model learns,0\n', "data.csv", "no rows|Could not parse|label"),
    "random-bytes": (bytes(np.random.default_rng(0).integers(0, 256, 2048, dtype=np.uint8)), "data.csv",
                     "binary|UTF-8"),
}


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.csv", "text,label\nx,0\n")
    return buf.getvalue()


@traceback
@pytest.mark.parametrize("name", list(UPLOADS))
def test_bad_upload_is_a_dataset_error(name):
    data, filename, message = UPLOADS[name]
    data = _zip_bytes() if name == "zip" else data
    with pytest.raises(lv.DatasetError, match=message):
        load_dataset(data, filename=filename, id2label=ID2LABEL)


@traceback
@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=600), filename=st.sampled_from(["d.csv", "d.tsv", "d.jsonl", "d.parquet", "d"]))
def test_any_bytes_load_or_are_refused_with_a_typed_error(data, filename):
    try:
        df = load_dataset(data, filename=filename, id2label=ID2LABEL)
    except lv.DatasetError as exc:
        assert str(exc)
        return
    _assert_normalised(df)


# ------------------------------------------------------------------------------------------------ tables
TABLES = {
    "no-text-column": (pd.DataFrame({"a": [1, 2], "b": [3, 4]}), {}, "No text column"),
    "named-text-column-missing": (_GOOD, {"text_column": "body"}, "No text column 'body'"),
    "named-label-column-missing": (_GOOD, {"label_column": "y"}, "No label column 'y'"),
    "nan-labels": (pd.DataFrame({"text": ["a b", "c d"], "label": [0, np.nan]}), {}, "no label"),
    "none-labels": (pd.DataFrame({"text": ["a b", "c d"], "label": ["pos", None]}), {}, "no label"),
    "unknown-labels": (pd.DataFrame({"text": ["a b", "c d"], "label": ["pos", "maybe"]}), {}, "maybe"),
    "fractional-labels": (pd.DataFrame({"text": ["a b", "c d"], "label": [0.0, 0.5]}), {}, "not integers"),
    "labels-outside-classes": (pd.DataFrame({"text": ["a b", "c d"], "label": [0, 7]}), {}, r"outside .* 0\.\.1"),
    "negative-labels": (pd.DataFrame({"text": ["a b", "c d"], "label": [-1, 0]}), {}, "outside"),
    "no-rows": (pd.DataFrame({"text": [], "label": []}), {}, "no rows"),
    "only-empty-texts": (pd.DataFrame({"text": ["", "  ", None], "label": [0, 1, 0]}), {}, "no non-empty text"),
    "numbers-as-text": (pd.DataFrame({"text": [1.5, 2.5], "label": [0, 1]}), {}, "no non-empty text"),
}


@traceback
@pytest.mark.parametrize("name", list(TABLES))
def test_bad_table_is_a_dataset_error(name):
    df, kwargs, message = TABLES[name]
    with pytest.raises(lv.DatasetError, match=message):
        normalise_dataset(df, id2label=ID2LABEL, **kwargs)


@wrong
def test_string_labels_map_through_the_models_classes_and_empty_rows_are_counted():
    df = pd.DataFrame({"review": ["good film", "  ", "bad film", "fine"], "class": ["POS", "neg", " neg", "1"]})
    with pytest.raises(lv.DatasetError, match=r"\['1'\]"):  # a mix of names and numbers is refused
        normalise_dataset(df, id2label=ID2LABEL)
    out = normalise_dataset(df.iloc[:3], id2label=ID2LABEL)
    assert out["text"].tolist() == ["good film", "bad film"] and out["label"].tolist() == [1, 0]
    assert out.attrs["dropped_rows"] == 1


def _assert_normalised(df: pd.DataFrame) -> None:
    assert len(df) > 0
    assert all(isinstance(t, str) and t.strip() for t in df["text"])
    if "label" in df:
        assert df["label"].dtype == np.int64 and df["label"].between(0, len(ID2LABEL) - 1).all()


_cells = st.one_of(st.none(), st.text(max_size=20), st.integers(-3, 3), st.floats(allow_nan=True, width=32),
                   st.sampled_from(["pos", "neg", "POS", " 1", "0", "=1+1", "nan"]))


@traceback
@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(_cells, _cells), max_size=8),
       columns=st.sampled_from([("text", "label"), ("review", "class"), ("a", "b"), ("text", "x")]))
def test_any_table_normalises_or_is_refused_with_a_typed_error(rows, columns):
    df = pd.DataFrame(rows, columns=list(columns))
    try:
        out = normalise_dataset(df, id2label=ID2LABEL)
    except lv.DatasetError as exc:
        assert str(exc)
        return
    _assert_normalised(out)
    # nothing silently lost: every kept text is one of the input cells, in order
    texts = [r[0] for r in rows if isinstance(r[0], str) and r[0].strip()] if out.columns[0] == "text" else None
    if texts is not None and columns[0] in ("text", "review"):
        assert out["text"].tolist() == texts
