"""Head importance by Taylor expansion (paper 3.1 "Scaling Attentions by Head Importance"; Michel et al. 2019,
"Are Sixteen Heads Really Better than One?"; Molchanov et al. 2019).

Every head h gets a gate xi_h = 1 that multiplies its slice of the attention context just before the
attention output projection (a forward pre-hook on `...attention.output.dense`, since transformers 5 dropped
`head_mask`). The importance is the expected absolute first-order change of the loss when the head is removed:

    I_h = mean over labelled examples x of | dL(x) / d xi_h |      (L = cross-entropy with the true label)

Normalisation (`normalise_importance`): "layer" divides each layer's scores by their L2 norm (Michel et al.'s
code, also used by T3-vis, which the paper follows); "global" then min-max scales all heads to [0, 1] (the
other step of that code); "none" keeps the raw means.

The raw scores are persisted under $LONGVIZ_CACHE_DIR/head_importance/ keyed by the model and dataset
fingerprints and the settings, so the app computes them once. A (layers, heads) array can also be imported
from .npy (allow_pickle=False) or .pt/.pth (torch.load(weights_only=True)), like the paper's head_importance.pt.
"""
from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..encoding import DEFAULT_MAX_TOKENS, encode
from ..errors import LongvizError
from ..loading import LoadedModel, dataset_fingerprint
from ..runtime import COMPUTE
from ..types import Progress, report

NORMALISATIONS: tuple[str, ...] = ("layer", "global", "none")
DEFAULT_EXAMPLES = 32
_OUTPUT_DENSE = re.compile(r"(?:^|\.)layers?\.(\d+)\.attention\.output\.dense$")


class HeadImportanceError(LongvizError, ValueError):
    """Head importance cannot be computed or imported (no labels, wrong shape, unreadable file)."""


def head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    normalise: str = "layer",
    progress: Progress | None = None,
) -> np.ndarray:
    """(layers, heads) Taylor importance over the first `max_examples` labelled documents of `dataset`
    (a DataFrame with `text` and `label`), normalised per `normalise`."""
    raw = raw_head_importance(model, dataset, max_tokens, max_examples, progress)
    return normalise_importance(raw, normalise)


def raw_head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    progress: Progress | None = None,
) -> np.ndarray:
    """(layers, heads) float64: mean over examples of |dL/d gate|, unnormalised."""
    texts, labels = _labelled(dataset, max_examples, model.num_labels)
    modules = _output_projections(model)
    L, H = model.num_layers, model.num_heads
    gates = torch.ones(L, H, dtype=torch.float32, device=model.device, requires_grad=True)
    total = torch.zeros(L, H, dtype=torch.float64)
    handles = []
    try:
        for layer, module in enumerate(modules):
            handles.append(module.register_forward_pre_hook(_gate_hook(gates, layer, H)))
        with COMPUTE.hold():
            for done, (text, label) in enumerate(zip(texts, labels)):
                enc = encode(model.tokenizer, text, max_tokens, model_max=model.max_tokens,
                             position_offset=model.position_offset)
                inputs = enc.torch_inputs(model.device)
                if not model.is_longformer:
                    inputs.pop("global_attention_mask")
                with torch.enable_grad():
                    logits = model.model(**inputs).logits.float()
                    loss = torch.nn.functional.cross_entropy(
                        logits, torch.tensor([int(label)], device=logits.device)
                    )
                    # autograd.grad, not backward(): only the gates get gradients, the shared model's
                    # parameters keep .grad empty.
                    (grad,) = torch.autograd.grad(loss, gates)
                total += grad.detach().abs().double().cpu()
                report(progress, (done + 1) / len(texts), f"head importance: document {done + 1}/{len(texts)}")
    finally:
        for handle in handles:
            handle.remove()
    return (total / len(texts)).numpy()


def normalise_importance(raw: np.ndarray, how: str = "layer") -> np.ndarray:
    """Normalise raw importance: "layer" (L2 norm per layer), "global" (then min-max over all heads), "none"."""
    if how not in NORMALISATIONS:
        raise ValueError(f"normalise must be one of {NORMALISATIONS}, got {how!r}")
    scores = _check_array(raw, None)
    if how == "none":
        return scores
    norms = np.sqrt((scores**2).sum(axis=1, keepdims=True))
    scores = np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)
    if how == "global":
        lo, hi = scores.min(), scores.max()
        scores = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
    return scores


def cached_head_importance(
    model: LoadedModel,
    dataset,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_examples: int | None = DEFAULT_EXAMPLES,
    normalise: str = "layer",
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
) -> np.ndarray:
    """`head_importance`, with the raw scores read from / written to the disk cache."""
    path = importance_cache_path(model, dataset, max_tokens, max_examples, cache_dir)
    raw = _read_cached(path, (model.num_layers, model.num_heads))
    if raw is None:
        raw = raw_head_importance(model, dataset, max_tokens, max_examples, progress)
        _atomic_save(path, raw)
    else:
        report(progress, 1.0, "head importance read from the cache")
    return normalise_importance(raw, normalise)


def importance_cache_path(model: LoadedModel, dataset, max_tokens, max_examples, cache_dir=None) -> Path:
    from ..demo import cache_root

    n = len(dataset) if max_examples is None else min(int(max_examples), len(dataset))
    name = f"{model.fingerprint}-{dataset_fingerprint(dataset)}-t{int(max_tokens)}-m{n}.npy"
    return cache_root(cache_dir) / "head_importance" / name


def load_head_importance(source, num_layers: int | None = None, num_heads: int | None = None,
                         filename: str | None = None) -> np.ndarray:
    """A (layers, heads) array from a .npy or .pt/.pth file (a path, or bytes with `filename` for the format).

    Pickles are refused (allow_pickle=False / weights_only=True). A .pt may hold a tensor, an array or a dict
    with a single tensor. The shape is checked against `num_layers` x `num_heads` when given."""
    if isinstance(source, (bytes, bytearray)):
        data, name = bytes(source), (filename or "")
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise HeadImportanceError(f"No head-importance file at '{source}'.")
        data, name = path.read_bytes(), filename or path.name
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
def _gate_hook(gates: torch.Tensor, layer: int, num_heads: int):
    """Pre-hook multiplying each head's slice of the context (batch, n, heads * head_dim) by its gate."""

    def hook(module, args):
        context = args[0]
        shape = context.shape
        gated = context.view(*shape[:-1], num_heads, shape[-1] // num_heads) * gates[layer].to(context.dtype)[:, None]
        return (gated.view(shape), *args[1:])

    return hook


def _output_projections(model: LoadedModel) -> list[torch.nn.Module]:
    """The attention output projection of every layer, in layer order (BERT/RoBERTa/Longformer layout)."""
    found = {}
    for name, module in model.model.named_modules():
        match = _OUTPUT_DENSE.search(name)
        if match and isinstance(module, torch.nn.Linear):
            found[int(match.group(1))] = module
    if sorted(found) != list(range(model.num_layers)):
        raise HeadImportanceError(
            "Head importance needs the BERT-style layout (encoder.layer.<i>.attention.output.dense); "
            f"found it for {len(found)} of {model.num_layers} layers in this model."
        )
    return [found[i] for i in range(model.num_layers)]


def _labelled(dataset, max_examples, num_labels: int) -> tuple[list[str], list[int]]:
    if dataset is None or "text" not in getattr(dataset, "columns", ()):
        raise HeadImportanceError("Head importance needs a dataset with a text column.")
    if "label" not in dataset.columns:
        raise HeadImportanceError("Head importance needs labelled documents: the dataset has no label column.")
    if max_examples is not None and int(max_examples) < 1:
        raise ValueError(f"max_examples must be at least 1, got {max_examples}")
    rows = dataset if max_examples is None else dataset.head(int(max_examples))
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
    if not path.is_file():
        return None
    try:
        value = np.load(path, allow_pickle=False)
        return _check_array(value, shape)
    except (OSError, ValueError, HeadImportanceError):
        return None


def _atomic_save(path: Path, value: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, value, allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
