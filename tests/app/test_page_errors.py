"""Every page answers bad input with the core's message in st.error, and a bug with one short line and a
collapsed traceback: never an exception element or Streamlit's "Something went wrong"."""
from __future__ import annotations

import pytest

import longviz_core as lv
from longviz_core import cache
from pages._ui.keys import K
from tests.support.apps import app_test, page

PAGES = ("document", "heatmap_grid", "token_counts", "attention_overlay", "attribution", "agreement",
         "faithfulness")


def _run(name: str, **state):
    at = app_test()
    at.session_state[K.MAX_TOKENS] = 128
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page(name)).run()
    return at


def _shows(at, message: str) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == [message]
    assert not any("Something went wrong" in m.value or "Traceback" in m.value for m in at.markdown)


def _message(call) -> str:
    with pytest.raises(lv.LongvizError) as info:
        call()
    return str(info.value)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    (root / "columns.csv").write_text("year,pages\n2021,12\n")
    (root / "unlabelled.csv").write_text("text\nA short text about neural networks.\nAnother one on proteins.\n")
    return root


def _bad_inputs(files):
    """(what, session state, the core's message) for every input a page reads from the sidebar."""
    missing = files / "no-such-model"
    return [
        ("index past the end", {K.DOC_INDEX: 10_000}, None),
        ("empty pasted text", {K.DOC_MODE: "pasted text", K.PASTED: "  "}, None),
        ("unknown model", {K.MODEL: str(missing)}, _message(lambda: lv.load_model(str(missing)))),
        ("dataset without a text column", {K.DATASET_KIND: "file path", K.DATASET_PATH: str(files / "columns.csv")},
         _message(lambda: lv.load_dataset(str(files / "columns.csv")))),
        ("missing dataset file", {K.DATASET_KIND: "file path", K.DATASET_PATH: str(files / "nothing.csv")},
         _message(lambda: lv.load_dataset(str(files / "nothing.csv")))),
        ("false negative of an unlabelled dataset", {K.DATASET_KIND: "file path", K.DOC_MODE: "random false negative",
                                                     K.DATASET_PATH: str(files / "unlabelled.csv")},
         "A false negative needs a labelled dataset (a label column), and this one has no labels: choose a labelled "
         "dataset, or pick the document by index or as the most confident positive."),
    ]


@pytest.mark.parametrize("name", PAGES)
def test_sidebar_inputs(demo, files, name):
    for what, state, message in _bad_inputs(files):
        at = _run(name, **state)
        if what == "index past the end":
            message = f"Index 10000 is past the end of the dataset ({len(cache.get_dataset(lv.DEMO))} documents)."
        elif what == "empty pasted text":
            message = "Paste a text in the sidebar to analyse it."
        _shows(at, message)


@pytest.mark.parametrize("name, option", [("heatmap_grid", "heatmap"), ("attention_overlay", "overlay"),
                                          ("faithfulness", "faithfulness")])
def test_importance_without_labels(demo, files, name, option):
    at = _run(name, **{K.DATASET_KIND: "file path", K.DATASET_PATH: str(files / "unlabelled.csv"),
                       K.page(option, "scale"): True})
    _shows(at, "Head importance needs a labelled dataset: choose one in the sidebar or untick the scaling.")


@pytest.mark.parametrize("name, option, message", [
    ("heatmap_grid", "heatmap", "The dataset-wide grid needs a dataset: choose one in the sidebar."),
    ("agreement", "similarity", "Dataset-wide tables need a dataset: choose one in the sidebar."),
    ("faithfulness", "faithfulness", "The dataset-wide summary needs a dataset: choose one in the sidebar."),
])
def test_dataset_scope_without_a_dataset(demo, name, option, message):
    at = _run(name, **{K.DOC_MODE: "pasted text", K.PASTED: "A pasted text about attention and gradients.",
                       K.DATASET_KIND: "file path", K.page(option, "scope"): "dataset"})
    _shows(at, message)


@pytest.mark.parametrize("name", PAGES)
def test_a_bug_is_one_line_and_folded_details(demo, monkeypatch, caplog, name):
    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cache, "get_analysis", broken)
    at = _run(name)
    _shows(at, "Unexpected error: RuntimeError: boom")
    details = [e for e in at.expander if e.label == "Details for a bug report"]
    assert len(details) == 1 and not details[0].proto.expanded
    assert "RuntimeError: boom" in details[0].code[0].value
    assert any(r.levelname == "ERROR" and r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)
