"""The only module of the core that imports Streamlit: process-wide caches for the app.

- the model: one copy per process (`st.cache_resource`), shared by every session;
- per-document analyses: keyed by model fingerprint + text hash + max_tokens, bounded by a memory budget
  (LONGVIZ_CACHE_MEMORY_MB, default 4096) so long documents cannot exhaust a shared server;
- derived per-document results (top-k indices, pooled grids, attributions...): `derived()` keys them on the
  analysis key plus the parameters, never on the arrays themselves (Streamlit would hash big arrays from a
  sample only).
Cached values are shared between sessions: treat them as read-only.
"""
from __future__ import annotations

import json
import os

import streamlit as st

from .model.analysis import DocumentAnalysis, analyze
from .model.encoding import text_hash
from .model.loading import LoadedModel, load_dataset, load_model
from .progress import Progress
from .runtime import BudgetLRU


def _budget_bytes() -> int:
    return int(float(os.environ.get("LONGVIZ_CACHE_MEMORY_MB", "4096")) * 2**20)


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(source: str) -> LoadedModel:
    return load_model(source)


@st.cache_resource(show_spinner=False)
def _lru() -> BudgetLRU:
    return BudgetLRU(_budget_bytes(), max_entries=256)


def memory_cache() -> BudgetLRU:
    """The per-process cache of analyses and derived results (exposed for tests and the status line)."""
    return _lru()


def _nbytes(value) -> int:
    if isinstance(value, DocumentAnalysis):
        return value.attention.nbytes
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 1024


def get_analysis(model: LoadedModel, text: str, max_tokens: int, before=None) -> DocumentAnalysis:
    """The analysis, cached; `before()` runs first when it is computed (a page's notice of how long it takes)."""
    key = ("analysis", model.fingerprint, text_hash(text), int(max_tokens))

    def compute() -> DocumentAnalysis:
        if before is not None:
            before()
        return analyze(model, text, max_tokens)

    return _lru().get_or_compute(key, compute, _nbytes)


def derived(analysis: DocumentAnalysis, name: str, fn, **params):
    """`fn(analysis, **params)` computed once per (analysis, name, params) and kept within the budget."""
    key = ("derived", analysis.key, name, json.dumps(params, sort_keys=True, default=str))
    return _lru().get_or_compute(key, lambda: fn(analysis, **params), _nbytes)


def memo(key_parts: tuple, compute):
    """`compute()` run once per `key_parts` (fingerprints and settings, never arrays) within the budget:
    for dataset-level results such as the predictions used to pick documents."""
    return _lru().get_or_compute(("memo", *key_parts), compute, _nbytes)


@st.cache_resource(show_spinner=False, max_entries=8)
def _dataset(source: str, text_column, label_column, id2label_json: str):
    return load_dataset(source, text_column, label_column, id2label=json.loads(id2label_json) or None)


def get_dataset(source: str, id2label: dict | None = None, text_column=None, label_column=None):
    """Datasets named by a path or 'demo' (uploads are parsed per session, not cached across sessions)."""
    return _dataset(source, text_column, label_column, json.dumps({str(k): v for k, v in (id2label or {}).items()}))


@st.cache_resource(show_spinner=False, ttl=60, max_entries=8)
def get_stores(root: str, model_fingerprint: str, dataset_fingerprint: str, max_tokens: int) -> tuple:
    """The ResultStores under `root` made for this model, dataset and max tokens (dataset.stores.find_stores).
    Re-opened every minute, so documents a running precompute adds appear."""
    from .dataset.stores import find_stores

    return tuple(find_stores(root, model_fingerprint, dataset_fingerprint, max_tokens))


__all__ = ["derived", "get_analysis", "get_dataset", "get_model", "get_stores", "memo", "memory_cache", "Progress"]
