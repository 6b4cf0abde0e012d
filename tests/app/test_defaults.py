"""Defaults that do not surprise (issue 15): every page says when the text was truncated; masking numbers and
extra stopwords are sidebar options in the URL, off by default (the paper's rule)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from longviz_core import cache
from longviz_core.views.masking import build_mask
from pages._ui.keys import K
from tests.support.apps import app_test, overlay_html, page

PAGES = ("document", "heatmap_grid", "token_counts", "attention_overlay")
MAX_TOKENS = 128


def _ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(name: str):
    at = app_test()
    at.session_state[K.MAX_TOKENS] = MAX_TOKENS
    at.run()
    at.switch_page(page(name)).run()
    _ok(at)
    return at


@pytest.mark.parametrize("name", PAGES)
def test_every_page_says_the_text_was_truncated(demo, name):
    at = _open(name)
    text = cache.get_dataset("demo")["text"].iloc[0]
    analysis = cache.get_analysis(cache.get_model("demo"), text, MAX_TOKENS)
    total = analysis.encoded.n_text_tokens_original
    assert total > MAX_TOKENS - 2
    assert [w.value.split(" (")[0] for w in at.warning if w.value.startswith("Truncated")] == [
        f"Truncated to {MAX_TOKENS - 2:,} of {total:,} text tokens"]


def _masked(at) -> np.ndarray:
    body = overlay_html(at)
    spans = re.findall(r'data-pos="(\d+)" title="[^"]*?(\(masked\))?"', body)
    out = np.zeros(len(spans), bool)
    for pos, masked in spans:
        out[int(pos)] = bool(masked)
    return out


def test_numbers_and_extra_stopwords_are_off_by_default_and_in_the_url(demo):
    at = _open("attention_overlay")
    text = cache.get_dataset("demo")["text"].iloc[0]
    tokens = cache.get_analysis(cache.get_model("demo"), text, MAX_TOKENS).tokens
    assert np.array_equal(_masked(at), build_mask(tokens))  # the paper's rule
    at.sidebar.toggle(key=K.MASK_NUMBERS).set_value(True).run()
    at.sidebar.text_input(key=K.EXTRA_STOPWORDS).set_value("Et, al ,").run()
    _ok(at)
    wanted = build_mask(tokens, numbers=True, extra_stopwords=("et", "al"))
    assert wanted.sum() > build_mask(tokens).sum()
    assert np.array_equal(_masked(at), wanted)
    linked = app_test()  # a link carries both options
    linked.query_params = {K.MAX_TOKENS: str(MAX_TOKENS), K.MASK_NUMBERS: "true", K.EXTRA_STOPWORDS: "et,al"}
    linked.run()
    linked.switch_page(page("attention_overlay")).run()
    _ok(linked)
    assert linked.sidebar.toggle(key=K.MASK_NUMBERS).value is True
    assert np.array_equal(_masked(linked), wanted)


@pytest.mark.parametrize("seconds, expected", [(1.0, "model"), (1e6, "default")])
def test_max_tokens_defaults_to_the_models_maximum_when_it_fits_the_budget(demo, monkeypatch, seconds, expected):
    import longviz_core as lv
    from longviz_core import attribution

    monkeypatch.setattr(attribution, "estimate_ig_seconds", lambda *a, **kw: seconds)
    cache.memory_cache().clear()  # the default is worked out once per model and process
    try:
        at = app_test()
        at.run()
        _ok(at)
        assert at.sidebar.number_input(key=K.MAX_TOKENS).value is None  # empty = automatic
        model = cache.get_model("demo")
        limit = model.max_tokens if expected == "model" else min(lv.DEFAULT_MAX_TOKENS, model.max_tokens)
        analysed = int(next(m.value for m in at.metric if m.label == "Tokens analysed").replace(",", ""))
        text_tokens = int(next(m.value for m in at.metric if m.label == "Text tokens").replace(",", ""))
        assert analysed == min(text_tokens + 2, limit)
    finally:
        cache.memory_cache().clear()
