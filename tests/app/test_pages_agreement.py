"""AppTest drives the Agreement and Faithfulness pages on the demo through every option."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from longviz_core.attribution import STEP_PRESETS
from longviz_core.views import agreement as ag
from longviz_core.evaluation import faithfulness as fa
from longviz_core.evaluation.importance import IMPORTANCE_METHODS
from pages._ui.keys import K
from support.apps import settle

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TIMEOUT = 300
MAX_TOKENS = 256  # short documents keep IG and the deletion test quick


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(page: str, doc: int = 0) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.session_state[K.DOC_INDEX] = doc
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    _ok(at)
    return at


def _compute_dataset(at, key):
    """The dataset button: absent when an earlier run left the local store of these settings in the cache."""
    for b in at.button:
        if b.key == key:
            b.click().run()
    _ok(at)


def _click_if_shown(at, key):
    buttons = [b for b in at.button if b.key == key]
    if buttons:  # not shown when the result is already in the disk cache
        assert any("takes about" in i.value or "min for" in i.value for i in at.info)
        buttons[0].click().run()
    _ok(at)


@pytest.fixture()
def similarity(demo):
    at = _open("agreement")
    _click_if_shown(at, K.page("similarity", "run_ig"))
    return at


@pytest.fixture()
def faithfulness(demo):
    at = _open("faithfulness", doc=1)  # an artificial_intelligence paper: its decision flips within ~60 %
    _click_if_shown(at, K.page("faithfulness", "run_ig"))
    return _settled(at)


def _settled(at):
    """The page once its first flips are in: before, it shows the curves and says the flips are being scanned."""
    pending = f"First flips within the first {fa.FLIP_BOUND} tokens: scanning …"
    if any(c.value == pending for c in at.caption):
        assert not any(k.startswith("first_flip") for k in at.dataframe[0].value["number"])  # no flips yet
        assert len(at.tabs) == 4 and any("being scanned" in i.value for i in at.tabs[-1].info)
        assert at.get("vega_lite_chart")  # the curves' charts are drawn already
        settle(at)
    _ok(at)
    assert not any(c.value == pending for c in at.caption)
    return at


def _key(name):
    return K.page("similarity", name)


def test_similarity_document_tables(similarity):
    at = similarity
    assert [s.value for s in at.subheader][:2] == ["Table 1: similarity of attention and |IG|",
                                                   "Table 2: Jaccard of the top 5 %"]
    table1 = at.dataframe[0].value
    assert len(table1) == 2 * 2 * 3  # final / all layers x scaled yes/no x masked no/zero/drop
    assert set(table1["Masked"]) == set(ag.MASK_MODES)
    assert any(f"Head importance: {IMPORTANCE_METHODS['t3vis']}" in c.value for c in at.caption)
    assert any("zero" in e.label for e in at.expander)


def test_similarity_follows_an_imported_head_importance(similarity):
    at = similarity
    at.session_state[K.page("attention", "imported_importance")] = np.zeros((4, 4))  # as the heatmap page stores it
    at.run()
    _ok(at)
    table1 = at.dataframe[0].value
    scaled = table1[table1["Scaled by head importance"] == "yes"]
    assert len(scaled) == 6 and scaled["Kendall tau"].isna().all()  # zero importance: constant attention
    assert scaled["Note"].str.contains("constant").all()
    assert any("imported on the heatmap page" in c.value for c in at.caption)


def test_similarity_document_every_option(similarity):
    at = similarity
    for kinds in ([], ["nonalnum"], list(ag.MASK_KINDS)):
        at.multiselect(key=_key("mask")).set_value(kinds).run()
        _ok(at)
    at.slider(key=_key("layers")).set_value((2, 3)).run()
    _ok(at)
    assert len(at.dataframe[0].value) == 3 * 2 * 3
    for p in (0.9, 0.995):
        at.select_slider(key=_key("p")).set_value(p).run()
        _ok(at)
    for source in range(3):
        at.selectbox(key=_key("set_source")).set_value(source).run()
        _ok(at)
        for scaled in (True, False):
            at.checkbox(key=_key("set_scaled")).set_value(scaled).run()
            for mode in ag.MASK_MODES:
                at.radio(key=_key("set_mode")).set_value(mode).run()
                _ok(at)
    for metric in ag.HEAD_METRICS:
        at.radio(key=_key("head_metric")).set_value(metric).run()
        for mode in ag.MASK_MODES:
            at.radio(key=_key("head_mode")).set_value(mode).run()
            _ok(at)
    at.checkbox(key=_key("scale")).set_value(False).run()
    _ok(at)
    assert set(at.dataframe[0].value["Scaled by head importance"]) == {"no"}
    # more steps: not cached, so the page states the expected time and waits for a click
    at.selectbox(key=_key("steps")).set_value(list(STEP_PRESETS)[1]).run()
    _ok(at)
    assert any("takes about" in i.value for i in at.info)
    assert [b.key for b in at.button] == [_key("run_ig")]


def test_similarity_dataset_mode(similarity):
    at = similarity
    at.radio(key=_key("scope")).set_value("dataset").run()
    _ok(at)
    at.slider(key=_key("docs")).set_value(2).run()
    _compute_dataset(at, _key("run_dataset"))
    assert any("2 documents" in c.value for c in at.caption)
    assert "±" in str(at.dataframe[0].value.iloc[0, -1])
    for i in range(len(at.selectbox(key=_key("ds_config")).options)):
        at.selectbox(key=_key("ds_config")).set_value(i).run()
        _ok(at)
    for i in range(len(at.selectbox(key=_key("ds_grid")).options)):
        at.selectbox(key=_key("ds_grid")).set_value(i).run()
        _ok(at)


def _fkey(name):
    return K.page("faithfulness", name)


def test_faithfulness_document_every_option(faithfulness):
    at = faithfulness
    table = at.dataframe[0].value.set_index("number")  # a column per ranking, a row per number, as text
    assert table.columns.tolist() == [fa.RANKING_LABELS[r] for r in fa.RANKINGS]
    assert {"aopc@10%", "lodds", "first_flip", "aopc_sd", "flip_rate"} <= set(table.index)
    # the stages: curves and the flips within the bound shown, the exact scan offered (or already settled)
    unflipped = [c.value for c in at.caption if "no flip within the first" in c.value]
    assert all(f"within the first {fa.FLIP_BOUND} tokens" in c for c in unflipped)
    assert bool(unflipped) == any(b.key == _fkey("exact") for b in at.button)
    assert table.loc["runs", "Random"] == str(len(fa.DEFAULT_SEEDS))
    assert table.loc["aopc_sd", "|IG|"] == "—" and float(table.loc["aopc_sd", "Random"]) >= 0  # sds: seeds only
    assert [t.label for t in at.tabs] == ["AOPC", "LOdds", "probability", "first flip (exact scan)"]
    assert any("exact scan" in m.value for m in at.markdown)
    # each rerun reruns the deletion test, so options are changed several at a time: every value is still visited
    runs = [dict(replacement="pad", layers=(4, 4)), dict(replacement="mask", scale=True),
            dict(replacement="baseline", seeds=3, scale=False)]
    token = {"mask": "<mask>", "pad": "<pad>", "baseline": "<pad>"}  # an encoder's IG baseline puts <pad>
    kinds = {"replacement": "radio", "layers": "slider", "scale": "checkbox", "seeds": "number_input"}
    for run in runs:
        for name, value in run.items():  # widgets are looked up in the latest element tree
            getattr(at, kinds[name])(key=_fkey(name)).set_value(value)
        _settled(at.run())
        if "replacement" in run:
            assert any(f"replaced by {token[run['replacement']]}" in c.value for c in at.caption)
        assert any(IMPORTANCE_METHODS["t3vis"] in c.value for c in at.caption) == bool(run.get("scale"))
        if "seeds" in run:
            assert at.dataframe[0].value.set_index("number").loc["runs", "Random"] == str(run["seeds"])
    assert set(fa.REPLACEMENTS) == set(token)


@pytest.mark.slow  # exact first-flip scans of two documents: a minute or two on one thread
def test_faithfulness_dataset_mode(faithfulness):
    at = faithfulness
    at.radio(key=_fkey("scope")).set_value("dataset").run()
    _ok(at)
    at.slider(key=_fkey("docs")).set_value(2).run()
    # scans up to 10 %: a document of the model's default class never flips, and scanning all its counts under
    # 12 runs took most of this test's time (the full scan: tests/unit/test_faithfulness.py's store test)
    at.selectbox(key=_fkey("max_removed")).set_value("10 %").run()
    _compute_dataset(at, _fkey("run_dataset"))
    summary = at.dataframe[0].value
    assert summary["ranking"].tolist() == [fa.RANKING_LABELS[r] for r in fa.RANKINGS]
    assert (summary["documents"] == 2).all()
    per_document = next(d.value for d in at.dataframe if "doc" in d.value)
    assert len(per_document) == 2 * len(fa.RANKINGS) and set(per_document["doc"]) == {0, 1}
    flipped = per_document["first_flip"].dropna()
    assert (flipped <= 0.1 + 1 / MAX_TOKENS).all()  # a flip found within the scan's limit, never past it
    at.radio(key=_fkey("replacement")).set_value("pad").run()  # new settings: the summary waits for a click
    _ok(at)
    assert [b.key for b in at.button] == [_fkey("run_dataset")] and not at.dataframe
