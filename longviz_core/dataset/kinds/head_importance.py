"""The head-importance kind: the dataset-level (layers, heads) importance (computed or given); its query."""
from __future__ import annotations

import numpy as np

from ...progress import Progress
from ..store.units import Record
from .job import Job, Kind
from .settings import Settings


def _head_importance(job: Job, progress: Progress | None) -> Record:
    from ...evaluation.importance import cached_raw_head_importance, normalise_importance, raw_head_importance

    if job.settings.importance_values is not None:  # its shape checked before the run (run.check_settings)
        given = np.asarray(job.settings.importance_values, dtype=np.float64)  # (layers, heads)
        return Record(arrays={"raw": given, "importance": given})
    cfg = _importance_settings(job.settings)
    args = (job.model, job.df, job.settings.max_tokens, cfg["examples"])
    raw = (cached_raw_head_importance(*args, method=cfg["importance_method"], cache_dir=job.cache_dir,
                                      progress=progress) if job.use_cache else
           raw_head_importance(*args, progress, method=cfg["importance_method"]))
    return Record(arrays={"raw": raw, "importance": normalise_importance(raw, cfg["normalise"])})


def _importance_settings(s: Settings) -> dict:
    from ..._disk import array_digest
    from ...evaluation.importance import DEFAULT_EXAMPLES, DEFAULT_NORMALISATION

    if s.importance_values is not None:  # given, not computed: the values themselves are the setting
        return {"given": array_digest(s.importance_values)}
    method = s.importance_method
    return {"examples": s.importance_docs or DEFAULT_EXAMPLES, "importance_method": method,
            "normalise": DEFAULT_NORMALISATION[method]}


KIND = Kind("head-importance", (), _importance_settings, _head_importance, dataset_level=True)


class HeadImportanceQueries:
    """ResultStore's query of the head-importance kind."""

    def head_importance(self) -> np.ndarray | None:
        """The dataset-level (layers, heads) head importance, normalised as its method does (the manifest's
        head-importance settings name the method and the normalisation), or None."""
        if not self.has("head-importance"):
            return None
        return self.array(None, "head-importance", "importance")

