"""Head importance: one number per attention head saying how much the classifier's loss on a labelled dataset
rests on it, used to scale heads (paper §3.1 "Scaling Attentions by Head Importance", which follows Molchanov
et al. 2019 and T3-Vis, Li et al. 2021). Two definitions; IMPORTANCE_METHODS names them for pages and docs.

"t3vis" (default) — Taylor importance exactly as T3-Vis computes it, the code that made the paper's
head_importance.pt (github.com/raymondzmc/T3-Vis, branch longformertest: application/utils/head_importance.py,
called from run_longformer_classification.py):

    G = sum over documents d of dL_d/dtheta      (L_d: cross-entropy of d with its gold label, model in eval mode;
                                                  other heads: their own loss, model.heads.Head.loss)
    I[l, h] = sum over theta in S(l, h) of (theta * G_theta)^2

S(l, h) is head h's share of layer l's attention: its rows of W_Q, W_K, W_V and of their biases, and its columns
of the attention output projection W_O (W_O's bias is shared by all heads and left out). The model's family
(model.families.Family.head_parameters) names them: BERT / RoBERTa / Longformer / BigBird
`attention.self.{query,key,value}` and `attention.output.dense` (for Longformer the local projections, not the
`*_global` ones, as in T3-Vis); ModernBERT's fused `attn.Wqkv` (head h's rows in each of its Q, K and V thirds)
and `attn.Wo`; EuroBERT / GTE / UltraBERT `self_attn.{q,k,v,o}_proj`.
The scores are then min-max scaled to [0, 1] over all layers and heads at once (T3-Vis's helpers.normalize).
G is a sum and the square is taken after the accumulation: T3-Vis calls loss.backward() once per batch without
zeroing the gradients and recomputes the scores from the accumulated .grad after every batch, so the scores it
keeps come from the full sum. Its batch loss is the batch mean (16 documents); here each document is one step,
weighted equally, which scales G by a constant when T3-Vis's batches are full, and the min-max removes it.

"michel" — the gate gradient of Michel et al. 2019 ("Are Sixteen Heads Really Better than One?"). Every head
gets a gate xi = 1 multiplying its slice of the attention context just before W_O (a forward pre-hook on W_O,
since transformers 5 dropped `head_mask`); one gate per document, as transformers'
bertology script (adapted from Michel's code) has with a batch of one:

    I[l, h] = mean over documents d of |dL_d / dxi[l, h]|

normalised as that script does by default: each layer divided by its L2 norm, then min-max over all heads (the
script divides by the number of tokens rather than documents, a constant the per-layer norm removes; Michel's
own code takes the absolute value per token rather than per document).

Normalisations (`normalise_importance`): "minmax" (T3-Vis), "layer+minmax" (Michel), "layer" (L2 per layer
only), "none". `normalise=None` picks the method's own (DEFAULT_NORMALISATION).

The raw scores are persisted under $LONGVIZ_CACHE_DIR/head_importance/ keyed by the method, the model and
dataset fingerprints and the settings, so the app computes them once. A (layers, heads) array can also be
imported from .npy (allow_pickle=False) or .pt/.pth (torch.load(weights_only=True)), like the paper's
head_importance.pt.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch

from .._disk import METADATA_BYTES, cache_folder, read_file, read_sealed, write_sealed
from ..errors import LongvizError, whole_number
from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.families import FamilyLayoutError, HeadParameters
from ..model.loading import LoadedModel, dataset_fingerprint
from ..progress import Progress, report
from ..runtime import COMPUTE

IMPORTANCE_METHODS: dict[str, str] = {
    "t3vis": "Taylor (T3-Vis): Σ(w·∇w)² per head, global min-max",
    "michel": "Gate gradient (Michel et al. 2019): mean |∂L/∂ξ|, per-layer L2 then min-max",
}
METHOD_NAMES: dict[str, str] = {"t3vis": "Taylor (T3-Vis)", "michel": "Gate gradient (Michel et al.)"}
DEFAULT_METHOD = "t3vis"
NORMALISATIONS: tuple[str, ...] = ("minmax", "layer+minmax", "layer", "none")
DEFAULT_NORMALISATION: dict[str, str] = {"t3vis": "minmax", "michel": "layer+minmax"}
DEFAULT_EXAMPLES = 32


class HeadImportanceError(LongvizError, ValueError):
    """Head importance cannot be computed or imported (no labels, wrong shape, unknown layout, unreadable file)."""


def head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    method: str = DEFAULT_METHOD,
    normalise: str | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """(layers, heads) head importance by `method` ("t3vis" or "michel", see the module docstring) over the first
    `max_examples` labelled documents of `dataset` (a DataFrame with `text` and `label`), normalised per
    `normalise` (None = the method's own, DEFAULT_NORMALISATION)."""
    how = _normalisation(method, normalise)
    raw = raw_head_importance(model, dataset, max_tokens, max_examples, progress, method=method)
    return normalise_importance(raw, how)


def raw_head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    progress: Progress | None = None,
    *,
    method: str = DEFAULT_METHOD,
) -> np.ndarray:
    """(layers, heads) float64 unnormalised scores: "t3vis" the sum over S(l, h) of (theta * G)^2 with G the loss
    gradient summed over the documents; "michel" the mean over the documents of |dL/d gate|."""
    _check_method(method)
    texts, labels = _labelled(dataset, max_examples, model.num_labels)
    compute = _taylor_t3vis if method == "t3vis" else _gate_gradient
    return compute(model, texts, labels, max_tokens, progress)


def normalise_importance(raw: np.ndarray, how: str = "minmax") -> np.ndarray:
    """Normalise raw importance: "minmax" (one min-max over all layers and heads to [0, 1]; T3-Vis), "layer"
    (each layer divided by its L2 norm), "layer+minmax" (both, in that order; Michel et al.'s script), "none".
    Where every head has the same score the min-max gives 1 everywhere."""
    if how not in NORMALISATIONS:
        raise HeadImportanceError(f"normalise must be one of {NORMALISATIONS}, got {how!r}")
    scores = _check_array(raw, None)
    if how == "none":
        return scores
    if how.startswith("layer"):
        norms = np.sqrt((scores**2).sum(axis=1, keepdims=True))
        scores = np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)
    if how.endswith("minmax"):
        lo, hi = scores.min(), scores.max()
        scores = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
    return scores


def cached_head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    method: str = DEFAULT_METHOD,
    normalise: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """`head_importance`, with the raw scores read from / written to the disk cache (one entry per method)."""
    how = _normalisation(method, normalise)
    raw = cached_raw_head_importance(model, dataset, max_tokens, max_examples, method=method, cache_dir=cache_dir,
                                     progress=progress)
    return normalise_importance(raw, how)


def cached_raw_head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    *,
    method: str = DEFAULT_METHOD,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """`raw_head_importance`, read from / written to the disk cache (one entry per method)."""
    path = importance_cache_path(model, dataset, max_tokens, max_examples, cache_dir, method=method)
    raw = _read_cached(path, (model.num_layers, model.num_heads))
    if raw is None:
        raw = raw_head_importance(model, dataset, max_tokens, max_examples, progress, method=method)
        buf = io.BytesIO()
        np.save(buf, raw, allow_pickle=False)
        write_sealed(path, buf.getvalue())
    else:
        report(progress, 1.0, "head importance read from the cache")
    return raw


def importance_cache_path(model: LoadedModel, dataset, max_tokens, max_examples, cache_dir=None, *,
                          method: str = DEFAULT_METHOD) -> Path:
    _check_method(method)
    max_tokens = whole_number(max_tokens, "max_tokens", lo=1, error=HeadImportanceError)
    n = len(dataset) if max_examples is None else min(_check_examples(max_examples), len(dataset))
    name = f"{method}-{model.fingerprint}-{dataset_fingerprint(dataset)}-t{max_tokens}-m{n}.npy.sealed"
    return cache_folder("head_importance", cache_dir) / name


def load_head_importance(source, num_layers: int | None = None, num_heads: int | None = None,
                         filename: str | None = None) -> np.ndarray:
    """A (layers, heads) array from a .npy or .pt/.pth file (a path, or bytes with `filename` for the format).

    Pickles are refused (allow_pickle=False / weights_only=True). A .pt may hold a tensor, an array or a dict
    with a single tensor. The shape is checked against `num_layers` x `num_heads` when given."""
    if num_layers is not None and num_heads is not None:
        num_layers = whole_number(num_layers, "num_layers", lo=1, error=HeadImportanceError)
        num_heads = whole_number(num_heads, "num_heads", lo=1, error=HeadImportanceError)
    if isinstance(source, (bytes, bytearray)):
        data, name = bytes(source), (filename or "")
    else:
        path = Path(source).expanduser()
        try:
            data = read_file(path, f"The head-importance file '{source}'", METADATA_BYTES, HeadImportanceError,
                             fix="give a .npy or .pt/.pth file of (layers, heads) values")
        except FileNotFoundError:
            raise HeadImportanceError(f"No head-importance file at '{source}'.") from None
        name = filename or path.name
    name = name.lower()
    try:
        if name.endswith(".npy") or data[:6] == b"\x93NUMPY":
            value = np.load(io.BytesIO(data), allow_pickle=False)
        elif name.endswith((".pt", ".pth", ".bin")) or data[:2] == b"PK":
            value = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        else:
            raise HeadImportanceError("Head importance must be a .npy or .pt/.pth file.")
    except HeadImportanceError:
        raise
    except Exception as exc:  # numpy / torch raise many types for bad or pickled files
        raise HeadImportanceError(
            f"Could not read the head-importance file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). "
            "It must be a plain array saved with numpy.save or torch.save (no pickled objects)."
        ) from exc
    if isinstance(value, dict):
        tensors = [v for v in value.values() if isinstance(v, (torch.Tensor, np.ndarray))]
        if len(tensors) != 1:
            raise HeadImportanceError("The .pt file holds a dict; expected exactly one tensor in it.")
        value = tensors[0]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    expected = (num_layers, num_heads) if num_layers is not None and num_heads is not None else None
    return _check_array(value, expected)


# ---------------------------------------------------------------------------------------------- workers
def _document_loss(model: LoadedModel, text: str, label: int, max_tokens: int) -> torch.Tensor:
    """The head's training loss (Head.loss: cross-entropy for a single-label head) of one document with its gold
    label, with the autograd graph (caller enables grad)."""
    enc = model.encode(text, max_tokens)
    logits = model(**model.family.inputs(enc, model.device)).logits
    return model.head.loss(logits.double()[0], label)


def _taylor_t3vis(model: LoadedModel, texts, labels, max_tokens, progress) -> np.ndarray:
    blocks = _attention_blocks(model)
    params = [p for b in blocks for p, *_ in b.slices]
    total = [torch.zeros(p.shape, dtype=torch.float64, device=p.device) for p in params]  # G, summed over documents
    with COMPUTE.hold():
        for done, (text, label) in enumerate(zip(texts, labels)):
            with torch.enable_grad():
                loss = _document_loss(model, text, label, max_tokens)
                # autograd.grad, not backward(): the gradients come back here and the shared model's
                # parameters keep .grad empty.
                grads = torch.autograd.grad(loss, params)
            for acc, g in zip(total, grads):
                acc += g.detach().double()
            report(progress, (done + 1) / len(texts), f"head importance: document {done + 1}/{len(texts)}")
    H = model.num_heads
    scores = torch.zeros(len(blocks), H, dtype=torch.float64)  # (layers, heads)
    g = iter(total)
    with torch.no_grad():
        for layer, block in enumerate(blocks):
            for p, axis, parts, group in block.slices:
                sq = (p.double() * next(g)) ** 2  # axis = parts x (heads / group) x head_dim
                shape = (*sq.shape[:axis], parts, H // group, -1, *sq.shape[axis + 1:])
                per_slice = sq.reshape(shape).movedim(axis + 1, 0).reshape(H // group, -1).sum(1)  # (heads / group,)
                # a key/value head shared by `group` query heads gives each of them an equal share
                scores[layer] += per_slice.repeat_interleave(group).cpu() / group
    return scores.numpy()


def _gate_gradient(model: LoadedModel, texts, labels, max_tokens, progress) -> np.ndarray:
    L, H = model.num_layers, model.num_heads
    blocks = _attention_blocks(model)
    # float64 gates: their gradient comes back in float64 whatever the model's dtype
    gates = torch.ones(L, H, dtype=torch.float64, device=model.device, requires_grad=True)
    total = torch.zeros(L, H, dtype=torch.float64)  # (layers, heads): sum over documents of |dL/d gate|
    handles = []
    try:
        for layer, block in enumerate(blocks):
            handles.append(block.output.register_forward_pre_hook(_gate_hook(gates, layer, H)))
        with COMPUTE.hold():
            for done, (text, label) in enumerate(zip(texts, labels)):
                with torch.enable_grad():
                    loss = _document_loss(model, text, label, max_tokens)
                    # only the gates get gradients; the shared model's parameters keep .grad empty
                    (grad,) = torch.autograd.grad(loss, gates)
                total += grad.detach().abs().cpu()
                report(progress, (done + 1) / len(texts), f"head importance: document {done + 1}/{len(texts)}")
    finally:
        for handle in handles:
            handle.remove()
    return (total / len(texts)).numpy()


def _gate_hook(gates: torch.Tensor, layer: int, num_heads: int):
    """Pre-hook multiplying each head's slice of the context (batch, n, heads * head_dim) by its gate."""

    def hook(module, args):
        context = args[0]
        shape = context.shape
        gated = context.view(*shape[:-1], num_heads, shape[-1] // num_heads) * gates[layer].to(context.dtype)[:, None]
        return (gated.view(shape), *args[1:])

    return hook


def _attention_blocks(model: LoadedModel) -> list[HeadParameters]:
    """Every layer's per-head attention parameters and W_O, in layer order (Family.head_parameters)."""
    try:
        blocks = model.family.head_parameters(model.model)
    except FamilyLayoutError as exc:
        raise HeadImportanceError(f"Head importance cannot slice this model's heads: {exc}") from exc
    if len(blocks) != model.num_layers:
        raise HeadImportanceError(f"Head importance found attention in {len(blocks)} of {model.num_layers} layers "
                                  "of this model.")
    return blocks


def _check_method(method: str) -> None:
    if method not in IMPORTANCE_METHODS:
        raise HeadImportanceError(f"Unknown head-importance method {method!r}: use one of {tuple(IMPORTANCE_METHODS)}.")


def _normalisation(method: str, normalise: str | None) -> str:
    _check_method(method)
    how = DEFAULT_NORMALISATION[method] if normalise is None else normalise
    if how not in NORMALISATIONS:
        raise HeadImportanceError(f"normalise must be one of {NORMALISATIONS}, got {how!r}")
    return how


def _check_examples(max_examples) -> int:
    return whole_number(max_examples, "max_examples (documents to score heads on)", lo=1, error=HeadImportanceError)


def _labelled(dataset, max_examples, num_labels: int) -> tuple[list[str], list[int]]:
    if dataset is None or "text" not in getattr(dataset, "columns", ()):
        raise HeadImportanceError("Head importance needs a dataset with a text column.")
    if "label" not in dataset.columns:
        raise HeadImportanceError("Head importance needs labelled documents: the dataset has no label column.")
    rows = dataset if max_examples is None else dataset.head(_check_examples(max_examples))
    if len(rows) == 0:
        raise HeadImportanceError("The dataset has no documents.")
    labels = [int(v) for v in rows["label"]]
    bad = [v for v in labels if not 0 <= v < num_labels]
    if bad:
        raise HeadImportanceError(f"Labels {sorted(set(bad))[:5]} are outside the model's classes 0..{num_labels - 1}.")
    return list(rows["text"]), labels


def _check_array(value, expected) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise HeadImportanceError(f"Head importance must be numeric, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if arr.ndim != 2:
        raise HeadImportanceError(f"Head importance must be a (layers, heads) array, got shape {arr.shape}.")
    if expected is not None and arr.shape != tuple(expected):
        raise HeadImportanceError(
            f"Head importance has shape {arr.shape} but the model has {expected[0]} layers x {expected[1]} heads."
        )
    if not np.all(np.isfinite(arr)):
        raise HeadImportanceError("Head importance contains NaN or infinite values.")
    return arr


def _read_cached(path: Path, shape) -> np.ndarray | None:
    """The cached raw scores, or None when absent or unreadable (then they are recomputed and rewritten)."""
    return read_sealed(path, lambda body: _check_array(np.load(io.BytesIO(body), allow_pickle=False), shape))
