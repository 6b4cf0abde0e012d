"""Dataset files: a path that is not a regular file (a folder, a device, a pipe), an endless stream, NUL bytes
past the binary check, pandas' missing-value words written as text, and repeated column names. Each is a
DatasetError naming the problem (the row, for a NUL byte), or every row is kept as written."""
from __future__ import annotations

import io
import os

import pandas as pd
import pytest
from pandas._libs.parsers import STR_NA_VALUES

import longviz_core as lv
from longviz_core.model import files
from longviz_core.model.loading import load_dataset, normalise_dataset

ID2LABEL = {0: "neg", 1: "pos"}
traceback = pytest.mark.guards("traceback")
loss = pytest.mark.guards("loss")


@pytest.fixture()
def paths(tmp_path):
    folder = tmp_path / "a folder.csv"
    folder.mkdir()
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    return {"folder": (folder, "is a folder"), "folder-with-data": (tmp_path, "is a folder"),
            "dev-zero": ("/dev/zero", "not a regular file"), "dev-null": ("/dev/null", "not a regular file"),
            "dev-urandom": ("/dev/urandom", "not a regular file"), "fifo": (fifo, "not a regular file")}


@traceback
@pytest.mark.parametrize("name", ["folder", "folder-with-data", "dev-zero", "dev-null", "dev-urandom", "fifo"])
def test_a_path_that_is_not_a_regular_file_is_refused_by_name(paths, name):
    path, message = paths[name]
    with pytest.raises(lv.DatasetError, match=message):
        load_dataset(str(path), id2label=ID2LABEL)


class _Endless(io.RawIOBase):
    def readable(self):
        return True

    def readinto(self, b):
        b[:] = b"a" * len(b)
        return len(b)


@traceback
def test_an_endless_stream_is_read_up_to_the_limit_only():
    with pytest.raises(lv.DatasetError, match="larger than"):
        files.read_bounded(io.BufferedReader(_Endless()), "The upload", limit=1 << 20)


@traceback
@pytest.mark.parametrize("row", [200, 1000])
@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_a_nul_byte_past_the_first_4_kib_names_its_row(tmp_path, row, fmt):
    texts = [f"the model learns attention {i}" for i in range(1200)]
    texts[row] = "binary \x00 junk"
    df = pd.DataFrame({"text": texts, "label": [i % 2 for i in range(1200)]})
    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_csv(path, sep="\t" if fmt == "tsv" else ",", index=False)
    assert b"\x00" not in path.read_bytes()[:4096]
    with pytest.raises(lv.DatasetError, match=f"NUL bytes, first in row {row} "):
        load_dataset(str(path), id2label=ID2LABEL)


@traceback
def test_a_nul_byte_in_a_parquet_cell_names_its_row(tmp_path):
    df = pd.DataFrame({"text": ["fine text", "also fine", "bad \x00 cell"], "label": [0, 1, 0]})
    df.to_parquet(tmp_path / "d.parquet")
    with pytest.raises(lv.DatasetError, match="first in row 2 "):
        load_dataset(str(tmp_path / "d.parquet"), id2label=ID2LABEL)


NA_WORDS = sorted(w for w in STR_NA_VALUES if w)  # pandas' default missing-value words, read from pandas


@loss
@pytest.mark.parametrize("sep, name", [(",", "d.csv"), ("\t", "d.tsv")])
def test_missing_value_words_written_as_text_are_kept(sep, name):
    body = "".join(f"{w}{sep}{i % 2}\n" for i, w in enumerate(NA_WORDS))
    df = load_dataset(f"text{sep}label\n{body}".encode(), filename=name, id2label=ID2LABEL)
    assert df["text"].tolist() == NA_WORDS
    assert df["label"].tolist() == [i % 2 for i in range(len(NA_WORDS))]


@loss
def test_missing_value_words_as_labels_and_in_other_columns_are_text_too():
    data = b"text,label,note\nthe model,pos,NA\nthe data,neg,None\n"
    df = load_dataset(data, filename="d.csv", id2label=ID2LABEL)
    assert df["note"].tolist() == ["NA", "None"] and df["label"].tolist() == [1, 0]
    with pytest.raises(lv.DatasetError, match="na.*not among"):  # a missing-value word as a label: no class, said so
        load_dataset(b"text,label\nthe model,pos\nthe data,NA\n", filename="d.csv", id2label=ID2LABEL)


@loss
def test_an_empty_cell_is_still_missing():
    with pytest.raises(lv.DatasetError, match="no label"):
        load_dataset(b"text,label\nthe model,1\nthe data,\n", filename="d.csv", id2label=ID2LABEL)
    df = load_dataset(b"text,label\nthe model,1\n,0\nNA,0\n", filename="d.csv", id2label=ID2LABEL)
    assert df["text"].tolist() == ["the model", "NA"] and df.attrs["dropped_rows"] == 1


@traceback
@pytest.mark.parametrize("columns", [["text", "text"], ["text", "label", "label"], [0, "0"], ["a", "a"]],
                         ids=["text-twice", "label-twice", "int-and-str", "other-twice"])
def test_repeated_column_names_are_a_dataset_error(columns):
    df = pd.DataFrame([["the model"] * len(columns)], columns=columns)
    with pytest.raises(lv.DatasetError, match="more than once"):
        normalise_dataset(df, id2label=ID2LABEL)
