"""The Python API's dataset functions: attribution, agreement, faithfulness and the explainer leaderboard over a
list of texts, each run by the precompute into a local store (dataset.stores) and read back from it."""
from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import DatasetError, InputTextError, whole_number
from ..model.encoding import DEFAULT_MAX_TOKENS
from ..model.loading import LoadedModel
from ..progress import Progress
from ..views.agreement import MASK_KINDS
from ..evaluation.faithfulness import DEFAULT_SEEDS, KS, RANKINGS, check_settings
from ..views.similarity import DEFAULT_P, DEFAULT_TOP
from . import leaderboard as lb
from .aggregate import DatasetAgreement, DatasetAttribution, DatasetFaithfulness
from .kinds import Settings
from .run import leaderboard_settings
from .stores import local_run

def _ig_steps(ig_steps) -> int:
    """Integrated Gradients' steps, named as these functions take them."""
    return whole_number(ig_steps, "ig_steps (Integrated Gradients' steps; captum's minimum is 2)", lo=2)


def _texts_frame(texts, labels=None) -> pd.DataFrame:
    """A dataset of `texts` (and integer `labels`, all or none) as precompute takes it."""
    texts = list(texts)
    if not texts:
        raise DatasetError("No documents: give at least one text.")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
    if bad is not None:
        raise InputTextError(f"Text {bad} is empty or not a string.")
    df = pd.DataFrame({"text": texts})
    labels = None if labels is None else list(labels)
    if labels is not None and any(v is not None for v in labels):
        if len(labels) != len(texts) or any(v is None for v in labels):
            raise DatasetError(f"Give one label per text or none ({len(labels)} labels for {len(texts)} texts).")
        df["label"] = np.asarray(labels, dtype=np.int64)
    return df


def dataset_attributions(
    model: LoadedModel,
    texts,
    target: int,
    n_steps: int = 50,
    method: str = "gausslegendre",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "fp32",
    masked: bool = False,
    min_docs: int = 1,
    cache_dir=None,
    progress: Progress | None = None,
) -> DatasetAttribution:
    """Dataset-wide attribution by token type (Fig 10e/f) over `texts`: the precompute's "attribution" kind (IG of
    class `target` with `n_steps` steps) into the local store for these texts and settings (local_store:
    resumable, and a later call with the same texts and settings computes nothing), then the store's aggregation
    (ResultStore.dataset_attributions): per type the mean over all documents of its summed normalised scores,
    the documents containing it, its occurrences and its mean per occurrence. masked: apply the paper's mask;
    min_docs: hide types found in fewer documents (the other types' means do not change)."""
    target = whole_number(target, "target (the class explained)", 0, model.num_labels - 1)
    min_docs = whole_number(min_docs, "min_docs", lo=1)
    settings = Settings(max_tokens=max_tokens, n_steps=n_steps, ig_method=method, precision=precision,
                        target=str(target))
    store, summary = local_run(model, _texts_frame(texts), "attribution", settings, progress, cache_dir)
    return replace(store.dataset_attributions(target, masked, min_docs),
                   from_cache=not any(summary.computed.values()))


def dataset_agreement(
    model: LoadedModel,
    texts,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    importance=None,
    mask_kinds=MASK_KINDS,
    layer_range: tuple[int, int] | None = None,
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
    cache_dir=None,
    progress: Progress | None = None,
) -> DatasetAgreement:
    """Tables 1-2, the top-set token counts (every configuration) and the per-head grids (HEAD_METRICS x
    MASK_MODES) over `texts`, mean +- std over documents: the precompute's "agreement" kind (IG of the predicted
    class with `ig_steps` steps, the mask rebuilt per document from `mask_kinds`, rows scaled by `importance`
    (layers, heads) when given) into the local store for these texts and settings (resumable; a later call with
    the same texts and settings computes nothing), then the store's aggregation (ResultStore.dataset_agreement).
    `from_cache` counts the documents found in the store."""
    settings = Settings(max_tokens=max_tokens, n_steps=_ig_steps(ig_steps), target="predicted",
                        importance_values=importance,
                        rbo_p=p, top=top, mask_kinds=tuple(mask_kinds), layer_range=layer_range)
    store, summary = local_run(model, _texts_frame(texts), "agreement", settings, progress, cache_dir)
    return replace(store.dataset_agreement(), from_cache=summary.skipped["agreement"])


def dataset_faithfulness(
    model: LoadedModel,
    texts,
    labels=None,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    layers=None,
    scale=None,
    rankings=RANKINGS,
    ks=KS,
    replacement: str = "mask",
    seeds=DEFAULT_SEEDS,
    max_removed: float = 1.0,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    unit: str = "token",
) -> DatasetFaithfulness:
    """evaluation.faithfulness.faithfulness on every text (IG of the predicted class, `ig_steps` steps; the attention
    ranking over `layers`, scaled by `scale` (layers, heads) when given), then per ranking the mean and sd over
    documents: the precompute's "faithfulness" kind into the local store for these texts and settings
    (resumable; a later call with the same texts and settings computes nothing), then the store's aggregation
    (ResultStore.dataset_faithfulness). `labels` go into the per-document rows. `batch_size` is checked but the
    run scores copies in the view's default batches (batching changes the cost, not the numbers); `from_cache`
    counts the documents found in the store. unit: what the deletion test removes (DeletionSettings.unit)."""
    check_settings(rankings, batch_size, seeds, max_removed)
    settings = Settings(max_tokens=max_tokens, n_steps=_ig_steps(ig_steps), target="predicted",
                        rankings=tuple(rankings), ks=ks, replacement=replacement, seeds=seeds,
                        max_removed=max_removed,
                        faithfulness_layers=None if layers is None else np.atleast_1d(np.asarray(layers, dtype=object)),
                        faithfulness_scaled=scale is not None, importance_values=scale, unit=unit)
    df = _texts_frame(texts, labels)
    store, summary = local_run(model, df, "faithfulness", settings, progress, cache_dir)
    return replace(store.dataset_faithfulness(), from_cache=summary.skipped["faithfulness"])


def leaderboard_runs(
    model: LoadedModel,
    texts,
    methods: Sequence[str] | None = None,
    target: int | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ks: Sequence[float] = KS,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    replacement: str = "mask",
    max_removed: float = 1.0,
    rank_by: str = "signed",
    options: dict | None = None,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    unit: str = "token",
) -> tuple[pd.DataFrame, int]:
    """leaderboard.document_leaderboard on every text (truncated to max_tokens), with a 'doc' column; (runs, documents found
    in the store). The precompute's "leaderboard" kind into the local store for these texts and settings
    (stores.local_store: resumable, a later call with the same texts and settings computes nothing, progress after
    every document with the time left), then the store's aggregation (ResultStore.leaderboard_runs).
    `batch_size` is checked but the run scores copies in the deletion test's default batches (batching changes
    the cost, not the numbers). unit: what the deletion test removes (DeletionSettings.unit)."""
    texts = list(texts)
    if not texts:
        raise lb.LeaderboardError("No documents to score.")
    if batch_size is not None:
        whole_number(batch_size, "batch_size (copies per forward)", lo=1, error=lb.LeaderboardError)
    if target is not None:
        target = whole_number(target, "target (the class explained)", 0, model.num_labels - 1,
                              error=lb.LeaderboardError)
    settings = leaderboard_settings(methods, target, max_tokens=max_tokens, ks=ks, seeds=seeds,
                                    replacement=replacement, max_removed=max_removed, rank_by=rank_by,
                                    options=options, unit=unit)
    store, summary = local_run(model, _texts_frame(texts), "leaderboard", settings, progress, cache_dir)
    return store.leaderboard_runs(), summary.skipped["leaderboard"]


def leaderboard(model: LoadedModel, texts, methods: Sequence[str] | None = None, target: int | None = None, *,
                max_tokens: int = DEFAULT_MAX_TOKENS, **settings) -> pd.DataFrame:
    """The dataset leaderboard (leaderboard.summarise of leaderboard_runs): one row per explainer (method, aopc,
    lodds, first_flip, seconds, then the sds, flip rate, peak memory and every k), sorted by AOPC with the best
    marked; random's numbers are the mean ± sd over its seeds. Settings as leaderboard_runs."""
    accepted = [k for k, v in inspect.signature(leaderboard_runs).parameters.items() if v.kind == v.KEYWORD_ONLY]
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise lb.LeaderboardError(f"the dataset leaderboard has no setting(s) {unknown}; its settings are "
                                  f"{accepted} (its flip scans are exact: no flip_bound)")
    runs, _ = leaderboard_runs(model, texts, methods, target, max_tokens=max_tokens, **settings)
    return lb.summarise(runs, settings.get("ks", KS))
