"""AppTest of the attribution page on the demo: header (normalised attribution score, F(x) − F(baseline), the
weak-explanation warning), overlay, mask toggle, token picker, tables, CSV downloads, the dataset-wide table
(class in its title, mask toggle, minimum documents), and cached results coming back without recomputation."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from longviz_core import _disk, analyze, load_model
from longviz_core.attribution import ig as A
from longviz_core.tokens import word_spans
from longviz_core.views.units import units
from pages._ui.keys import K
from tests.support.apps import click_token, overlay_html, overlays

TIMEOUT = 300
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
APP = str(Path(__file__).resolve().parents[2] / "app.py")
P = "attribution"


@pytest.fixture()
def calls(tmp_path, monkeypatch):
    """Every IG computation the page triggers, in a private cache folder."""
    monkeypatch.setattr(_disk, "cache_folder", lambda name, cache_dir=None: tmp_path / name)
    seen = []
    real = A._compute

    def counting(*args, **kwargs):
        seen.append(args[3])  # n_steps
        return real(*args, **kwargs)

    monkeypatch.setattr(A, "_compute", counting)
    return seen


def _open(max_tokens=200, steps=4, link=None, **state):
    """The page on its own (switch_page runs it without app.py's sidebar: settings go in session state), opened
    from a `link`'s query parameters if given."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params = dict(link or {})
    at.session_state[K.MAX_TOKENS] = max_tokens
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page("pages/attribution.py").run()
    at.selectbox(key=K.page(P, "steps")).set_value("custom").run()
    at.number_input(key=K.page(P, "steps_n")).set_value(steps).run()
    assert not at.exception, at.exception
    return at


def _table(at, key):
    return next(d for d in at.dataframe if d.key == K.page(P, key)).value


def _metric(at, label):
    return next(m for m in at.metric if m.label == label)


def test_overlay_tables_toggles_and_cache(demo, calls):
    at = _open()
    assert at.title[0].value == "Attribution"
    assert any("Not computed yet" in i.value for i in at.info) and calls == []
    at.button(key=K.page(P, "run")).click().run()
    assert not at.exception and calls == [4]

    attr = A.cached_attribution(*_current(at), n_steps=4)  # default target: the predicted class
    assert attr is not None and attr.n == 200
    assert _metric(at, "Attribution score").value == f"{attr.total:+.3f}"  # sum of the L2-normalised scores
    assert attr.total == pytest.approx(attr.raw.sum() / np.linalg.norm(attr.raw))
    diff = _metric(at, "F(x) − F(baseline)")
    assert diff.value == f"{attr.expected:+.4f}" and f"p(baseline) = {attr.prob_baseline:.4f}" in diff.delta
    assert _metric(at, "Attribution label").value == _metric(at, "Predicted label").value  # default target
    # document 0 at 200 tokens: the baseline already gives the predicted class (AI) p = 0.82
    assert attr.prob_baseline >= 0.5 and attr.weak_explanation in [w.value for w in at.warning]
    assert any("divided by their L2 norm" in c.value for c in at.caption)
    overlay = overlay_html(at)
    assert overlay.count("data-pos=") == 200 and 'class="lv-t lv-m' not in overlay
    assert any("Attribution to" in h.proto.body for h in at.html)  # the legend
    assert len(at.dataframe) >= 4 and len(at.download_button) >= 5
    top = _table(at, "t_tokens_positive")  # the top 10 positive tokens (the document map's table comes first)
    assert list(top.columns) == ["token", "position", "attribution"] and (top["attribution"] > 0).all()
    assert top["attribution"].iloc[0] == pytest.approx(attr.scores.max())

    at.toggle(key=K.page(P, "mask")).set_value(True).run()
    overlay = overlay_html(at)
    assert 'class="lv-t lv-m' in overlay and calls == [4]

    at.number_input(key=K.page(P, "pos")).set_value(5).run()
    token = _metric(at, "Token")
    assert "position 5 of 200" in token.delta
    assert _metric(at, "Attribution").value == f"{attr.scores[5]:+.4f}"
    overlay = overlay_html(at)
    assert re.search(r'class="[^"]*lv-sel[^"]*" data-pos="5"', overlay) and overlay.count("lv-sel\"") == 1
    assert calls == [4]

    # a new session (as after a restart: the result comes from the disk cache, not from memory)
    again = _open()
    assert not again.exception and calls == [4]
    assert _metric(again, "Attribution score").value == f"{attr.total:+.3f}"
    assert any("loaded from cache" in c.value for c in again.caption)


def test_words_overlay_tables_and_one_selection(demo, calls):
    # words outside the demo's corpus: its tokenizer cuts them into pieces
    text = ("Unforeseen hyperparameters destabilised Longformer's convolutional embeddings; Smith et al. (2021) "
            "reported naïve “reproducibility” gains. ") * 3
    at = _open(**{K.DOC_MODE: "pasted text", K.PASTED: text})
    at.button(key=K.page(P, "run")).click().run()
    assert calls == [4]
    model = load_model("demo")
    analysis = analyze(model, text, 200)
    attr = A.cached_attribution(model, analysis, n_steps=4)
    assert overlay_html(at).count("data-pos=") == analysis.n  # tokens by default: the paper's view
    words = word_spans(analysis.tokens)
    assert len(words) < analysis.n - 30  # many words in pieces
    at.session_state[K.UNIT] = "word"  # the sidebar's Unit (the page runs here without app.py's sidebar)
    at.run()
    assert not at.exception and calls == [4]  # the same attributions, grouped
    overlay = overlay_html(at)
    assert overlay.count("data-pos=") == len(words) + 2  # and <s>, </s>
    shown = units(analysis.tokens, attr.scores, unit="word")
    top = _table(at, "t_words_positive")
    assert list(top.columns) == ["word", "position", "attribution"]
    assert top["attribution"].iloc[0] == pytest.approx(shown.values.max())  # a word's sum of its pieces
    assert top["position"].iloc[0] == shown.positions[shown.values.argmax()]
    # one selection: a piece chosen in the number box outlines its word; a click on a word picks its first token
    mid = next(p for p in range(analysis.n) if words.word_of_token[p] >= 0 and p not in words.starts)
    first = int(words.starts[words.word_of_token[mid]])
    at.number_input(key=K.page(P, "pos")).set_value(mid).run()
    assert overlays(at)[0]["selected"] == first
    assert f'lv-sel" data-pos="{first}"' in overlay_html(at)
    assert f"position {mid:,} of" in _metric(at, "Token").delta  # the token itself stays selected
    word = int(words.starts[len(words) // 2])
    click_token(at, word)
    assert not at.exception and at.number_input(key=K.page(P, "pos")).value == word
    assert overlays(at)[0]["selected"] == word and calls == [4]


def test_dataset_wide_table(demo, calls):
    """The table is the local store's aggregation, computed on a click for the first N documents; its numbers
    equal lv.dataset_attributions for the class shown (another store: IG of that class, not of the predicted
    one); the mask and minimum-documents filters read the same store; fewer documents and a new session compute
    nothing."""
    import longviz_core as lv

    at = _open(max_tokens=128, steps=2)
    at.button(key=K.page(P, "run")).click().run()
    at.slider(key=K.page(P, "docs")).set_value(2)
    at.selectbox(key=K.page(P, "ds_steps")).set_value("custom").run()
    at.number_input(key=K.page(P, "ds_steps_n")).set_value(2).run()
    assert any("0 of the first 2 documents are computed" in i.value for i in at.info)
    at.button(key=K.page(P, "run_dataset")).click().run()
    assert not at.exception
    n_after = len(calls)
    assert n_after <= 3  # the page's document plus at most two dataset documents (one may be the same)
    assert any("2 of the first 2 documents" in c.value and "local result store" in c.value for c in at.caption)
    tables = [d.value for d in at.dataframe if "mean_attribution" in d.value.columns]
    assert len(tables) == 2 and (tables[0]["n_docs"] >= 1).all()
    assert list(tables[0].columns) == ["token", "mean_attribution", "n_docs", "occurrences", "mean_per_occurrence",
                                       "total_attribution"]
    class_name = _metric(at, "Attribution label").value.replace("\u200b", "")  # the tile's wrap points out
    title = f"Dataset-wide attribution for class '{class_name}' (IG, L2-normalised per document)"
    assert sum(title in m.value for m in at.markdown) == 2  # the positive and the negative table
    shown_first = tables[0].reset_index(drop=True)

    # the mask toggle applies to the dataset table; the minimum-documents filter hides rare types; no new IG
    at.toggle(key=K.page(P, "mask")).set_value(True).run()
    at.number_input(key=K.page(P, "ds_min_docs")).set_value(2).run()
    assert not at.exception and len(calls) == n_after
    tables = [d.value for d in at.dataframe if "mean_attribution" in d.value.columns]
    assert len(tables) == 2 and all((t["n_docs"] == 2).all() for t in tables)
    shown = set(pd.concat(tables)["token"])
    assert shown and not shown & {"the", "of", "and", "a", ",", "."}
    assert any("stopwords and non-alphanumeric tokens masked" in c.value for c in at.caption)
    at.slider(key=K.page(P, "docs")).set_value(1).run()  # fewer documents than the filter asked for
    assert not at.exception and at.number_input(key=K.page(P, "ds_min_docs")).value == 1
    again = _open(max_tokens=128, steps=2)
    again.slider(key=K.page(P, "docs")).set_value(2)
    again.selectbox(key=K.page(P, "ds_steps")).set_value("custom").run()
    again.number_input(key=K.page(P, "ds_steps_n")).set_value(2).run()
    assert len([d for d in again.dataframe if "mean_attribution" in d.value.columns]) == 2
    assert len(calls) == n_after

    model = load_model("demo")
    target = next(i for i, n in model.id2label.items() if n == class_name)
    full = lv.dataset_attributions(model, _demo_texts(2), target, 2, max_tokens=128).table
    # IG of the other class is the negation: the same sums up to float32 rounding of the scores
    pd.testing.assert_frame_equal(shown_first, full[full["mean_attribution"] > 0].head(10).reset_index(drop=True),
                                  rtol=1e-5, atol=1e-7)


def _current(at):
    """The model and analysis the page shows by default: document 0 of the demo dataset (loaded afresh: the
    cache keys are content fingerprints, so an equal copy finds the page's entries)."""
    model = load_model("demo")
    return model, analyze(model, _demo_texts(1)[0], 200)


def _demo_texts(n):
    from longviz_core import load_dataset

    return load_dataset("demo", id2label=load_model("demo").id2label)["text"].head(n).tolist()


def test_tiny_model_pasted_text_and_file_dataset(calls, tmp_path):
    """Without the demo: a tiny checkpoint, a pasted document and a CSV dataset (fast; same widgets)."""
    import pandas as pd

    from tiny import make_tiny_longformer, text_of

    model_dir = make_tiny_longformer(tmp_path / "tiny", initializer_range=0.3)
    csv = tmp_path / "docs.csv"
    pd.DataFrame({"text": [text_of(30), text_of(50)], "label": [0, 1]}).to_csv(csv, index=False)
    at = _open(max_tokens=128, steps=3, **{K.MODEL: str(model_dir), K.DOC_MODE: "pasted text",
                                          K.PASTED: text_of(40), K.DATASET_KIND: "file path",
                                          K.DATASET_PATH: str(csv)})
    at.button(key=K.page(P, "run")).click().run()
    assert not at.exception and calls == [3]
    assert _metric(at, "True label").value == "—"
    overlay = overlay_html(at)
    assert "&lt;s&gt;" in overlay and "hsl(" in overlay
    at.selectbox(key=K.page(P, "ds_steps")).set_value("custom").run()
    at.number_input(key=K.page(P, "ds_steps_n")).set_value(2).run()
    at.button(key=K.page(P, "run_dataset")).click().run()
    assert not at.exception and calls == [3, 2, 2]
    tables = [d.value for d in at.dataframe if "mean_attribution" in d.value.columns]
    assert len(tables) == 2 and set(tables[0]["n_docs"]) <= {1, 2}
