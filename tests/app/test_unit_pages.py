"""The sidebar's Unit through the app (AppTest on the demo, short documents): `?unit=sentence` gives the Attribution
page a row per sentence, equal to the document's sentences and their summed IG scores computed here; every page
renders at every unit, its per-token views read by that unit; `?unit=` with another value falls back to tokens with
a notice; a link to an overlay page's old unit opens that unit in the sidebar."""
from __future__ import annotations

import numpy as np
import pytest

import longviz_core as lv
from longviz_core import _disk
from longviz_core.attribution import ig as A
from pages._ui import ig
from pages._ui.keys import K
from support.apps import app_test, overlay_html, page, settle

MAX_TOKENS, STEPS = 96, 2
PAGES = ("document", "heatmap_grid", "token_counts", "attention_overlay", "attribution", "agreement",
         "faithfulness", "explainers")
RUN_BUTTONS = ("attribution.run", "similarity.run_ig", "faithfulness.run_ig", "explainers.run")
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")


@pytest.fixture(scope="module")
def private_cache(demo, tmp_path_factory):
    """IG and the scans' caches in a fresh folder for this module (the demo model stays in the shared cache; IG,
    the same at every unit, is computed once), IG's steps capped."""
    real, folder = _disk.cache_folder, tmp_path_factory.mktemp("unit-pages")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_disk, "cache_folder",
                   lambda name, cache_dir=None: real(name, cache_dir) if cache_dir else folder / name)
        mp.setattr(ig, "max_ig_steps", lambda: STEPS)
        mp.delenv("LONGVIZ_STORE_DIR", raising=False)
        mp.delenv("LONGVIZ_CONFIG", raising=False)
        yield folder


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _linked(query: dict, name: str = "attribution"):
    at = app_test()
    at.query_params = {"max_tokens": str(MAX_TOKENS), **query}
    at.switch_page(page(name))
    at.run()
    _ok(at)
    return at


def test_a_link_with_unit_sentence_lists_sentences_on_the_attribution_page(private_cache):
    at = _linked({"unit": "sentence"})
    assert at.selectbox(key=K.UNIT).value == "sentence"
    at.button(key="attribution.run").click().run()
    _ok(at)
    model = lv.load_model("demo")
    analysis = lv.analyze(model, lv.load_dataset("demo")["text"].iloc[0], MAX_TOKENS)
    sentences = lv.segment(analysis, "sentence")
    attr = A.integrated_gradients(model, analysis, None, STEPS, use_cache=False)  # computed here, not the page's
    sums = lv.aggregate(attr.scores, sentences)
    assert len(sentences) >= 3
    top = next(d for d in at.dataframe if d.key == K.page("attribution", "t_sentences_positive")).value  # (the
    # document map's table comes first)
    assert list(top.columns) == ["sentence", "position", "attribution"]
    order = [u for u in np.argsort(-sums, kind="stable") if sums[u] > 0][:10]
    assert top["position"].tolist() == [sentences.spans[u][0] for u in order]
    assert top["sentence"].tolist() == [sentences.texts[u].strip().replace("\n", "↵") for u in order]
    assert top["attribution"].to_numpy() == pytest.approx(sums[order], rel=1e-4, abs=1e-6)
    # the overlay colours whole sentences: one box per sentence and one per special token
    assert overlay_html(at).count("data-pos=") == len(sentences) + 2


@pytest.mark.parametrize("unit", lv.UNITS)
def test_every_page_renders_at_every_unit(private_cache, unit):
    at = _linked({"unit": unit, "similarity.scale": "false",  # (head importance: not what is tested, and slow)
                  "explainers.methods": ["ig", "grad_x_input", "occlusion", "random"]}, "document")
    assert at.selectbox(key=K.UNIT).value == unit
    removed = "text tokens" if unit == "token" else f"{unit}s"
    for name in PAGES:
        at.switch_page(page(name)).run()
        for key in RUN_BUTTONS:
            if any(b.key == key for b in at.button):
                at.button(key=key).click().run()
        settle(at)
        _ok(at)
        assert at.selectbox(key=K.UNIT).value == unit, name  # the one unit, on every page
        if name == "faithfulness":  # the deletion test removed whole units
            m = len(lv.segment(_analysis(), unit)) if unit != "token" else _analysis().n - 2
            assert any(f"{m:,} removable {removed}" in c.value for c in at.caption), [c.value for c in at.caption]


def _analysis():
    return lv.analyze(lv.load_model("demo"), lv.load_dataset("demo")["text"].iloc[0], MAX_TOKENS)


def test_another_unit_in_the_link_falls_back_to_tokens_with_a_notice(private_cache):
    at = _linked({"unit": "chapter"})
    assert at.selectbox(key=K.UNIT).value == "token" and "unit" not in at.query_params
    assert any("unit" in t.value and "showing token instead" in t.value for t in at.toast), [t.value for t in at.toast]


def test_a_link_to_an_overlay_pages_old_unit_opens_it_in_the_sidebar(private_cache):
    at = _linked({"attribution.unit": "words"})
    assert at.selectbox(key=K.UNIT).value == "word" and "attribution.unit" not in at.query_params
