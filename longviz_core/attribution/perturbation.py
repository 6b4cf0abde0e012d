"""Perturbation explainers over units: occlusion (captum's FeatureAblation) and Shapley value sampling (captum's
ShapleyValueSampling), each unit of model.segments one feature of captum's feature mask, removed by writing the
deletion test's replacement token over its tokens (model.copies: the same copies, forward and batches).

With p the head's explained quantity of the target class (model.heads: its softmax probability, a multi-label
head's sigmoid, a regression head's score) and x∖S the document with the units in S replaced:

    occlusion  φ_u = p(x) - p(x∖{u})                                           1 + units forwards
    shapley    φ_u = E_π [p(x∖{units after u in π}) - p(x∖{u and the units after it in π})]
               over n_samples random orders π of the units (Castro et al. 2009), or over all of them when there
               are no more orders than n_samples (units! <= n_samples: the exact Shapley value, captum's
               ShapleyValues)                                     1 + units x min(n_samples, units!) forwards

Shapley's values add up to p(x) - p(x with every unit replaced) for every sample of orders (efficiency). The
explanation's score of a token is its unit's φ divided by the unit's tokens (Segments.per_token), so the sum over
a unit's tokens, what every view and the deletion test by units read, is φ_u; special tokens score 0.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ExplainerError, whole_number
from ..model.copies import REPLACEMENTS, copy_logits, default_batch_size, replacement_id
from ..model.segments import UNITS, segment
from ..progress import report


class _Copies:
    """captum's forward: (B, m) text ids -> (B,) float64 p of the target, the special tokens put back around each
    copy; counts the copies and reports progress against the `total` expected."""

    def __init__(self, model, analysis, target: int, total: int, progress, label: str) -> None:
        self.model, self.enc, self.target = model, analysis.encoded, int(target)
        self.total, self.progress, self.label, self.copies = total, progress, label, 0

    def __call__(self, text_ids: torch.Tensor) -> torch.Tensor:
        enc = self.enc
        ids = np.repeat(enc.input_ids[None, :], text_ids.shape[0], axis=0)  # (B, n)
        ids[:, enc.prefix : enc.n - enc.suffix] = text_ids.cpu().numpy()
        out = self.model.head.explained(copy_logits(self.model, enc, ids), self.target)  # (B,)
        self.copies += len(ids)
        report(self.progress, min(1.0, self.copies / self.total), f"{self.label}: {self.copies:,} of "
               f"{self.total:,} copies")
        return out.cpu()


def _setup(model, analysis, unit, replacement, batch_size):
    """(segments, text ids (1, m), feature mask (1, m): each text token's unit, baseline id, copies per forward)."""
    segments = segment(analysis, unit)
    enc = analysis.encoded
    text = slice(enc.prefix, enc.n - enc.suffix)
    ids = torch.as_tensor(enc.input_ids[text], dtype=torch.long)[None]  # (1, m)
    mask = torch.tensor(segments.unit_of_token[text], dtype=torch.long)[None]  # (1, m)
    batch = default_batch_size(model, enc.n) if batch_size is None else int(batch_size)
    return segments, ids, mask, replacement_id(model, replacement, ExplainerError), batch


def check(settings: dict, model=None) -> None:
    """Occlusion's and Shapley sampling's option values (ExplainerError), before any copy is scored: the unit,
    the replacement (with `model`: one its tokenizer has a token for), the batch size, and Shapley's samples and
    seed."""
    if settings["unit"] not in UNITS:
        raise ExplainerError(f"unit must be one of {', '.join(UNITS)}, got {settings['unit']!r}")
    replacement = settings["replacement"]
    if replacement not in REPLACEMENTS:
        raise ExplainerError(f"replacement must be one of {', '.join(REPLACEMENTS)}, got {replacement!r}")
    if model is not None:
        replacement_id(model, replacement, ExplainerError)  # the tokenizer has a token for it
    if settings["batch_size"] is not None:
        whole_number(settings["batch_size"], "batch_size (copies per forward)", lo=1, error=ExplainerError)
    if "n_samples" in settings:
        whole_number(settings["n_samples"], "n_samples (orders of the units sampled)", lo=1, error=ExplainerError)
        whole_number(settings["seed"], "seed (of the sampled orders)", lo=0, error=ExplainerError)


def _unit_scores(attributions: torch.Tensor, segments, prefix: int) -> np.ndarray:
    """(units,) float64 from captum's (1, m) attributions, every token holding its unit's value."""
    first = np.array([a for a, _ in segments.spans], dtype=np.int64) - prefix  # (units,)
    return attributions[0].double().cpu().numpy()[first]


def _every_order(units: int, limit: int) -> int | None:
    """units! (the orders of the units) when it is at most `limit`, else None (without computing a huge one)."""
    count = 1
    for k in range(2, units + 1):
        count *= k
        if count > limit:
            return None
    return count


def occlusion(model, analysis, target, unit="sentence", replacement="mask", batch_size=None, _progress=None):
    """(n,) scores: each unit's p(x) - p(x with the unit replaced), spread over its tokens (module docstring)."""
    from captum.attr import FeatureAblation

    segments, ids, mask, baseline, batch = _setup(model, analysis, unit, replacement, batch_size)
    forward = _Copies(model, analysis, target, 1 + len(segments), _progress, "Occlusion")
    phi = FeatureAblation(forward).attribute(ids, baselines=baseline, feature_mask=mask,
                                             perturbations_per_eval=batch)
    return segments.per_token(_unit_scores(phi, segments, analysis.encoded.prefix))


def shapley(model, analysis, target, unit="sentence", n_samples=25, seed=0, replacement="mask", batch_size=None,
            _progress=None):
    """(n,) scores: each unit's Shapley value of p, by sampled (or all) orders of the units (module docstring)."""
    from captum.attr import ShapleyValues, ShapleyValueSampling

    n_samples, seed = int(n_samples), int(seed)  # checked by `check`
    segments, ids, mask, baseline, batch = _setup(model, analysis, unit, replacement, batch_size)
    units = len(segments)
    every = _every_order(units, n_samples)  # every order costs no more than the samples: exact values
    exact = every is not None
    orders = every if exact else n_samples
    forward = _Copies(model, analysis, target, 1 + units * orders, _progress, "Shapley sampling")
    method = ShapleyValues(forward) if exact else ShapleyValueSampling(forward)
    with torch.random.fork_rng(devices=[]):  # captum draws its orders from torch's global generator
        torch.manual_seed(seed)
        phi = method.attribute(ids, baselines=baseline, feature_mask=mask, perturbations_per_eval=batch,
                               **({} if exact else {"n_samples": n_samples}))
    return segments.per_token(_unit_scores(phi, segments, analysis.encoded.prefix))


__all__ = ["occlusion", "shapley"]
