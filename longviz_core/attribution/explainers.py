"""Explainers: one score per token for one document and one class, from the banded attention, from gradients,
or from both — one family behind one front door.

`EXPLAINERS` maps a method name to its metadata (label, source, cost class, whether scores are signed, options);
`explain(model, analysis, method, target=None, **options)` runs one and returns an `Explanation`: a float64 score
per token of the analysis (<s> and </s> included), the class explained, the wall time and the peak extra memory.
Definitions, with their sources, are in docs/methods.md#explainers. With z_t the target's logit, p_t the head's
explained quantity (model.heads: its softmax probability, a multi-label head's sigmoid_t, a regression's score),
e_i the embeddings-layer output of token i, h^l the input of layer l (h^0 = e), A_{l,h} head h's attention in
layer l (rows = queries), Ā_l = mean_h A_{l,h}, L layers, cls = the row the classifier reads (position 0, <s>;
a decoder's last token; under a family's mean pooling e_cls below is the vector 1/n: Family.read_row and
Family.readout):

    ig             Integrated Gradients (attribution.ig), L2-normalised, sign kept
    grad_x_input   Σ_d e_{i,d} · ∂z_t/∂e_{i,d}
    grad_norm      ‖∂z_t/∂e_i‖₂
    raw_attention  Ā_L[cls, :]                     (option row="received": the column sums of Ā_L)
    rollout        e_cls^T Ã_L ⋯ Ã_1,   Ã_l = rownorm(½ (Ā_l + I))                           Abnar & Zuidema 2020
    att_x_grad     mean_h A_{L,h}[cls, j] · ∂p_t/∂A_{L,h}[cls, j]                          Serrano & Smith 2019
    gae            e_cls^T (I + Ḡ_L) ⋯ (I + Ḡ_1),   Ḡ_l = mean_h (∂z_t/∂A_{l,h} ⊙ A_{l,h})⁺      Chefer et al. 2021
    attcat         Σ_{l<L} (Σ_d h^l_{i,d} · ∂z_t/∂h^l_{i,d}) · ᾱ^l_i,   ᾱ^l_i = mean_{h,q} A_{l,h}[q, i]
                                                                                    Qiang et al. 2022 (their code)
    random         the ranks of a seeded random permutation (evaluation.faithfulness.random_order's), specials 0
    occlusion      p_t(x) - p_t(x with unit u replaced), per unit (option unit: model.segments)  Zeiler & Fergus 2014
    shapley        Shapley value of p_t over the units, sampled orders          Štrumbelj & Kononenko 2010
                   (attribution.perturbation: captum FeatureAblation / ShapleyValueSampling with a feature mask
                   per unit; a token's score is its unit's divided by the unit's tokens)

Rollout and GAE never build an n x n matrix: the classifier reads cls, so only the cls row of the rolled-out
product is needed, and it is a vector pushed through each layer's matrix in its banded (plus global) form,
v <- v^T M, in O(n * window) per layer (`vecmat`, `cls_rollout`).

Attention gradients come from one backward pass with the probabilities in the graph. transformers' Longformer
zeroes the global tokens' rows of the returned local probabilities in place after using them, and returns the
global probabilities as a view, so the tensors it returns are not the ones the context was computed from (their
.grad stays empty). A forward hook on each self-attention module therefore registers a hook on the autograd node
that produced each returned tensor before that in-place write or view: its incoming gradient is d objective /
d probabilities. The other families (BERT, RoBERTa, ModernBERT, BigBird at full attention) return the very tensor
they multiply with the values, so a tensor hook does. Modules, layers and the embeddings come from the model's
family (model.families). Every hook is removed in `finally`. The returned probabilities are swapped for empty tensors
in the forward hook: autograd keeps what the backward needs, and the model's output tuple would otherwise hold a
second copy of every layer's band until the pass ends; the values multiplied with the gradients are the
analysis's own bands (same model, same inputs).
"""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import ExplainerError, finite_vector, whole_number
from ..model.analysis import DocumentAnalysis, DocumentSummary
from ..model.bands import AttentionBands
from ..model.loading import LoadedModel
from ..progress import Progress, report
from ..runtime import COMPUTE
from .backward import backward, token_dot
from .ig import DELTA_WARN, MAX_STEPS, integrated_gradients, validate_settings
from .peak_memory import PeakMemory
from .perturbation import check as check_perturbation
from .perturbation import occlusion, shapley
from .random_order import random_order

CLS = 0  # the position the classifier reads (<s> / [CLS])


@dataclass(frozen=True)
class Explainer:
    """Metadata of one explainer (the registry's values)."""

    name: str
    label: str
    source: str  # where the definition comes from
    cost: str  # cost class: "none", "attention" (reads the analysis's bands), "1 forward + backward", "IG",
    # or a count of forwards of perturbed copies ("1 + units forwards", "1 + n_samples x units forwards")
    signed: bool  # scores can be negative (evidence against the class); deletion ranks them high to low
    options: dict  # option name -> default
    compute: Callable = field(repr=False, compare=False)
    reports: bool = False  # compute takes `_progress` (a Progress) and reports on it
    # chosen when no explainers are named (DEFAULT_METHODS: the leaderboards, the command line): not Shapley
    # sampling, whose 1 + n_samples x units copies (3,751 on the demo's document 0) would outweigh all the others
    by_default: bool = True
    # (settings, model or None) -> None: the option values checked before anything is computed (check_options)
    check: Callable | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Explanation:
    method: str
    target: int  # the class explained
    scores: np.ndarray = field(repr=False)  # (n,) float64, one per token of the analysis, <s> and </s> included
    seconds: float  # wall time of the computation (IG read from its disk cache: the time it took when computed)
    peak_bytes: int | None  # peak memory above the level at the start (None: not measurable on this system)
    options: dict = field(default_factory=dict)  # every option that produced the scores, defaults included
    from_cache: bool = False  # IG read from its disk cache (peak_bytes is then that of the read)
    specials: tuple[int, int] = (1, 1)  # special tokens before and after the text (Encoded.prefix, .suffix)
    # the tokens and the prediction, for a notebook's display
    document: DocumentSummary | None = field(default=None, repr=False, compare=False)

    @property
    def text_scores(self) -> np.ndarray:
        """(n - specials,) the scores of the text tokens."""
        return self.scores[self.specials[0] : self.n - self.specials[1]]

    @property
    def label(self) -> str:
        return EXPLAINERS[self.method].label

    @property
    def n(self) -> int:
        return int(self.scores.shape[0])


# ------------------------------------------------------------------------------------------ banded algebra
def head_mean(bands: AttentionBands, layer: int) -> AttentionBands:
    """Ā_l = mean over heads of layer `layer`'s attention, as a one-layer, one-head AttentionBands (banded form,
    float64)."""
    one = bands.layer_bands(layer)
    mean = lambda a: a.mean(axis=1, dtype=np.float64, keepdims=True)  # noqa: E731  (1, 1, ...)
    return AttentionBands(mean(one.local), mean(one.global_cols), mean(one.global_rows), one.global_idx,
                          one.window, one.windows)


def vecmat(v, m: AttentionBands) -> np.ndarray:
    """v^T M for the one matrix M held by `m` (layer 0, head 0) in banded form: O(n * window), never n x n.

    (v^T M)_j = Σ_i v_i M[i, j]. Band: M[i, i - w + c] = local[i, c], so band column c adds v * local[:, c] to the
    keys shifted by c - w. Global keys k_g add Σ_i v_i global_cols[i, g] over the other queries; global queries'
    rows are global_rows (what AttentionBands.dense reassembles: their band and global_cols entries do not count)."""
    v = np.asarray(v, dtype=np.float64)
    n, w = m.n, m.window
    if v.shape != (n,):
        raise ExplainerError(f"the vector has shape {v.shape}, the matrix is {n} x {n}")
    g = m.global_idx
    local_v = v.copy()
    local_v[g] = 0.0  # global queries' rows live in global_rows only
    out = np.zeros(n + 2 * w, dtype=np.float64)  # key j at out[j + w]
    band = m.local[0, 0]  # (n, 2w+1)
    for c in range(2 * w + 1):
        out[c : c + n] += local_v * band[:, c]
    out = out[w : w + n]
    if len(g):
        out[g] += local_v @ m.global_cols[0, 0]  # (n,) @ (n, g)
        out += v[g] @ m.global_rows[0, 0]  # (g,) @ (g, n)
    return out


def row_sums(m: AttentionBands) -> np.ndarray:
    """Row sums of the one matrix held by `m`, (n,)."""
    sums = m.local[0, 0].sum(axis=1, dtype=np.float64) + m.global_cols[0, 0].sum(axis=1, dtype=np.float64)
    if len(m.global_idx):
        sums[m.global_idx] = m.global_rows[0, 0].sum(axis=1, dtype=np.float64)
    return sums


def cls_rollout(matrices: Sequence[AttentionBands], kind: str, cls: int = CLS, readout=None) -> np.ndarray:
    """The cls row of a rolled-out product over layers 1..L (`matrices[l]` = layer l's one-head matrix):

    kind="rollout": e_cls^T Ã_L ⋯ Ã_1 with Ã_l = D_l^{-1} ½ (M_l + I), D_l its row sums (Abnar & Zuidema 2020);
    kind="gae":     e_cls^T (I + M_L) ⋯ (I + M_1)                      (Chefer et al. 2021, R <- R + M_l R from I).
    Computed right to left as a vector: v = e_cls, then v <- v^T (...) for l = L .. 1. `readout` (n,) replaces
    e_cls by the rows the classifier reads (Family.readout: 1/n everywhere for mean pooling)."""
    if kind not in ("rollout", "gae"):
        raise ExplainerError(f"kind must be 'rollout' or 'gae', got {kind!r}")
    n = matrices[0].n
    if readout is None:
        v = np.zeros(n, dtype=np.float64)
        v[cls] = 1.0
    else:
        v = np.asarray(readout, dtype=np.float64).copy()
    for m in reversed(matrices):
        if kind == "rollout":
            u = v / (0.5 * (row_sums(m) + 1.0))  # v^T D^{-1}
            v = 0.5 * (vecmat(u, m) + u)
        else:
            v = v + vecmat(v, m)
    return v


# ------------------------------------------------------------------------------------------ attention only
def _read_row(model, bands: AttentionBands, layer: int) -> np.ndarray:
    """Ā_l's row the classifier reads: the cls row (a decoder's: its last token), or under mean pooling the mean
    of all rows (n,) float64."""
    row = model.family.read_row(bands.n)
    if row is not None:
        return np.mean([bands.row(layer, h, row) for h in range(bands.num_heads)], axis=0, dtype=np.float64)
    return vecmat(model.family.readout(bands.n), head_mean(bands, layer))


def _raw_attention(model, analysis, target, row="cls"):
    bands = analysis.attention
    last = bands.num_layers - 1
    if row == "cls":
        return _read_row(model, bands, last)
    return bands.received_per_head()[last].mean(axis=0, dtype=np.float64)  # "received"


ROWS = ("cls", "received")  # raw_attention's row, attcat's attention: the row the classifier reads, or the received


def _one_of(name: str, option: str):
    def check(settings: dict, model=None) -> None:
        if settings[option] not in ROWS:
            raise ExplainerError(f"{name}'s {option} must be one of {', '.join(ROWS)}, got {settings[option]!r}")
    return check


def _rollout(model, analysis, target):
    bands = analysis.attention
    return cls_rollout([head_mean(bands, l) for l in range(bands.num_layers)], "rollout",
                       readout=model.family.readout(bands.n))


def _random(model, analysis, target, seed=0):
    """Scores whose deletion order is random_order(n, seed), the deletion test's random ranking: (m - k) / m for
    the k-th position of the permutation, 0 for <s> and </s> (never deleted)."""
    n, enc = analysis.n, analysis.encoded
    if n - enc.prefix - enc.suffix < 1:
        raise ExplainerError(f"a document needs at least one text token between its special tokens, got n={n}")
    order = random_order(n, seed, enc.prefix, enc.suffix)  # (m,) positions, most important first
    scores = np.zeros(n, dtype=np.float64)
    scores[order] = np.arange(len(order), 0, -1, dtype=np.float64) / len(order)
    return scores


# ------------------------------------------------------------------------------------------ gradients
def _grad_x_input(model, analysis, target):
    return token_dot(*backward(model, analysis, target, "logit", hidden=[0])[0])


def _grad_norm(model, analysis, target):
    _, g = backward(model, analysis, target, "logit", hidden=[0])[0]
    return torch.linalg.vector_norm(g.double(), dim=-1).cpu().numpy()


def _attcat(model, analysis, target, attention="received"):
    bands = analysis.attention
    L, n = bands.num_layers, bands.n
    if attention == "received":  # the authors' code: mean over heads and queries of the attention token i gets
        weights = bands.received_per_head().mean(axis=1, dtype=np.float64) / n  # (L, n)
    else:  # "cls"
        weights = np.stack([_read_row(model, bands, l) for l in range(L)])  # (L, n)
    passes = backward(model, analysis, target, "logit", hidden=range(L))
    cat = np.stack([token_dot(*passes[l]) for l in range(L)])  # (L, n) class activation tokens summed over d
    return (cat * weights).sum(axis=0)


def _gae(model, analysis, target):
    bands = analysis.attention
    L = bands.num_layers
    products: dict[int, AttentionBands] = {}

    def consume(layer, grads: AttentionBands):
        products[layer] = _head_mean_product(grads, bands, layer, positive=True)  # Ḡ_l = mean_h (∇A ⊙ A)⁺

    backward(model, analysis, target, "logit", attention=range(L), consume=consume)
    return cls_rollout([products[l] for l in range(L)], "gae", readout=model.family.readout(bands.n))


def _head_mean_product(grads: AttentionBands, bands: AttentionBands, layer: int, positive: bool) -> AttentionBands:
    """mean_h (∇A_h ⊙ A_h) of one layer (its positive part if `positive`), as a one-head AttentionBands; head by
    head, so no (H, n, 2w+1) temporary beyond the gradient itself."""
    def mean(grad, att):  # (H, ...) x (H, ...) -> (1, 1, ...)
        acc = np.zeros(grad.shape[1:], dtype=np.float64)
        for h in range(grad.shape[0]):
            acc += np.maximum(grad[h] * att[h], 0.0) if positive else grad[h] * att[h].astype(np.float64)
        return (acc / grad.shape[0])[None, None]

    one = bands.layer_bands(layer)
    # a sliding layer's band (radius r) is narrower than its gradient's, captured from the eager n x n weights:
    # the columns beyond r multiply attention that is zero there, so they are cut, not summed
    cut = grads.window - one.window
    local = grads.local[..., cut : grads.local.shape[-1] - cut]  # (1, H, n, 2r+1)
    return AttentionBands(mean(local[0], one.local[0]), mean(grads.global_cols[0], one.global_cols[0]),
                          mean(grads.global_rows[0], one.global_rows[0]), one.global_idx, one.window, one.windows)


def _att_x_grad(model, analysis, target):
    bands = analysis.attention
    last = bands.num_layers - 1
    rows: list[np.ndarray] = []

    def consume(layer, grads: AttentionBands):
        row = model.family.read_row(bands.n)
        if row is not None:
            rows.extend(bands.row(last, h, row).astype(np.float64) * grads.row(0, h, row)
                        for h in range(bands.num_heads))
        else:  # mean pooling: every row is read, each with weight 1/n
            rows.append(vecmat(model.family.readout(bands.n), _head_mean_product(grads, bands, last, positive=False)))

    backward(model, analysis, target, "prob", attention=[last], consume=consume)
    return np.mean(rows, axis=0)


# ------------------------------------------------------------------------------------------ IG
def _ig(model, analysis, target, n_steps=50, method="gausslegendre", precision="fp32", internal_batch_size=None,
        use_cache=True, cache_dir=None, _progress=None, _meta=None):
    a = integrated_gradients(model, analysis, target, n_steps, method, precision=precision,
                             internal_batch_size=internal_batch_size, use_cache=use_cache, cache_dir=cache_dir,
                             progress=_progress)
    _meta.update(seconds=a.seconds, from_cache=a.from_cache)
    return a.scores


def _check_ig(settings: dict, model=None) -> None:
    validate_settings(settings["n_steps"], settings["method"], settings["precision"], settings["internal_batch_size"],
                      DELTA_WARN, MAX_STEPS)
    if not isinstance(settings["use_cache"], bool):
        raise ExplainerError(f"ig's use_cache must be True or False, got {settings['use_cache']!r}")
    if settings["cache_dir"] is not None and not isinstance(settings["cache_dir"], (str, os.PathLike)):
        raise ExplainerError(f"ig's cache_dir must be a folder's path or None, got {settings['cache_dir']!r}")


def _check_seed(settings: dict, model=None) -> None:
    whole_number(settings["seed"], "random's seed", lo=0, error=ExplainerError)


# ------------------------------------------------------------------------------------------ registry
_A_Z = "Abnar & Zuidema 2020, 'Quantifying Attention Flow in Transformers'"
EXPLAINERS: dict[str, Explainer] = {e.name: e for e in (
    Explainer("ig", "Integrated Gradients", "Sundararajan et al. 2017; the paper §3.2 (captum LayerIntegratedGradients "
              "on the embeddings, pad baseline)", "IG", True,
              {"n_steps": 50, "method": "gausslegendre", "precision": "fp32", "internal_batch_size": None,
               "use_cache": True, "cache_dir": None}, _ig, reports=True, check=_check_ig),
    Explainer("grad_x_input", "Gradient × Input", "Shrikumar et al. 2017; Song et al. 2024 §2", "1 forward + backward", True,
              {}, _grad_x_input),
    Explainer("grad_norm", "Gradient norm", "Simonyan et al. 2014 (saliency); Serrano & Smith 2019 §5.2's gradient ranking",
              "1 forward + backward", False, {}, _grad_norm),
    Explainer("raw_attention", "RawAtt (last layer)", f"{_A_Z}; Song et al. 2024 §5.2 (RawAtt)", "attention", False,
              {"row": "cls"}, _raw_attention, check=_one_of("raw_attention", "row")),
    Explainer("rollout", "Attention rollout", f"{_A_Z}; Song et al. 2024 §5.2 (Rollout)", "attention", False, {}, _rollout),
    Explainer("att_x_grad", "Attention × gradient", "Serrano & Smith 2019 §5.2", "1 forward + backward",
              True, {}, _att_x_grad),
    Explainer("gae", "GAE", "Chefer et al. 2021, 'Generic Attention-model Explainability' eqs. 5-6; Song et al. 2024 §5.2",
              "1 forward + backward", False, {}, _gae),
    Explainer("attcat", "AttCAT", "Qiang et al. 2022, NeurIPS (the authors' code, github.com/qiangyao1988/AttCAT; "
              "Song et al.'s (2024) baseline)", "1 forward + backward", True, {"attention": "received"}, _attcat,
              check=_one_of("attcat", "attention")),
    Explainer("random", "Random", "Song et al. 2024 and Serrano & Smith 2019 (random baseline)", "none", False, {"seed": 0}, _random,
              check=_check_seed),
    Explainer("occlusion", "Occlusion", "Zeiler & Fergus 2014 (occlusion), over units: captum FeatureAblation with a "
              "feature mask per unit", "1 + units forwards", True,
              {"unit": "sentence", "replacement": "mask", "batch_size": None}, occlusion, reports=True,
              check=check_perturbation),
    Explainer("shapley", "Shapley sampling", "Štrumbelj & Kononenko 2010; Castro et al. 2009 (Shapley value "
              "sampling), over units: captum ShapleyValueSampling with a feature mask per unit",
              "1 + n_samples × units forwards", True,
              {"unit": "sentence", "n_samples": 25, "seed": 0, "replacement": "mask", "batch_size": None}, shapley,
              reports=True, by_default=False, check=check_perturbation),
)}
DEFAULT_METHODS: tuple[str, ...] = tuple(m for m, e in EXPLAINERS.items() if e.by_default)


# ------------------------------------------------------------------------------------------ front door
def check_options(method: str, options: dict, model: LoadedModel | None = None) -> dict:
    """The settings `method` runs with, its defaults updated by `options`, every name and value checked before
    anything is computed (ExplainerError; AttributionError for IG's own): a leaderboard checks every explainer's
    before the first runs. With `model`, also what depends on it (the tokenizer's replacement token)."""
    info = EXPLAINERS.get(method)
    if info is None:
        raise ExplainerError(f"unknown explainer {method!r}; choose from {list(EXPLAINERS)}")
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        raise ExplainerError(f"{method} has no option(s) {unknown}; its options are {sorted(info.options) or 'none'}")
    settings = {**info.options, **options}
    if info.check is not None:
        info.check(settings, model)
    return settings


def explain(model: LoadedModel, analysis: DocumentAnalysis, method: str, /, target: int | None = None, *,
            progress: Progress | None = None, **options) -> Explanation:
    """Token scores of `method` (a key of EXPLAINERS) for `target` (default: the predicted class).

    options: the method's own (EXPLAINERS[method].options; e.g. n_steps and method for ig, seed for random, unit
    for occlusion and shapley; the first three arguments are positional-only so that IG's `method` option can be
    given). The model must be the one the analysis was made with. Gradient explainers run one forward and one
    backward pass under COMPUTE, occlusion and shapley batches of perturbed copies; attention explainers read the
    analysis's bands only."""
    if not isinstance(model, LoadedModel) or not isinstance(analysis, DocumentAnalysis):
        raise ExplainerError("explain needs a LoadedModel and a DocumentAnalysis (see load_model, analyze)")
    if analysis.model_fingerprint != model.fingerprint:
        raise ExplainerError("this analysis was made with another model")
    target = whole_number(analysis.predicted if target is None else target, "target (the class explained)", 0,
                          model.num_labels - 1, error=ExplainerError)
    settings = check_options(method, options, model)  # the method known, its option names and values
    info = EXPLAINERS[method]
    meta: dict = {}
    extra = {"_progress": progress} if info.reports else {}
    if method == "ig":
        extra["_meta"] = meta  # IG read from its cache: the time it took when computed
    heavy = info.cost not in ("none", "attention")
    report(progress, 0.0, f"{info.label}")
    with (COMPUTE.hold() if heavy else nullcontext()), PeakMemory(model.device) as peak:
        started = time.perf_counter()
        scores = info.compute(model, analysis, int(target), **settings, **extra)
        seconds = time.perf_counter() - started
    scores = finite_vector(scores, f"{method} scores", ExplainerError)
    if scores.shape != (analysis.n,):
        raise ExplainerError(f"{method} returned {scores.size} scores for {analysis.n} tokens")
    report(progress, 1.0, f"{info.label} done")
    shown = {k: v for k, v in settings.items() if k not in ("cache_dir", "use_cache")}
    return Explanation(method=method, target=int(target), scores=scores, seconds=float(meta.get("seconds", seconds)),
                       peak_bytes=peak.bytes, options=shown, from_cache=bool(meta.get("from_cache", False)),
                       specials=(analysis.encoded.prefix, analysis.encoded.suffix), document=analysis.summary(shown.get("unit")))


__all__ = ["CLS", "DEFAULT_METHODS", "EXPLAINERS",
           "Explainer", "ExplainerError", "Explanation", "check_options", "cls_rollout", "explain", "head_mean",
           "row_sums", "vecmat"]
