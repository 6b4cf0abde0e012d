"""longviz_core: explain long-document Transformer classifiers (attention, attribution, agreement).

The front door: everything a page or a notebook needs is importable from here. It loads lazily (PEP 562):
`import longviz_core` imports none of torch, transformers, pandas or streamlit; a name's module is imported the
first time the name is used. `longviz_core.<name>` and `from longviz_core import <name>` work as before.
"""
from __future__ import annotations

import importlib
import sys

from ._version import __version__  # noqa: F401  (the package version, here as everywhere)

# module (relative to this package) -> the public names it provides here
_EXPORTS: dict[str, tuple[str, ...]] = {
    "errors": ("AttributionError", "CacheCorruptError", "DatasetError", "HubUnreachableError", "InputTextError",
        "LongvizError", "ManifestMismatchError", "MissingDependencyError", "ModelLoadError", "ModelNotFoundError",
        "NoAttentionError", "NotAClassifierError", "SelectionError", "SettingsError", "StoreError"),
    "progress": ("Progress",),
    "runtime": ("BudgetLRU", "COMPUTE", "ComputeQueue"),
    "model.loading": ("DEMO", "LoadedModel", "dataset_fingerprint", "load_dataset", "load_model",
        "normalise_dataset"),
    "model.encoding": ("DEFAULT_MAX_TOKENS", "Encoded", "encode", "text_hash"),
    "model.heads": ("Head", "HeadError"),
    "model.analysis": ("DocumentAnalysis", "analyze", "pick_document", "predict_probs"),
    "model.bands": ("AttentionBands", "head_weights"),
    "model.segments": ("Segments", "UNITS", "aggregate", "segment"),
    "attribution.ig": ("Attribution", "integrated_gradients"),
    "attribution.cost": ("estimate_ig_seconds",),
    "attribution.explainers": ("EXPLAINERS", "ExplainerError", "Explanation", "explain"),
    "model.topk": ("CountsError", "TOPK_MAX", "TopK", "topk_indices"),
    "views.counts": ("COUNT_MEANINGS", "COUNT_RULES", "Tallies", "count_intersection", "instance_counts", "tally",
        "token_counts"),
    "views.pooling": ("PoolingError", "PooledAttention", "normalised_maps", "pool_attention", "pool_dataset"),
    "views.masking": ("build_mask", "nonalnum_mask", "special_mask", "stopword_mask"),
    "views.similarity": ("METRICS", "SimilarityError", "compare", "compare_many"),
    "views.agreement": ("TopSets", "agreement_table", "head_agreement", "top_sets"),
    "views.attribution_tables": ("attribution_by_token", "top_attributions"),
    "views.document_map": ("DocumentMap", "document_map"),
    "evaluation.importance": ("HeadImportanceError", "IMPORTANCE_METHODS", "cached_head_importance",
        "head_importance", "load_head_importance", "normalise_importance"),
    "evaluation.faithfulness": ("FaithfulnessError", "FaithfulnessResult", "RankingCurve"),
    "evaluation.deletion": ("DeletionError", "DeletionResult", "DeletionSettings"),
    "evaluation.deletion_engine": ("deletion_test",),
    "dataset.kinds": ("PrecomputeSettings",),
    "dataset.run": ("precompute",),
    "dataset.stores": ("find_store", "local_store"),
    "dataset.api": ("dataset_agreement", "dataset_attributions", "dataset_faithfulness", "leaderboard"),
    "dataset.ray": ("run_on_ray",),
    "dataset.store": ("Record", "ResultStore"),
    "dataset.aggregate": ("DatasetAgreement", "DatasetAttribution", "DatasetFaithfulness", "dataset_type_counts"),
    "dataset.leaderboard": ("LeaderboardError", "document_leaderboard"),
    "notebook": ("save",),
}
_ALIASES = {"PrecomputeSettings": "Settings"}  # public name -> its name in its module
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    try:
        module = _MODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), _ALIASES.get(name, name))
    globals()[name] = value  # the next access is a plain attribute lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# The result types a notebook shows by themselves (longviz_core.notebook draws them). They live below the figures,
# which no lower module may import, even inside a function (tests/unit/test_architecture.py): so the front door
# registers the drawing with IPython's HTML formatter, by the types' names, and nothing loads until one is shown.
_SHOWN = (("model.analysis", "DocumentAnalysis"), ("attribution.ig", "Attribution"),
          ("attribution.explainers", "Explanation"), ("evaluation.deletion", "DeletionResult"),
          ("dataset.leaderboard", "Leaderboard"), ("dataset.aggregate", "DatasetAttribution"),
          ("dataset.aggregate", "DatasetAgreement"), ("dataset.aggregate", "DatasetFaithfulness"))


def _show(result) -> str:
    return importlib.import_module(".notebook", __name__).html(result)


def _register_displays() -> None:
    """In an IPython kernel (Jupyter, VS Code), every type of _SHOWN displays as longviz_core.notebook draws it;
    elsewhere nothing happens (IPython is not imported here)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)()
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name in _SHOWN:
        formatter.for_type_by_name(f"{__name__}.{module}", name, _show)


_register_displays()
