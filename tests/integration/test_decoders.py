"""Decoder classifiers (transformers' GenericForSequenceClassification: Llama, Qwen3, Mistral, Gemma2) on tiny
random checkpoints saved to disk and loaded through load_model. Oracles: the model's own eager attention
(`output_attentions`, every layer and head), its own logits from a fresh transformers load, brute-force top-k
lists, IG's completeness against independent forwards, and transformers' head on the last token."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

import longviz_core as lv
from longviz_core.attribution import integrated_gradients
from longviz_core.errors import LongvizError
from longviz_core.model.families import CAUSAL
from longviz_core.model.reproduce import AttentionMismatchError
from longviz_core.views.counts import topk_indices
from support.oracles import brute_topk
from tiny import make_tiny_decoder, text_of

pytestmark = pytest.mark.filterwarnings("ignore::longviz_core.attribution.ConvergenceWarning")
# probabilities in [0, 1]: a layer above the first reads hidden states that the sdpa route and eager round
# differently (float32), and the large random scores (initializer 0.5) magnify that to a few ulp of 1
ATOL = 1e-5

# name: (kind, options); Qwen3 with sliding and full layers, Mistral's window shorter than the document
KINDS = {
    "llama": ("llama", {"pad": False}),
    "qwen3": ("qwen3", {"layers": 3, "use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1,
                        "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]}),
    "mistral": ("mistral", {}),
    "gemma2": ("gemma2", {"layers": 3}),
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {name: make_tiny_decoder(root / name, kind, **options) for name, (kind, options) in KINDS.items()}


@pytest.fixture(scope="module")
def models(dirs):
    return {name: lv.load_model(str(path), device="cpu") for name, path in dirs.items()}


def _eager(path, ids):
    """(layers, heads, n, n) weights and the logits of a fresh transformers load run eagerly on `ids`."""
    net = AutoModelForSequenceClassification.from_pretrained(str(path), attn_implementation="eager").eval()
    t = torch.as_tensor(np.asarray(ids), dtype=torch.long)[None]
    with torch.no_grad():
        out = net(input_ids=t, output_attentions=True)
    return torch.stack(out.attentions)[:, 0].double().numpy(), out.logits[0].double().numpy()


def test_decoders_are_recognised_from_their_config(models):
    for name, m in models.items():
        assert m.family.name == "decoder" and m.family.pooling == "last", name
        assert m.family.read_row(50) == 49 and m.position_offset == 0
        assert m.family.embeddings(m.model) is m.model.model.embed_tokens
    q = models["qwen3"]
    assert [(p.kind, p.radius) for p in q.family.attention_patterns(200)] == [(CAUSAL, 0), (CAUSAL, 15), (CAUSAL, 15)]
    assert q.model.config.num_key_value_heads == 2 and q.num_heads == 4
    assert [p.radius for p in models["mistral"].family.attention_patterns(200)] == [11, 11]
    assert [p.radius for p in models["mistral"].family.attention_patterns(12)] == [0, 0]  # the window holds it all
    assert [p.radius for p in models["gemma2"].family.attention_patterns(200)] == [11, 0, 11]
    # templates: Llama, Mistral and Gemma put a BOS before the text and nothing after; Qwen adds nothing
    assert (models["llama"].template.before, models["llama"].template.after) == ((0,), ())
    assert (models["qwen3"].template.before, models["qwen3"].template.after) == ((), ())
    # the baseline's filler: pad where its embedding is not zero, else unk (the tiny models' pad rows are zero)
    assert models["llama"].template.filler == 3 and models["qwen3"].template.filler == 3


@pytest.mark.parametrize("name", list(KINDS))
def test_every_layer_and_head_is_the_models_own_eager_attention(models, dirs, name):
    a = lv.analyze(models[name], text_of(300), max_tokens=301)
    weights, logits = _eager(dirs[name], a.input_ids)
    L, H, n, _ = weights.shape
    assert (L, H, n) == (a.attention.num_layers, a.attention.num_heads, a.n) and n >= 300
    assert weights.max() > 0.5  # peaked, not uniform
    for layer in range(L):
        for head in range(H):
            dense = a.attention.dense(layer, head)
            np.testing.assert_allclose(dense, weights[layer, head], rtol=0, atol=ATOL, err_msg=f"{layer}/{head}")
            assert not np.triu(dense, 1).any()  # causal: no query attends to a later token
    np.testing.assert_allclose(a.logits, logits, rtol=1e-5, atol=1e-5)
    # a column sum adds up to n entries, each within ATOL
    np.testing.assert_allclose(a.attention.received_per_head(), weights.sum(axis=2), rtol=0, atol=n * ATOL)


@pytest.mark.parametrize("kind", ["qwen2", "gemma3", "gemma", "phi3", "smollm3", "olmo2"])
def test_more_decoder_types_are_their_own_eager_attention(kind, tmp_path):
    """Other GenericForSequenceClassification layouts, found through transformers' mapping: Qwen2's sliding
    layers from max_window_layers, Gemma 3's layer types, Phi3's fused projections, SmolLM3, Olmo2's norms."""
    path = make_tiny_decoder(tmp_path / kind, kind)
    m = lv.load_model(str(path))
    assert m.family.name == "decoder"
    a = lv.analyze(m, text_of(60), max_tokens=64)
    weights, logits = _eager(path, a.input_ids)
    for layer in range(weights.shape[0]):
        for head in range(weights.shape[1]):
            np.testing.assert_allclose(a.attention.dense(layer, head), weights[layer, head], rtol=0, atol=ATOL)
    np.testing.assert_allclose(a.logits, logits, rtol=1e-5, atol=1e-5)


def test_lists_by_brute_force_on_grouped_sliding_layers(models, dirs):
    a = lv.analyze(models["qwen3"], text_of(150), max_tokens=151)
    weights, _ = _eager(dirs["qwen3"], a.input_ids)
    k = 6
    topk = topk_indices(a.attention, k=k)
    for direction in ("attended", "attending"):
        got = topk.lists(direction)
        for layer in range(weights.shape[0]):
            for head in range(weights.shape[1]):
                m = weights[layer, head] if direction == "attended" else weights[layer, head].T
                for i, listed in enumerate(brute_topk(m, k)):
                    assert got[layer, head, i].tolist() == listed + [-1] * (k - len(listed)), (direction, layer, i)


def test_the_head_reads_the_last_token_without_a_pad_token(models, dirs):
    """Llama here has no pad token: transformers refuses batches of two; longviz's copies are read at their last
    token, as the model reads a single input."""
    m = models["llama"]
    assert m.model.config.pad_token_id is None
    a = lv.analyze(m, text_of(30), max_tokens=64)
    ids = torch.as_tensor(a.input_ids)[None].repeat(2, 1)
    with torch.no_grad():
        logits = m(**m.family.kwargs(ids, torch.ones_like(ids), torch.arange(a.n)[None].repeat(2, 1))).logits
    np.testing.assert_allclose(logits.numpy(), [a.logits, a.logits], rtol=1e-5, atol=1e-6)
    assert m.model.config.pad_token_id is None  # restored after the forward
    with pytest.raises(ValueError, match="batch sizes > 1"):  # what transformers alone does
        m.model(input_ids=ids)


def test_pad_equal_to_eos_still_reads_the_last_token(tmp_path):
    path = make_tiny_decoder(tmp_path / "eos", "llama")
    config = json.loads((path / "config.json").read_text())
    config["pad_token_id"] = config["eos_token_id"]
    (path / "config.json").write_text(json.dumps(config))
    m = lv.load_model(str(path))
    a = lv.analyze(m, text_of(20), max_tokens=64)
    eos = int(m.model.config.eos_token_id)
    ids = torch.as_tensor(np.r_[a.input_ids[:-1], eos])[None]  # the input now ends in eos (= pad)
    with torch.no_grad():
        ours = m(**m.family.kwargs(ids, torch.ones_like(ids), torch.arange(a.n)[None])).logits[0]
        hidden = m.model.model(input_ids=ids).last_hidden_state[0, -1]  # the last token's state, read directly
    np.testing.assert_allclose(ours.numpy(), m.model.score(hidden).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma2"])
def test_ig_completeness(models, name, tmp_path):
    m = models[name]
    a = lv.analyze(m, text_of(25), max_tokens=64)
    target = int(a.predicted)
    ig = integrated_gradients(m, a, target, n_steps=64, cache_dir=tmp_path)
    enc = a.encoded
    base = np.asarray(enc.baseline_ids)
    assert (base[: enc.prefix] == enc.input_ids[: enc.prefix]).all()  # the baseline keeps the specials
    with torch.no_grad():
        def prob(ids):
            t = torch.as_tensor(ids)[None]
            return float(torch.softmax(m(**m.family.kwargs(t, torch.ones_like(t), torch.arange(a.n)[None])
                                         ).logits[0].double(), -1)[target])
        gap = prob(enc.input_ids) - prob(base)
    assert abs(float(np.sum(ig.raw)) - gap) < 0.02 * max(abs(gap), 0.05)


@pytest.mark.parametrize("method", ["raw_attention", "rollout", "att_x_grad", "gae", "grad_x_input"])
def test_explainers_read_the_last_row(models, method):
    m = models["qwen3"]
    a = lv.analyze(m, text_of(40), max_tokens=64)
    e = lv.explain(m, a, method)
    assert e.scores.shape == (a.n,) and np.isfinite(e.scores).all()
    if method == "raw_attention":
        expected = np.mean([a.attention.dense(a.attention.num_layers - 1, h)[-1] for h in range(m.num_heads)],
                           axis=0)
        np.testing.assert_allclose(e.scores, expected, rtol=0, atol=1e-6)


def test_custom_code_is_refused(tmp_path):
    path = make_tiny_decoder(tmp_path / "remote", "llama")
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_x.XForSequenceClassification"}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(LongvizError, match="its own modelling code"):
        lv.load_model(str(path))


def test_attention_longviz_cannot_reproduce_is_refused(tmp_path, monkeypatch):
    """A model whose attention applies what longviz does not see (here: a position bias added inside its own
    attention function, as custom attentions do) is refused at load, never drawn with other weights."""
    from transformers.models.llama import modeling_llama

    path = make_tiny_decoder(tmp_path / "odd", "llama")
    real = modeling_llama.eager_attention_forward

    def biased(module, query, key, value, attention_mask, **kwargs):
        n = query.shape[-2]
        bias = -0.5 * (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().float()  # ALiBi-like
        mask = bias if attention_mask is None else attention_mask + bias
        return real(module, query, key, value, mask, **kwargs)

    monkeypatch.setattr(modeling_llama, "eager_attention_forward", biased)
    with pytest.raises(AttentionMismatchError, match="differs from the model's own"):
        lv.load_model(str(path))
    monkeypatch.setattr(modeling_llama, "eager_attention_forward", real)
    assert lv.load_model(str(path)).family.name == "decoder"


def test_a_layer_type_longviz_cannot_reproduce_is_refused(tmp_path):
    path = make_tiny_decoder(tmp_path / "chunked", "llama")
    config = json.loads((path / "config.json").read_text())
    config["layer_types"] = ["full_attention", "linear_attention"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(LongvizError, match="linear_attention"):
        lv.load_model(str(path))


# ------------------------------------------------------------------------------------------ the pages
@pytest.mark.parametrize("name", list(KINDS))
def test_every_page_opens_on_the_decoder(dirs, name, tmp_path):
    """Every page with its defaults on a tiny decoder checkpoint saved to a directory."""
    import pandas as pd
    from streamlit.testing.v1 import AppTest

    from pages._ui.keys import K
    from support.apps import APP, ROOT

    csv = tmp_path / "data.csv"
    pd.DataFrame({"text": [text_of(w) for w in (37, 90, 12)], "label": [0, 1, 1]}).to_csv(csv, index=False)
    at = AppTest.from_file(str(APP), default_timeout=300)
    for key, value in {K.MODEL: str(dirs[name]), K.DATASET_KIND: "file path", K.DATASET_PATH: str(csv),
                       K.DOC_MODE: "by index", K.MAX_TOKENS: 128}.items():
        at.session_state[key] = value
    for page in sorted(p.stem for p in (ROOT / "pages").glob("*.py") if not p.stem.startswith("_")):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in (*at.exception, *at.error)])


def test_head_importance_shares_a_key_value_head_among_its_group(models):
    """T3-Vis's Taylor score on grouped-query attention, written out: query head h's rows of W_Q and columns of
    W_O, plus 1/group of the rows of W_K and W_V of the key/value head h // group that it shares."""
    import copy

    import pandas as pd

    from longviz_core.evaluation import importance as imp

    m = models["qwen3"]
    data = pd.DataFrame({"text": [text_of(20), text_of(33)], "label": [0, 1]})
    raw = imp.raw_head_importance(m, data, 64, max_examples=None, method="t3vis")
    net = copy.deepcopy(m.model)
    for text, label in zip(data["text"], data["label"]):
        enc = m.encode(text, 64)
        with m.family.running(net, enc.n):
            logits = net(**m.family.inputs(enc)).logits
        torch.nn.functional.cross_entropy(logits.double(), torch.tensor([label])).backward()
    H, group = m.num_heads, m.num_heads // m.model.config.num_key_value_heads
    oracle = np.zeros((m.num_layers, H))
    for layer, block in enumerate(net.model.layers):
        a = block.self_attn
        d = a.head_dim
        for h in range(H):
            rows, kv = slice(h * d, (h + 1) * d), slice((h // group) * d, (h // group + 1) * d)
            share = lambda p, index: float(((p.grad[index] * p[index]) ** 2).sum())  # noqa: E731
            oracle[layer, h] = (share(a.q_proj.weight, rows) + share(a.o_proj.weight, (slice(None), rows))
                                + (share(a.k_proj.weight, kv) + share(a.v_proj.weight, kv)) / group)
    assert np.all(oracle > 0)
    np.testing.assert_allclose(raw, oracle, rtol=1e-6)


def test_a_decoders_template_tokens_are_masked_as_special(tmp_path):
    """A BOS spelled <|begin_of_text|> (Llama 3) is no default special token: the template's tokens are."""
    from tokenizers import AddedToken

    from longviz_core.views.masking import build_mask, special_tokens_of

    path = make_tiny_decoder(tmp_path / "l3", "llama")
    tok = lv.load_model(str(path)).tokenizer
    tok.add_special_tokens({"bos_token": AddedToken("<|begin_of_text|>", special=True)})
    from tokenizers import processors

    bos = tok.convert_tokens_to_ids("<|begin_of_text|>")
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    tok.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config.update(bos_token_id=bos, vocab_size=len(tok))
    (path / "config.json").write_text(json.dumps(config))
    from transformers import AutoModelForSequenceClassification

    net = AutoModelForSequenceClassification.from_pretrained(str(path), ignore_mismatched_sizes=True)
    net.resize_token_embeddings(len(tok))
    net.save_pretrained(path)
    m = lv.load_model(str(path))
    a = lv.analyze(m, text_of(12) + " <|begin_of_text|>", max_tokens=64)  # the spelling inside the text is text
    assert a.tokens[0] == "<|begin_of_text|>" and a.encoded.prefix == 1
    mask = build_mask(a.tokens, nonalnum=False, stopwords=False, special_tokens=special_tokens_of(a.encoded))
    assert mask.tolist() == [True] + [False] * (a.n - 1)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_deletion_test_equals_a_brute_force_loop(models, name):
    """The deletion test scanned to the end on a decoder without a pad token (Llama: batches of copies, the head
    on the last token) and one whose template adds no special token (Qwen3: every token removable, the first and
    the last included), against one unbatched forward per count through transformers alone."""
    from longviz_core.evaluation import faithfulness as fa

    m = models[name]
    a = lv.analyze(m, text_of(17), max_tokens=64)
    enc = a.encoded
    positions = enc.text_positions
    assert positions.tolist() == list(range(enc.prefix, a.n))  # no special token after the text
    scores = np.random.default_rng(0).normal(size=a.n)
    res = fa.faithfulness(m, a, scores, rankings=("ig", "random"), seeds=(0, 1), replacement="baseline",
                          batch_size=4, max_removed=1.0)
    filler = m.template.filler

    def log_probs(ids):
        t = torch.as_tensor(ids)[None]
        with torch.no_grad():  # transformers alone, batch of one: the head reads the last token
            return torch.log_softmax(m.model(input_ids=t).logits[0].double(), -1).numpy()

    intact = log_probs(enc.input_ids)
    y = int(np.argmax(intact))
    runs = [*res.curves.values(), *res.random.runs]
    assert sorted(runs[0].order.tolist()) == positions.tolist()
    # the |IG| ranking: the text tokens by |score|, highest first
    assert runs[0].order.tolist() == (np.argsort(-np.abs(scores[positions]), kind="stable") + enc.prefix).tolist()
    for run in runs:
        logp, flip = [], None
        for c in range(1, len(positions) + 1):
            ids = enc.input_ids.copy()
            ids[run.order[:c]] = filler
            lp = log_probs(ids)
            logp.append(lp[y])
            if flip is None and int(np.argmax(lp)) != y:
                flip = c
        assert run.flip_removed == flip
        counts = np.asarray([fa.removed_count(k, len(positions)) for k in res.ks])
        np.testing.assert_allclose(run.lodds_k, np.asarray(logp)[counts - 1] - intact[y], atol=5e-5)


def test_a_32768_token_maximum_is_extrapolated_not_run(models, monkeypatch):
    """The page default (budget.fitting_max_tokens) never times a 32,768-token forward and backward: it scales the
    2,048-token timing by the squared ratio of the lengths."""
    from longviz_core import attribution
    from longviz_core.attribution.budget import fitting_max_tokens

    asked = []

    def fake(model, n, steps):
        asked.append(n)
        return 0.01

    monkeypatch.setattr(attribution, "estimate_ig_seconds", fake)
    m = models["qwen3"]
    assert m.max_tokens == 32768
    assert fitting_max_tokens(m, budget_s=0.01 * 16**2 * 0.99) == 2048 and asked == [2048]
    assert fitting_max_tokens(m, budget_s=0.01 * 16**2) == 32768


def test_a_bf16_checkpoint_computes_in_float32_on_the_cpu(tmp_path):
    path = make_tiny_decoder(tmp_path / "bf16", "qwen3")
    net = AutoModelForSequenceClassification.from_pretrained(str(path))
    net.to(torch.bfloat16).save_pretrained(path)
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    m = lv.load_model(str(path), device="cpu")
    assert {p.dtype for p in m.model.parameters()} == {torch.float32}
    a = lv.analyze(m, text_of(20), max_tokens=32)
    assert a.attention.layers[0].query.dtype == torch.float32 and np.isfinite(a.logits).all()
