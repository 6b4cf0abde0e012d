"""AppTest of the document map (pages/_ui/document_map.py) on the three pages that show it above an overlay
(Summed attention, Attribution, Explainers), on the demo: the strip and the top sentences are drawn, their scores
are the page's own scores summed per sentence (a loop over the tokens), and a row chosen selects that sentence's
first token, which the overlay outlines (and, in the browser, scrolls to)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

import longviz_core as lv
from longviz_core.attribution import ig as A
from longviz_core.views.masking import build_mask
from pages._ui.keys import K
from support.apps import open_page, overlay_html, overlays

MAX_TOKENS = 256
pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _open(name: str, **state):
    at = open_page(name, MAX_TOKENS, **{K.DOC_INDEX: 0, **state})
    _ok(at)
    return at


def _top(at, page_name: str):
    return next(d for d in at.dataframe if d.key == K.page(page_name, "map_top")).value


def _select_row(at, page_name: str, row: int):
    """Rerun as the browser does after a click on row `row` of the top sentences (AppTest cannot click a table
    row: the selection goes in as the table's widget state)."""
    frame = next(d for d in at.dataframe if d.key == K.page(page_name, "map_top")).proto
    states = at._tree.get_widget_states()
    selection = {"selection": {"rows": [row], "columns": [], "cells": []}}
    kept = [w for w in states.widgets if w.id != frame.id]
    del states.widgets[:]
    states.widgets.extend([*kept, WidgetState(id=frame.id, string_value=json.dumps(selection))])
    at._run(states)
    _ok(at)
    return at


def _check_map(at, page_name: str, analysis, scores, mask=None):
    """The map's strip is drawn and its top sentences are the sentences with the largest sums of `scores` over
    their unmasked tokens, high to low; their first tokens, best first."""
    titles = [json.loads(c.proto.spec)["title"]["text"] for c in at.get("vega_lite_chart")
              if "Document map" in c.proto.spec]
    seg = lv.segment(analysis, "sentence")
    assert titles == [f"Document map: {len(seg):,} sentences over {analysis.n:,} tokens"]
    sums = [sum(scores[p] for p in range(a, b) if mask is None or not mask[p]) for a, b in seg.spans]
    best = sorted((u for u in range(len(seg)) if sums[u] > 0), key=lambda u: -sums[u])[:5]
    top = _top(at, page_name)
    assert top["rank"].tolist() == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(top.iloc[:, 1], [sums[u] for u in best], rtol=1e-9)
    texts = [" ".join(seg.texts[u].replace("\n", "↵").split()) for u in best]
    assert all(text.startswith(shown.rstrip("…")) for shown, text in zip(top["sentence"], texts))
    return [seg.spans[u][0] for u in best]


def test_summed_attention_map_brings_the_overlay_to_a_sentence(demo, demo_model, demo_dataset):
    at = _open("attention_overlay")
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], MAX_TOKENS)
    L, H = demo_model.num_layers, demo_model.num_heads
    received = analysis.attention.received([L - 1], None, None) / H  # the page's default: the last layer
    mask = build_mask(analysis.tokens, special_tokens=("<s>", "</s>"))  # masked by default
    top = _check_map(at, "overlay", analysis, received, mask)
    assert overlays(at)[0]["selected"] is None  # nothing chosen yet
    chosen = top[2]
    _select_row(at, "overlay", 2)
    assert overlays(at)[0]["selected"] == chosen and f'lv-sel" data-pos="{chosen}"' in overlay_html(at)
    assert at.session_state[K.page("overlay", "map_top")]["selection"]["rows"] == [2]
    at.radio(key=K.page("overlay", "preset")).set_value("all layers (averaged)").run()  # other scores: kept
    _ok(at)
    assert overlays(at)[0]["selected"] == chosen


def test_attribution_map_selects_the_token_everywhere(demo, demo_model, demo_dataset, tmp_path, monkeypatch):
    from longviz_core import _disk

    monkeypatch.setattr(_disk, "cache_folder", lambda name, cache_dir=None: tmp_path / name)
    at = _open("attribution", **{K.page("attribution", "steps"): "custom", K.page("attribution", "steps_n"): 4})
    at.button(key=K.page("attribution", "run")).click().run()
    _ok(at)
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], MAX_TOKENS)
    attr = A.cached_attribution(demo_model, analysis, n_steps=4)
    top = _check_map(at, "attribution", analysis, attr.scores)
    chosen = top[1]
    assert at.number_input(key=K.page("attribution", "pos")).value != chosen
    _select_row(at, "attribution", 1)
    assert at.number_input(key=K.page("attribution", "pos")).value == chosen  # the page's one selection
    assert overlays(at)[0]["selected"] == chosen and at.query_params["token"] == str(chosen)
    token = next(m for m in at.metric if m.label == "Token")
    assert f"position {chosen:,} of" in token.delta


def test_explainers_map_over_the_chosen_explainers_overlay(demo, demo_model, demo_dataset, tmp_path, monkeypatch):
    from longviz_core import _disk

    monkeypatch.setattr(_disk, "cache_folder", lambda name, cache_dir=None: tmp_path / name)
    P = "explainers"
    at = _open(P, **{K.page(P, "methods"): ["grad_x_input", "raw_attention", "random"], K.page(P, "seeds"): 2})
    at.button(key=K.page(P, "run")).click().run()
    _ok(at)
    assert at.radio(key=K.page(P, "map_method")).options == ["Gradient × Input", "RawAtt (last layer)"]
    analysis = lv.analyze(demo_model, demo_dataset["text"].iloc[0], MAX_TOKENS)
    for method in ("grad_x_input", "raw_attention"):
        at.radio(key=K.page(P, "map_method")).set_value(method).run()
        _ok(at)
        shown = lv.explain(demo_model, analysis, method)
        top = _check_map(at, P, analysis, shown.scores)
    chosen = top[0]
    _select_row(at, P, 0)
    (overlay,) = overlays(at)
    assert overlay["selected"] == chosen and f'data-pos="{chosen}"' in overlay["html"]
