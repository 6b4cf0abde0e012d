"""One document through the model: the head's outputs, prediction and its attention (bands or layer by layer)."""
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
from .heads import MULTI_LABEL, MULTI_LABEL_CUT, SINGLE_LABEL, Head
from .layered import LayeredAttention
from .loading import LoadedModel
from .segments import Segments, segment


@dataclass(frozen=True)
class DocumentSummary:
    """What a result keeps of its document to show itself in a notebook (longviz_core.notebook): the tokens and the
    prediction, not the attention, which a result kept in a notebook or a cache would otherwise keep alive."""

    tokens: tuple[str, ...]
    labels: tuple[str, ...]  # (classes,) every class's name, by index
    probs: tuple[float, ...]  # (classes,) the head's outputs (DocumentAnalysis.probs)
    predicted: int  # DocumentAnalysis.predicted
    segments: Segments | None = None  # the units a result scored (occlusion by sentence: its sentences); None: tokens


@dataclass(frozen=True)
class DocumentAnalysis:
    text: str = field(repr=False)
    encoded: Encoded = field(repr=False)
    logits: np.ndarray  # (classes,)
    probs: np.ndarray  # (classes,) the head's outputs: softmax, independent sigmoids, or the score (model.heads)
    predicted: int  # the label explained by default (Head.predicted; 0 for a regression's score)
    head: Head
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
        """Class `i`'s name (a number outside id2label as itself); SelectionError unless `i` is a whole number."""
        i = whole_number(i, "class index", error=SelectionError)
        return str(self.id2label.get(i, i))

    @property
    def predicted_set(self) -> tuple[int, ...]:
        """What the head predicts: one label, every label with probability >= 0.5 (multi-label), or the score."""
        return self.head.predicted_set(self.probs)

    @property
    def prediction_words(self) -> str:
        """The prediction for a caption: 'X (p = 0.873)', 'X, Z (labels with p ≥ 0.5)' or 'score 1.2345'."""
        if self.head.regression:
            return f"score {self.probs[0]:.4f}"
        if self.head.kind == MULTI_LABEL:
            names = ", ".join(self.label_name(i) for i in self.predicted_set) or "no label"
            return f"{names} (labels with p ≥ {MULTI_LABEL_CUT:g})"
        return f"{self.label_name(self.predicted)} (p = {self.probs[self.predicted]:.3f})"

    def summary(self, unit: str | None = None) -> DocumentSummary:
        """The tokens and the prediction, for a result computed from this analysis to show itself; with `unit`
        (not "token"), the document's units of that kind, which the result shows as one box each."""
        return DocumentSummary(tuple(self.tokens), tuple(self.label_name(i) for i in range(len(self.probs))),
                               tuple(float(p) for p in self.probs), int(self.predicted),
                               None if unit in (None, "token") else segment(self, unit))

    def explained_name(self, target: int | None = None) -> str:
        """What an explanation of `target` (default: the predicted label) explains, in words."""
        target = self.predicted if target is None else whole_number(
            target, "target (the class explained)", 0, len(self.probs) - 1, error=SelectionError)
        return self.head.explained_name(self.label_name(target))


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
    probs = model.head.outputs(out.logits[0].float()).cpu().numpy()
    return DocumentAnalysis(
        text=text,
        encoded=enc,
        logits=logits,
        probs=probs,
        predicted=model.head.predicted(probs),
        head=model.head,
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
    """The head's outputs for many documents, (documents, classes): class probabilities (softmax or independent
    sigmoids) or the score; one forward each, no attentions."""
    texts = list(texts)
    out = np.zeros((len(texts), model.num_labels), dtype=np.float32)  # (documents, classes)
    for i, text in enumerate(texts):
        enc = model.encode(text, max_tokens)
        with COMPUTE.hold(), torch.no_grad():
            logits = model(**model.family.inputs(enc, model.device)).logits[0].float()
        out[i] = model.head.outputs(logits).cpu().numpy()
        report(progress, (i + 1) / max(len(texts), 1), f"Predicted {i + 1}/{len(texts)} documents")
    return out


DOCUMENT_CHOICES = ("false negative", "false positive", "most confident positive")


def pick_document(probs: np.ndarray, labels, how: str, positive: int = 1, seed: int = 0, *,
                  head: Head = Head(SINGLE_LABEL), threshold: float | None = None) -> int | None:
    """The paper's appendix A.2 choices: 'false negative' / 'false positive' (random, seeded) or
    'most confident positive', from `probs` = predict_probs (the head's outputs). Returns None when no document
    qualifies. A false negative or positive needs labels: DatasetError without them. `head`: the model's
    (LoadedModel.head); a softmax over classes unless given.

    A document is predicted positive when the argmax is `positive` (single-label), when label `positive`'s
    probability is >= 0.5 (multi-label), or when its score is >= `threshold` (regression: the labels are then
    read as 1 = positive, 0 = not; without a threshold a regression has no false negatives or positives, and its
    most confident positive is the highest score)."""
    if how not in DOCUMENT_CHOICES:
        raise SettingsError(f"Unknown document choice {how!r}: choose one of {', '.join(map(repr, DOCUMENT_CHOICES))}.")
    seed = whole_number(seed, "seed", lo=0)
    probs = np.asarray(probs)
    fewest = 1 if head.regression else 2
    if probs.ndim != 2 or probs.shape[1] < fewest:
        raise SettingsError(f"probs must be (documents, classes) with at least {fewest} classes, got shape "
                            f"{probs.shape}.")
    if head.regression:
        positive, threshold = 0, head.check_threshold(threshold)
    else:
        head.check_threshold(threshold)
        positive = whole_number(positive, "positive (the positive class)", 0, probs.shape[1] - 1,
                                error=SelectionError)
    if how == "most confident positive":
        return int(np.argmax(probs[:, positive]))
    if head.regression and threshold is None:
        raise SettingsError(f"A {how} of a regression head needs a score threshold (score >= threshold is "
                            "positive): give one, or pick the document by index or as the highest score.")
    if labels is None:
        raise DatasetError(f"A {how} needs a labelled dataset (a label column), and this one has no labels: choose "
                           "a labelled dataset, or pick the document by index or as the most confident positive.")
    labels = np.asarray(labels)
    said = head.says(probs, positive, threshold)
    gold = labels == (1 if head.regression else positive)
    if how == "false negative":
        pool = np.flatnonzero(gold & ~said)
    else:
        pool = np.flatnonzero(~gold & said)
    if pool.size == 0:
        return None
    return int(np.random.default_rng(seed).choice(pool))
