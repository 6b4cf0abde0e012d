"""The front door (longviz_core/__init__.py) loads lazily: importing the package costs no torch, transformers,
streamlit, numba or pandas, and every public name still resolves to the object its module defines."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "streamlit", "numba", "pandas", "captum", "altair")

# Every public name of the front door and the module it lives in.
PUBLIC = {
    "errors": ["AttributionError", "CacheCorruptError", "DatasetError", "HubUnreachableError", "InputTextError",
               "LongvizError", "ManifestMismatchError", "MissingDependencyError", "ModelLoadError",
               "ModelNotFoundError", "NoAttentionError", "NotAClassifierError", "SelectionError", "SettingsError",
               "StoreError"],
    "progress": ["Progress"],
    "runtime": ["BudgetLRU", "COMPUTE", "ComputeQueue"],
    "model.loading": ["DEMO", "LoadedModel", "dataset_fingerprint", "load_dataset", "load_model", "normalise_dataset"],
    "model.encoding": ["DEFAULT_MAX_TOKENS", "Encoded", "encode", "text_hash"],
    "model.heads": ["Head", "HeadError"],
    "model.analysis": ["DocumentAnalysis", "analyze", "pick_document", "predict_probs"],
    "model.bands": ["AttentionBands", "head_weights"],
    "model.segments": ["Segments", "UNITS", "aggregate", "segment"],
    "attribution.ig": ["Attribution", "integrated_gradients"],
    "attribution.cost": ["estimate_ig_seconds"],
    "attribution.explainers": ["EXPLAINERS", "ExplainerError", "Explanation", "explain"],
    "model.topk": ["CountsError", "TOPK_MAX", "TopK", "topk_indices"],
    "views.counts": ["COUNT_MEANINGS", "COUNT_RULES", "Tallies", "count_intersection", "instance_counts", "tally",
                     "token_counts"],
    "views.pooling": ["PoolingError", "PooledAttention", "normalised_maps", "pool_attention", "pool_dataset"],
    "views.masking": ["build_mask", "nonalnum_mask", "special_mask", "stopword_mask"],
    "views.similarity": ["METRICS", "SimilarityError", "compare", "compare_many"],
    "views.agreement": ["TopSets", "agreement_table", "head_agreement", "top_sets"],
    "views.attribution_tables": ["attribution_by_token", "top_attributions"],
    "views.document_map": ["DocumentMap", "document_map"],
    "evaluation.importance": ["HeadImportanceError", "IMPORTANCE_METHODS", "cached_head_importance",
                              "head_importance", "load_head_importance", "normalise_importance"],
    "evaluation.faithfulness": ["FaithfulnessError", "FaithfulnessResult", "RankingCurve"],
    "evaluation.deletion": ["DeletionError", "DeletionResult", "DeletionSettings"],
    "evaluation.deletion_engine": ["deletion_test"],
    "dataset.run": ["precompute"],
    "dataset.stores": ["find_store", "local_store"],
    "dataset.api": ["dataset_agreement", "dataset_attributions", "dataset_faithfulness", "leaderboard"],
    "dataset.ray": ["run_on_ray"],
    "dataset.store": ["Record", "ResultStore"],
    "dataset.aggregate": ["DatasetAgreement", "DatasetAttribution", "DatasetFaithfulness", "dataset_type_counts"],
    "dataset.leaderboard": ["LeaderboardError", "document_leaderboard"],
    "notebook": ["save"],
}


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_loads_no_heavy_library():
    version, imported = _run("import sys, longviz_core\n"
                             "print(longviz_core.__version__)\n"
                             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))").split("\n")[:2]
    assert imported == "", f"`import longviz_core` imported {imported}"
    assert version == "0.1.0"


def test_a_name_loads_only_what_it_needs():
    # the hosted configuration's error and the store's error types need no model code
    loaded = _run("import sys, longviz_core as lv\n"
                  "lv.LongvizError, lv.StoreError, lv.Progress\n"
                  f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert loaded == "\n"


def test_reading_a_store_needs_no_model_code():
    # `store-info` and the app's store lookups open stores; the views' definitions (torch) load on use
    loaded = _run("import sys\n"
                  "from longviz_core.dataset.store import ResultStore\n"
                  f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert set(loaded.strip().split(",")) <= {"pandas", ""}, loaded


def test_every_public_name_resolves_to_its_module():
    import longviz_core as lv

    expected = {name for names in PUBLIC.values() for name in names} | {"PrecomputeSettings"}
    assert set(lv.__all__) == expected
    assert expected <= set(dir(lv))
    for module, names in PUBLIC.items():
        for name in names:
            obj = getattr(lv, name)
            home = __import__(f"longviz_core.{module}", fromlist=[name])
            assert obj is getattr(home, name), (name, module)
    from longviz_core.dataset.kinds import Settings

    assert lv.PrecomputeSettings is Settings
    from longviz_core import (  # the from-import form works too
        PrecomputeSettings,
        integrated_gradients,
    )

    assert PrecomputeSettings is Settings and integrated_gradients is lv.integrated_gradients


def test_an_unknown_name_is_an_attribute_error():
    import longviz_core as lv

    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        lv.no_such_thing  # noqa: B018


def test_the_command_line_still_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "longviz_core", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "precompute" in out.stdout and "store-info" in out.stdout
