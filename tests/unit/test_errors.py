"""One error contract: every entry point a user reaches (through the app or from Python) answers bad input with a
typed LongvizError whose message says what to do, never a bare ValueError. The typed errors that replace a
ValueError are still ValueErrors, so callers that caught ValueError keep working."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import longviz_core as lv
from longviz_core.attribution import _inputs
from longviz_core.views import agreement as ag
from longviz_core.views import attribution_tables as tables
from longviz_core.views import pooling
from support.oracles import synthetic_bands
from tiny import text_of

PROBS = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])


@pytest.fixture(scope="module")
def analysis(tiny_longformer):
    return lv.analyze(tiny_longformer, text_of(40), max_tokens=64)


def _raises(error, fix, fn, *args, **kwargs):
    """fn(*args, **kwargs) raises exactly `error` (a LongvizError) and the message contains `fix`."""
    with pytest.raises(error) as info:
        fn(*args, **kwargs)
    assert type(info.value) is error, type(info.value)
    assert isinstance(info.value, lv.LongvizError) and isinstance(info.value, ValueError)
    assert fix in str(info.value), str(info.value)
    return str(info.value)


# --------------------------------------------------------------------------- the sidebar's document choice
def test_a_random_false_negative_on_an_unlabelled_dataset_says_to_choose_a_labelled_one():
    for how in ("false negative", "false positive"):
        msg = _raises(lv.DatasetError, "choose a labelled dataset", lv.pick_document, PROBS, None, how)
        assert how in msg and "by index" in msg


def test_an_unknown_document_choice_lists_the_choices():
    msg = _raises(lv.SettingsError, "choose one of", lv.pick_document, PROBS, [0, 1, 0], "false negatives")
    assert all(c in msg for c in ("'false negative'", "'false positive'", "'most confident positive'"))
    assert lv.pick_document(PROBS, None, "most confident positive") == 1  # needs no labels


# --------------------------------------------------------------------------------------- attribution
def test_integrated_gradients_settings(tiny_longformer, analysis):
    ig = lv.integrated_gradients
    _raises(lv.AttributionError, "at least 2", ig, tiny_longformer, analysis, n_steps=1)
    msg = _raises(lv.AttributionError, "method must be one of", ig, tiny_longformer, analysis, method="trapezoid")
    assert "gausslegendre" in msg
    msg = _raises(lv.AttributionError, "precision must be one of", ig, tiny_longformer, analysis, precision="fp8")
    assert "bf16" in msg and "fp32" in msg
    _raises(lv.AttributionError, "class index in [0, 1]", ig, tiny_longformer, analysis, target=2)
    _raises(lv.AttributionError, "positive number", ig, tiny_longformer, analysis, tolerance=0)
    _raises(lv.AttributionError, "raise max_steps or lower n_steps", ig, tiny_longformer, analysis, n_steps=64,
            max_steps=32)
    _raises(lv.AttributionError, "or None for automatic", ig, tiny_longformer, analysis, internal_batch_size=0)


def test_integrated_gradients_of_another_models_analysis(tiny_longformer, tiny_bert):
    other = lv.analyze(tiny_bert, text_of(20), max_tokens=32)
    _raises(lv.AttributionError, "analyze the text with this model", lv.integrated_gradients, tiny_longformer, other)
    _raises(lv.AttributionError, "load_model", lv.integrated_gradients, "demo", other)
    _raises(lv.AttributionError, "from analyze", lv.integrated_gradients, tiny_longformer, text_of(5))
    _raises(lv.AttributionError, "target=", lv.integrated_gradients, tiny_longformer, other.encoded)


def test_time_estimates(tiny_longformer):
    limit = tiny_longformer.max_tokens
    _raises(lv.AttributionError, f"ask for at most {limit} tokens", lv.estimate_ig_seconds, tiny_longformer,
            limit + 1, 8)
    _raises(lv.AttributionError, "n_steps (captum's minimum is 2) must be at least 2", lv.estimate_ig_seconds,
            tiny_longformer, 100, 1)
    _raises(lv.AttributionError, "precision must be one of", lv.estimate_ig_seconds, tiny_longformer, 100, 8, "fp8")


def test_a_model_without_embeddings_cannot_be_attributed():
    import torch

    from longviz_core.model.families import Family

    model = SimpleNamespace(model=torch.nn.Linear(2, 2), family=Family(SimpleNamespace()))
    _raises(lv.AttributionError, "no embeddings module", _inputs.embeddings_layer, model)


def test_attribution_tables(analysis):
    scores = np.linspace(-1, 1, analysis.n)
    _raises(lv.SettingsError, "'positive' or 'negative'", lv.top_attributions, analysis.tokens, scores, 5, "both")
    _raises(lv.AttributionError, "scores of one document", lv.top_attributions, analysis.tokens, scores[:-1])
    _raises(lv.SettingsError, "build_mask(tokens)", lv.attribution_by_token, analysis.tokens, scores,
            np.zeros(3, bool))


def test_token_detail_position_and_length(tiny_longformer, analysis):
    attr = lv.integrated_gradients(tiny_longformer, analysis, n_steps=4, use_cache=False)
    _raises(lv.SelectionError, f"positions 0..{analysis.n - 1}", tables.token_detail, analysis, attr, analysis.n)
    shorter = lv.analyze(tiny_longformer, text_of(10), max_tokens=64)
    _raises(lv.AttributionError, "attribute this document's analysis", tables.token_detail, shorter, attr, 0)


# ------------------------------------------------------------------------------ layer / head selections
def test_layer_and_head_selections():
    bands = synthetic_bands(layers=2, heads=3)
    msg = _raises(lv.SelectionError, "layers 0..1", bands.received, [2])
    assert "[2]" in msg
    _raises(lv.SelectionError, "heads 0..2", bands.received, None, [-1])
    _raises(lv.SelectionError, "or None for all 3", bands.received, None, [])
    _raises(lv.SelectionError, "heads 0..2", bands.dense, 0, 3)
    _raises(lv.SettingsError, "shape (2, 3)", bands.received, None, None, np.ones((3, 2)))
    _raises(lv.SettingsError, "finite weight", lv.head_weights, 2, 3, scale=np.full((2, 3), np.nan))


def test_token_counts_selection(analysis):
    _raises(lv.CountsError, "layers 0..1", lv.token_counts, analysis, layers=[5])


# ---------------------------------------------------------------------------------------- heatmap grid
def test_pooling():
    bands = synthetic_bands(layers=2, heads=2)
    _raises(pooling.PoolingError, "1..1024", lv.pool_attention, bands, 0)
    _raises(pooling.PoolingError, "analyze(model, text).attention", lv.pool_attention, np.zeros((2, 2)))
    _raises(pooling.PoolingError, "at least one", lv.pool_dataset, [])
    other = synthetic_bands(layers=1, heads=2)
    _raises(pooling.PoolingError, "one model", lv.pool_dataset, [bands, other], 8)
    pooled = lv.pool_attention(bands, 8)
    _raises(pooling.PoolingError, "compute it for this model", lv.normalised_maps, pooled, np.ones((3, 3)))
    _raises(pooling.PoolingError, "absolute value", lv.normalised_maps, pooled, -np.ones((2, 2)))
    _raises(lv.SelectionError, f"cells 0..{pooled.grid - 1}", pooling.block_tokens, pooled, pooled.grid)
    dataset = lv.pool_dataset([bands], 8)
    _raises(pooling.PoolingError, "one document's grid", pooling.block_tokens, dataset, 0)


# --------------------------------------------------------------------------------------------- agreement
def test_agreement_settings(analysis):
    _raises(lv.SelectionError, "0 <= lo <= hi < 4", ag.attention_sources, 4, (3, 1))
    msg = _raises(lv.SimilarityError, "choose from", ag.mask_for, analysis.tokens, ["stopword"])
    assert "'stopwords'" in msg
    scores = np.linspace(-1, 1, analysis.n)
    _raises(lv.SimilarityError, "one of no, zero, drop", lv.head_agreement, analysis, scores, mode="mask")
    _raises(lv.SimilarityError, "an attribution of the same analysis", lv.agreement_table, analysis, scores[:-1])
    _raises(lv.SimilarityError, "mask_for or build_mask", lv.top_sets, analysis.tokens,
            analysis.attention.received(), scores, np.zeros(3, bool), "zero")


# ------------------------------------------------------------------------------------------------ masks
def test_masks():
    _raises(lv.SettingsError, "analyze(model, text).tokens", lv.build_mask, "Ġthe Ġcat")
    _raises(lv.SettingsError, "token 1 is int", lv.build_mask, ["Ġthe", 3])
    _raises(lv.SettingsError, "tokenizer.all_special_tokens", lv.special_mask, ["<s>"], "<s>")
    _raises(lv.SettingsError, "None to detect it", lv.stopword_mask, ["Ġthe"], "bpe")


# ------------------------------------------------------------------------------------------ head importance
def test_head_importance_examples(tiny_longformer):
    df = pd.DataFrame({"text": [text_of(10)], "label": [1]})
    _raises(lv.HeadImportanceError, "must be at least 1", lv.head_importance, tiny_longformer, df, 64, 0)


# ----------------------------------------------------------------------------- a separately installed package
def test_rbo_missing_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "rbo", None)  # `import rbo` raises ImportError
    attention, attribution = np.array([0.5, 0.2, 0.9, 0.1]), np.array([0.1, -0.4, 0.8, 0.05])
    with pytest.raises(lv.MissingDependencyError, match=r"pip install --no-deps rbo==0\.1\.3") as info:
        lv.compare(attention, attribution)
    assert isinstance(info.value, lv.LongvizError) and isinstance(info.value, ImportError)
    cosine = lv.compare_many(attention[None, None], attribution, metric="cosine")  # the other metrics need no rbo
    assert cosine.shape == (1, 1) and np.isfinite(cosine).all()
