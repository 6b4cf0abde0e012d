"""Longformers with a different attention window per layer (`attention_window=[16, 8]` and `[8, 16, 32]`, global
<s>): loading, the views built on the bands, Integrated Gradients and the precompute store, each against an
independent oracle (the dense recomputation of test_bands, brute-force top-k, captum run as the notebook runs
it, plain forwards). test_bands checks the bands themselves against the dense recomputation."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import ModelLoadError, analyze, export, load_dataset, load_model
from longviz_core.attribution import cost, integrated_gradients
from longviz_core.attribution._inputs import padded_length
from longviz_core.dataset.kinds import Settings
from longviz_core.dataset.run import precompute
from longviz_core.dataset.store import ResultStore, doc_id_of
from longviz_core.model.topk import topk_indices
from longviz_core.views.pooling import pool_attention, pool_dataset
from support.oracles import assert_cells_are_block_means, brute_topk, oracle_longformer
from tiny import WORDS, text_of

pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")


def _full_windows(model) -> list[int]:
    return list(model.model.config.attention_window)  # per layer, as transformers keeps it


# ------------------------------------------------------------------------------------------ loading
def test_loaded_model_keeps_every_layers_window(layered_longformer):
    full = _full_windows(layered_longformer)
    assert len(set(full)) > 1
    assert layered_longformer.attention_windows == tuple(w // 2 for w in full)
    assert layered_longformer.attention_window == max(full) // 2  # what transformers pads to (twice this)
    meta = json.loads(export.metadata_json(export.run_metadata(layered_longformer, {})))
    assert meta["model"]["attention_windows"] == [w // 2 for w in full]
    assert meta["model"]["attention_window"] == max(full) // 2


@pytest.mark.parametrize("windows,reason", [([12, 8], "not a multiple of every layer's window"),
                                            ([16, 7], "positive even window per layer"),
                                            ([16, 8, 8], "one positive even window per layer")])
def test_windows_the_model_cannot_run_are_refused_with_the_reason(tiny_longformer_dir, tmp_path, windows, reason):
    """transformers pads to a multiple of the largest window; [12, 8] then fails inside the model on most
    lengths (12 tokens: 'Sequence length should be multiple of 8'), odd or missing windows fail at load."""
    path = tmp_path / "model"
    shutil.copytree(tiny_longformer_dir, path)
    config = json.loads((path / "config.json").read_text())
    config["attention_window"] = windows
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=reason) as err:
        load_model(str(path))
    assert str(windows) in str(err.value)


def test_one_window_in_the_config_means_every_layer(tiny_longformer):
    assert tiny_longformer.attention_windows == (4, 4) and tiny_longformer.attention_window == 4


# ------------------------------------------------------------------------------------------ views
@pytest.fixture(scope="module")
def doc(layered_longformer):
    analysis = analyze(layered_longformer, text_of(37), max_tokens=layered_longformer.max_tokens)
    assert analysis.n % 2 == 1 and analysis.n % max(_full_windows(layered_longformer)) != 0
    return analysis


@pytest.mark.parametrize("k", [1, 5, 20])
def test_topk_lists_equal_brute_force(doc, k):
    """Algorithms 1 and 3 from the bands equal sorting each dense row / column, so the zero columns outside a
    narrower layer's window are never listed; k = 20 exceeds the 9 band keys of a w = 4 layer."""
    bands = doc.attention
    topk = topk_indices(bands, k=k)
    for direction in ("attended", "attending"):
        got = topk.lists(direction)
        for layer in range(bands.num_layers):
            for head in range(bands.num_heads):
                dense = bands.dense(layer, head)
                ref = brute_topk(dense if direction == "attended" else dense.T, k)
                for i, listed in enumerate(ref):
                    assert got[layer, head, i, :k].tolist() == listed + [-1] * (k - len(listed)), (direction, i)


@pytest.mark.parametrize("grid", [7, 64])
def test_pooled_cells_are_block_means(doc, grid):
    assert_cells_are_block_means(doc.attention, pool_attention(doc.attention, grid))


def test_views_see_each_layers_own_window(doc, layered_longformer):
    """The oracle's matrices (each layer's window) and the bands' agree on what lies beyond a layer's window:
    nothing, apart from the global <s> column."""
    n = doc.n
    far = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])  # (n, n) distance query - key
    for layer, w_l in enumerate(doc.attention.windows):
        ref = oracle_longformer(layered_longformer, doc, layer)  # (heads, n, n)
        for head in range(doc.attention.num_heads):
            dense = doc.attention.dense(layer, head)
            beyond = (far > w_l)
            beyond[:, 0] = beyond[0, :] = False  # the global <s> row and column
            assert not dense[beyond].any() and not ref[head][beyond].any()
            assert dense[far == w_l].all()  # the window's edge is used: the band is not narrower than w_l


# ------------------------------------------------------------------------------------------ IG
def _p_target(model, ids, enc, target):
    """A plain forward at the document's length (the model pads it itself)."""
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long)[None]  # noqa: E731
    with torch.no_grad():
        logits = model.model(input_ids=t(ids), attention_mask=t(np.ones(len(ids))), position_ids=t(enc.position_ids),
                             global_attention_mask=t(enc.global_mask)).logits
    return float(torch.softmax(logits, -1)[0, target])


@pytest.mark.slow
def test_integrated_gradients_match_the_notebooks_captum_call(layered_longformer, doc, tmp_path):
    """captum's LayerIntegratedGradients as the notebook calls it, on the unpadded input: the model pads to a
    multiple of its largest window and the attributions come back at that length; ours are sliced to n.
    Compared as directions (each divided by its L2 norm) plus the convergence delta and the endpoints, which
    together fix the raw sums; completeness F(x) - F(x') = sum of the raw scores holds to the delta."""
    from captum.attr import LayerIntegratedGradients

    model, enc, target, steps = layered_longformer, doc.encoded, doc.predicted, 48
    net = model.model

    def custom_forward(inputs, position_ids=None, attention_mask=None):
        return torch.softmax(net(inputs, position_ids=position_ids, attention_mask=attention_mask).logits, dim=1)

    lig = LayerIntegratedGradients(custom_forward, net.longformer.embeddings)
    t = lambda a: torch.as_tensor(a, dtype=torch.long)[None]  # noqa: E731
    ref, ref_delta = lig.attribute(
        inputs=t(enc.input_ids), baselines=t(enc.baseline_ids), return_convergence_delta=True,
        additional_forward_args=(t(enc.position_ids), t(np.ones(enc.n))), target=target, n_steps=steps,
        internal_batch_size=8,
    )
    padded = -(-enc.n // max(_full_windows(model))) * max(_full_windows(model))
    assert ref.shape[1] == padded == padded_length(model, enc.n) > enc.n
    ref_scores = ref.sum(dim=-1)[0].double().numpy()  # (n_padded,)
    assert not ref_scores[enc.n:].any()  # the padding has the same embedding in the input and the baseline
    ref_scores = ref_scores[: enc.n]

    ours = integrated_gradients(model, doc, n_steps=steps, internal_batch_size=5, cache_dir=tmp_path)
    assert ours.scores.shape == (enc.n,) and ours.scores[0] == 0.0 and ours.scores[-1] == 0.0
    # unit vectors: float32 noise relative to the norm (1)
    np.testing.assert_allclose(ours.scores / np.linalg.norm(ours.scores), ref_scores / np.linalg.norm(ref_scores),
                               rtol=0, atol=1e-5)
    p_x, p_b = _p_target(model, enc.input_ids, enc, target), _p_target(model, enc.baseline_ids, enc, target)
    assert ours.prob_input == pytest.approx(p_x, rel=1e-5) and ours.prob_baseline == pytest.approx(p_b, rel=1e-5)
    assert abs(p_x - p_b) > 0.05, "the test model is too flat for completeness to mean anything"
    # both deltas are float32 sums over the tokens: relative to the sum of the magnitudes summed
    assert ours.delta == pytest.approx(float(ref_delta), abs=1e-5 * np.abs(ref_scores).sum())
    assert abs(ref_scores.sum() - (p_x - p_b)) <= 0.01 * abs(p_x - p_b)  # completeness, by captum's own sums


def test_memory_per_step_sums_each_layers_band(layered_longformer):
    cfg = layered_longformer.model.config
    full = _full_windows(layered_longformer)
    n_pad = -(-45 // max(full)) * max(full)
    d, f, heads = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads
    # per layer: a dozen (n, d), two (n, f) and three copies of its own (n, heads, w_full + 2) scores
    per_layer = [n_pad * 4 * (12 * d + 2 * f + 3 * heads * (w + 2)) for w in full]
    assert cost._bytes_per_step(layered_longformer, 45, "fp32") == sum(per_layer)


# ------------------------------------------------------------------------------------------ store
def test_precompute_attention_store(layered_longformer, tmp_path):
    """The store's per-document received attention equals the dense oracle's column sums; its dataset grid
    equals pool_dataset over fresh analyses."""
    model, max_tokens = layered_longformer, 100
    long = " ".join(np.random.default_rng(1).choice(WORDS, size=200))
    texts = [text_of(1), text_of(37), long]  # one text token, an odd length, truncated to max_tokens
    csv = tmp_path / "data.csv"
    pd.DataFrame({"text": texts, "label": [0, 1, 0]}).to_csv(csv, index=False)
    df = load_dataset(str(csv), id2label=model.id2label)
    precompute(model, df, tmp_path / "store", "attention", Settings(max_tokens=max_tokens, grid=16))
    store = ResultStore(tmp_path / "store")
    assert store.doc_ids("attention") == [doc_id_of(row) for row in range(3)]
    analyses = [analyze(model, t, max_tokens) for t in texts]
    assert [a.n for a in analyses][0] == 3 and analyses[1].n % 2 == 1 and analyses[2].n == max_tokens
    for row, analysis in enumerate(analyses):
        np.testing.assert_array_equal(store.array(doc_id_of(row), "attention", "input_ids"), analysis.input_ids)
        received = store.array(doc_id_of(row), "attention", "received")  # (layers, heads, n)
        for layer in range(model.num_layers):
            ref = oracle_longformer(model, analysis, layer).sum(axis=1)  # (heads, n) column sums
            np.testing.assert_allclose(received[layer], ref, rtol=1e-5)
    np.testing.assert_array_equal(store.pooled_attention().cells,
                                  pool_dataset((a.attention for a in analyses), 16).cells)


# ------------------------------------------------------------------------------------------ pages
def test_attention_pages_on_a_per_layer_window_model(layered_longformer, tmp_path):
    """The heatmap grid (document and dataset scope), token counts and overlay pages run on the model, and
    the grid names the selected layer's own window."""
    from streamlit.testing.v1 import AppTest

    from pages._ui.keys import K
    from support.apps import APP

    def _ok(at):
        assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]

    csv = tmp_path / "data.csv"
    pd.DataFrame({"text": [text_of(37), text_of(90)], "label": [0, 1]}).to_csv(csv, index=False)
    at = AppTest.from_file(str(APP), default_timeout=300)
    # switch_page runs a page without app.py's sidebar: its settings go in session state
    for key, value in {K.MODEL: layered_longformer.source, K.DATASET_KIND: "file path", K.DATASET_PATH: str(csv),
                       K.DOC_MODE: "by index", K.MAX_TOKENS: 128}.items():
        at.session_state[key] = value
    at.switch_page("pages/heatmap_grid.py").run()
    _ok(at)
    for layer, w_l in enumerate(layered_longformer.attention_windows):
        at.selectbox(key=K.page("heatmap", "layer")).set_value(layer).run()
        _ok(at)
        assert any(f"layer {layer + 1}'s sliding window (±{w_l} tokens)" in c.value for c in at.caption)
    at.radio(key=K.page("heatmap", "scope")).set_value("dataset").run()
    _ok(at)
    for button in at.button:  # the dataset grid is computed into the local store on a click
        if button.key == K.page("heatmap", "run_dataset"):
            button.click().run()
    _ok(at)
    assert len(at.get("image")) == 1
    for page, title in (("token_counts", "Token counts"), ("attention_overlay", "Summed attention")):
        at.switch_page(f"pages/{page}.py").run()
        _ok(at)
        assert at.title[0].value == title
