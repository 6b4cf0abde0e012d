"""Head importance of a dataset, store or compute: read from a result store that serves it, else computed once
into the app's local store and read from there."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.loading import LoadedModel
from ..progress import Progress
from .kinds import Settings
from .stores import local_store, local_store_dir
from .store import ResultStore


def stored_head_importance(model: LoadedModel, df: pd.DataFrame, settings: Settings,
                           serving: ResultStore | None = None, progress: Progress | None = None) -> np.ndarray:
    """(layers, heads) head importance by settings.importance_method on `df`: from `serving` (a precomputed store
    that holds it) when given, else from the local store, computed there first when it lacks it."""
    store = serving
    if store is None:
        out = local_store_dir(model, df, settings)
        store = ResultStore(out, limit=0) if (out / "manifest.json").is_file() else None
        if store is None or not store.has("head-importance"):  # computed once per dataset and definition, then read
            store = local_store(model, df, "head-importance", settings, limit=0, progress=progress)
    return store.head_importance()
