"""Everything that turns per-document results into dataset numbers: the combining functions a ResultStore's
aggregation methods call (dataset.store), and the result types they return. Nothing else in longviz makes a
dataset-wide number: the app, the Python API (dataset.api's dataset_attributions, dataset_agreement,
dataset_faithfulness) and the command line all read a store through these.

    heatmap grid  the mean of the documents' relative-position maps (mean_arrays)
    attribution   per type: the sum over documents of the type's summed normalised scores, divided by the
                  number of documents (combine_token_sums); Fig 10e/f
    agreement     per configuration: mean and population sd over documents of every metric (summarise_agreement);
                  per head: the NaN-aware mean (combine_head_means); top-set counts: sums (combine_set_counts)
    faithfulness  per ranking: mean and sd over documents (summarise_faithfulness); flips over the documents that
                  flipped
    token counts  dataset_type_counts (sums over documents of views.counts' per-document tables)
    leaderboard   every document's runs with its `doc` (ResultStore.leaderboard_runs); dataset.leaderboard.summarise
                  averages them (explainers: over documents; random: per seed over documents, then over seeds)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import StoreError, whole_number
from ..evaluation.deletion import KS, k_label, metric_columns
from ..views.similarity import METRICS


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
    one row per index of the store (its SQL sums) or per document; rows of one type add up. Per type:
        mean_attribution    = total_attribution / n_documents   (mean over ALL documents, absent = 0)
        mean_per_occurrence = total_attribution / occurrences
    Types found in fewer than `min_docs` documents are left out (the others' means do not change). Columns
    TOKEN_TABLE_COLUMNS, sorted by mean_attribution (descending), then token."""
    n_documents = whole_number(n_documents, "n_documents", lo=1)
    min_docs = whole_number(min_docs, "min_docs", lo=1)
    if partial.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "token" else
                                          np.int64 if c in ("n_docs", "occurrences") else np.float64)
                             for c in TOKEN_TABLE_COLUMNS})
    out = partial.groupby("token", sort=False)[["total_attribution", "n_docs", "occurrences"]].sum().reset_index()
    out = out.astype({"total_attribution": np.float64, "n_docs": np.int64, "occurrences": np.int64})
    if int(out["n_docs"].max()) > n_documents:
        raise ValueError(f"a type is found in {int(out['n_docs'].max())} documents, more than the {n_documents} "
                         "averaged over")
    out = out[out["n_docs"] >= min_docs]
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
    """A store table's per-document rows with the dataset row number `doc` first (instead of doc_id)."""
    return rows.drop(columns="doc_id").assign(doc=rows["doc_id"].astype(int))[
        ["doc", *[c for c in rows.columns if c != "doc_id"]]]


# ================================================================================= attribution by token type
@dataclass(frozen=True)
class DatasetAttribution:
    table: pd.DataFrame  # TOKEN_TABLE_COLUMNS, sorted by mean_attribution (descending), see combine_token_sums
    target: int
    n_steps: int
    n_docs: int  # documents the means are taken over: all of them, whether they contain a type or not
    key: str  # "store:" + the store's content key
    masked: bool = False  # the paper's mask (stopwords, non-alphanumeric) applied; special tokens are always out
    min_docs: int = 1  # types found in fewer documents are left out of the table
    from_cache: bool = field(default=False, compare=False)  # nothing was computed by the call that returned this

    def title(self, class_name: str) -> str:
        return f"Dataset-wide attribution for class '{class_name}' (IG, L2-normalised per document)"

    def description(self) -> str:
        """What the table's numbers are, for a caption."""
        return (f"mean_attribution: a type's summed score per document, averaged over all {self.n_docs} documents "
                "(0 where it is absent); mean_per_occurrence: its total over its occurrences. Special tokens left out"
                + ("; stopwords and non-alphanumeric tokens masked" if self.masked else "")
                + (f"; types in fewer than {self.min_docs} documents hidden" if self.min_docs > 1 else "") + ".")


# ================================================================================= agreement (Tables 1-2)
@dataclass(frozen=True)
class DatasetAgreement:
    per_document: pd.DataFrame  # agreement_table rows of every document, plus a `doc` column
    table: pd.DataFrame  # source, scaled, masked, documents, "<metric> mean", "<metric> std" for every METRICS key
    head_grids: dict  # (metric, mask mode) -> (layers, heads) mean over documents (NaN-aware)
    set_counts: dict  # (source, scaled, masked) -> DataFrame like TopSets.counts(), summed over documents
    n_documents: int
    from_cache: int  # documents found in the store, not computed by the call that returned this


def without_scaled(result: DatasetAgreement) -> DatasetAgreement:
    """The same dataset result without its head-importance-scaled rows and top-set configurations, for a view
    that does not scale by head importance (the store of a labelled dataset holds both)."""
    if not isinstance(result, DatasetAgreement):
        raise ValueError(f"expected a DatasetAgreement, got {type(result).__name__}")
    unscaled = lambda df: df[~df["scaled"].astype(bool)].reset_index(drop=True)  # noqa: E731
    return replace(result, per_document=unscaled(result.per_document), table=unscaled(result.table),
                   set_counts={key: v for key, v in result.set_counts.items() if not key[1]})


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


# ================================================================================= faithfulness
@dataclass(frozen=True)
class DatasetFaithfulness:
    per_document: pd.DataFrame  # one row per (document, ranking): doc, label, predicted, n, p_original, table()
    summary: pd.DataFrame  # one row per ranking: mean and std of every number, flips and no-flip counts
    n_documents: int
    from_cache: int  # documents found in the store, not computed by the call that returned this
    ks: tuple[float, ...] = KS
    unit: str = "token"  # what the deletion test removed (token, word, sentence, paragraph)
    max_removed: float = 1.0  # the first-flip scan's limit, a fraction of the removable units

    def long_curves(self) -> pd.DataFrame:
        """Tidy curves of every document for charts: doc, ranking, k, aopc, lodds."""
        rows = []
        for rec in self.per_document.to_dict("records"):
            for k in self.ks:
                rows.append({"doc": rec["doc"], "ranking": rec["ranking"], "k": k,
                             "aopc": rec[f"aopc@{k_label(k)}"], "lodds": rec[f"lodds@{k_label(k)}"]})
        return pd.DataFrame(rows)


def summarise_faithfulness(per_document: pd.DataFrame, ks: Sequence[float] = KS) -> pd.DataFrame:
    """Per ranking: mean and std (population) over documents of AOPC@k, LOdds@k, AOPC, LOdds and flip_rate; the
    flip fraction's mean and std over the documents that flipped, how many flipped and how many did not ('no
    flip'). The random ranking's per-document numbers are already its means over seeds (a document counts as
    flipped when at least one seed flipped)."""
    out = []
    for ranking, group in per_document.groupby("ranking", sort=False):
        row = {"ranking": ranking, "documents": len(group)}
        for col in metric_columns(ks) + ["first_flip", "flip_rate"]:
            values = group[col].to_numpy(dtype=np.float64)
            row[f"{col} mean"] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
            row[f"{col} std"] = float(np.nanstd(values)) if np.isfinite(values).any() else math.nan
        row["flipped"] = int(group["first_flip"].notna().sum())
        row["no flip"] = int(group["first_flip"].isna().sum())
        out.append(row)
    return pd.DataFrame(out)


__all__ = [
    "TOKEN_TABLE_COLUMNS", "DatasetAgreement", "DatasetAttribution", "DatasetFaithfulness", "combine_head_means",
    "combine_set_counts", "combine_token_sums", "mean_arrays", "summarise_agreement", "summarise_faithfulness",
    "with_doc", "without_scaled",
]


def dataset_type_counts(tables) -> pd.DataFrame:
    """Dataset-wide counts by token type (or by word) from per-document `token_counts(..., by="type")` tables
    (`by="word"`): a type's (word's) count is the sum over documents of its count in each (so, under the paper's
    rule, at most the dataset's number of tokens). Columns token (word), count, documents (how many documents
    count it), sorted by count descending, ties in the order the tokens first appear in the tables (as given). A
    table may also be a partial sum over several documents, with its own `documents` column (a result store sums
    in SQL first). The tables must all count by type or all by word."""
    from ..model.topk import CountsError  # on use: reading a store loads no model code
    from ..views.counts import same_rule

    tables = list(tables)
    if not tables:
        raise CountsError("no per-document count tables to aggregate")
    groups = set()
    for i, t in enumerate(tables):
        column = next((c for c in ("word", "token") if isinstance(t, pd.DataFrame) and c in t.columns), None)
        if column is None or "count" not in t.columns or "position" in t.columns:
            raise CountsError(f"table {i} is not a count table by type or by word (columns token or word, count)")
        groups.add(column)
    if len(groups) > 1:
        raise CountsError("the tables count by different things: all by type or all by word")
    key = groups.pop()
    rule = same_rule(tables)
    rows = pd.concat([t[[key, "count"]].assign(documents=t["documents"] if "documents" in t else 1)
                      for t in tables], ignore_index=True)
    rows = rows[rows["count"] > 0]
    frame = rows.groupby(key, sort=False).agg(count=("count", "sum"), documents=("documents", "sum"))
    frame = frame.reset_index().astype({"count": np.int64, "documents": np.int64})
    frame = frame.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)
    if rule is not None:
        frame.attrs["count_rule"] = rule
    return frame
