"""The cases of issue 16 through the app (AppTest): each ends in st.error with the core's message, never in
"Something went wrong" or an exception, and putting the input right brings the page back."""
from __future__ import annotations

import shutil

import pytest

from support.apps import local_app

traceback = pytest.mark.guards("traceback")


@pytest.fixture()
def app(demo, monkeypatch):
    return local_app(monkeypatch, 128)


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def _assert_message(at, message: str) -> None:
    assert not at.exception, at.exception
    errors = _errors(at)
    assert errors and message in errors[0], errors
    assert not any("Something went wrong" in e for e in errors)


def _variant(src, dst, drop=(), damage=None):
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    if damage:
        (dst / damage).write_bytes((dst / damage).read_bytes()[:1000])
    return dst


@traceback
def test_checkpoints_without_tokenizer_or_with_damaged_weights(app, tiny_longformer_dir, tmp_path):
    from pages._ui.keys import K

    cases = {
        "no-tokenizer": (dict(drop=("tokenizer.json", "vocab.json", "merges.txt")), "no complete tokenizer"),
        "damaged-weights": (dict(damage="model.safetensors"), "model.safetensors is damaged"),
    }
    for name, (kwargs, message) in cases.items():
        path = _variant(tiny_longformer_dir, tmp_path / name, **kwargs)
        app.text_input(key=K.MODEL).set_value(str(path)).run()
        _assert_message(app, message)
        app.text_input(key=K.MODEL).set_value("demo").run()
        assert not app.exception and not app.error


@traceback
def test_pasted_binary_text(app):
    from pages._ui.keys import K

    app.selectbox(key=K.DOC_MODE).set_value("pasted text").run()
    app.text_area(key=K.PASTED).set_value("PK\x03\x04\x00\x00 binary").run()
    _assert_message(app, "NUL bytes")
