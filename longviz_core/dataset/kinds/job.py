"""What a kind is and what it is given: the Kind record, the run's Job (model, dataset, settings, store) and each
Doc, whose analysis is made once, when a kind first needs it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

from ..store.units import Record, doc_id_of, load_unit
from .settings import Settings

if TYPE_CHECKING:
    from ...model.loading import LoadedModel


@dataclass
class Doc:
    """One document of the run; its analysis (one forward) is made at most once, when a kind needs it."""

    row: int
    text: str
    label: int | None
    job: "Job"
    _analysis: object = None

    @property
    def doc_id(self) -> str:
        return doc_id_of(self.row)

    @property
    def analysis(self):
        if self._analysis is None:
            from ...model.analysis import analyze

            self._analysis = analyze(self.job.model, self.text, self.job.settings.max_tokens)
        return self._analysis

    def load(self, kind: str) -> Record:
        """A dependency's stored unit (committed earlier in this run or by an earlier run)."""
        return load_unit(self.job.root, self.doc_id, kind)


@dataclass
class Job:
    """What every kind's function is given: the model, the dataset, the settings and the store's folder, and how
    the run may reuse the per-document disk caches (never part of the numbers)."""

    model: LoadedModel
    df: pd.DataFrame
    settings: Settings
    root: Path  # the store (units are read from their files: a writer never opens other shards' indexes)
    # In-process runs (the app, the Python API) reuse and fill the disk caches of IG, head importance and the flip
    # scans, so a store made for other settings of a later kind does not redo them; a command-line run keeps
    # its results in the store alone.
    use_cache: bool = False
    cache_dir: Path | None = None


@dataclass(frozen=True)
class Kind:
    name: str
    needs: tuple  # kinds that must be stored first
    settings: Callable[[Settings], dict]  # what the manifest records for this kind
    compute: Callable  # (job, doc) -> Record; dataset level: (job, progress) -> Record
    dataset_level: bool = False


def target_class(job: Job, analysis) -> int:
    t = job.settings.target
    if t == "predicted":
        return int(analysis.predicted)
    if t == "positive":
        return 1 if job.model.num_labels > 1 else 0
    if int(t) >= job.model.num_labels:
        raise ValueError(f"target class {t} does not exist (the model has {job.model.num_labels} classes)")
    return int(t)

