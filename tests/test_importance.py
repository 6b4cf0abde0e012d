"""Taylor head importance: finite differences of the loss, gate semantics, hygiene of the shared model,
normalisation, the disk cache and safe import."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from longviz_core import encode, load_model
from longviz_core.views import importance as imp
from tiny import make_tiny_longformer, text_of

MAX_TOKENS = 40


@pytest.fixture(scope="module")
def peaked_longformer(tmp_path_factory):
    """Larger initial weights: attention far from uniform, so every head matters measurably."""
    return load_model(str(make_tiny_longformer(tmp_path_factory.mktemp("imp"), initializer_range=0.5)))


@pytest.fixture(scope="module")
def labelled():
    return pd.DataFrame({"text": [text_of(30), " ".join(reversed(text_of(17).split())), text_of(44)],
                         "label": [0, 1, 1]})


def _losses(model, data, gates: torch.Tensor) -> np.ndarray:
    """Per-example cross-entropy with the heads gated by `gates` (the gates are not differentiated here)."""
    modules = imp._output_projections(model)
    handles = [m.register_forward_pre_hook(imp._gate_hook(gates, l, model.num_heads)) for l, m in enumerate(modules)]
    try:
        out = []
        for text, label in zip(data["text"], data["label"]):
            inputs = encode(model.tokenizer, text, MAX_TOKENS, position_offset=model.position_offset).torch_inputs()
            if not model.is_longformer:
                inputs.pop("global_attention_mask")
            with torch.no_grad():
                logits = model.model(**inputs).logits.double()
            out.append(torch.nn.functional.cross_entropy(logits, torch.tensor([int(label)])).item())
        return np.array(out)
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("which", ["longformer", "bert"])
def test_raw_importance_matches_finite_differences(which, peaked_longformer, tiny_bert, labelled):
    model = peaked_longformer if which == "longformer" else tiny_bert
    raw = imp.raw_head_importance(model, labelled, max_tokens=MAX_TOKENS, max_examples=None)
    L, H = model.num_layers, model.num_heads
    eps = 1e-2
    fd = np.zeros((L, H))
    for layer in range(L):
        for head in range(H):
            up, down = torch.ones(L, H), torch.ones(L, H)
            up[layer, head] += eps
            down[layer, head] -= eps
            per_example = (_losses(model, labelled, up) - _losses(model, labelled, down)) / (2 * eps)
            fd[layer, head] = np.abs(per_example).mean()  # E_x |dL(x)/d xi_h|
    assert raw.shape == (L, H)
    assert np.all(fd > 0)
    np.testing.assert_allclose(raw, fd, rtol=2e-2)


def test_a_closed_gate_removes_the_head(peaked_longformer):
    """Gate 0 on (layer 1, head 0) == zeroing that head's value projections (local and global)."""
    model = peaked_longformer
    inputs = encode(model.tokenizer, text_of(25), MAX_TOKENS, position_offset=model.position_offset).torch_inputs()
    gates = torch.ones(model.num_layers, model.num_heads)
    gates[1, 0] = 0.0
    module = imp._output_projections(model)[1]
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


def test_shared_model_left_untouched_even_on_error(peaked_longformer, labelled):
    model = peaked_longformer
    imp.raw_head_importance(model, labelled, max_tokens=MAX_TOKENS, max_examples=2)
    bad = pd.DataFrame({"text": [text_of(10), "   "], "label": [0, 1]})  # the second text cannot be encoded
    with pytest.raises(Exception, match="empty"):
        imp.raw_head_importance(model, bad, max_tokens=MAX_TOKENS)
    for module in imp._output_projections(model):
        assert not module._forward_pre_hooks
    assert not model.model.training
    assert all(p.grad is None for p in model.model.parameters())
    assert all(p.requires_grad for p in model.model.parameters())


def test_normalisation():
    raw = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    layer = imp.normalise_importance(raw, "layer")
    np.testing.assert_allclose(layer, [[0.6, 0.8], [0.0, 0.0], [2**-0.5, 2**-0.5]])
    glob = imp.normalise_importance(raw, "global")
    assert glob.min() == 0.0 and glob.max() == 1.0
    np.testing.assert_allclose(glob, layer / 0.8)
    np.testing.assert_array_equal(imp.normalise_importance(raw, "none"), raw)
    with pytest.raises(ValueError, match="normalise"):
        imp.normalise_importance(raw, "softmax")


def test_disk_cache_round_trip(peaked_longformer, labelled, tmp_path, monkeypatch):
    model = peaked_longformer
    first = imp.cached_head_importance(model, labelled, MAX_TOKENS, max_examples=3, cache_dir=tmp_path)
    path = imp.importance_cache_path(model, labelled, MAX_TOKENS, 3, cache_dir=tmp_path)
    assert path.is_file() and path.parent.name == "head_importance"
    assert model.fingerprint in path.name
    assert not list(path.parent.glob("*.tmp"))

    def boom(*a, **k):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(imp, "raw_head_importance", boom)
    np.testing.assert_array_equal(imp.cached_head_importance(model, labelled, MAX_TOKENS, 3, cache_dir=tmp_path), first)
    monkeypatch.undo()
    path.write_bytes(b"not an array")  # a corrupt entry is recomputed and rewritten
    again = imp.cached_head_importance(model, labelled, MAX_TOKENS, 3, cache_dir=tmp_path)
    np.testing.assert_allclose(again, first, rtol=1e-6)
    assert np.load(path, allow_pickle=False).shape == (2, 2)


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
