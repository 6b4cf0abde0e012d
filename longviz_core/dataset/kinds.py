"""The kinds of dataset-wide results: each is a small function of one document (or, for head importance, of the
dataset) that returns a store.Record; dataset.run computes them into a store.

Kinds and what they store per document:
    attention        received (layers, heads, n) float32: attention each token receives, per head;
                     pooled (layers, heads, g, g) float32: the head maps on relative positions (dataset grid);
                     input_ids (n,); table `document` (row, label, predicted, prob_<class>, n_tokens, ...)
    attribution      scores (n,) float64 Integrated Gradients, L2-normalised (what every view uses), raw (n,) the
                     per-token sums before normalising; tables `summary` (target, total, delta, F(x), F(x'),
                     converged, weak) and `by_token` (views.attribution_tables.document_token_sums)
    head-importance  (dataset level) importance (layers, heads) by `importance_method` (default T3-Vis's
                     Taylor scores, see views/importance.py), normalised as that method does, and raw
    agreement        tables `rows` (Tables 1-2), `heads` (every head's agreement with |IG|), `sets` (top-5 % sets)
    faithfulness     table `rows`: AOPC / LOdds at each k and the first decision flip (exact scan) per ranking;
                     the random row: means and sds over its seeds
A kind whose module is not in this installation is reported by name instead of failing half-way.
"""
from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from ..errors import StoreError
from ..model.loading import LoadedModel
from ..progress import Progress
from .store import Record, doc_id_of, load_unit

ALL_KINDS = ("attention", "attribution", "head-importance", "agreement", "faithfulness")  # dependency order


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers (recorded per kind in the manifest)."""

    max_tokens: int = 2048
    grid: int = 64  # cells per axis of the pooled (dataset-wide) head maps
    n_steps: int = 50  # Integrated Gradients steps
    ig_method: str = "gausslegendre"
    # Class IG explains: "predicted" (as the agreement and faithfulness views do), "positive" (class 1, as the
    # paper's attribution figures), or a class index. |IG|, which agreement and faithfulness use, is the same
    # for either class of a binary classifier.
    target: str = "predicted"
    precision: str = "fp32"
    importance_docs: int | None = None  # labelled documents (first rows) for head importance; None = module default
    importance_method: str = "t3vis"  # head importance: "t3vis" (Taylor, T3-Vis) or "michel" (gate gradient)

    def __post_init__(self):
        if int(self.max_tokens) < 3:
            raise ValueError(f"max_tokens must be >= 3, got {self.max_tokens}")
        if int(self.n_steps) < 2:
            raise ValueError(f"n_steps must be >= 2 (captum's minimum), got {self.n_steps}")
        if not (self.target in ("positive", "predicted") or str(self.target).isdigit()):
            raise ValueError(f"target must be 'positive', 'predicted' or a class index, got {self.target!r}")
        if self.importance_docs is not None and int(self.importance_docs) < 1:
            raise ValueError(f"importance_docs must be >= 1, got {self.importance_docs}")
        if self.importance_method not in ("t3vis", "michel"):
            raise ValueError(f"importance_method must be 't3vis' or 'michel', got {self.importance_method!r}")


@dataclass
class Doc:
    """One document of the run; its analysis (one forward) is made at most once, when a kind needs it."""

    row: int
    text: str
    label: int | None
    job: "Job"
    _analysis: object = None

    @property
    def doc_id(self) -> str:
        return doc_id_of(self.row)

    @property
    def analysis(self):
        if self._analysis is None:
            from ..model.analysis import analyze

            self._analysis = analyze(self.job.model, self.text, self.job.settings.max_tokens)
        return self._analysis

    def load(self, kind: str) -> Record:
        """A dependency's stored unit (committed earlier in this run or by an earlier run)."""
        return load_unit(self.job.root, self.doc_id, kind)


@dataclass
class Job:
    """What every kind's function is given: the model, the dataset, the settings and the store's folder."""

    model: LoadedModel
    df: pd.DataFrame
    settings: Settings
    root: Path  # the store (units are read from their files: a writer never opens other shards' indexes)


@dataclass(frozen=True)
class Kind:
    name: str
    modules: tuple  # modules of longviz_core this kind needs (an older installation may lack one)
    needs: tuple  # kinds that must be stored first
    settings: Callable[[Settings], dict]  # what the manifest records for this kind
    compute: Callable  # (job, doc) -> Record; dataset level: (job, progress) -> Record
    dataset_level: bool = False


# ============================================================================================ the kinds
def _attention(job: Job, doc: Doc) -> Record:
    from ..views.pooling import pool_dataset

    a = doc.analysis
    enc = a.encoded
    document = {"row": doc.row, "text_hash": a.text_hash, "n_tokens": enc.n, "n_text_tokens":
                enc.n_text_tokens_original, "truncated": bool(enc.truncated),
                "label": doc.label if doc.label is not None else pd.NA, "predicted": a.predicted}
    document.update({f"prob_{c}": float(p) for c, p in enumerate(a.probs)})
    table = pd.DataFrame([document]).astype({"label": "Int64"})
    return Record(
        arrays={
            "received": a.attention.received_per_head(),  # (layers, heads, n) float32
            # relative-position cells of this one document: their mean over documents is pool_dataset's
            "pooled": pool_dataset([a.attention], job.settings.grid).cells,  # (layers, heads, g, g)
            "input_ids": enc.input_ids,  # (n,)
        },
        tables={"document": table},
    )


def _target(job: Job, analysis) -> int:
    t = job.settings.target
    if t == "predicted":
        return int(analysis.predicted)
    if t == "positive":
        return 1 if job.model.num_labels > 1 else 0
    if int(t) >= job.model.num_labels:
        raise ValueError(f"target class {t} does not exist (the model has {job.model.num_labels} classes)")
    return int(t)


def _attribution(job: Job, doc: Doc) -> Record:
    from ..attribution.ig import ConvergenceWarning, integrated_gradients
    from ..views.attribution_tables import document_token_sums

    a = doc.analysis
    s = job.settings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in the summary table instead
        attr = integrated_gradients(job.model, a, _target(job, a), s.n_steps, s.ig_method, precision=s.precision,
                                    use_cache=False)
    by_token = document_token_sums(a.tokens, attr.scores, job.model.tokenizer.all_special_tokens)
    summary = pd.DataFrame([{"target": attr.target, "n_steps": attr.n_steps, "total": attr.total, "delta": attr.delta,
                             "prob_input": attr.prob_input, "prob_baseline": attr.prob_baseline,
                             "converged": bool(attr.converged), "weak": attr.weak_explanation is not None}])
    return Record(arrays={"scores": attr.scores, "raw": attr.raw}, tables={"summary": summary, "by_token": by_token},
                  scalars={"target": attr.target, "delta": attr.delta})


def _score_scale() -> str:
    from ..attribution.ig import SCORE_SCALE

    return SCORE_SCALE


def _head_importance(job: Job, progress: Progress | None) -> Record:
    from ..views.importance import normalise_importance, raw_head_importance

    cfg = _importance_settings(job.settings)
    raw = raw_head_importance(job.model, job.df, job.settings.max_tokens, cfg["examples"], progress,
                              method=cfg["importance_method"])
    return Record(arrays={"raw": raw, "importance": normalise_importance(raw, cfg["normalise"])})


def _importance_settings(s: Settings) -> dict:
    from ..views.importance import DEFAULT_EXAMPLES, DEFAULT_NORMALISATION

    method = s.importance_method
    return {"examples": s.importance_docs or DEFAULT_EXAMPLES, "importance_method": method,
            "normalise": DEFAULT_NORMALISATION[method]}


def _agreement(job: Job, doc: Doc) -> Record:
    from ..views.agreement import MASK_KINDS, document_numbers, mask_for

    cfg = _agreement_settings(job.settings)
    a = doc.analysis
    scores = doc.load("attribution").arrays["scores"]
    try:
        importance = load_unit(job.root, None, "head-importance").arrays["importance"]
    except StoreError:  # an unlabelled dataset has no head importance: unscaled rows only
        importance = None
    numbers = document_numbers(a, scores, importance, mask_for(a.tokens, MASK_KINDS),
                                None, cfg["p"], cfg["top"])
    heads = [{"metric": metric, "masked": masked, "layer": layer, "head": head, "value": value}
             for key, grid in numbers["grids"].items() for metric, masked in [key.split("|")]
             for layer, row in enumerate(grid) for head, value in enumerate(row)]
    sets = [{"source": source, "scaled": bool(int(scaled)), "masked": masked, "token": token,
             "attention_only": v[0], "attribution_only": v[1], "both": v[2]}
            for key, table in numbers["counts"].items() for source, scaled, masked in [key.split("|")]
            for token, v in table.items()]
    heads_df = pd.DataFrame(heads, columns=["metric", "masked", "layer", "head", "value"]).astype({"value": float})
    sets_df = pd.DataFrame(sets, columns=["source", "scaled", "masked", "token", "attention_only",
                                          "attribution_only", "both"])
    return Record(tables={"rows": pd.DataFrame(numbers["table"]), "heads": heads_df, "sets": sets_df})


def _agreement_settings(s: Settings) -> dict:
    from ..views.agreement import MASK_KINDS
    from ..views.similarity import DEFAULT_P, DEFAULT_TOP

    return {"p": DEFAULT_P, "top": DEFAULT_TOP, "mask": list(MASK_KINDS), "layer_range": None}


def _faithfulness(job: Job, doc: Doc) -> Record:
    from ..views.faithfulness import faithfulness

    cfg = _faithfulness_settings(job.settings)
    a = doc.analysis
    result = faithfulness(job.model, a, doc.load("attribution").arrays["scores"], rankings=cfg["rankings"],
                          ks=cfg["ks"], replacement=cfg["replacement"], seeds=cfg["seeds"],
                          max_removed=cfg["max_removed"])
    rows = result.table()
    rows.insert(0, "p_original", result.p_original)
    rows.insert(0, "n", result.n)
    rows.insert(0, "predicted", result.predicted)
    return Record(tables={"rows": rows})


def _faithfulness_settings(s: Settings) -> dict:
    from ..views.faithfulness import DEFAULT_SEEDS, KS, RANKINGS

    return {"rankings": list(RANKINGS), "ks": list(KS), "replacement": "mask", "flip": "exact scan",
            "max_removed": 1.0, "seeds": list(DEFAULT_SEEDS), "attention_layers": None, "scaled": False}


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("attention", ("model.analysis", "views.pooling"), (),
             lambda s: {"grid": s.grid, "pooling": "relative"}, _attention),
        Kind("attribution", ("attribution.ig", "views.masking", "views.attribution_tables"), ("attention",),
             lambda s: {"n_steps": s.n_steps, "method": s.ig_method, "target": str(s.target),
                        "precision": s.precision, "scores": _score_scale()}, _attribution),
        Kind("head-importance", ("views.importance",), (), _importance_settings, _head_importance,
             dataset_level=True),
        Kind("agreement", ("views.agreement", "views.similarity"), ("attention", "attribution", "head-importance"),
             _agreement_settings, _agreement),
        Kind("faithfulness", ("views.faithfulness",), ("attention", "attribution"), _faithfulness_settings,
             _faithfulness),
    )
}


def available_kinds() -> dict[str, str | None]:
    """{kind: None if it can run here, else why not}."""
    out = {}
    for name, kind in KINDS.items():
        missing = [m for m in kind.modules if importlib.util.find_spec(f"longviz_core.{m}") is None]
        out[name] = f"needs longviz_core.{missing[0]}, which this installation does not have" if missing else None
    return out


def kind_names(what) -> list[str]:
    """The kinds named in `what` (a comma-separated string or a list), as given."""
    return [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w and w.strip()]


def resolve_kinds(what) -> tuple[str, ...]:
    """Validated kinds plus the kinds they depend on, in dependency order."""
    names = kind_names(what)
    if not names:
        raise ValueError(f"choose at least one of {', '.join(ALL_KINDS)}")
    unknown = [w for w in names if w not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(ALL_KINDS)}")
    wanted = set()

    def add(k):
        if k not in wanted:
            wanted.add(k)
            for dep in KINDS[k].needs:
                add(dep)

    for w in names:
        add(w)
    missing = {k: why for k, why in available_kinds().items() if k in wanted and why}
    if missing:
        raise StoreError("Cannot compute " + "; ".join(f"'{k}': {why}" for k, why in missing.items()) + ".")
    return tuple(k for k in ALL_KINDS if k in wanted)


__all__ = ["ALL_KINDS", "KINDS", "Doc", "Job", "Kind", "Settings", "available_kinds", "kind_names", "resolve_kinds"]
