"""Head importance: T3-Vis's Taylor scores against a hand-written loop over the parameters, the Michel gate
gradient against finite differences of a head gate, gate semantics, hygiene of the shared model, normalisation,
the disk cache (keyed by method), safe import and error messages."""
from __future__ import annotations

import copy
import dataclasses
import io

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import encode, load_model
from longviz_core._disk import unsealed
from longviz_core.evaluation import importance as imp
from tiny import make_tiny_bert, make_tiny_bigbird, make_tiny_longformer, make_tiny_modernbert, text_of

MAX_TOKENS = 40
EPS64 = np.finfo(np.float64).eps


@pytest.fixture(scope="module")
def peaked_longformer(tmp_path_factory):
    """Larger initial weights: attention far from uniform, so every head matters measurably."""
    return load_model(str(make_tiny_longformer(tmp_path_factory.mktemp("imp"), initializer_range=0.5)))


def _float64(model):
    model.model.double()  # a private copy (loaded for these tests only): oracles in float64 arithmetic
    return model


@pytest.fixture(scope="module")
def models64(tmp_path_factory):
    """float64 tiny models: a Longformer with per-layer windows [16, 8] (and the global <s>), a BERT, a ModernBERT
    (fused Q/K/V projection, sliding radius 8, layers 0 and 3 full) and a BigBird (at these lengths it runs full
    attention)."""
    root = tmp_path_factory.mktemp("imp64")
    return {
        "longformer": _float64(load_model(str(make_tiny_longformer(root / "lf", window=[16, 8],
                                                                   initializer_range=0.5)))),
        "bert": _float64(load_model(str(make_tiny_bert(root / "bert")))),
        "modernbert": _float64(load_model(str(make_tiny_modernbert(root / "mb", heads=2, initializer_range=0.3)))),
        "bigbird": _float64(load_model(str(make_tiny_bigbird(root / "bb")))),
    }


@pytest.fixture(scope="module")
def labelled():
    """Odd lengths, one word, longer than both windows and truncated at MAX_TOKENS; both labels."""
    return pd.DataFrame({"text": [text_of(30), " ".join(reversed(text_of(17).split())), "model", text_of(44)],
                         "label": [0, 1, 1, 0]})


def _inputs(model, text):
    return model.family.inputs(encode(model.tokenizer, text, MAX_TOKENS, position_offset=model.position_offset))


def _head_slices(model, net):
    """Per layer, (weight or bias, index of head h's share) for every parameter T3-Vis scores, written out per
    layout: BERT-style separate Q, K, V (rows) and W_O (columns); ModernBERT's fused Wqkv, whose rows are
    [Q | K | V] with head h at rows h*d:(h+1)*d inside each third, and Wo (columns)."""
    H = model.num_heads
    if model.family.name == "sliding-window":
        for layer in net.model.layers:
            width = layer.attn.Wo.in_features
            d = width // H
            yield [(layer.attn.Wqkv.weight, lambda h, d=d, w=width: ([t * w + h * d + i for t in range(3)
                                                                      for i in range(d)], slice(None))),
                   (layer.attn.Wo.weight, lambda h, d=d: (slice(None), slice(h * d, (h + 1) * d)))]
        return
    layers = net.longformer.encoder.layer if model.family.name == "longformer" else net.bert.encoder.layer
    for layer in layers:
        attn = layer.attention
        d = attn.self.query.weight.shape[0] // H
        rows = lambda h, d=d: slice(h * d, (h + 1) * d)  # noqa: E731
        params = [(p.weight, lambda h, r=rows: (r(h), slice(None))) for p in (attn.self.query, attn.self.key,
                                                                             attn.self.value)]
        params += [(p.bias, lambda h, r=rows: (r(h),)) for p in (attn.self.query, attn.self.key, attn.self.value)]
        yield params + [(attn.output.dense.weight, lambda h, r=rows: (slice(None), r(h)))]


def _t3vis_oracle(model, data) -> np.ndarray:
    """T3-Vis's compute_importance / get_taylor_importance written out on a private copy of the model: backward()
    per document without zeroing .grad (G = the sum), then for every layer and head the explicit row slices of
    W_Q, W_K, W_V, their biases and the column slice of W_O, summing (w * G)^2."""
    net = copy.deepcopy(model.model)
    for text, label in zip(data["text"], data["label"]):
        logits = net(**_inputs(model, text)).logits
        torch.nn.functional.cross_entropy(logits, torch.tensor([int(label)])).backward()
    H = model.num_heads
    out = np.zeros((model.num_layers, H))
    for i, params in enumerate(_head_slices(model, net)):
        for h in range(H):
            for p, index in params:
                out[i, h] += ((p.grad[index(h)] * p[index(h)]) ** 2).sum().item()
    return out


@pytest.mark.parametrize("which", [pytest.param("longformer", marks=pytest.mark.slow), "bert", "modernbert",
                                   "bigbird"])
def test_t3vis_matches_a_loop_over_the_parameters(which, models64, labelled):
    model = models64[which]
    raw = imp.raw_head_importance(model, labelled, MAX_TOKENS, max_examples=None, method="t3vis")
    oracle = _t3vis_oracle(model, labelled)
    assert raw.shape == (model.num_layers, model.num_heads) and np.all(oracle > 0)
    # Both sides are float64 with the same forward and backward; they differ in how the gradient is summed
    # (over documents, then over the ~10^3 terms of a head), each sum exact to ~(terms) * eps64 ~ 1e-13
    # relative: 1e-10 leaves a wide margin and still catches any wrong slice (those change scores by O(1)).
    np.testing.assert_allclose(raw, oracle, rtol=1e-10)
    lo, hi = oracle.min(), oracle.max()
    # [0, 1] scale: the min-max divides the raw error by (hi - lo), which is of the order of hi here
    np.testing.assert_allclose(imp.head_importance(model, labelled, MAX_TOKENS, None),
                               (oracle - lo) / (hi - lo), rtol=0, atol=1e-9)
    assert all(p.grad is None for p in model.model.parameters())


def _losses(model, data, gates: torch.Tensor, scale: bool = False) -> np.ndarray:
    """Per-example cross-entropy with the heads gated by `gates` (the gates are not differentiated here); with
    `scale`, also each example's |L| + max |logit|, the size its rounding error is relative to."""
    blocks = imp._attention_blocks(model)
    handles = [b.output.register_forward_pre_hook(imp._gate_hook(gates, l, model.num_heads))
               for l, b in enumerate(blocks)]
    try:
        out, sizes = [], []
        for text, label in zip(data["text"], data["label"]):
            with torch.no_grad():
                logits = model(**_inputs(model, text)).logits
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor([int(label)])).item()
            out.append(loss)
            sizes.append(abs(loss) + logits.abs().max().item())
        return (np.array(out), np.array(sizes)) if scale else np.array(out)
    finally:
        for h in handles:
            h.remove()


def _central(model, data, layer, head, step) -> np.ndarray:
    L, H = model.num_layers, model.num_heads
    up, down = torch.ones(L, H, dtype=torch.float64), torch.ones(L, H, dtype=torch.float64)
    up[layer, head] += step
    down[layer, head] -= step
    return (_losses(model, data, up) - _losses(model, data, down)) / (2 * step)


@pytest.mark.parametrize("which", ["longformer", "bert", "modernbert"])
def test_michel_matches_finite_differences(which, models64, labelled):
    model = models64[which]
    raw = imp.raw_head_importance(model, labelled, MAX_TOKENS, max_examples=None, method="michel")
    L, H = model.num_layers, model.num_heads
    # Rounding: a float64 model still runs Longformer's and ModernBERT's attention softmax in float32
    # (transformers hard-codes dtype=torch.float32 there), so their losses carry float32 rounding; BERT's are
    # float64 throughout. Each loss
    # is off by at most r = 10 u (|L| + max|logit|), u the unit roundoff: a few roundings of the logits, carried
    # through two layers (about 0.2 u is measured on these models), so a central difference D(h) is off by <= r / h.
    # Truncation: D(h) = f' + c h^2 + O(h^4); Richardson's (4 D(h) - D(2h)) / 3 = f' + O(h^4), rounded to within
    # (4 r / h + r / 2h) / 3 = 1.5 r / h, and |D(2h) - D(h)| / 3 = |c| h^2 (+ noise) bounds its truncation error
    # many times over. h = u^(1/3) balances the two terms for a third derivative of order 1.
    u = np.finfo(np.float64 if model.family.name == "full-attention" else np.float32).eps
    step = float(u ** (1 / 3))
    _, sizes = _losses(model, labelled, torch.ones(L, H, dtype=torch.float64), scale=True)
    rounding = 1.5 * 10 * u * sizes / step
    fd, tol = np.zeros((L, H)), np.zeros((L, H))
    for layer in range(L):
        for head in range(H):
            d1 = _central(model, labelled, layer, head, step)
            d2 = _central(model, labelled, layer, head, 2 * step)
            fd[layer, head] = np.abs((4 * d1 - d2) / 3).mean()  # E_x |dL(x)/d xi_h|
            # | mean|a| - mean|b| | <= mean |a - b|
            tol[layer, head] = (np.abs(d2 - d1) / 3 + rounding).mean()
    assert raw.shape == (L, H) and np.all(fd > 0)
    assert np.all(tol < 1e-2 * fd)  # the check is tight: far below the values it compares
    assert np.all(np.abs(raw - fd) <= tol), (raw, fd, tol)


def test_a_closed_gate_removes_the_head(peaked_longformer):
    """Gate 0 on (layer 1, head 0) == zeroing that head's value projections (local and global)."""
    model = peaked_longformer
    inputs = _inputs(model, text_of(25))
    gates = torch.ones(model.num_layers, model.num_heads, dtype=torch.float64)
    gates[1, 0] = 0.0
    module = imp._attention_blocks(model)[1].output
    handle = module.register_forward_pre_hook(imp._gate_hook(gates, 1, model.num_heads))
    try:
        with torch.no_grad():
            gated = model.model(**inputs).logits
    finally:
        handle.remove()
    attn = model.model.longformer.encoder.layer[1].attention.self
    d = attn.head_dim
    saved = {n: p.detach().clone() for n, p in attn.named_parameters()}
    try:
        with torch.no_grad():
            for proj in (attn.value, attn.value_global):
                proj.weight[:d] = 0.0
                proj.bias[:d] = 0.0
            removed = model.model(**inputs).logits
    finally:
        with torch.no_grad():
            for n, p in attn.named_parameters():
                p.copy_(saved[n])
    torch.testing.assert_close(gated, removed, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        plain = model.model(**inputs).logits
    assert not torch.allclose(plain, gated)


@pytest.mark.parametrize("method", list(imp.IMPORTANCE_METHODS))
def test_shared_model_left_untouched_even_on_error(method, peaked_longformer, labelled):
    model = peaked_longformer
    imp.raw_head_importance(model, labelled, max_tokens=MAX_TOKENS, max_examples=2, method=method)
    bad = pd.DataFrame({"text": [text_of(10), "   "], "label": [0, 1]})  # the second text cannot be encoded
    with pytest.raises(Exception, match="empty"):
        imp.raw_head_importance(model, bad, max_tokens=MAX_TOKENS, method=method)
    for block in imp._attention_blocks(model):
        assert not block.output._forward_pre_hooks
    assert not model.model.training
    assert all(p.grad is None for p in model.model.parameters())
    assert all(p.requires_grad for p in model.model.parameters())


def test_normalisation():
    raw = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    np.testing.assert_array_equal(imp.normalise_importance(raw, "minmax"), raw / 4.0)  # min 0, max 4
    np.testing.assert_array_equal(imp.normalise_importance(raw + 2.0, "minmax"), raw / 4.0)  # min -> 0
    layer = imp.normalise_importance(raw, "layer")
    np.testing.assert_allclose(layer, [[0.6, 0.8], [0.0, 0.0], [2**-0.5, 2**-0.5]], rtol=1e-15)
    both = imp.normalise_importance(raw, "layer+minmax")
    assert both.min() == 0.0 and both.max() == 1.0
    np.testing.assert_allclose(both, layer / 0.8, rtol=1e-15)
    np.testing.assert_array_equal(imp.normalise_importance(raw, "none"), raw)
    np.testing.assert_array_equal(imp.normalise_importance(np.full((2, 3), 5.0), "minmax"), np.ones((2, 3)))
    with pytest.raises(imp.HeadImportanceError, match="normalise must be one of"):
        imp.normalise_importance(raw, "softmax")


def test_each_method_has_its_own_normalisation(peaked_longformer, labelled):
    model = peaked_longformer
    assert set(imp.IMPORTANCE_METHODS) == set(imp.METHOD_NAMES) == set(imp.DEFAULT_NORMALISATION)
    assert imp.DEFAULT_METHOD == "t3vis" and imp.METHOD_NAMES["t3vis"] == "Taylor (T3-Vis)"
    raws = {}
    for method, how in (("t3vis", "minmax"), ("michel", "layer+minmax")):
        raws[method] = imp.raw_head_importance(model, labelled, MAX_TOKENS, 3, method=method)
        np.testing.assert_array_equal(imp.head_importance(model, labelled, MAX_TOKENS, 3, method=method),
                                      imp.normalise_importance(raws[method], how))
        np.testing.assert_array_equal(imp.head_importance(model, labelled, MAX_TOKENS, 3, method=method,
                                                          normalise="none"), raws[method])
    assert not np.allclose(imp.normalise_importance(raws["t3vis"]), imp.normalise_importance(raws["michel"]))


def test_disk_cache_round_trip_keyed_by_method(peaked_longformer, labelled, tmp_path, monkeypatch):
    model = peaked_longformer
    first = {m: imp.cached_head_importance(model, labelled, MAX_TOKENS, 3, method=m, cache_dir=tmp_path)
             for m in imp.IMPORTANCE_METHODS}
    paths = {m: imp.importance_cache_path(model, labelled, MAX_TOKENS, 3, cache_dir=tmp_path, method=m)
             for m in imp.IMPORTANCE_METHODS}
    assert len(set(paths.values())) == 2
    for m, path in paths.items():
        assert path.is_file() and path.parent.name == "head_importance"
        assert path.name.startswith(m + "-") and model.fingerprint in path.name
        np.testing.assert_array_equal(_read(path), imp.raw_head_importance(model, labelled, MAX_TOKENS, 3,
                                                                              method=m))
    assert not list(tmp_path.glob("head_importance/*.tmp"))
    assert not np.array_equal(first["t3vis"], first["michel"])

    def boom(*a, **k):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(imp, "raw_head_importance", boom)
    for m in imp.IMPORTANCE_METHODS:
        np.testing.assert_array_equal(imp.cached_head_importance(model, labelled, MAX_TOKENS, 3, method=m,
                                                                 cache_dir=tmp_path), first[m])
    monkeypatch.undo()
    paths["t3vis"].write_bytes(b"not an array")  # a corrupt entry is recomputed and rewritten
    again = imp.cached_head_importance(model, labelled, MAX_TOKENS, 3, cache_dir=tmp_path)
    np.testing.assert_array_equal(again, first["t3vis"])
    assert _read(paths["t3vis"]).shape == (2, 2)


def _read(path):
    return np.load(io.BytesIO(unsealed(path.read_bytes())), allow_pickle=False)


def test_import_npy_and_pt(tmp_path):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "a.npy", values)
    torch.save(torch.tensor(values), tmp_path / "b.pt")
    torch.save({"head_importance": torch.tensor(values)}, tmp_path / "c.pt")
    for name in ("a.npy", "b.pt", "c.pt"):
        np.testing.assert_array_equal(imp.load_head_importance(tmp_path / name, 2, 3), values)
    raw = (tmp_path / "b.pt").read_bytes()
    np.testing.assert_array_equal(imp.load_head_importance(raw, filename="upload.pt"), values)
    with pytest.raises(imp.HeadImportanceError, match="2 layers x 2 heads"):
        imp.load_head_importance(tmp_path / "a.npy", 2, 2)


class _Evil:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_import_refuses_pickles(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([_Evil()], dtype=object), allow_pickle=True)
    with pytest.raises(imp.HeadImportanceError, match="no pickled objects"):
        imp.load_head_importance(tmp_path / "obj.npy")
    torch.save({"x": _Evil()}, tmp_path / "obj.pt")
    with pytest.raises(imp.HeadImportanceError):
        imp.load_head_importance(tmp_path / "obj.pt")
    with pytest.raises(imp.HeadImportanceError, match="No head-importance file"):
        imp.load_head_importance(tmp_path / "missing.npy")
    (tmp_path / "x.txt").write_text("1 2 3")
    with pytest.raises(imp.HeadImportanceError, match=".npy or .pt"):
        imp.load_head_importance(tmp_path / "x.txt")
    np.save(tmp_path / "nan.npy", np.array([[np.nan, 1.0]]))
    with pytest.raises(imp.HeadImportanceError, match="NaN"):
        imp.load_head_importance(tmp_path / "nan.npy")


def test_dataset_validation(peaked_longformer):
    with pytest.raises(imp.HeadImportanceError, match="label"):
        imp.raw_head_importance(peaked_longformer, pd.DataFrame({"text": ["a b"]}))
    with pytest.raises(imp.HeadImportanceError, match="outside"):
        imp.raw_head_importance(peaked_longformer, pd.DataFrame({"text": ["a b"], "label": [7]}))
    one = pd.DataFrame({"text": ["a b"], "label": [0]})
    with pytest.raises(imp.HeadImportanceError, match="Unknown head-importance method 'taylor'.*t3vis"):
        imp.raw_head_importance(peaked_longformer, one, method="taylor")
    with pytest.raises(imp.HeadImportanceError, match="Unknown head-importance method"):
        imp.cached_head_importance(peaked_longformer, one, method="")


def test_layouts_it_cannot_slice(tiny_bert, labelled):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    distil = DistilBertForSequenceClassification(DistilBertConfig(vocab_size=64, dim=32, n_layers=2, n_heads=2,
                                                                  hidden_dim=64)).eval()
    other = dataclasses.replace(tiny_bert, model=distil)  # attention.q_lin / out_lin: not the BERT layout
    for method in imp.IMPORTANCE_METHODS:
        with pytest.raises(imp.HeadImportanceError, match="cannot slice .* no encoder layer list"):
            imp.raw_head_importance(other, labelled, MAX_TOKENS, method=method)
    uneven = copy.deepcopy(tiny_bert.model)
    uneven.bert.encoder.layer[1].attention.self.query = torch.nn.Linear(32, 30)
    with pytest.raises(imp.HeadImportanceError, match="layer 1's projections do not split into 2 equal heads"):
        imp.raw_head_importance(dataclasses.replace(tiny_bert, model=uneven), labelled, MAX_TOKENS)
