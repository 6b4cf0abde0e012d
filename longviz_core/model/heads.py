"""What a classification head's outputs mean: the one place that knows head types.

transformers' rules, from the config: num_labels == 1 is a regression head (a score, e.g. a reward model);
problem_type "multi_label_classification" is a multi-label head (independent sigmoids, one per label); anything
else is single-label (a softmax over the labels). Every computation that turns logits into a number asks `Head`:

    kind            outputs(logits)       explained(logits, t)   decision (deletion flips)
    single_label    softmax               p_t                    argmax
    multi_label     sigmoid per label     sigmoid_t (one label)  sigmoid_t >= 0.5
    regression      the score itself      the score              score >= threshold, only when one is given
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SettingsError

SINGLE_LABEL, MULTI_LABEL, REGRESSION = "single_label", "multi_label", "regression"
KINDS = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
MULTI_LABEL_CUT = 0.5  # a multi-label head predicts every label whose sigmoid reaches this


class HeadError(SettingsError):
    """A setting that does not fit this head (a threshold on a probability head, a label it does not have)."""


@dataclass(frozen=True)
class Head:
    kind: str  # one of KINDS

    def __post_init__(self):
        if self.kind not in KINDS:
            raise HeadError(f"Unknown head kind {self.kind!r}: one of {', '.join(KINDS)}.")

    @classmethod
    def of_config(cls, config) -> "Head":
        """The head of a transformers config (its problem_type and num_labels, as transformers reads them)."""
        if int(config.num_labels) == 1:
            return cls(REGRESSION)
        if getattr(config, "problem_type", None) == "multi_label_classification":
            return cls(MULTI_LABEL)
        return cls(SINGLE_LABEL)

    @property
    def regression(self) -> bool:
        return self.kind == REGRESSION

    @property
    def probabilities(self) -> bool:
        """The outputs are probabilities (every head but a regression's score)."""
        return self.kind != REGRESSION

    # ------------------------------------------------------------------------------------------- numbers
    def outputs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., labels) -> (..., labels): the softmax, the independent sigmoids, or the score itself."""
        if self.kind == SINGLE_LABEL:
            return torch.softmax(logits, dim=-1)
        if self.kind == MULTI_LABEL:
            return torch.sigmoid(logits)
        return logits

    def log_outputs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., labels): the outputs on the scale the deletion test compares them on: log-probabilities (computed
        as log-softmax / log-sigmoid, not log of a rounded probability), or the score itself for regression."""
        if self.kind == SINGLE_LABEL:
            return torch.log_softmax(logits, dim=-1)
        if self.kind == MULTI_LABEL:
            return torch.nn.functional.logsigmoid(logits)
        return logits

    def explained(self, logits: torch.Tensor, target: int) -> torch.Tensor:
        """(..., labels) -> (...): the scalar an explanation of `target` explains (p_t, sigmoid_t, the score)."""
        return self.outputs(logits)[..., int(target)]

    def value(self, log_outputs: np.ndarray) -> np.ndarray:
        """Outputs back from `log_outputs`: probabilities (exp), or the score as it is."""
        return np.exp(log_outputs) if self.probabilities else np.asarray(log_outputs)

    def predicted(self, outputs: np.ndarray) -> int:
        """The label explained by default: the most probable (a multi-label head's too); 0 for a regression.
        An argmax, so `outputs` may as well be log_outputs."""
        return 0 if self.regression else int(np.argmax(outputs))

    def predicted_set(self, outputs: np.ndarray) -> tuple[int, ...]:
        """What the head predicts: the argmax alone; every label with probability >= 0.5 (possibly none);
        the score's one output for regression."""
        if self.kind == MULTI_LABEL:
            return tuple(int(i) for i in np.flatnonzero(np.asarray(outputs) >= MULTI_LABEL_CUT))
        return (self.predicted(outputs),)

    def says(self, outputs: np.ndarray, label: int, threshold: float | None = None) -> np.ndarray:
        """(..., labels) outputs -> (...) bool: the head predicts `label` (the argmax; probability >= 0.5; for
        regression the score >= `threshold`, which it then needs)."""
        v = np.asarray(outputs)
        if self.kind == SINGLE_LABEL:
            return np.argmax(v, axis=-1) == int(label)
        if self.kind == MULTI_LABEL:
            return v[..., int(label)] >= MULTI_LABEL_CUT
        if threshold is None:
            raise HeadError("A regression head predicts no label without a threshold: give one (score >= threshold).")
        return v[..., 0] >= threshold

    # ------------------------------------------------------------------------------------------- decisions
    def check_threshold(self, threshold: float | None) -> float | None:
        """`threshold` as a float: only a regression head takes one (its decision: score >= threshold)."""
        if threshold is None:
            return None
        if not self.regression:
            raise HeadError(f"A decision threshold is for a regression head's score; this head is {self.words}, "
                            "whose decisions are its labels.")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not math.isfinite(threshold):
            raise HeadError(f"The score threshold must be a finite number, got {threshold!r}.")
        return float(threshold)

    def has_decision(self, threshold: float | None) -> bool:
        """Whether a decision flip is defined: always for labels, for a score only against a threshold."""
        return not self.regression or threshold is not None

    def decision(self, log_outputs: np.ndarray, target: int, threshold: float | None = None) -> np.ndarray:
        """(..., labels) log_outputs -> (...) the decision a flip changes: the argmax (single-label), whether
        label `target` is predicted (multi-label: sigmoid >= 0.5), whether the score reaches `threshold`."""
        v = np.asarray(log_outputs)
        if self.kind == SINGLE_LABEL:
            return np.argmax(v, axis=-1)
        if self.kind == MULTI_LABEL:
            return v[..., int(target)] >= math.log(MULTI_LABEL_CUT)
        if threshold is None:
            raise HeadError("A regression head has no decision without a threshold: give one (score >= threshold).")
        return v[..., int(target)] >= threshold

    def loss(self, logits: torch.Tensor, label) -> torch.Tensor:
        """The training loss transformers uses for this head, for one document (logits (labels,)): cross-entropy
        with the gold label; binary cross-entropy with the gold label as the one present label; the squared
        error of the score."""
        if self.kind == SINGLE_LABEL:
            return torch.nn.functional.cross_entropy(logits[None], torch.tensor([int(label)], device=logits.device))
        if self.kind == MULTI_LABEL:
            gold = torch.zeros_like(logits)
            gold[int(label)] = 1.0
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, gold)
        return (logits[0] - float(label)) ** 2

    # ------------------------------------------------------------------------------------------- words
    @property
    def words(self) -> str:
        return {SINGLE_LABEL: "a single-label classifier (softmax)",
                MULTI_LABEL: "a multi-label classifier (independent sigmoids)",
                REGRESSION: "a regression head (one score)"}[self.kind]

    def explained_name(self, label: str) -> str:
        """What an explanation of the label named `label` explains: "the probability of X", "label X's
        probability", "the score"."""
        if self.kind == SINGLE_LABEL:
            return f"the probability of {label}"
        if self.kind == MULTI_LABEL:
            return f"label {label}'s probability"
        return "the score"

    @property
    def deletion_words(self) -> str:
        """What the deletion test's numbers mean for this head, for the pages ('' for a single-label head, the
        formulas' own case)."""
        if self.kind == MULTI_LABEL:
            return ("This head is multi-label: p is the sigmoid of the label explained, one label at a time, and its "
                    "decision flips when that sigmoid crosses 0.5.")
        if self.kind == REGRESSION:
            return ("This head is a regression: AOPC is the drop of the score itself, in score units; LOdds is "
                    "undefined (a score is not a probability); a decision flip needs a score threshold (score ≥ "
                    "threshold), and without one there are no decision flips to find.")
        return ""

    @property
    def unit(self) -> str:
        """The explained quantity's unit in a sentence: "probability" or "score"."""
        return "probability" if self.probabilities else "score"

    @property
    def symbol(self) -> str:
        """How formulas on the pages write the explained quantity of y."""
        return {SINGLE_LABEL: "p(y|x)", MULTI_LABEL: "σ_y(x)", REGRESSION: "s(x)"}[self.kind]


__all__ = ["Head", "HeadError", "KINDS", "MULTI_LABEL", "MULTI_LABEL_CUT", "REGRESSION", "SINGLE_LABEL"]
