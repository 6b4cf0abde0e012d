"""The kinds of dataset-wide results: each is a small function of one document (or, for head importance, of the
dataset) that returns a store.Record; dataset.run computes them into a store.

Kinds and what they store per document:
    attention        received (layers, heads, n) float32: attention each token receives, per head;
                     pooled (layers, heads, g, g) float32: the head maps on relative positions (dataset grid);
                     input_ids (n,); table `document` (row, label, predicted, prob_<class>, n_tokens, ...);
                     table `counts`: the paper-rule top-k counts by token type (views.counts.token_counts at
                     COUNTS: k = 10, all layers and heads) for both directions, unmasked and masked; table
                     `word_counts`: the same counts by word, from the same top-k lists
    attribution      scores (n,) float64 Integrated Gradients, L2-normalised (what every view uses), raw (n,) the
                     per-token sums before normalising; tables `summary` (target, total, delta, F(x), F(x'),
                     converged, weak) and `by_token` (views.attribution_tables.document_token_sums)
    head-importance  (dataset level) importance (layers, heads) by `importance_method` (default T3-Vis's
                     Taylor scores, see views/importance.py), normalised as that method does, and raw; or the
                     values given in Settings.importance_values (an imported file, the API's `importance=`)
    agreement        tables `rows` (Tables 1-2), `heads` (every head's agreement with |IG|), `sets` (top-5 % sets)
    faithfulness     table `rows`: AOPC / LOdds at each k and the first decision flip (exact scan) per ranking
                     (views.deletion: the deletion test's summary of its runs); the random row: means and sds
                     over its seeds
    leaderboard      table `runs`: the explainer leaderboard's runs (dataset.leaderboard.document_leaderboard):
                     one row per explainer, one per seed for random, with AOPC / LOdds at each k, the first flip and
                     the explanation's cost (seconds, peak memory)
Every option that changes a kind's numbers is a field of Settings and is recorded in the store's manifest (the
kind's `settings`), so a store is only ever read for the settings it was made with.
A kind whose module is not in this installation is reported by name instead of failing half-way.
"""
from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import StoreError
from ..model.loading import LoadedModel
from ..progress import Progress
from .store import COUNT_TABLES, Record, doc_id_of, load_unit

ALL_KINDS = ("attention", "attribution", "head-importance", "agreement", "faithfulness",
             "leaderboard")  # dependency order
# The token counts the attention kind stores: the Token counts page's dataset scope shows them at these settings,
# grouped by each of `groups` (table "counts" by token type, "word_counts" by word). A store whose manifest names no
# groups (made before the counts by word) holds the counts by type only.
COUNTS = {"k": 10, "rule": "paper", "groups": ("type", "word"), "layers": "all", "heads": "all"}
_SEQUENCES = {"importance_values": lambda row: tuple(float(x) for x in row), "mask_kinds": str, "layer_range": int,
              "rankings": str, "ks": float, "seeds": int, "faithfulness_layers": int, "explainers": str,
              "explainer_options": lambda t: (str(t[0]), str(t[1]), t[2])}


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers (recorded per kind in the manifest). None means the view's own
    default (views.importance, views.similarity, views.agreement, views.faithfulness)."""

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
    # (layers, heads) head importance to use instead of computing it (an imported file); needs no labels
    importance_values: tuple | None = None
    # agreement (Tables 1-2, per-head grids, top-5 % sets)
    rbo_p: float | None = None  # RBO persistence; None = views.similarity.DEFAULT_P
    top: float | None = None  # the top set's fraction; None = views.similarity.DEFAULT_TOP
    mask_kinds: tuple | None = None  # any of views.agreement.MASK_KINDS; None = all of them
    layer_range: tuple | None = None  # an extra attention source (lo, hi), 0-based inclusive
    # faithfulness (deletion curves, first flips)
    rankings: tuple | None = None  # None = views.faithfulness.RANKINGS
    ks: tuple | None = None  # fractions removed; None = views.faithfulness.KS
    replacement: str = "mask"  # what a removed token becomes: "mask" or "pad"
    seeds: tuple | None = None  # the random ranking's seeds; None = views.faithfulness.DEFAULT_SEEDS
    max_removed: float = 1.0  # the flip scan's limit, a fraction of the removable tokens
    flip_bound: int | None = None  # the flip scan's limit in tokens (the smaller limit applies); None = no bound
    faithfulness_layers: tuple | None = None  # the attention ranking's layers (0-based); None = all
    faithfulness_scaled: bool = False  # the attention ranking scaled by the store's head importance
    # the explainer leaderboard (also ks, seeds, replacement, max_removed, target; its IG: n_steps, ig_method,
    # precision)
    explainers: tuple | None = None  # methods of attribution.explainers.EXPLAINERS; None = all of them
    rank_by: str = "signed"  # deletion order: "signed" (score, high to low) or "magnitude" (|score|)
    explainer_options: tuple | None = None  # (method, option, value) triples for the explainers other than IG

    def __post_init__(self):
        for name, item in _SEQUENCES.items():  # lists (a command line, JSON, an array) kept as tuples: hashable
            value = getattr(self, name)
            if value is not None:
                try:
                    object.__setattr__(self, name, tuple(item(v) for v in value))
                except (TypeError, ValueError):
                    raise ValueError(f"{name} must be a sequence" + (" of rows (layers x heads)" if name ==
                                     "importance_values" else "") + f", got {value!r}") from None
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
        if self.rbo_p is not None and not 0 < float(self.rbo_p) < 1:
            raise ValueError(f"rbo_p must be in (0, 1), got {self.rbo_p}")
        if self.top is not None and not 0 < float(self.top) <= 1:
            raise ValueError(f"top must be in (0, 1], got {self.top}")
        if self.layer_range is not None and (len(self.layer_range) != 2 or not 0 <= self.layer_range[0]
                                             <= self.layer_range[1]):
            raise ValueError(f"layer_range must be (lo, hi) with 0 <= lo <= hi, got {self.layer_range}")
        if self.replacement not in ("mask", "pad"):
            raise ValueError(f"replacement must be 'mask' or 'pad', got {self.replacement!r}")
        if not 0 < float(self.max_removed) <= 1:
            raise ValueError(f"max_removed must be a fraction in (0, 1], got {self.max_removed}")
        if self.flip_bound is not None and int(self.flip_bound) < 1:
            raise ValueError(f"flip_bound must be at least 1 token, got {self.flip_bound}")


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

            self._analysis = analyze(self.job.model, self.text, self.job.settings.max_tokens,
                                     on_wait=self.job.on_wait)
        return self._analysis

    def load(self, kind: str) -> Record:
        """A dependency's stored unit (committed earlier in this run or by an earlier run)."""
        return load_unit(self.job.root, self.doc_id, kind)


@dataclass
class Job:
    """What every kind's function is given: the model, the dataset, the settings and the store's folder, and how
    the run may reuse the per-document disk caches (never part of the numbers)."""

    model: LoadedModel
    df: pd.DataFrame
    settings: Settings
    root: Path  # the store (units are read from their files: a writer never opens other shards' indexes)
    # In-process runs (the app, the Python API) reuse and fill the disk caches of IG, head importance and the flip
    # scans, so a store made for other settings of a later kind does not redo them; a command-line run keeps
    # its results in the store alone.
    use_cache: bool = False
    cache_dir: Path | None = None
    on_wait: Callable | None = None  # told the place in the compute queue (runtime.COMPUTE) while waiting


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
        tables={"document": table, **_counts(a)},
    )


def _counts(analysis) -> dict[str, pd.DataFrame]:
    """The document's token counts at COUNTS by each group, both directions, unmasked and masked (the Token counts
    page's mask), as the attention kind's tables (COUNT_TABLES): columns direction, masked, token (by type) or word
    (by word), count, each part in token_counts' order. One set of top-k lists and one tally per mask serve
    every group."""
    from ..views.counts import DIRECTIONS, GROUP_COLUMNS, tally, token_counts, topk_indices
    from ..views.masking import build_mask

    topk = topk_indices(analysis.attention, k=COUNTS["k"])
    parts = {group: [] for group in COUNTS["groups"]}
    for masked in (False, True):
        tallies = tally(topk, analysis.tokens, build_mask(analysis.tokens) if masked else None)
        for group, direction in ((g, d) for g in COUNTS["groups"] for d in DIRECTIONS):
            table = token_counts(analysis, COUNTS["k"], direction, group, mask=tallies.mask, tallies=tallies,
                                 rule=COUNTS["rule"])
            parts[group].append(table.assign(direction=direction, masked=masked)[
                ["direction", "masked", GROUP_COLUMNS[group], "count"]])
    return {COUNT_TABLES[group]: pd.concat(tables, ignore_index=True).astype({"count": "int64"})
            for group, tables in parts.items()}


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
                                    use_cache=job.use_cache, cache_dir=job.cache_dir, on_wait=job.on_wait)
    by_token = document_token_sums(a.tokens, attr.scores, job.model.tokenizer.all_special_tokens)
    summary = pd.DataFrame([{"target": attr.target, "n_steps": attr.n_steps, "total": attr.total, "delta": attr.delta,
                             "prob_input": attr.prob_input, "prob_baseline": attr.prob_baseline,
                             "converged": bool(attr.converged), "weak": attr.weak_explanation is not None}])
    return Record(arrays={"scores": attr.scores, "raw": attr.raw}, tables={"summary": summary, "by_token": by_token},
                  scalars={"target": attr.target, "delta": attr.delta})


def _mask_rule() -> str:
    from ..views.masking import RULE

    return RULE


def _attribution_settings(s: Settings) -> dict:
    from ..attribution.ig import DELTA_WARN, SCORE_SCALE, validate_settings

    validate_settings(int(s.n_steps), s.ig_method, s.precision, None, DELTA_WARN, int(s.n_steps))  # before a manifest
    return {"n_steps": s.n_steps, "method": s.ig_method, "target": str(s.target), "precision": s.precision,
            "scores": SCORE_SCALE, "mask_rule": _mask_rule()}


def _head_importance(job: Job, progress: Progress | None) -> Record:
    from ..views.importance import cached_raw_head_importance, normalise_importance, raw_head_importance

    if job.settings.importance_values is not None:
        given = np.asarray(job.settings.importance_values, dtype=np.float64)  # (layers, heads)
        if given.shape != (job.model.num_layers, job.model.num_heads):
            raise StoreError(f"The head importance given has shape {given.shape}; this model has "
                             f"{job.model.num_layers} layers x {job.model.num_heads} heads.")
        return Record(arrays={"raw": given, "importance": given})
    cfg = _importance_settings(job.settings)
    args = (job.model, job.df, job.settings.max_tokens, cfg["examples"])
    raw = (cached_raw_head_importance(*args, method=cfg["importance_method"], cache_dir=job.cache_dir,
                                      progress=progress) if job.use_cache else
           raw_head_importance(*args, progress, method=cfg["importance_method"]))
    return Record(arrays={"raw": raw, "importance": normalise_importance(raw, cfg["normalise"])})


def _importance_settings(s: Settings) -> dict:
    from .._disk import array_digest
    from ..views.importance import DEFAULT_EXAMPLES, DEFAULT_NORMALISATION

    if s.importance_values is not None:  # given, not computed: the values themselves are the setting
        return {"given": array_digest(s.importance_values)}
    method = s.importance_method
    return {"examples": s.importance_docs or DEFAULT_EXAMPLES, "importance_method": method,
            "normalise": DEFAULT_NORMALISATION[method]}


def _agreement(job: Job, doc: Doc) -> Record:
    from ..views.agreement import document_numbers, mask_for

    cfg = _agreement_settings(job.settings)
    a = doc.analysis
    scores = doc.load("attribution").arrays["scores"]
    try:
        importance = load_unit(job.root, None, "head-importance").arrays["importance"]
    except StoreError:  # an unlabelled dataset has no head importance: unscaled rows only
        importance = None
    numbers = document_numbers(a, scores, importance, mask_for(a.tokens, cfg["mask"]), cfg["layer_range"],
                               cfg["p"], cfg["top"])
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
    return Record(tables={"rows": numbers["table"], "heads": heads_df, "sets": sets_df})


def _agreement_settings(s: Settings) -> dict:
    from ..views.agreement import MASK_KINDS
    from ..views.similarity import DEFAULT_P, DEFAULT_TOP

    kinds = MASK_KINDS if s.mask_kinds is None else s.mask_kinds
    unknown = set(kinds) - set(MASK_KINDS)
    if unknown:
        raise ValueError(f"unknown mask kind(s) {sorted(unknown)}; choose from {list(MASK_KINDS)}")
    return {"p": DEFAULT_P if s.rbo_p is None else float(s.rbo_p),
            "top": DEFAULT_TOP if s.top is None else float(s.top),
            "mask": [k for k in MASK_KINDS if k in kinds], "mask_rule": _mask_rule(),
            "layer_range": None if s.layer_range is None else list(s.layer_range)}


def _faithfulness(job: Job, doc: Doc) -> Record:
    from ..views.faithfulness import faithfulness

    cfg = _faithfulness_settings(job.settings)
    a = doc.analysis
    scale = load_unit(job.root, None, "head-importance").arrays["importance"] if cfg["scaled"] else None
    result = faithfulness(job.model, a, doc.load("attribution").arrays["scores"], layers=cfg["attention_layers"],
                          scale=scale, rankings=cfg["rankings"], ks=cfg["ks"], replacement=cfg["replacement"],
                          seeds=cfg["seeds"], max_removed=cfg["max_removed"], flip_bound=cfg["flip_bound"],
                          resume=job.use_cache, cache_dir=job.cache_dir, on_wait=job.on_wait)
    rows = result.table()
    rows.insert(0, "p_original", result.p_original)
    rows.insert(0, "n", result.n)
    rows.insert(0, "predicted", result.predicted)
    return Record(tables={"rows": rows})


def _faithfulness_settings(s: Settings) -> dict:
    from ..views.faithfulness import DEFAULT_SEEDS, KS, RANKINGS, check_ks, check_settings

    rankings = list(RANKINGS if s.rankings is None else s.rankings)
    seeds = check_settings(rankings, None, DEFAULT_SEEDS if s.seeds is None else s.seeds, s.max_removed)
    return {"rankings": rankings, "ks": list(check_ks(KS if s.ks is None else s.ks)), "replacement": s.replacement,
            "flip": "exact scan", "max_removed": float(s.max_removed), "flip_bound": _bound(s), "seeds": list(seeds),
            "attention_layers": None if s.faithfulness_layers is None else list(s.faithfulness_layers),
            "scaled": bool(s.faithfulness_scaled)}


def _bound(s: Settings) -> int | None:
    """The flip bound in tokens as the manifest records it: a store scanned to another bound is another store,
    never served as exact."""
    return None if s.flip_bound is None else int(s.flip_bound)


def _leaderboard(job: Job, doc: Doc) -> Record:
    from .leaderboard import document_leaderboard

    cfg = _leaderboard_settings(job.settings)
    a = doc.analysis
    options = {m: dict(o) for m, o in cfg["options"].items()}
    # IG is computed here rather than read from the attribution kind: its scores would be the same (attribution
    # stores integrated_gradients' L2-normalised scores, which the 'ig' explainer returns), but the leaderboard's
    # row holds IG's cost (seconds, peak memory), which an attribution unit does not record, and a leaderboard
    # without IG must not need attention and attribution units. In-process runs share IG's per-document disk
    # cache with the attribution kind (same key), so the app computes it once.
    if cfg["ig"] is not None:
        options["ig"] = {"n_steps": cfg["ig"]["n_steps"], "method": cfg["ig"]["method"],
                         "precision": cfg["ig"]["precision"], "use_cache": job.use_cache, "cache_dir": job.cache_dir}
    target = None if job.settings.target == "predicted" else _target(job, a)
    runs = document_leaderboard(job.model, a, cfg["methods"], target, ks=cfg["ks"], seeds=cfg["seeds"] or (),
                                replacement=cfg["replacement"], max_removed=cfg["max_removed"],
                                flip_bound=cfg["flip_bound"], rank_by=cfg["rank_by"], options=options,
                                resume=job.use_cache,
                                cache_dir=job.cache_dir, on_wait=job.on_wait)
    return Record(tables={"runs": runs})


def _leaderboard_settings(s: Settings) -> dict:
    from ..attribution.explainers import EXPLAINERS
    from ..views.faithfulness import DEFAULT_SEEDS, KS, check_ks, check_settings
    from .leaderboard import check_methods

    methods = list(EXPLAINERS if s.explainers is None else s.explainers)
    options: dict = {}
    for method, option, value in s.explainer_options or ():
        options.setdefault(method, {})[option] = value
    check_methods(methods, s.rank_by, s.replacement, options)
    if "ig" in options:
        raise ValueError("the leaderboard's IG takes the settings' n_steps, ig_method and precision, not "
                         "explainer_options")
    unknown = [f"{m}.{o}" for m, opts in options.items() for o in opts if o not in EXPLAINERS[m].options]
    if unknown:
        raise ValueError(f"unknown explainer option(s) {unknown}")
    # the seeds change the numbers only when random is chosen (as IG's settings only when IG is)
    seeds = (check_settings(["random"], None, DEFAULT_SEEDS if s.seeds is None else s.seeds, s.max_removed)
             if "random" in methods else None)
    ig = _attribution_settings(s) if "ig" in methods else None
    return {"methods": methods, "target": str(s.target), "rank_by": s.rank_by,
            "ks": list(check_ks(KS if s.ks is None else s.ks)), "replacement": s.replacement, "flip": "exact scan",
            "max_removed": float(s.max_removed), "flip_bound": _bound(s),
            "seeds": None if seeds is None else list(seeds),
            "ig": None if ig is None else {k: ig[k] for k in ("n_steps", "method", "precision", "scores")},
            "options": options}


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("attention", ("model.analysis", "views.pooling", "views.counts"), (),
             lambda s: {"grid": s.grid, "pooling": "relative", "counts": {**COUNTS, "groups": list(COUNTS["groups"])},
                        "mask_rule": _mask_rule()},
             _attention),
        Kind("attribution", ("attribution.ig", "views.masking", "views.attribution_tables"), ("attention",),
             _attribution_settings, _attribution),
        Kind("head-importance", ("views.importance",), (), _importance_settings, _head_importance,
             dataset_level=True),
        Kind("agreement", ("views.agreement", "views.similarity"), ("attention", "attribution", "head-importance"),
             _agreement_settings, _agreement),
        Kind("faithfulness", ("views.faithfulness",), ("attention", "attribution"), _faithfulness_settings,
             _faithfulness),
        Kind("leaderboard", ("dataset.leaderboard", "attribution.explainers", "views.faithfulness"), (),
             _leaderboard_settings, _leaderboard),
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


def resolve_kinds(what, settings: Settings | None = None) -> tuple[str, ...]:
    """Validated kinds plus the kinds they depend on, in dependency order (faithfulness with an attention ranking
    scaled by head importance also needs head importance)."""
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
    if "faithfulness" in wanted and settings is not None and settings.faithfulness_scaled:
        add("head-importance")
    missing = {k: why for k, why in available_kinds().items() if k in wanted and why}
    if missing:
        raise StoreError("Cannot compute " + "; ".join(f"'{k}': {why}" for k, why in missing.items()) + ".")
    return tuple(k for k in ALL_KINDS if k in wanted)


__all__ = ["ALL_KINDS", "COUNTS", "COUNT_TABLES", "KINDS", "Doc", "Job", "Kind", "Settings", "available_kinds",
           "kind_names", "resolve_kinds"]
