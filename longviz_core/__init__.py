"""longviz_core: explain long-document Transformer classifiers (attention, attribution, agreement).

The front door: everything a page or a notebook needs is importable from here.
"""
from .analysis import DocumentAnalysis, analyze, pick_document, predict_probs
from .bands import AttentionBands, head_weights
from .encoding import DEFAULT_MAX_TOKENS, Encoded, encode, text_hash
from .errors import (
    CacheCorruptError,
    DatasetError,
    HubUnreachableError,
    InputTextError,
    LongvizError,
    ManifestMismatchError,
    ModelLoadError,
    ModelNotFoundError,
    NoAttentionError,
    NotAClassifierError,
    StoreError,
)
from .loading import DEMO, LoadedModel, dataset_fingerprint, load_dataset, load_model, normalise_dataset
from .runtime import COMPUTE, BudgetLRU, ComputeQueue
from .types import Progress

__all__ = [
    "AttentionBands",
    "BudgetLRU",
    "CacheCorruptError",
    "COMPUTE",
    "ComputeQueue",
    "DEFAULT_MAX_TOKENS",
    "DEMO",
    "DatasetError",
    "DocumentAnalysis",
    "Encoded",
    "HubUnreachableError",
    "InputTextError",
    "LoadedModel",
    "LongvizError",
    "ManifestMismatchError",
    "ModelLoadError",
    "ModelNotFoundError",
    "NoAttentionError",
    "NotAClassifierError",
    "Progress",
    "StoreError",
    "analyze",
    "pick_document",
    "predict_probs",
    "dataset_fingerprint",
    "encode",
    "head_weights",
    "load_dataset",
    "load_model",
    "normalise_dataset",
    "text_hash",
]
