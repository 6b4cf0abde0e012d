"""longviz_core: explain long-document Transformer classifiers (attention, attribution, agreement).

The front door: everything a page or a notebook needs is importable from here.
"""
__version__ = "0.1.0"

from .agreement import DatasetAgreement, TopSets, agreement_table, dataset_agreement, head_agreement, top_sets
from .attribution import (
    Attribution,
    DatasetAttribution,
    attribution_by_token,
    dataset_attributions,
    estimate_ig_seconds,
    integrated_gradients,
    top_attributions,
)
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
from .explainers import EXPLAINERS, ExplainerError, Explanation, explain
from .faithfulness import (
    DatasetFaithfulness,
    FaithfulnessError,
    FaithfulnessResult,
    RankingCurve,
    dataset_faithfulness,
)
from .leaderboard import LeaderboardError, document_leaderboard, leaderboard
from .loading import DEMO, LoadedModel, dataset_fingerprint, load_dataset, load_model, normalise_dataset
from .runtime import COMPUTE, BudgetLRU, ComputeQueue
from .types import Progress
from .views.counts import (
    COUNT_MEANINGS,
    COUNT_RULES,
    TOPK_MAX,
    CountsError,
    Tallies,
    TopK,
    count_intersection,
    dataset_type_counts,
    instance_counts,
    tally,
    token_counts,
    topk_indices,
)
from .views.importance import (
    IMPORTANCE_METHODS,
    HeadImportanceError,
    cached_head_importance,
    head_importance,
    load_head_importance,
    normalise_importance,
)
from .views.masking import build_mask, nonalnum_mask, special_mask, stopword_mask
from .views.pooling import PooledAttention, normalised_maps, pool_attention, pool_dataset
from .precompute import Settings as PrecomputeSettings
from .precompute import find_store, local_store, precompute, run_on_ray
from .store import Record, ResultStore
from .similarity import METRICS, SimilarityError, compare, compare_many

__all__ = [
    "EXPLAINERS",
    "ExplainerError",
    "Explanation",
    "LeaderboardError",
    "document_leaderboard",
    "explain",
    "leaderboard",
    "Attribution",
    "DatasetAgreement",
    "DatasetAttribution",
    "DatasetFaithfulness",
    "FaithfulnessError",
    "FaithfulnessResult",
    "RankingCurve",
    "TopSets",
    "agreement_table",
    "attribution_by_token",
    "dataset_agreement",
    "dataset_attributions",
    "dataset_faithfulness",
    "estimate_ig_seconds",
    "head_agreement",
    "integrated_gradients",
    "top_attributions",
    "top_sets",
    "PrecomputeSettings",
    "Record",
    "ResultStore",
    "find_store",
    "local_store",
    "precompute",
    "run_on_ray",
    "HeadImportanceError",
    "IMPORTANCE_METHODS",
    "METRICS",
    "PooledAttention",
    "SimilarityError",
    "COUNT_MEANINGS",
    "COUNT_RULES",
    "CountsError",
    "TOPK_MAX",
    "Tallies",
    "TopK",
    "build_mask",
    "cached_head_importance",
    "compare",
    "compare_many",
    "count_intersection",
    "dataset_type_counts",
    "head_importance",
    "instance_counts",
    "load_head_importance",
    "nonalnum_mask",
    "normalise_importance",
    "normalised_maps",
    "pool_attention",
    "pool_dataset",
    "special_mask",
    "stopword_mask",
    "tally",
    "token_counts",
    "topk_indices",
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
