"""AppTest drives the app shell on the demo: every document choice, pasted text and bad input."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pages._ui.keys import DOC_MODES, K

TIMEOUT = 180
# the demo's classes as a metric tile shows them: a zero-width space after "_" lets them wrap between words
CLASSES = {"programming_\u200blanguages", "artificial_\u200bintelligence"}
APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture()
def app(demo):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    return at


def _metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def test_document_page_shows_a_demo_document(app):
    assert not app.exception
    assert not app.error
    assert app.title[0].value == "Document"
    assert _metric(app, "Predicted") in CLASSES
    assert int(_metric(app, "Tokens analysed").replace(",", "")) > 100


# every choice but "by index" predicts the whole dataset first (half a minute on two cores)
@pytest.mark.parametrize("mode", [pytest.param(m, marks=[] if m == "by index" else [pytest.mark.slow])
                                  for m in DOC_MODES if m != "pasted text"])
def test_every_document_choice(app, mode):
    app.selectbox(key=K.DOC_MODE).set_value(mode).run()
    assert not app.exception
    # a choice may legitimately find no document (e.g. no false positive): that is a clear message
    if app.error:
        assert f"No {mode.replace('random ', '')}" in app.error[0].value
    else:
        assert _metric(app, "True label") in CLASSES
        assert any(mode in c.value for c in app.caption)


def test_pasted_text_and_truncation(app):
    app.selectbox(key=K.DOC_MODE).set_value("pasted text").run()
    assert "Paste a text" in app.error[0].value
    app.session_state[K.PASTED] = "neural networks learn attention. " * 400
    app.session_state[K.MAX_TOKENS] = 256
    app.run()
    assert not app.exception and not app.error
    assert _metric(app, "True label") == "—"
    assert _metric(app, "Tokens analysed") == "256"
    assert "Truncated" in app.warning[0].value


def test_whitespace_text_is_a_clear_message(app):
    app.session_state[K.PASTED] = "   \n\t "
    app.selectbox(key=K.DOC_MODE).set_value("pasted text").run()
    assert not app.exception
    assert "Paste a text" in app.error[0].value


def test_unknown_model_path_is_a_clear_message(app, tmp_path):
    app.text_input(key=K.MODEL).set_value(str(tmp_path / "no-such-model")).run()
    assert not app.exception
    assert "No model directory" in app.error[0].value


def test_index_past_the_end(app):
    app.number_input(key=K.DOC_INDEX).set_value(10_000).run()
    assert not app.exception
    assert "past the end" in app.error[0].value
