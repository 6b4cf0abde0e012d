"""AppTest drives the attention pages on the demo through every toggle: heatmap grid, token counts, overlay."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from longviz_core.evaluation.importance import IMPORTANCE_METHODS
from pages._ui.keys import K
from tests.support.apps import overlay_html, overlays

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 300
MAX_TOKENS = 512  # keeps the dataset-wide grid and head importance quick on the demo
IMPORTED = K.page("attention", "imported_importance")


def _open(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(MAX_TOKENS).run()
    at.switch_page(f"pages/{page}.py").run()
    _ok(at)
    return at


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _tables(at: AppTest) -> list:
    return [d.value.to_dict("list") for d in at.dataframe]


@pytest.fixture()
def counts_page(demo):
    return _open("token_counts")


def test_token_counts_every_toggle(counts_page):
    at = counts_page
    assert at.title[0].value == "Token counts"
    baseline = _tables(at)
    assert len(baseline) == 6  # 2 intersection tables + 4 count tables
    # the paper's count (the default) is a number of tokens, and the page says so
    assert all(c <= MAX_TOKENS for t in baseline for name, col in t.items() if name.startswith("count") for c in col)
    assert any("tokens whose top-10 (over the selected heads) contain it" in h.value for h in at.subheader)
    at.radio(key=K.page("counts", "rule")).set_value("per_head").run()
    _ok(at)
    assert _tables(at) != baseline
    assert any("per-head top-10 lists that contain it" in h.value for h in at.subheader)
    assert any("once per head list" in m.value for m in at.markdown)
    at.radio(key=K.page("counts", "rule")).set_value("paper").run()
    _ok(at)
    assert _tables(at) == baseline
    at.toggle(key=K.page("counts", "mask")).set_value(True).run()
    _ok(at)
    masked = _tables(at)
    assert masked != baseline  # the mask changes the displayed tables
    assert all("<s>" not in t.get("token", []) for t in masked)
    for k in (1, 20):
        at.slider(key=K.page("counts", "k")).set_value(k).run()
        _ok(at)
    at.slider(key=K.page("counts", "n")).set_value(25).run()
    _ok(at)
    for scope in ("one layer", "one head", "all layers and heads"):
        at.radio(key=K.page("counts", "scope")).set_value(scope).run()
        _ok(at)
        if scope != "all layers and heads":
            at.selectbox(key=K.page("counts", "layer")).set_value(3).run()
            _ok(at)
        if scope == "one head":
            at.selectbox(key=K.page("counts", "head")).set_value(2).run()
            _ok(at)
    token_box = at.selectbox(key=K.page("counts", "token"))
    token_box.set_value(token_box.options[-1]).run()
    _ok(at)
    at.radio(key=K.page("counts", "instance_direction")).set_value("attending").run()
    _ok(at)
    at.toggle(key=K.page("counts", "mask")).set_value(False).run()
    _ok(at)


def test_heatmap_grid_every_toggle(demo):
    at = _open("heatmap_grid")
    assert at.title[0].value == "Attention heatmap grid"
    assert len(at.get("image")) == 1
    for grid in (32, 128):
        at.select_slider(key=K.page("heatmap", "grid")).set_value(grid).run()
        _ok(at)
    at.radio(key=K.page("heatmap", "colour")).set_value("log").run()
    _ok(at)
    at.selectbox(key=K.page("heatmap", "layer")).set_value(3).run()
    at.selectbox(key=K.page("heatmap", "head")).set_value(1).run()
    _ok(at)
    at.checkbox(key=K.page("heatmap", "scale")).check().run()  # computed on the demo dataset (disk-cached)
    _ok(at)
    assert any("unimportant heads fade" in c.value and IMPORTANCE_METHODS["t3vis"] in c.value for c in at.caption)
    at.selectbox(key=K.page("heatmap", "importance_method")).set_value("michel").run()
    _ok(at)
    assert any(IMPORTANCE_METHODS["michel"] in c.value for c in at.caption)
    at.session_state[IMPORTED] = np.arange(16, dtype=float).reshape(4, 4)
    at.radio(key=K.page("heatmap", "importance_source")).set_value("imported file").run()
    _ok(at)
    assert any("imported on the heatmap page" in c.value for c in at.caption)
    at.radio(key=K.page("heatmap", "scope")).set_value("dataset").run()
    _ok(at)
    at.slider(key=K.page("heatmap", "docs")).set_value(3).run()
    _ok(at)
    if any(b.key == K.page("heatmap", "run_dataset") for b in at.button):  # not in the local store yet
        at.button(key=K.page("heatmap", "run_dataset")).click().run()
        _ok(at)
    assert any("3 of the first 3 documents" in c.value for c in at.caption)
    assert len(at.get("image")) == 1
    at.checkbox(key=K.page("heatmap", "scale")).uncheck().run()
    at.radio(key=K.page("heatmap", "colour")).set_value("linear").run()
    _ok(at)


def test_overlay_every_toggle(demo):
    at = _open("attention_overlay")
    assert at.title[0].value == "Summed attention"

    def html():
        return overlay_html(at)

    first = html()
    assert 'data-pos="0"' in first and not overlays(at)[0]["clickable"]  # display only: no selection here
    at.radio(key=K.page("overlay", "preset")).set_value("all layers (averaged)").run()
    _ok(at)
    assert html() != first
    at.radio(key=K.page("overlay", "preset")).set_value("choose layers and heads").run()
    at.multiselect(key=K.page("overlay", "layers")).set_value([0, 1]).run()
    at.multiselect(key=K.page("overlay", "heads")).set_value([2]).run()
    _ok(at)
    masked = html()
    assert "lv-t lv-m" in masked  # the paper's view: masking is on by default
    at.toggle(key=K.page("overlay", "mask")).set_value(False).run()
    _ok(at)
    assert html() != masked and "lv-t lv-m" not in html()
    at.toggle(key=K.page("overlay", "mask")).set_value(True).run()
    _ok(at)
    assert html() == masked
    at.checkbox(key=K.page("overlay", "scale")).check().run()
    _ok(at)
    assert any(f"Head importance: {IMPORTANCE_METHODS['t3vis']}" in c.value for c in at.caption)
    at.multiselect(key=K.page("overlay", "heads")).set_value([]).run()
    assert not at.exception
    assert any("at least one" in i.value for i in at.info)


# words outside the demo's corpus: its tokenizer cuts them into pieces
PIECES = ("Unforeseen hyperparameters destabilised Longformer's convolutional embeddings; Smith et al. (2021) "
          "reported naïve “reproducibility” gains. ") * 4


def _open_pasted(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state[K.DOC_MODE], at.session_state[K.PASTED] = "pasted text", PIECES
    at.run()
    at.number_input(key=K.MAX_TOKENS).set_value(MAX_TOKENS).run()
    at.switch_page(f"pages/{page}.py").run()
    _ok(at)
    return at


@pytest.fixture(scope="module")
def pieces_doc(demo):
    from longviz_core import analyze, load_model
    from longviz_core.tokens import word_spans

    model = load_model("demo")
    analysis = analyze(model, PIECES, MAX_TOKENS)
    words = word_spans(analysis.tokens)
    assert len(words) < analysis.n - 30  # many words in pieces
    return model, analysis, words


def test_overlay_shows_words(pieces_doc):
    from longviz_core.views.masking import build_mask
    from longviz_core.views.units import overlay_table

    model, analysis, words = pieces_doc
    at = _open_pasted("attention_overlay")
    assert overlay_html(at).count("data-pos=") == analysis.n  # tokens by default
    at.session_state[K.UNIT] = "word"  # the sidebar's Unit (the page runs here without app.py's sidebar)
    at.run()
    _ok(at)
    assert overlay_html(at).count("data-pos=") == len(words) + 2  # and <s>, </s>
    # the last layer's received attention per head, summed over each word's pieces, masked words left out
    values = analysis.attention.received([model.num_layers - 1]) / model.num_heads
    expected = overlay_table(analysis.tokens, values, "received", build_mask(analysis.tokens), "word")
    expected = expected[~expected["masked"]].sort_values("received", ascending=False, kind="stable")
    (table,) = [d.value for d in at.dataframe if "word" in d.value.columns]
    assert list(table.columns) == ["position", "word", "received"]
    assert table["word"].tolist() == expected["word"].head(25).tolist()
    assert table["received"].to_numpy() == pytest.approx(expected["received"].head(25).to_numpy(), rel=1e-5)


def test_token_counts_group_by_word(pieces_doc, demo_dataset, tmp_path, monkeypatch):
    import longviz_core as lv
    from longviz_core import _disk
    from longviz_core.dataset.run import clamped
    from longviz_core.dataset.stores import local_store_dir
    from longviz_core.views import counts as tc

    real = _disk.cache_folder  # the page's local store in a fresh folder: its button computes the documents
    monkeypatch.setattr(_disk, "cache_folder", lambda name, cache_dir=None: tmp_path / name
                        if name == "stores" and not cache_dir else real(name, cache_dir))
    monkeypatch.delenv("LONGVIZ_STORE_DIR", raising=False)
    model, analysis, words = pieces_doc
    at = _open_pasted("token_counts")
    group = at.radio(key=K.page("counts", "group"))
    assert group.value == "type" and group.options == ["token type", "word"]
    at.radio(key=K.page("counts", "group")).set_value("word").run()
    _ok(at)
    tables = [d.value for d in at.dataframe]
    assert len(tables) == 6 and not any(list(t.columns) == ["token", "count"] for t in tables)
    by_word = [t for t in tables if list(t.columns) == ["word", "count"]]
    assert len(by_word) == 2  # attended and attending, in the expander
    expected = tc.token_counts(analysis, 10, "attended", "word")
    assert by_word[0].to_dict("list") == expected.to_dict("list")
    assert any(list(t.columns) == ["word", "count_attended", "count_attending"] for t in tables)
    # the dataset scope keeps the choice: the store's counts by word, summed over the documents computed
    at.radio(key=K.page("counts", "over")).set_value("dataset").run()
    _ok(at)
    assert at.radio(key=K.page("counts", "group")).value == "word"
    at.slider(key=K.page("counts", "docs")).set_value(2).run()
    at.button(key=K.page("counts", "run_dataset")).click().run()
    _ok(at)
    shown = [d.value for d in at.dataframe if list(d.value.columns) == ["word", "count", "documents"]]
    assert len(shown) == len(tc.DIRECTIONS)
    store = lv.ResultStore(local_store_dir(model, demo_dataset, clamped(model, lv.PrecomputeSettings(
        max_tokens=MAX_TOKENS))), limit=2)
    assert store.count("attention") == 2
    docs = [lv.analyze(model, text, MAX_TOKENS) for text in demo_dataset["text"][:2]]
    for table, direction in zip(shown, tc.DIRECTIONS):
        pd.testing.assert_frame_equal(table.reset_index(drop=True), store.word_counts(direction))
        expected = Counter()  # the oracle: each document's counts by word, summed
        for doc in docs:
            per_doc = tc.token_counts(doc, 10, direction, "word", rule="paper")
            expected.update(dict(zip(per_doc["word"], per_doc["count"])))
        assert dict(zip(table["word"], table["count"])) == dict(expected)
    assert not any("by word is for one document" in c.value.lower() for c in at.caption)
