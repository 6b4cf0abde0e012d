"""Everything that turns per-document results into dataset numbers: the store's aggregations (combine_*,
mean_arrays) and the in-app dataset functions, one per view (dataset_attributions, dataset_agreement,
dataset_faithfulness), which run each document through the views, cache its numbers on disk, then combine them
with the same functions the store uses.

    attribution   per type: the sum over documents of the type's summed normalised scores, divided by the
                  number of documents (combine_token_sums); Fig 10e/f
    agreement     per configuration: mean and population sd over documents of every metric (summarise_agreement);
                  per head: the NaN-aware mean; top-set counts: sums
    faithfulness  per ranking: mean and sd over documents (summarise_faithfulness); flips over the documents that
                  flipped
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from .._disk import JsonStore, array_digest, digest, document_key, texts_hasher, write_cache
from ..attribution import cache_folder
from ..attribution.ig import CACHE_VERSION, DELTA_WARN, ConvergenceWarning, integrated_gradients, validate_settings
from ..errors import StoreError
from ..model.analysis import analyze
from ..model.encoding import DEFAULT_MAX_TOKENS, encode
from ..model.loading import LoadedModel
from ..progress import Progress, eta_text, report
from ..progress import scaled as scaled_progress
from ..views.agreement import MASK_KINDS, SET_NAMES, document_numbers, mask_for
from ..views.attribution_tables import document_token_sums
from ..views.faithfulness import (
    DEFAULT_SEEDS,
    KS,
    RANKINGS,
    FaithfulnessError,
    check_ks,
    check_settings,
    faithfulness,
    k_label,
    metric_columns,
)
from ..views.similarity import DEFAULT_P, DEFAULT_TOP, METRICS

log = logging.getLogger(__name__)

_AGREEMENT_CACHE_VERSION = 1
_FAITHFULNESS_CACHE_VERSION = 2


# ================================================================================= combining (one code path)
def mean_arrays(arrays: Iterable[np.ndarray]) -> np.ndarray:
    """Element-wise mean of equally shaped arrays, accumulated in float64 one array at a time."""
    total, n = None, 0
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        if total is None:
            total = a.copy()
        elif a.shape != total.shape:
            raise StoreError(f"cannot average arrays of shapes {total.shape} and {a.shape}")
        else:
            total += a
        n += 1
    if n == 0:
        raise StoreError("No documents to average.")
    return (total / n).astype(np.float32)


TOKEN_TABLE_COLUMNS = ["token", "mean_attribution", "n_docs", "occurrences", "mean_per_occurrence",
                       "total_attribution"]


def combine_token_sums(partial: pd.DataFrame, n_documents: int, min_docs: int = 1) -> pd.DataFrame:
    """The dataset-wide table by token type (Fig 10e/f), from partial sums with columns token,
    total_attribution (the type's summed normalised scores), n_docs (documents containing it) and occurrences:
    one row per document (dataset_attributions) or per index (the store's SQL sums); rows of one
    type add up. Per type:
        mean_attribution    = total_attribution / n_documents   (mean over ALL documents, absent = 0)
        mean_per_occurrence = total_attribution / occurrences
    Types found in fewer than `min_docs` documents are left out (the others' means do not change). Columns
    TOKEN_TABLE_COLUMNS, sorted by mean_attribution (descending), then token."""
    if not isinstance(n_documents, (int, np.integer)) or n_documents < 1:
        raise ValueError(f"n_documents must be a positive integer, got {n_documents!r}")
    if not isinstance(min_docs, (int, np.integer)) or min_docs < 1:
        raise ValueError(f"min_docs must be a positive integer, got {min_docs!r}")
    if partial.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "token" else
                                          np.int64 if c in ("n_docs", "occurrences") else np.float64)
                             for c in TOKEN_TABLE_COLUMNS})
    out = partial.groupby("token", sort=False)[["total_attribution", "n_docs", "occurrences"]].sum().reset_index()
    out = out.astype({"total_attribution": np.float64, "n_docs": np.int64, "occurrences": np.int64})
    if int(out["n_docs"].max()) > n_documents:
        raise ValueError(f"a type is found in {int(out['n_docs'].max())} documents, more than the {n_documents} "
                         "averaged over")
    out = out[out["n_docs"] >= int(min_docs)]
    out["mean_attribution"] = out["total_attribution"] / int(n_documents)
    out["mean_per_occurrence"] = out["total_attribution"] / out["occurrences"]
    out = out.sort_values(["mean_attribution", "token"], ascending=[False, True], kind="stable")
    return out[TOKEN_TABLE_COLUMNS].reset_index(drop=True)


def combine_head_means(partial: pd.DataFrame, num_layers: int, num_heads: int) -> np.ndarray:
    """(layers, heads) means from per-index partial sums and counts; NaN where no document has a value."""
    total = np.zeros((num_layers, num_heads))
    n = np.zeros((num_layers, num_heads))
    for layer, head, s, c in partial[["layer", "head", "total", "n"]].itertuples(index=False) if len(partial) else []:
        total[int(layer), int(head)] += 0.0 if s is None or pd.isna(s) else s
        n[int(layer), int(head)] += c
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def combine_set_counts(partial: pd.DataFrame) -> pd.DataFrame:
    """Per-index sums of top-set memberships (columns token, a, b, c) combined and sorted as
    views.agreement.TopSets.counts() sorts them: total descending, then token."""
    cols = ["token", "attention only", "attribution only", "both", "total"]
    if partial.empty:
        return pd.DataFrame(columns=cols)
    out = partial.groupby("token", sort=False)[["a", "b", "c"]].sum().astype(np.int64).reset_index()
    out.columns = cols[:4]
    out["total"] = out[cols[1:4]].sum(axis=1)
    return out.sort_values(["total", "token"], ascending=[False, True], kind="stable").reset_index(drop=True)


def with_doc(rows: pd.DataFrame) -> pd.DataFrame:
    """Per-document rows with the dataset row number `doc` first, as the in-app dataset functions give them."""
    return rows.drop(columns="doc_id").assign(doc=rows["doc_id"].astype(int))[
        ["doc", *[c for c in rows.columns if c != "doc_id"]]]


# ================================================================================= attribution by token type
def token_sums_partial(by_token: pd.DataFrame, masked: bool = False) -> pd.DataFrame:
    """A document_token_sums table as the partial sums combine_token_sums takes (one document)."""
    value, count = ("attribution_unmasked", "count_unmasked") if masked else ("attribution", "count")
    rows = by_token[by_token[count] > 0]
    return pd.DataFrame({"token": rows["token"].to_numpy(), "total_attribution": rows[value].to_numpy(np.float64),
                         "n_docs": np.ones(len(rows), dtype=np.int64), "occurrences": rows[count].to_numpy(np.int64)})


@dataclass(frozen=True)
class DatasetAttribution:
    table: pd.DataFrame  # TOKEN_TABLE_COLUMNS, sorted by mean_attribution (descending), see combine_token_sums
    target: int
    n_steps: int
    n_docs: int  # documents the means are taken over: all of them, whether they contain a type or not
    key: str
    masked: bool = False  # the paper's mask (stopwords, non-alphanumeric) applied; special tokens are always out
    min_docs: int = 1  # types found in fewer documents are left out of the table
    from_cache: bool = field(default=False, compare=False)

    def title(self, class_name: str) -> str:
        return f"Dataset-wide attribution for class '{class_name}' (IG, L2-normalised per document)"

    def description(self) -> str:
        """What the table's numbers are, for a caption."""
        return (f"mean_attribution: a type's summed score per document, averaged over all {self.n_docs} documents "
                "(0 where it is absent); mean_per_occurrence: its total over its occurrences. Special tokens left out"
                + ("; stopwords and non-alphanumeric tokens masked" if self.masked else "")
                + (f"; types in fewer than {self.min_docs} documents hidden" if self.min_docs > 1 else "") + ".")


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
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetAttribution:
    """Dataset-wide attribution by token type (Fig 10e/f): every document's normalised scores summed per token
    type (views.attribution_tables.document_token_sums), then combine_token_sums: per type, the sum over
    documents divided by the number of documents (a mean over all of them), with documents containing it,
    occurrences and the mean per occurrence. masked: apply the paper's mask; min_docs: hide types found in fewer documents.

    Each document's IG result goes through the per-document cache, so an interrupted run resumes where it
    stopped; the per-type sums are cached too (keyed by model, texts and settings; both mask choices)."""
    texts = list(texts)
    _check_min_docs(min_docs)
    key, path = _dataset_key(model, texts, target, n_steps, method, max_tokens, precision, cache_dir)
    cached = _read_dataset(path, key)
    if cached is not None:
        report(progress, 1.0, "Loaded from cache")
        return _dataset_result(cached, key, masked, min_docs, from_cache=True)
    specials = model.tokenizer.all_special_tokens
    parts: dict[bool, list] = {False: [], True: []}
    started = time.monotonic()
    for i, text in enumerate(texts):
        enc = encode(model.tokenizer, text, max_tokens, model_max=model.max_tokens,
                     position_offset=model.position_offset)
        done = i / len(texts)
        eta = eta_text(started, i, len(texts))
        sub = scaled_progress(progress, done, 1 / len(texts), f"Document {i + 1}/{len(texts)}{eta}: ")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # 50 steps is the paper's dataset compromise
            attr = integrated_gradients(model, enc, target, n_steps, method, precision=precision,
                                        cache_dir=cache_dir, progress=sub, on_wait=on_wait)
        by_token = document_token_sums(enc.tokens, attr.scores, specials)
        for m in parts:
            parts[m].append(token_sums_partial(by_token, m))
    saved = {"key": key, "target": int(target), "n_steps": int(n_steps), "n_docs": len(texts)}
    for m, frames in parts.items():  # per-type sums: what combine_token_sums needs, in any grouping
        sums = pd.concat(frames, ignore_index=True).groupby("token", sort=False).sum()
        saved["masked" if m else "all"] = {"token": sums.index.tolist(), **{c: sums[c].tolist() for c in sums}}
    write_cache(path, json.dumps(saved).encode())
    report(progress, 1.0, "Done")
    return _dataset_result(saved, key, masked, min_docs)


def cached_dataset_attributions(
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
    cache_dir: str | os.PathLike | None = None,
) -> DatasetAttribution | None:
    """The cached dataset-wide table for these settings, or None (nothing is computed)."""
    _check_min_docs(min_docs)
    key, path = _dataset_key(model, list(texts), target, n_steps, method, max_tokens, precision, cache_dir)
    cached = _read_dataset(path, key)
    return None if cached is None else _dataset_result(cached, key, masked, min_docs, from_cache=True)


def _dataset_result(saved: dict, key: str, masked: bool, min_docs: int, from_cache: bool = False):
    partial = pd.DataFrame(saved["masked" if masked else "all"])
    table = combine_token_sums(partial, int(saved["n_docs"]), min_docs)
    return DatasetAttribution(table, int(saved["target"]), int(saved["n_steps"]), int(saved["n_docs"]), key,
                              masked=bool(masked), min_docs=int(min_docs), from_cache=from_cache)


def _check_min_docs(min_docs) -> None:
    if not isinstance(min_docs, (int, np.integer)) or min_docs < 1:
        raise ValueError(f"min_docs must be a positive integer, got {min_docs!r}")


def _dataset_key(model, texts, target, n_steps, method, max_tokens, precision, cache_dir):
    if not texts:
        raise ValueError("No documents to attribute.")
    if not isinstance(target, (int, np.integer)) or not 0 <= int(target) < model.num_labels:
        raise ValueError(f"target must be a class index in [0, {model.num_labels - 1}], got {target!r}")
    validate_settings(n_steps, method, precision, None, DELTA_WARN, n_steps)
    key = digest({"kind": "dataset", "v": CACHE_VERSION, "model": model.fingerprint,
                  "texts": texts_hasher(texts).hexdigest(),
                  "target": int(target), "n_steps": int(n_steps), "method": method, "precision": precision,
                  "max_tokens": int(max_tokens)})
    return key, cache_folder(cache_dir) / f"dataset-{key}.json"


def _read_dataset(path: Path, key: str) -> dict | None:
    """The cached per-type sums (as dataset_attributions saves them), or None."""
    try:
        saved = json.loads(path.read_text())
        if saved.get("key") != key:
            raise ValueError("key mismatch")
        for m in ("all", "masked"):
            cols = saved[m]
            if set(cols) != {"token", "total_attribution", "n_docs", "occurrences"} or len(
                    {len(v) for v in cols.values()}) != 1:
                raise ValueError(f"malformed '{m}' sums")
        return saved
    except FileNotFoundError:
        return None
    except Exception as exc:
        log.warning("Dataset attribution cache %s is unreadable (%s); recomputing.", path, exc)
        return None


# ================================================================================= agreement (Tables 1-2)
@dataclass(frozen=True)
class DatasetAgreement:
    per_document: pd.DataFrame  # agreement_table rows of every document, plus a `doc` column
    table: pd.DataFrame  # source, scaled, masked, documents, "<metric> mean", "<metric> std" for every METRICS key
    head_grids: dict  # (metric, mask mode) -> (layers, heads) mean over documents (NaN-aware)
    set_counts: dict  # (source, scaled, masked) -> DataFrame like TopSets.counts(), summed over documents
    n_documents: int
    from_cache: int  # documents read from the disk cache


def without_scaled(result: DatasetAgreement) -> DatasetAgreement:
    """The same dataset result without its head-importance-scaled rows and top-set configurations: what
    dataset_agreement returns when no importance is given (a precomputed store holds both)."""
    if not isinstance(result, DatasetAgreement):
        raise ValueError(f"expected a DatasetAgreement, got {type(result).__name__}")
    unscaled = lambda df: df[~df["scaled"].astype(bool)].reset_index(drop=True)  # noqa: E731
    return replace(result, per_document=unscaled(result.per_document), table=unscaled(result.table),
                   set_counts={key: v for key, v in result.set_counts.items() if not key[1]})


def dataset_agreement(
    model: LoadedModel,
    texts,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    importance=None,
    mask_kinds: Sequence[str] = MASK_KINDS,
    layer_range: tuple[int, int] | None = None,
    p: float = DEFAULT_P,
    top: float = DEFAULT_TOP,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetAgreement:
    """Tables 1-2, the top-set token counts (every configuration) and the per-head grids (HEAD_METRICS x
    MASK_MODES) for every document, then mean +- std. IG explains the predicted class with `ig_steps` steps;
    the mask is rebuilt per document from `mask_kinds`. Each document's numbers are cached on disk."""
    texts = list(texts)
    if not texts:
        raise ValueError("No documents to compare.")
    settings = {"v": _AGREEMENT_CACHE_VERSION, "model": model.fingerprint, "max_tokens": int(max_tokens),
                "ig_steps": int(ig_steps), "importance": array_digest(importance), "mask": sorted(mask_kinds),
                "layer_range": None if layer_range is None else [int(v) for v in layer_range], "p": float(p),
                "top": float(top)}
    store = JsonStore("agreement", cache_dir)
    rows, grids, counts, hits, started = [], {}, {}, 0, time.monotonic()
    for i, text in enumerate(texts):
        key = document_key(settings, text)
        doc = store.get(key)
        if doc is None:
            lo, eta = i / len(texts), eta_text(started, i, len(texts))
            analysis = analyze(model, text, max_tokens, on_wait=on_wait)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # few steps are the dataset-wide compromise
                ig = integrated_gradients(
                    model, analysis, None, ig_steps, cache_dir=cache_dir, on_wait=on_wait,
                    progress=lambda f, msg, lo=lo, i=i, eta=eta: report(
                        progress, lo + 0.9 * f / len(texts), f"Document {i + 1}/{len(texts)}{eta}: IG {msg}"))
            doc = document_numbers(analysis, ig.scores, importance, mask_for(analysis.tokens, mask_kinds),
                                    layer_range, p, top)
            store.put(key, doc)
        else:
            hits += 1
        rows.extend({"doc": i, **r} for r in doc["table"])
        for name, grid in doc["grids"].items():
            grids.setdefault(name, []).append(np.asarray(grid, dtype=np.float64))
        for config, table in doc["counts"].items():
            acc = counts.setdefault(config, {})
            for token, values in table.items():
                acc[token] = np.add(acc.get(token, 0), values)
        report(progress, (i + 1) / len(texts), f"Document {i + 1}/{len(texts)} done")
    per_doc = pd.DataFrame(rows)
    return DatasetAgreement(
        per_document=per_doc,
        table=summarise_agreement(per_doc),
        head_grids={tuple(name.split("|")): _nanmean(stack) for name, stack in grids.items()},
        set_counts={_config_key(config): _counts_from_sums(acc) for config, acc in counts.items()},
        n_documents=len(texts),
        from_cache=hits,
    )


def summarise_agreement(per_document: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (population, NaN-aware) over documents of every metric, per (source, scaled, masked)."""
    out = []
    for (source, scaled, masked), group in per_document.groupby(["source", "scaled", "masked"], sort=False):
        row = {"source": source, "scaled": bool(scaled), "masked": masked,
               "documents": int(group[list(METRICS)].notna().all(axis=1).sum())}
        for name in METRICS:
            values = group[name].to_numpy(dtype=np.float64)
            finite = np.isfinite(values).any()
            row[f"{name} mean"] = float(np.nanmean(values)) if finite else math.nan
            row[f"{name} std"] = float(np.nanstd(values)) if finite else math.nan
        out.append(row)
    return pd.DataFrame(out)


def _counts_from_sums(acc: dict) -> pd.DataFrame:
    if not acc:
        return pd.DataFrame(columns=["token", *SET_NAMES, "total"])
    values = np.asarray(list(acc.values()), dtype=np.int64).reshape(len(acc), len(SET_NAMES))
    frame = pd.DataFrame(values, columns=list(SET_NAMES))
    frame.insert(0, "token", list(acc))
    frame["total"] = frame[list(SET_NAMES)].sum(axis=1)
    return frame.sort_values(["total", "token"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _config_key(config: str) -> tuple[str, bool, str]:
    source, scaled, masked = config.split("|")
    return source, bool(int(scaled)), masked


def _nanmean(stack: list[np.ndarray]) -> np.ndarray:
    arr = np.asarray([np.asarray(g, dtype=np.float64) for g in stack])  # (documents, layers, heads)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(arr).sum(axis=0)
        total = np.where(np.isfinite(arr), arr, 0.0).sum(axis=0)
    return np.where(counts > 0, total / np.maximum(counts, 1), np.nan)


# ================================================================================= faithfulness
@dataclass(frozen=True)
class DatasetFaithfulness:
    per_document: pd.DataFrame  # one row per (document, ranking): doc, label, predicted, n, p_original, table()
    summary: pd.DataFrame  # one row per ranking: mean and std of every number, flips and no-flip counts
    n_documents: int
    from_cache: int  # documents read from the disk cache
    ks: tuple[float, ...] = KS

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves of every document for charts: doc, ranking, k, aopc, lodds."""
        rows = []
        for rec in self.per_document.to_dict("records"):
            for k in self.ks:
                rows.append({"doc": rec["doc"], "ranking": rec["ranking"], "k": k,
                             "aopc": rec[f"aopc@{k_label(k)}"], "lodds": rec[f"lodds@{k_label(k)}"]})
        return pd.DataFrame(rows)


def dataset_faithfulness(
    model: LoadedModel,
    texts,
    labels=None,
    *,
    max_tokens: int,
    ig_steps: int = 50,
    layers=None,
    scale=None,
    rankings: Sequence[str] = RANKINGS,
    ks: Sequence[float] = KS,
    replacement: str = "mask",
    seeds: Sequence[int] = DEFAULT_SEEDS,
    max_removed: float = 1.0,
    batch_size: int | None = None,
    cache_dir=None,
    progress: Progress | None = None,
    on_wait=None,
) -> DatasetFaithfulness:
    """views.faithfulness.faithfulness on every document (IG with `ig_steps` steps on the predicted class), then mean and std per
    ranking. Each document's rows (its table(): the random row holds the means and sds over the seeds) are cached
    on disk, keyed by model, token ids and every setting."""
    texts = list(texts)
    if not texts:
        raise FaithfulnessError("No documents to evaluate.")
    labels = [None] * len(texts) if labels is None else [None if v is None else int(v) for v in labels]
    ks = check_ks(ks)
    seeds = check_settings(rankings, batch_size, seeds, max_removed)
    settings = {"v": _FAITHFULNESS_CACHE_VERSION, "model": model.fingerprint, "max_tokens": int(max_tokens),
                "ig_steps": int(ig_steps), "layers": _jsonable(layers), "scale": array_digest(scale),
                "rankings": list(rankings), "ks": list(ks), "replacement": replacement,
                "flip": "exact scan", "max_removed": float(max_removed), "seeds": list(seeds)}
    store = JsonStore("faithfulness", cache_dir)
    rows, hits, started = [], 0, time.monotonic()
    for i, text in enumerate(texts):
        done = i / len(texts)
        eta = eta_text(started, i, len(texts))
        key = document_key(settings, text)
        doc_rows = store.get(key)
        if doc_rows is None:
            def sub(f, msg, lo=done, i=i, eta=eta):
                report(progress, lo + f / len(texts), f"Document {i + 1}/{len(texts)}{eta}: {msg}")

            analysis = analyze(model, text, max_tokens, on_wait=on_wait)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # few steps are the dataset-wide compromise
                ig = integrated_gradients(model, analysis, None, ig_steps, cache_dir=cache_dir,
                                          progress=lambda f, msg: sub(0.5 * f, f"IG {msg}"), on_wait=on_wait)
            result = faithfulness(model, analysis, ig.scores, layers=layers, scale=scale, rankings=rankings, ks=ks,
                                  replacement=replacement, seeds=seeds, max_removed=max_removed,
                                  batch_size=batch_size, resume=True, cache_dir=cache_dir,
                                  progress=lambda f, msg: sub(0.5 + 0.5 * f, msg), on_wait=on_wait)
            doc_rows = [{"predicted": result.predicted, "n": result.n, "p_original": result.p_original, **r}
                        for r in result.table().to_dict("records")]
            store.put(key, doc_rows)
        else:
            hits += 1
        for r in doc_rows:
            rows.append({"doc": i, "label": labels[i], **r})
        report(progress, (i + 1) / len(texts), f"Document {i + 1}/{len(texts)} done")
    per_doc = pd.DataFrame(rows)
    return DatasetFaithfulness(per_doc, summarise_faithfulness(per_doc, ks), len(texts), hits, ks)


def summarise_faithfulness(per_document: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """Per ranking: mean and std (population) over documents of AOPC@k, LOdds@k, AOPC, LOdds and flip_rate; the
    flip fraction's mean and std over the documents that flipped, how many flipped and how many did not ('no
    flip'). The random ranking's per-document numbers are already its means over seeds (a document counts as
    flipped when at least one seed flipped)."""
    out = []
    for ranking, group in per_document.groupby("ranking", sort=False):
        row = {"ranking": ranking, "documents": len(group)}
        for col in metric_columns(ks) + ["flip_fraction", "flip_rate"]:
            values = group[col].to_numpy(dtype=np.float64)
            row[f"{col} mean"] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
            row[f"{col} std"] = float(np.nanstd(values)) if np.isfinite(values).any() else math.nan
        row["flipped"] = int(group["flip_fraction"].notna().sum())
        row["no flip"] = int(group["flip_fraction"].isna().sum())
        out.append(row)
    return pd.DataFrame(out)


def _jsonable(layers):
    if layers is None:
        return None
    return [int(v) for v in np.atleast_1d(np.asarray(layers))]


__all__ = [
    "TOKEN_TABLE_COLUMNS", "DatasetAgreement", "DatasetAttribution", "DatasetFaithfulness",
    "cached_dataset_attributions", "combine_head_means", "combine_set_counts", "combine_token_sums",
    "dataset_agreement", "dataset_attributions", "dataset_faithfulness", "mean_arrays", "summarise_agreement",
    "summarise_faithfulness", "token_sums_partial", "with_doc", "without_scaled",
]
