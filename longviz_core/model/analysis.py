"""One document through the model: probabilities, prediction and its attention (bands or layer by layer)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import DatasetError, SelectionError, SettingsError, whole_number
from ..progress import report
from ..runtime import COMPUTE
from .bands import AttentionBands
from .block_sparse import analyze_block_sparse
from .capture import analyze_layers
from .encoding import DEFAULT_MAX_TOKENS, Encoded, text_hash
from .families import BANDED_GLOBAL, BLOCK_SPARSE, LayerPattern
from .layered import LayeredAttention
from .loading import LoadedModel


@dataclass(frozen=True)
class DocumentAnalysis:
    text: str = field(repr=False)
    encoded: Encoded = field(repr=False)
    logits: np.ndarray  # (classes,)
    probs: np.ndarray  # (classes,)
    predicted: int
    attention: AttentionBands | LayeredAttention = field(repr=False)  # Longformer: bands; others: by layer
    model_fingerprint: str
    id2label: dict
    text_hash: str

    @property
    def tokens(self) -> list[str]:
        return self.encoded.tokens

    @property
    def input_ids(self) -> np.ndarray:
        return self.encoded.input_ids  # (n,)

    @property
    def n(self) -> int:
        return self.encoded.n

    @property
    def key(self) -> str:
        """Cache key for everything derived from this analysis."""
        return f"{self.model_fingerprint}-{self.text_hash}-{self.encoded.max_tokens}"

    def label_name(self, i: int) -> str:
        return str(self.id2label.get(int(i), i))


def analyze(model: LoadedModel, text: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> DocumentAnalysis:
    """Encode `text` (truncated to `max_tokens`), run the model once with attentions, keep the bands."""
    enc = model.encode(text, max_tokens)
    patterns = model.family.attention_patterns(enc.n)
    inputs = model.family.inputs(enc, model.device)
    with COMPUTE.hold(), torch.no_grad():
        if model.family.attention_interface:  # each layer by its pattern: banded, or streamed from Q and K
            out, attention = analyze_layers(model, inputs, patterns)
        elif any(p.kind == BLOCK_SPARSE for p in patterns):  # BigBird: the weights its block-sparse layers apply
            out, attention = analyze_block_sparse(model, inputs, enc.n)
        else:
            out = model(**inputs, output_attentions=True)
            attention = _bands(out, enc, patterns)
    logits = out.logits[0].float().cpu().numpy()
    probs = torch.softmax(out.logits[0].float(), dim=-1).cpu().numpy()
    return DocumentAnalysis(
        text=text,
        encoded=enc,
        logits=logits,
        probs=probs,
        predicted=int(np.argmax(probs)),
        attention=attention,
        model_fingerprint=model.fingerprint,
        id2label=dict(model.id2label),
        text_hash=text_hash(text),
    )


def _bands(out, enc: Encoded, patterns: tuple[LayerPattern, ...]) -> AttentionBands:
    """Longformer's banded + global layers from its band outputs; BigBird's full mode (bounded by the length at
    which it turns block-sparse) from the eager n x n weights, stored as a band of width n."""
    if all(p.kind == BANDED_GLOBAL for p in patterns):
        return AttentionBands.from_longformer(out.attentions, out.global_attentions, np.flatnonzero(enc.global_mask),
                                              enc.n)
    return AttentionBands.from_full(out.attentions, enc.n)


def predict_probs(model: LoadedModel, texts, max_tokens: int = DEFAULT_MAX_TOKENS, progress=None) -> np.ndarray:
    """Class probabilities for many documents, (documents, classes): one forward each, no attentions."""
    texts = list(texts)
    out = np.zeros((len(texts), model.num_labels), dtype=np.float32)  # (documents, classes)
    for i, text in enumerate(texts):
        enc = model.encode(text, max_tokens)
        with COMPUTE.hold(), torch.no_grad():
            logits = model(**model.family.inputs(enc, model.device)).logits[0].float()
        out[i] = torch.softmax(logits, dim=-1).cpu().numpy()
        report(progress, (i + 1) / max(len(texts), 1), f"Predicted {i + 1}/{len(texts)} documents")
    return out


DOCUMENT_CHOICES = ("false negative", "false positive", "most confident positive")


def pick_document(probs: np.ndarray, labels, how: str, positive: int = 1, seed: int = 0) -> int | None:
    """The paper's appendix A.2 choices: 'false negative' / 'false positive' (random, seeded) or
    'most confident positive'. Returns None when no document qualifies. A false negative or positive needs
    labels: DatasetError without them."""
    if how not in DOCUMENT_CHOICES:
        raise SettingsError(f"Unknown document choice {how!r}: choose one of {', '.join(map(repr, DOCUMENT_CHOICES))}.")
    probs = np.asarray(probs)
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise SettingsError(f"probs must be (documents, classes) with at least 2 classes, got shape {probs.shape}.")
    positive = whole_number(positive, "positive (the positive class)", 0, probs.shape[1] - 1, error=SelectionError)
    predicted = probs.argmax(axis=1)
    if how == "most confident positive":
        return int(np.argmax(probs[:, positive]))
    if labels is None:
        raise DatasetError(f"A {how} needs a labelled dataset (a label column), and this one has no labels: choose "
                           "a labelled dataset, or pick the document by index or as the most confident positive.")
    labels = np.asarray(labels)
    if how == "false negative":
        pool = np.flatnonzero((labels == positive) & (predicted != positive))
    else:
        pool = np.flatnonzero((labels != positive) & (predicted == positive))
    if pool.size == 0:
        return None
    return int(np.random.default_rng(seed).choice(pool))
