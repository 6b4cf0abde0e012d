"""Model families (longviz_core.model.families) on tiny random checkpoints saved to disk and loaded through
load_model: ModernBERT (sliding radius 8, layers 0 and 3 full; cls and mean pooling), BigBird (blocks of 16,
block-sparse from 177 tokens) and BERT. Oracles: the config's own numbers, the model run by transformers
directly (a fresh load, its own padding, its eager attentions), IG's completeness against independent forwards
and captum run as the paper's notebook runs it, and dense products of the attentions transformers returns."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

import longviz_core as lv
from longviz_core.attribution import integrated_gradients
from longviz_core.model.families import BANDED, BLOCK_SPARSE, FULL
from tiny import make_tiny_bert, make_tiny_bigbird, make_tiny_modernbert, text_of

pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
EPS32 = float(np.finfo(np.float32).eps)
SHORT, LONG = 37, 190  # words: 39 tokens (full attention everywhere), 192 tokens (BigBird block-sparse)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {
        "modernbert": make_tiny_modernbert(root / "mb", initializer_range=0.3),
        "modernbert-mean": make_tiny_modernbert(root / "mbm", pooling="mean", initializer_range=0.3, seed=1),
        "bigbird": make_tiny_bigbird(root / "bb"),
        "bert": make_tiny_bert(root / "bert", initializer_range=0.3),
    }


@pytest.fixture(scope="module")
def models(dirs):
    return {name: lv.load_model(str(path), device="cpu") for name, path in dirs.items()}


def _plain(path, **config):
    """The checkpoint loaded by transformers alone (eager attention), for oracles independent of longviz."""
    net = AutoModelForSequenceClassification.from_pretrained(str(path), attn_implementation="eager", **config)
    return net.eval()


def _probs(net, ids, **kwargs):
    """Class probabilities of a plain forward (the model's own positions and padding)."""
    t = torch.as_tensor(np.asarray(ids), dtype=torch.long)[None]
    with torch.no_grad():
        out = net(input_ids=t, attention_mask=torch.ones_like(t), **kwargs)
    return torch.softmax(out.logits.double(), -1)[0].numpy(), out


# ------------------------------------------------------------------------------------------ the adapter
def test_each_family_reads_its_config(models):
    mb, bb, bert = models["modernbert"], models["bigbird"], models["bert"]
    cfg = mb.model.config
    assert mb.family.name == "sliding-window" and cfg.local_attention == 16
    assert [p.kind for p in mb.family.attention_patterns(40)] == [FULL, BANDED, BANDED, FULL]  # layers 0, 3 full
    assert {p.radius for p in mb.family.attention_patterns(40) if p.kind == BANDED} == {cfg.local_attention // 2}
    assert mb.max_tokens == 8192 and mb.position_offset == 0 and mb.family.pooling == "cls"
    assert mb.family.embeddings(mb.model) is mb.model.model.embeddings.tok_embeddings  # RoPE: no position table
    assert models["modernbert-mean"].family.pooling == "mean"
    np.testing.assert_array_equal(models["modernbert-mean"].family.readout(4), [0.25] * 4)

    assert bb.family.name == "bigbird" and bb.family.sparse_from == (5 + 2 * 3) * 16
    assert {p.kind for p in bb.family.attention_patterns(176)} == {FULL}
    assert {p.kind for p in bb.family.attention_patterns(177)} == {BLOCK_SPARSE}
    assert bb.family.padded_length(176) == 176 and bb.family.padded_length(177) == 192
    assert bb.family.embeddings(bb.model) is bb.model.bert.embeddings and bb.max_tokens == 1024

    assert bert.family.name == "full-attention" and {p.kind for p in bert.family.attention_patterns(9)} == {FULL}
    assert bert.family.padded_length(9) == 9 and bert.family.embeddings(bert.model) is bert.model.bert.embeddings
    for m in models.values():
        assert len(m.family.layers(m.model)) == len(m.family.attention_modules(m.model)) == m.num_layers


def test_modernbert_sliding_layers_attend_within_their_radius(models):
    m = models["modernbert"]
    a = lv.analyze(m, text_of(SHORT), 64)
    n, r = a.n, m.model.config.local_attention // 2
    assert n > 2 * r + 1
    far = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) > r
    for layer, pattern in enumerate(m.family.attention_patterns(n)):
        dense = np.stack([a.attention.dense(layer, h) for h in range(m.num_heads)])  # (heads, n, n)
        np.testing.assert_allclose(dense.sum(-1), 1.0, rtol=0, atol=n * EPS32)
        if pattern.kind == BANDED:
            assert np.all(dense[:, far] == 0.0)
        else:
            assert np.all(dense[:, far] > 0.0)  # a full layer attends beyond the window too


# ------------------------------------------------------------------------------------------ BigBird's mode
def _cores(net):
    return {type(layer.attention.self).__name__ for layer in net.bert.encoder.layer}


def test_bigbird_keeps_its_block_sparse_mode(models, dirs):
    m, net = models["bigbird"], models["bigbird"].model
    assert net.bert.attention_type == "block_sparse" and _cores(net) == {"BigBirdBlockSparseAttention"}  # loaded
    rng = torch.get_rng_state()
    short = lv.analyze(m, text_of(SHORT), 400)  # full attention, as transformers runs it at this length
    assert net.bert.attention_type == "block_sparse" and _cores(net) == {"BigBirdBlockSparseAttention"}
    assert torch.equal(torch.get_rng_state(), rng)  # switching modes drew nothing from torch's generator

    # the short document: the attentions of the same checkpoint loaded in full attention by transformers
    full = _plain(dirs["bigbird"], attention_type="original_full")
    p_full, out = _probs(full, short.input_ids, output_attentions=True)
    np.testing.assert_allclose(short.probs, p_full, rtol=0, atol=1e-6)
    for layer, att in enumerate(out.attentions):
        for h in range(m.num_heads):
            np.testing.assert_allclose(short.attention.dense(layer, h), att[0, h].numpy(), rtol=0, atol=1e-6)

    # a long document after the short one runs block-sparse: as a fresh model whose first input is long
    enc = lv.encode(m.tokenizer, text_of(LONG), 400)
    sparse = _plain(dirs["bigbird"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p_sparse, _ = _probs(sparse, enc.input_ids)
    assert sparse.bert.attention_type == "block_sparse" and enc.n > m.family.sparse_from
    np.testing.assert_allclose(lv.predict_probs(m, [text_of(LONG)], 400)[0], p_sparse, rtol=0, atol=1e-6)
    p_dense, _ = _probs(full, enc.input_ids)
    assert np.abs(p_dense - p_sparse).max() > 1e-4  # the mode changes the prediction: the check above has teeth
    long = lv.analyze(m, text_of(LONG), 400)  # the weights it applies (oracles: tests/integration/test_block_sparse.py)
    np.testing.assert_allclose(long.probs, p_sparse, rtol=0, atol=1e-6)
    assert {type(a).__name__ for a in long.attention.layers} == {"BlockSparseLayer"}
    assert net.bert.attention_type == "block_sparse" and _cores(net) == {"BigBirdBlockSparseAttention"}


# ------------------------------------------------------------------------------------------ IG on every family
CASES = [("modernbert", SHORT), ("modernbert-mean", SHORT), ("bigbird", SHORT), ("bigbird", LONG), ("bert", 20)]


@pytest.mark.parametrize("name, words", CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_ig_completeness_on_every_family(models, dirs, name, words, tmp_path):
    """sum(raw) = F(x) - F(x') with F(x), F(x') from plain transformers forwards of the input and of the
    <s> <pad>... </s> baseline (the model's own positions and padding); <s> and </s> get exactly 0."""
    m = models[name]
    enc = lv.encode(m.tokenizer, text_of(words), min(400, m.max_tokens), model_max=m.max_tokens,
                    position_offset=m.position_offset)
    attr = integrated_gradients(m, enc, target=1, n_steps=64, cache_dir=tmp_path)
    net = _plain(dirs[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p_x, p_b = _probs(net, enc.input_ids)[0][1], _probs(net, enc.baseline_ids)[0][1]
    d = net.config.hidden_size
    assert abs(attr.prob_input - p_x) <= d * EPS32 * p_x and abs(attr.prob_baseline - p_b) <= d * EPS32 * p_b
    assert abs(p_x - p_b) > 0.02, "the test model is too flat for completeness to mean anything"
    # the reported delta is the whole gap, and after 64 Gauss-Legendre steps it is small (4e-3 of the output
    # difference on the steepest of these models, 1e-5 on most)
    rounding = d * EPS32 * (np.abs(attr.raw).sum() + p_x + p_b)
    assert abs(attr.raw.sum() - (p_x - p_b)) <= abs(attr.delta) + rounding
    assert abs(attr.delta) <= 1e-2 * abs(p_x - p_b)
    assert attr.raw.shape == (enc.n,) and attr.raw[0] == 0.0 and attr.raw[-1] == 0.0
    assert np.count_nonzero(attr.raw[1:-1]) == enc.n - 2


NOTEBOOK = [("modernbert", SHORT), ("bigbird", LONG), ("bert", 20)]


@pytest.mark.parametrize("name, words", NOTEBOOK, ids=[f"{n}-{w}" for n, w in NOTEBOOK])
def test_ig_matches_captum_run_as_the_notebook_runs_it(models, dirs, name, words, tmp_path):
    """The notebook's LayerIntegratedGradients on a softmax forward of the unpadded input, attached to the layer
    named here per family (ModernBERT's token table: RoPE; BigBird's and BERT's whole embeddings: the position
    table lives there and gets the same position ids for input and baseline), baseline <s> <pad>... </s>."""
    from captum.attr import LayerIntegratedGradients

    m, net = models[name], _plain(dirs[name])
    layer = net.model.embeddings.tok_embeddings if name == "modernbert" else net.bert.embeddings
    enc = lv.encode(m.tokenizer, text_of(words), min(400, m.max_tokens), model_max=m.max_tokens,
                    position_offset=m.position_offset)
    positions = torch.arange(enc.n)[None]  # BERT-style position ids (the notebook's cumsum, from 0)

    def custom_forward(inputs, position_ids=None, attention_mask=None):
        return torch.softmax(net(inputs, position_ids=position_ids, attention_mask=attention_mask).logits, dim=1)

    ids = torch.as_tensor(enc.input_ids)[None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LayerIntegratedGradients(custom_forward, layer).attribute(
            inputs=ids, baselines=torch.as_tensor(enc.baseline_ids)[None], target=1, n_steps=12,
            additional_forward_args=(positions, torch.ones_like(ids)), internal_batch_size=4)
    ref = ref[:, : enc.n]  # BigBird pads to its block size inside; those rows are 0
    ref_raw = ref.sum(dim=-1)[0].double().numpy()
    ours = integrated_gradients(m, enc, target=1, n_steps=12, internal_batch_size=5, cache_dir=tmp_path)
    # float32 arithmetic in other batch shapes: a token's sum moves by d * eps32 * the sum of its terms' magnitudes
    tol = net.config.hidden_size * EPS32 * ref.abs().sum(dim=-1)[0].double().numpy()
    np.testing.assert_array_less(np.abs(ours.raw - ref_raw), tol + 1e-300)


def test_one_word_documents(models, tmp_path):
    """<s> word </s> on every family: one attended-to text token, IG puts all of F(x) - F(x') on it."""
    for m in models.values():
        a = lv.analyze(m, "model", 64)
        assert a.n == 3 and a.attention.n == 3
        attr = integrated_gradients(m, a, n_steps=32, cache_dir=tmp_path)
        assert attr.raw[0] == attr.raw[2] == 0.0
        assert abs(attr.raw[1] - attr.expected) <= abs(attr.delta) + 1e-6


# ------------------------------------------------------------------------------------------ pooling in explainers
def _dense_rollout(mats, start):
    n = mats[0].shape[0]
    joint = np.eye(n)
    for a in mats:
        aug = 0.5 * (a + np.eye(n))
        joint = (aug / aug.sum(axis=1, keepdims=True)) @ joint
    return start @ joint


def test_mean_pooling_explainers_read_every_row(models, dirs):
    """Under mean pooling the head reads the mean of all final states: rollout and raw attention start from the
    uniform vector 1/n, attention x gradient sums A ∘ dp/dA over all rows; oracles from the attention tensors a
    plain transformers forward returns (with their gradient retained)."""
    m = models["modernbert-mean"]
    a = lv.analyze(m, text_of(SHORT), 64)
    net, n = _plain(dirs["modernbert-mean"]), a.n
    t = torch.as_tensor(a.input_ids)[None]
    out = net(input_ids=t, attention_mask=torch.ones_like(t), output_attentions=True)
    att = [x.detach()[0].double().numpy() for x in out.attentions]  # (heads, n, n) per layer
    start = np.full(n, 1.0 / n)
    close = lambda got, want, tol: np.testing.assert_allclose(got, want, rtol=0, atol=tol)  # noqa: E731
    close(lv.explain(m, a, "rollout").scores, _dense_rollout([x.mean(0) for x in att], start), 1e-6)
    close(lv.explain(m, a, "raw_attention").scores, start @ att[-1].mean(0), 1e-7)
    last = out.attentions[-1]
    last.retain_grad()
    torch.softmax(out.logits, -1)[0, a.predicted].backward()
    product = (last.detach() * last.grad)[0].double().numpy()  # (heads, n, n)
    want = (start @ product).mean(0)  # mean over heads of sum_q (1/n) A[q, j] dp/dA[q, j]
    close(lv.explain(m, a, "att_x_grad").scores, want, 1e-6 * np.abs(want).max())


def test_hooks_removed_and_model_untouched_on_every_family(models):
    for m in models.values():
        net = m.model
        a = lv.analyze(m, text_of(SHORT), 64)
        count = lambda: sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in net.modules())  # noqa: E731
        before = count()
        for method in ("grad_x_input", "att_x_grad", "gae", "attcat"):
            assert np.all(np.isfinite(lv.explain(m, a, method).scores))
            assert count() == before, (m.family.name, method)
        assert all(p.grad is None for p in net.parameters()) and not net.training
    assert math.isfinite(lv.estimate_ig_seconds(models["modernbert"], 40, 8))


# ------------------------------------------------------------------------------------------ the pages
PAGES = [("modernbert", 128, (37, 90, 12)), ("bigbird", 128, (37, 90, 12)), ("bigbird", 192, (190, 181, 37))]


@pytest.mark.parametrize("name, max_tokens, words", PAGES, ids=["modernbert", "bigbird-full", "bigbird-sparse"])
def test_every_page_opens_on_the_family(dirs, name, max_tokens, words, tmp_path):
    """Every page with its defaults on a tiny checkpoint of the family; BigBird at 128 tokens (full attention) and
    at 192 (block-sparse for the first two documents: 192 and 183 tokens; full for the third)."""
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from pages._ui.keys import K
    from support.apps import APP, ROOT

    csv = tmp_path / "data.csv"
    pd.DataFrame({"text": [text_of(w) for w in words], "label": [0, 1, 1]}).to_csv(csv, index=False)
    at = AppTest.from_file(str(APP), default_timeout=300)
    for key, value in {K.MODEL: str(dirs[name]), K.DATASET_KIND: "file path", K.DATASET_PATH: str(csv),
                       K.DOC_MODE: "by index", K.MAX_TOKENS: max_tokens}.items():
        at.session_state[key] = value
    for page in sorted(p.stem for p in (ROOT / "pages").glob("*.py") if not p.stem.startswith("_")):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in (*at.exception, *at.error)])
